"""How many training samples does each model need to learn to copy? (copy paper §3.2, Figs. 1a, 9)

``python -m analyses.copy_efficiency ckpt.pt ...`` (or ``--train quick``): string- and
character-level copy accuracy against the number of training examples seen, read from the
evaluation history the trainer stores in every checkpoint (``history``: samples_seen,
string_acc, char_acc, eval_loss; evaluated on fresh strings of the training distribution). For
each model: the samples needed to first reach 50 % and 90 % string accuracy, and their ratio to
the fastest model (paper: transformers need ~100× fewer samples than GSSMs on length-300
strings, ~10× fewer on length ≤ 30, Fig. 9b).

With ``--train`` it reads the zoo's copy models of Fig. 1, the same checkpoints as
``length_generalization`` (``analyses.common.COPY_LABELS``; trained once, cached); the quick
preset evaluates every 100 steps.

``--medium`` (``--train medium``): the comparison as a number with an error bar, in the paper's
setting as far as a CPU allows (the zoo's ``copy_medium/*`` recipes; ``zoo.COPY_MEDIUM_SETTING``
says what is matched and what is not): parameter-matched models (the transformers as the
authors' GPT-NeoX: a quarter of each head rotated, parallel residual), strings of random length
1..L, several seeds, a run stopped once past 90 %, every model at its own learning rate: the
one a sweep over three lrs at every seed chose (:func:`best_lr`; ``zoo.COPY_MEDIUM_LR``;
``--sweep`` trains the whole sweep again and then credits each model with its best); then
samples to 50 % and 90 % (mean ± sd over seeds), per GSSM the ratio of its samples to the
fastest transformer's (ratio of the means, and the per-seed ratios, seeds paired), and the same
ratio at a longer L, where the paper finds the gap grows (Fig. 9b vs 1a).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator

from analyses.common import (
    Checkpoint,
    Claim,
    Figure,
    add_copy_models_argument,
    copy_models_recipes,
    copy_recipes,
    load_copy_models,
    need,
    run_analysis,
    to_jsonable,
)
from figures.style import COLORS, new_figure
from models import zoo
from models.checkpoint import read_checkpoint
from probes.sample_efficiency import (  # noqa: F401 - best_lr, TRANSFORMERS: found here too
    GSSMS,
    LEVELS,
    TRANSFORMERS,
    best_lr,
    medium_by_length,
    samples_to_reach,
)
from tasks.base import check

NAME = "copy_efficiency"


def compute(histories: dict[str, list[dict]], info: dict | None = None) -> dict:
    """Curves and samples-to-accuracy for {label: checkpoint history}."""
    curves, reach = {}, {}
    for label, hist in histories.items():
        rows = [{"samples_seen": int(h["samples_seen"]), "step": int(h.get("step", 0)),
                 "string_acc": h.get("string_acc"), "char_acc": h.get("char_acc"),
                 "eval_loss": h.get("eval_loss")} for h in hist if "samples_seen" in h]
        curves[label] = rows
        reach[label] = {f"string_{lv}": samples_to_reach(rows, "string_acc", lv) for lv in LEVELS}
        reach[label].update({f"char_{lv}": samples_to_reach(rows, "char_acc", lv)
                             for lv in LEVELS})
    ratios = {}
    for key in (f"string_{LEVELS[-1]}", f"string_{LEVELS[0]}"):
        reached = {k: v[key] for k, v in reach.items() if v[key] is not None}
        if reached:
            best = min(reached.values())
            ratios[key] = {k: (v[key] / best if v[key] is not None else None)
                           for k, v in reach.items()}
    return to_jsonable({"curves": curves, "samples_to_reach": reach,
                        "ratio_to_fastest": ratios, "train": info or {}})


def plot(result: dict):
    if result.get("level") == "medium":
        return plot_medium(result)
    fig, axes = new_figure(2, width_per_panel=4.6, height=3.5)
    for label, rows in result["curves"].items():
        color = COLORS.get(label.split("'")[0])
        x = [r["samples_seen"] for r in rows]
        for ax, key in zip(axes, ("string_acc", "char_acc"), strict=True):
            y = [np.nan if r[key] is None else r[key] for r in rows]
            ax.plot(x, y, marker="o", ms=3, color=color, label=label)
    axes[0].set(ylabel="string-level accuracy", title="copy: training efficiency")
    # the paper's synthetic evaluation is teacher forced (the authors' code: the argmax of one
    # pass over prompt and true answer), as is the quick preset's; greedy decoding gives the
    # same string accuracy but counts the characters of its own continuation
    forced = any(not i.get("greedy_eval", True) for i in result["train"].values())
    axes[1].set(ylabel="character-level accuracy" + (" (teacher forced)" if forced else ""),
                title="character level (Fig. 9)")
    for ax in axes:
        ax.set(xscale="log", xlabel="training examples seen", ylim=(-0.02, 1.02))
        ax.legend(fontsize=7)
    return fig


def table(result: dict) -> list[list]:
    if result.get("level") == "medium":
        return table_medium(result)
    rows = [["model", "final string", "final char", "samples→50%", "samples→90%", "×fastest"]]
    ratio = result["ratio_to_fastest"].get(f"string_{LEVELS[-1]}", {})
    for label, r in result["curves"].items():
        last = r[-1] if r else {}
        reach = result["samples_to_reach"][label]
        rows.append([label, last.get("string_acc", "-"), last.get("char_acc", "-"),
                     reach[f"string_{LEVELS[0]}"] or "never",
                     reach[f"string_{LEVELS[-1]}"] or "never",
                     "-" if ratio.get(label) is None else ratio[label]])
    return rows


# ---------------------------------------------------------------------------- medium
def compute_medium(runs: list[dict], setting: dict | None = None) -> dict:
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
    states it (the paper's setting and what could not be matched), passed through."""
    flat, by_length = medium_by_length(runs)
    return to_jsonable({"level": "medium", "runs": flat, "by_length": by_length,
                        "setting": setting or {}})


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
        axes[0].plot([r["samples_seen"] for r in run["curve"]],
                     [np.nan if r["string_acc"] is None else r["string_acc"] for r in run["curve"]],
                     color=COLORS.get(label), lw=1, alpha=0.8,
                     label=None if label in seen else label)
        seen.add(label)
    axes[0].axhline(LEVELS[-1], color="k", ls=":", lw=0.8)
    axes[0].set(xscale="log", xlabel="training examples seen", ylabel="string-level accuracy",
                ylim=(-0.02, 1.02), title=f"copy, L = {base} (each seed, best lr)")
    key = f"string_{LEVELS[-1]}"
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
            if s["reached"] == s["seeds"]:
                xs.append(x)
                means.append(s["mean"])
        axes[1].plot(xs, means, marker="o", color=COLORS.get(label), label=label)
    axes[1].set(yscale="log", xlabel="string length L", ylabel="training examples to 90 %",
                title="samples to 90 % string accuracy", xticks=lengths)
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
    axes[2].axhline(1, color="k", ls=":", lw=0.8)
    axes[2].set(yscale="log", xlabel="string length L", xticks=lengths,
                ylabel="samples to 90 %: GSSM / fastest transformer",
                title="ratio (bars: per-seed min–max)")
    axes[2].text(0.02, 0.98, "paper: Mamba ~10× at L <= 30 (Fig. 9b),\n~100× at L <= 300 "
                 "(Fig. 1a)", transform=axes[2].transAxes, va="top", fontsize=7)
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=6, ncol=3, loc="upper center")
    axes[1].set_ylim(top=axes[1].get_ylim()[1] * 4)  # room for the legend
    axes[2].legend(fontsize=6, loc="upper left", bbox_to_anchor=(0.0, 0.86))
    for ax in axes[1:]:  # plain numbers on the log axes, at 1, 2, 5 × 10^k
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10
                                                   else f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    return fig


