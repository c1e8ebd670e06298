"""copy_efficiency at the seeded levels (medium and large): samples-to-accuracy over seeds,
learning rates and string lengths with the GSSM / transformer ratios (:func:`compute_medium`, of
the checkpoints :func:`_run_of` reads), the large level's lr sweep at one seed and its other
seeds at each model's chosen lr (:func:`large_choice`, :func:`compute_large`), and their
figure and table (:func:`plot_medium`, :func:`table_medium`).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator

from analyses.common import to_jsonable
from analyses.copy_efficiency.regime import slopes_of
from analyses.zoo import copy as zoo_copy
from figures.style import COLORS, new_figure
from models.checkpoint.io import read_checkpoint
from probes.sample_efficiency import (
    GSSMS,
    THRESHOLDS,
    lr_key,
    medium_by_length,
)
from seqprobe.config import check


def compute_medium(runs: list[dict], setting: dict | None = None,
                   level: str = "medium") -> dict:
    """Samples-to-accuracy over seeds, learning rates and string lengths, and the GSSM /
    transformer ratios.

    ``runs``: [{label, length, seed, history, lr (optional), params (optional)}], one per
    trained model. Per model and length, each learning rate's seeds are summarised
    (``sweep``) and the model is represented by its :func:`best_lr`. At each length the
    reference is the transformer with the fewest mean samples to 90 % (at its best lr) among
    those whose every seed got there; a GSSM's ratio is its mean over the reference's mean
    (``ratio``), and per seed, GSSM seed s over reference seed s (``per_seed``: their min and
    max are the spread). A GSSM seed that never got there leaves its ratio None and the mean
    ratio a lower bound (``all_reached`` False). ``setting``: what was trained, as the zoo
    states it (the paper's setting and what could not be matched), passed through;
    ``level``: the level the runs are of (medium or large), recorded."""
    # a model trained at one lr is flagged against the grid that chose it (zoo_copy.COPY_MEDIUM_LR)
    flat, by_length = medium_by_length(runs, zoo_copy.COPY_MEDIUM_LR_GRID if level == "medium"
                                       else None)
    # each seed's slope of log ratio on log L , beside the per-seed values it is of
    return to_jsonable({"level": level, "runs": flat, "by_length": by_length,
                        "slopes": slopes_of(by_length), "setting": setting or {}})


def _run_of(path: str) -> dict:
    """{label, length, seed, lr, params, history} of a medium copy checkpoint: strings of
    length ``min_len``..L, L = ``max_len`` (the Fig. 1a setting: lengths ≤ L)."""
    ck = read_checkpoint(path)
    task, model = ck["task"], ck["model"]
    check(task["name"] == "copy", f"{path}: not a copy checkpoint ({task['name']})")
    cfg = task["config"]
    check(any("string_acc" in h for h in ck["history"]),
          f"{path}: the checkpoint has no accuracy history (was it trained?)")
    label = model["config"]["pe"] if model["arch"] == "transformer" else model["arch"]
    train = ck["train"]["config"]
    return {"label": label, "length": int(cfg["max_len"]), "seed": int(train.get("seed", 0)),
            "lr": float(train["lr"]) if "lr" in train else None,
            "params": int(sum(v.numel() for v in ck["state_dict"].values())),
            "history": ck["history"]}


def _by_length(result: dict) -> dict[int, dict]:
    """``result["by_length"]`` keyed by int length, shortest first (JSON keys are strings)."""
    return {int(L): m for L, m in sorted(result["by_length"].items(), key=lambda x: int(x[0]))}


def _ratio_text(r: dict) -> str:
    if r["ratio"] is None:
        return "never"
    low = "" if r["all_reached"] else ">="
    return f"{low}{r['ratio']:.1f}× ({r['min']:.1f}–{r['max']:.1f})"


def plot_medium(result: dict):
    fig, axes = new_figure(4, width_per_panel=4.4, height=3.5)
    at = _by_length(result)
    lengths = sorted(at)
    base = lengths[0]
    seen = set()
    for run in result["runs"]:
        if run["length"] != base or not run.get("best_lr", True):
            continue
        label = run["label"]
        x = [r["samples_seen"] for r in run["curve"]]
        for key, ls in (("string_acc_at_L", "-"), ("string_acc", "--")):  # exactly L; 1..L
            y = [np.nan if r.get(key) is None else r[key] for r in run["curve"]]
            axes[0].plot(x, y, color=COLORS.get(label), lw=1 if ls == "-" else 0.7,
                         ls=ls, alpha=0.8, label=None if label in seen or ls != "-" else label)
        seen.add(label)
    axes[0].axhline(THRESHOLDS[-1], color="k", ls=":", lw=0.8, label=f"{THRESHOLDS[-1]:.0%}")
    axes[0].set(xscale="log", xlabel="training examples seen", ylabel="string-level accuracy",
                ylim=(-0.02, 1.02),
                title=f"copy, L = {base} (each seed, best lr)\nsolid: at exactly L; "
                      f"dashed: lengths 1..L")
    key = f"string_{THRESHOLDS[-1]}"
    labels = list(dict.fromkeys(r["label"] for r in result["runs"]))
    for i, label in enumerate(labels):
        xs, means = [], []
        for L in lengths:
            s = at[L]["models"].get(label, {}).get(key)
            if not s:
                continue
            got = [v for v in s["per_seed"] if v is not None]
            x = L + 0.06 * (i - (len(labels) - 1) / 2)  # side by side, not on top
            axes[1].scatter([x] * len(got), got, s=10, color=COLORS.get(label), alpha=0.6)
            # a seed that never got there is a lower bound: its samples seen, drawn open
            seen = at[L]["models"][label].get("seen") or []
            never = [n for v, n in zip(s["per_seed"], seen, strict=False)
                     if v is None and n is not None]
            if never:
                axes[1].scatter([x] * len(never), never, s=22, marker="^", facecolors="none",
                                edgecolors=COLORS.get(label))
            if s["reached"] == s["seeds"]:
                xs.append(x)
                means.append(s["mean"])
        axes[1].plot(xs, means, marker="o", color=COLORS.get(label), label=label)
    axes[1].set(yscale="log", xlabel="string length L", ylabel="training examples to 90 %",
                title="samples to 90 % (△: never, at its budget)", xticks=lengths)
    for i, g in enumerate(GSSMS):
        pts, bounds = [], []
        for L in lengths:
            r = at[L]["ratio_to_reference"].get(g)
            x = L + 0.06 * (i - 1)
            if r and r["all_reached"]:
                pts.append((x, r["ratio"], r["min"], r["max"]))
            elif r and r["ratio"] is not None:  # a seed never got there: a lower bound
                bounds.append((x, r["ratio"]))
        if pts:
            L, y, lo, hi = (np.array(v, dtype=float) for v in zip(*pts, strict=True))
            axes[2].errorbar(L, y, yerr=[y - lo, hi - y], marker="o", capsize=3,
                             color=COLORS.get(g), label=g)
        if bounds:
            axes[2].scatter(*zip(*bounds, strict=True), marker="^", facecolors="none",
                            edgecolors=COLORS.get(g), label=f"{g} >= (a seed never got there)")
    _plot_sweep(axes[3], at[lengths[-1]], lengths[-1])
    axes[2].axhline(1, color="k", ls=":", lw=0.8, label="as fast as the transformer")
    axes[2].set(yscale="log", xlabel="string length L", xticks=lengths,
                ylabel="samples to 90 %:\nGSSM / fastest transformer",
                title="ratio (bars: per-seed min–max)")
    axes[2].set_xlabel("string length L\n(paper: Mamba ~10× at L <= 30, Fig. 9b;\n"
                       "~100× at L <= 300, Fig. 1a)")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7, ncol=3, loc="upper center")
    axes[1].set_ylim(top=axes[1].get_ylim()[1] * 4)  # room for the legend
    axes[2].legend(fontsize=7)
    for ax in axes[1:]:  # plain numbers on the log axes, at 1, 2, 5 × 10^k
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10
                                                   else f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    return fig


def _plot_sweep(ax, m: dict, L: int) -> None:
    """Median samples to 90 % against the learning rate, one line per model (open marker at
    the top: the median seed never got there)."""
    key = f"string_{THRESHOLDS[-1]}"
    top = max((v for sw in m.get("sweep", {}).values() for s in sw.values()
               for v in s[key]["per_seed"] if v is not None), default=1)
    for label, sw in m.get("sweep", {}).items():
        lrs = sorted((k for k in sw if k != "-"), key=float)
        if not lrs:
            continue
        med = [float(np.median([math.inf if v is None else v for v in sw[k][key]["per_seed"]]))
               for k in lrs]
        x = [float(k) for k in lrs]
        y = [v if math.isfinite(v) else np.nan for v in med]
        ax.plot(x, y, marker="o", color=COLORS.get(label), label=label)
        never = [xi for xi, v in zip(x, med, strict=True) if not math.isfinite(v)]
        ax.scatter(never, [top * 1.5] * len(never), marker="^", facecolors="none",
                   edgecolors=COLORS.get(label))
    swept = any(len([k for k in sw if k != "-"]) > 1 for sw in m.get("sweep", {}).values())
    what = "lr sweep" if swept else "each model's lr"
    ax.set(xscale="log", yscale="log", xlabel="learning rate",
           ylabel="median training examples to 90 %",
           title=f"{what} at L = {L} (△: median seed never)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)


def table_medium(result: dict) -> list[list]:
    rows = [["L", "model", "params", "best lr", "reached 90%", "samples→50%", "samples→90%",
             "→90% over 1..L", "×fastest transformer", "sweep: lr reached median→90%"]]
    key = f"string_{THRESHOLDS[-1]}"
    for L, m in _by_length(result).items():
        for label, s in m["models"].items():
            cells = []
            for k in (*(f"string_{lv}" for lv in THRESHOLDS), f"dist_string_{THRESHOLDS[-1]}"):
                x = s.get(k)
                cells.append("-" if x is None else "never" if x["mean"] is None
                             else f"{x['mean']:,.0f} ± {x['sd']:,.0f}")
            edge = (m.get("lr_edge") or {}).get(label)
            r = m["ratio_to_reference"].get(label)
            sweep = "; ".join(
                f"{lr} {v[key]['reached']}/{len(v['seeds'])} {_median_text(v[key])}"
                for lr, v in sorted(m.get("sweep", {}).get(label, {}).items(),
                                    key=lambda kv: float(kv[0]) if kv[0] != "-" else 0.0))
            rows.append([L, label, "-" if s.get("params") is None else f"{s['params']:,}",
                         "-" if s.get("lr") is None else f"{s['lr']:g}"
                         + (f" (at the {edge} end of {_grid_text(m, label)})" if edge else ""),
                         f"{s[key]['reached']}/{len(s['seeds'])}",
                         *cells, "reference" if label == m["reference"]
                         else _ratio_text(r) if r else "-", sweep or "-"])
    return rows


def _grid_text(m: dict, label: str) -> str:
    return "/".join(f"{x:g}" for x in (m.get("lr_grid") or {}).get(label, []))


def _median_text(s: dict) -> str:
    med = float(np.median([math.inf if v is None else v for v in s["per_seed"]]))
    return f"{med:,.0f}" if math.isfinite(med) else "never"


# ---------------------------------------------------------------------------- large
def large_choice(runs: list[dict]) -> dict[tuple[str, int], float]:
    """{(label, L): lr} each model's best lr at each length (:func:`best_lr`) from the large
    level's lr sweep at the sweep seed (``runs``: :func:`_run_of` of those checkpoints)."""
    sweep = [r for r in runs if r["seed"] == zoo_copy.COPY_LARGE["sweep_seed"]]
    _, by_length = medium_by_length(sweep)
    return {(label, int(L)): lr for L, m in by_length.items()
            for label, lr in m["best_lr"].items() if lr is not None}


def large_followups(choice: dict[tuple[str, int], float]) -> list[str]:
    """The recipes of the other seeds at each model's chosen lr (the sweep seed is trained)."""
    seeds = [s for s in range(zoo_copy.COPY_LARGE["seeds"])
             if s != zoo_copy.COPY_LARGE["sweep_seed"]]
    return [zoo_copy.copy_large_name(label, L, s, lr) for (label, L), lr in choice.items()
            for s in seeds]


def compute_large(runs: list[dict], train=None) -> dict:
    """Fig. 1a / 9b at large: each model and L at the best lr of the sweep seed's runs
    (:func:`large_choice`), its seeds summarised as at medium (:func:`compute_medium`, the
    other lrs left out: they have one seed), and the sweep itself (``lr_sweep``: samples to
    90 % per model, L and lr at the sweep seed). ``train(names) -> [run]``: trains the other
    seeds' recipes and returns their runs (None: ``runs`` already hold them)."""
    choice = large_choice(runs)
    if train is not None:
        def key(r: dict) -> tuple:
            return r["label"], r["length"], r["seed"], lr_key(r["lr"])
        have = {key(r) for r in runs}
        runs = [*runs, *[r for r in train(large_followups(choice)) if key(r) not in have]]
    chosen = [r for r in runs if (r["label"], r["length"]) in choice
              and lr_key(r["lr"]) == lr_key(choice[(r["label"], r["length"])])]
    sweep = [r for r in runs if r["seed"] == zoo_copy.COPY_LARGE["sweep_seed"]]
    _, by_length = medium_by_length(sweep)
    result = compute_medium(chosen, zoo_copy.COPY_LARGE_SETTING, level="large")
    result["lr_sweep"] = to_jsonable({L: m["sweep"] for L, m in by_length.items()})
    return result