def _plot_sweep(ax, m: dict, L: int) -> None:
    """Median samples to 90 % against the learning rate, one line per model (open marker at
    the top: the median seed never got there)."""
    key = f"string_{LEVELS[-1]}"
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
    ax.set(xscale="log", yscale="log", xlabel="learning rate",
           ylabel="median training examples to 90 %",
           title=f"lr sweep at L = {L} (△: never, median seed)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)


def table_medium(result: dict) -> list[list]:
    rows = [["L", "model", "params", "best lr", "reached 90%", "samples→50%", "samples→90%",
             "×fastest transformer", "sweep: lr reached median→90%"]]
    key = f"string_{LEVELS[-1]}"
    for L, m in _by_length(result).items():
        for label, s in m["models"].items():
            cells = []
            for lv in LEVELS:
                x = s[f"string_{lv}"]
                cells.append("never" if x["mean"] is None
                             else f"{x['mean']:,.0f} ± {x['sd']:,.0f}")
            r = m["ratio_to_reference"].get(label)
            sweep = "; ".join(
                f"{lr} {v[key]['reached']}/{len(v['seeds'])} {_median_text(v[key])}"
                for lr, v in sorted(m.get("sweep", {}).get(label, {}).items(),
                                    key=lambda kv: float(kv[0]) if kv[0] != "-" else 0.0))
            rows.append([L, label, "-" if s.get("params") is None else f"{s['params']:,}",
                         "-" if s.get("lr") is None else f"{s['lr']:g}",
                         f"{s[key]['reached']}/{len(s['seeds'])}",
                         *cells, "reference" if label == m["reference"]
                         else _ratio_text(r) if r else "-", sweep or "-"])
    return rows


def _median_text(s: dict) -> str:
    med = float(np.median([math.inf if v is None else v for v in s["per_seed"]]))
    return f"{med:,.0f}" if math.isfinite(med) else "never"


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints, "copy checkpoints")
    if (args.train or args.preset) == "medium":
        return compute_medium([_run_of(c.path) for c in checkpoints], zoo.COPY_MEDIUM_SETTING)
    models, info, _ = load_copy_models([c.path for c in checkpoints], args.device)
    histories = {label: list(m.provenance.history) for label, m in models.items()}
    for label, h in histories.items():
        check(any("string_acc" in r for r in h),
              f"{info[label]['path']}: the checkpoint has no accuracy history (was it trained?)")
    return compute(histories, info)


# ---------------------------------------------------------------------------- the paper's claims
def claim_fewer_samples(d: dict) -> tuple[str, bool | None]:
    """Every GSSM needs more samples to reach 90 % string accuracy than the fastest
    transformer (or never reaches it); n/a without a GSSM. Medium: at every length, in every
    seed pairing (each per-seed ratio > 1; a GSSM seed that never got there counts as slower)."""
    if d.get("level") == "medium":
        return _fewer_samples_medium(d)
    key = "string_0.9"
    reach = {k: v.get(key) for k, v in d["samples_to_reach"].items()}
    text = "samples to 90 % string accuracy: " + ", ".join(
        f"{k} {v:,}" if v is not None else f"{k} never" for k, v in reach.items())
    gssm = [v for k, v in reach.items() if k.split("'")[0] in GSSMS]
    tf = [v for k, v in reach.items() if k.split("'")[0] not in GSSMS and v is not None]
    if not tf or not gssm:
        return text, None if not gssm else False
    best = min(tf)
    return text, all(v is None or v > best for v in gssm)


def _fewer_samples_medium(d: dict) -> tuple[str, bool | None]:
    parts, holds, any_gssm = [], True, False
    for L, m in _by_length(d).items():
        ref = m["reference"]
        if ref is None:
            parts.append(f"L={L}: no transformer reached 90 % in every seed")
            holds = False
            continue
        mean = m["models"][ref][f"string_{LEVELS[-1]}"]["mean"]
        ratios = m["ratio_to_reference"]
        any_gssm |= bool(ratios)
        parts.append(f"L={L}: {ref} {mean:,.0f} samples; " + ", ".join(
            f"{g} {_ratio_text(r)}" for g, r in ratios.items()))
        holds &= all(x is None or x > 1 for r in ratios.values() for x in r["per_seed"])
    text = ("samples to 90 % string accuracy, GSSM / fastest transformer (per-seed min–max): "
            + "; ".join(parts) + _setting_text(d))
    return text, (holds if any_gssm or not holds else None)


def _setting_text(d: dict) -> str:
    """What was trained (each model at its best lr of the sweep, its parameter count) and
    what of the paper's setting could not be matched, for a medium claim's text."""
    last = list(_by_length(d).values())[-1] if d.get("by_length") else {}
    models = last.get("models", {})
    seeds = max((len(m.get("seeds", [])) for m in models.values()), default=0)
    lrs = sorted({float(k) for sw in last.get("sweep", {}).values() for k in sw if k != "-"})
    parts = []
    if any(m.get("params") for m in models.values()):
        parts.append("params " + ", ".join(f"{k} {m['params'] / 1e3:.0f}k"
                                           for k, m in models.items() if m.get("params")))
    swept = any(len([k for k in sw if k != "-"]) > 1 for sw in last.get("sweep", {}).values())
    if lrs:
        parts.append(("each model at its best lr of " + "/".join(f"{x:g}" for x in lrs)
                      if swept else "each model at its lr from the full sweep (zoo.COPY_MEDIUM_LR"
                      "; --sweep reruns it)")
                     + " per L (" + "; ".join(
                         f"L={L} " + ", ".join(f"{k} {v:g}" for k, v in m["best_lr"].items()
                                               if v is not None)
                         for L, m in _by_length(d).items() if m.get("best_lr")) + ")")
    if seeds:
        parts.append(f"{seeds} seeds")
    setting = d.get("setting") or {}
    if setting.get("paper"):
        parts.append(f"setting: {setting['paper']}")
    if setting.get("not_matched"):
        parts.append(f"not matched: {setting['not_matched']}")
    return (" [" + "; ".join(parts) + "]") if parts else ""


def claim_gap_grows(d: dict) -> tuple[str, bool | None] | None:
    """Medium: each GSSM measured (every seed at 90 %) at two or more lengths needs more
    samples relative to the fastest transformer as the strings get longer (its ratio rises
    from each length to the next). None on a quick result (one length, the GSSMs never get
    there): a medium claim, left out of the quick index."""
    if d.get("level") != "medium":
        return None
    series: dict[str, list[tuple[int, float]]] = {}
    for L, m in _by_length(d).items():
        for g, r in m["ratio_to_reference"].items():
            if r["all_reached"]:
                series.setdefault(g, []).append((L, r["ratio"]))
    series = {g: pts for g, pts in series.items() if len(pts) >= 2}
    if not series:
        return "no GSSM reached 90 % in every seed at two lengths", None
    text = "; ".join(f"{g} " + " → ".join(f"{r:.1f}× (L={L})" for L, r in pts)
                     for g, pts in series.items())
    grows = all(b[1] > a[1] for pts in series.values() for a, b in zip(pts, pts[1:], strict=False))
    return f"GSSM / fastest transformer, samples to 90 %: {text}{_setting_text(d)}", grows


FIGURE = Figure(
    "Copy accuracy vs samples seen", "Copy paper Figs. 1a, 9",
    (Claim("transformers learn to copy from far fewer samples than GSSMs", claim_fewer_samples),
     Claim("the gap grows with string length (Mamba ~10× at length <= 30, Fig. 9b; ~100× at "
           "300, Fig. 1a)", claim_gap_grows)),
    recipes=lambda preset: (zoo.copy_medium_recipes() if preset == "medium"
                            else copy_recipes(preset)),
    presets=("quick", "medium", "paper"))


def add_arguments(p) -> None:
    add_copy_models_argument(p)
    p.add_argument("--sweep", action="store_true",
                   help="with --train medium: every lr of the sweep (zoo.COPY_MEDIUM['lrs']) at "
                   "every seed, which picks each model's lr (zoo.COPY_MEDIUM_LR); without it "
                   "only the chosen lrs train (a third of the runs)")


def _recipes(args) -> list[str]:
    """``--train PRESET [--models a,b]``; at medium every length and seed of those models (at
    their chosen lr, or every lr with ``--sweep``)."""
    check(not args.sweep or args.train == "medium", "--sweep goes with --train medium")
    if args.train != "medium":
        return copy_models_recipes(args)
    return zoo.copy_medium_recipes(args.models.split(",") if args.models else None,
                                   sweep=args.sweep)


def main(argv=None) -> int:
    return run_analysis(
        NAME, __doc__, argv, compute=_compute, plot=plot, table=table, figure=FIGURE,
        add_arguments=add_arguments, recipes=_recipes)


if __name__ == "__main__":
    raise SystemExit(main())
