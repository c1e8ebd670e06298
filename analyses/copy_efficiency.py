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
setting as far as a CPU allows (the zoo's ``copy_medium/*`` recipes; ``zoo_copy.COPY_MEDIUM_SETTING``
says what is matched and what is not): parameter-matched models (the transformers as the
authors' GPT-NeoX: a quarter of each head rotated, parallel residual), strings of random length
1..L, several seeds, a run stopped once past 90 %, every model at its own learning rate: the
one a sweep over the lr grid at every seed chose (:func:`best_lr`; ``zoo_copy.COPY_MEDIUM_LR``;
``--sweep`` trains the whole sweep of ``zoo_copy.COPY_MEDIUM["lrs"]`` again and then credits each
model with its best; a chosen lr at an end of its grid is flagged, ``lr_edge``); then
samples to 50 % and 90 % at exactly L, as Fig. 1a's caption scores (the score over the
training distribution 1..L beside it, ``dist_string_*``; mean ± sd over seeds), per GSSM
the ratio of its samples to the fastest transformer's (ratio of the means, and the per-seed
ratios, seeds paired), and the same ratio at a longer L, where the paper finds the gap grows
(Fig. 9b vs 1a).

``--large`` (``--train large``; issue 36 §2): the same at L <= 10, 20, 30 over 26 letters in
packed contexts, models matched at ~1M parameters (``zoo_copy.COPY_LARGE_SETTING``): a sweep of four
lrs at seed 0 (the zoo's ``copy_large/*`` recipes the plan trains), then each model's best lr of
it at the other seeds, trained here side by side (:func:`compute_large`, ``--jobs``).
"""

from __future__ import annotations

import math
import os
from statistics import fmean

import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator

from analyses import zoo
from analyses.claims import Claim, Figure, Margin, Reading, Undecided, Verdict
from analyses.common import Checkpoint, need, run_analysis, to_jsonable
from analyses.copy_models import (
    add_copy_models_argument,
    copy_models_recipes,
    copy_recipes,
    load_copy_models,
)
from analyses.zoo import copy as zoo_copy
from figures.style import COLORS, new_figure
from models.checkpoint import read_checkpoint
from models.train.levels import SEEDED
from probes.sample_efficiency import (  # noqa: F401 - best_lr, TRANSFORMERS: found here too
    CLEAR_GAP,
    GSSMS,
    LEVELS,
    TRANSFORMERS,
    acc_at,
    best_lr,
    gap_is_clear,
    lr_key,
    mean_interval,
    medium_by_length,
    paper_gap,
    samples_to_reach,
)
from seqprobe import flags
from seqprobe.config import check
from seqprobe.sweep import Failed, backend_of

NAME = "copy_efficiency"


def compute(histories: dict[str, list[dict]], info: dict | None = None) -> dict:
    """Curves and samples-to-accuracy for {label: checkpoint history}: over the training
    distribution (``string_*``, ``char_*``) and, where ``info[label]["max_len"]`` names L and
    the history scored it, at exactly L (``exact_string_*``, Fig. 1a's caption)."""
    curves, reach = {}, {}
    for label, hist in histories.items():
        L = (info or {}).get(label, {}).get("max_len")
        rows = [{"samples_seen": int(h["samples_seen"]), "step": int(h.get("step", 0)),
                 "string_acc": h.get("string_acc"), "char_acc": h.get("char_acc"),
                 "string_acc_at_L": None if L is None else acc_at(h, "string_acc_at", L),
                 "eval_loss": h.get("eval_loss")} for h in hist if "samples_seen" in h]
        curves[label] = rows
        reach[label] = {f"string_{lv}": samples_to_reach(rows, "string_acc", lv) for lv in LEVELS}
        reach[label].update({f"char_{lv}": samples_to_reach(rows, "char_acc", lv)
                             for lv in LEVELS})
        reach[label].update({f"exact_string_{lv}": samples_to_reach(rows, "string_acc_at_L", lv)
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
    if result.get("level") in SEEDED:
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
    if result.get("level") in SEEDED:
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
    return to_jsonable({"level": level, "runs": flat, "by_length": by_length,
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
        x = [r["samples_seen"] for r in run["curve"]]
        for key, ls in (("string_acc_at_L", "-"), ("string_acc", "--")):  # exactly L; 1..L
            y = [np.nan if r.get(key) is None else r[key] for r in run["curve"]]
            axes[0].plot(x, y, color=COLORS.get(label), lw=1 if ls == "-" else 0.7,
                         ls=ls, alpha=0.8, label=None if label in seen or ls != "-" else label)
        seen.add(label)
    axes[0].axhline(LEVELS[-1], color="k", ls=":", lw=0.8)
    axes[0].set(xscale="log", xlabel="training examples seen", ylabel="string-level accuracy",
                ylim=(-0.02, 1.02),
                title=f"copy, L = {base} (each seed, best lr)\nsolid: at exactly L; "
                      f"dashed: lengths 1..L")
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
             "→90% over 1..L", "×fastest transformer", "sweep: lr reached median→90%"]]
    key = f"string_{LEVELS[-1]}"
    for L, m in _by_length(result).items():
        for label, s in m["models"].items():
            cells = []
            for k in (*(f"string_{lv}" for lv in LEVELS), f"dist_string_{LEVELS[-1]}"):
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
    seeds = [s for s in range(zoo_copy.COPY_LARGE["seeds"]) if s != zoo_copy.COPY_LARGE["sweep_seed"]]
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


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints, "copy checkpoints")
    if (args.train or args.level) == "medium":
        return compute_medium([_run_of(c.path) for c in checkpoints], zoo_copy.COPY_MEDIUM_SETTING)
    if (args.train or args.level) == "large":
        def train(names: list[str]) -> list[dict]:
            jobs = args.jobs or os.cpu_count() or 1
            done = zoo.train_recipes(names, "large", args.cache_dir, args.device,
                                     backend_of(args, jobs, args.device), progress=False)
            return [_run_of(str(p)) for p in done.values() if not isinstance(p, Failed)]
        return compute_large([_run_of(c.path) for c in checkpoints],
                             train if args.train else None)
    models, info, _ = load_copy_models([c.path for c in checkpoints], args.device)
    histories = {label: list(m.provenance.history) for label, m in models.items()}
    for label, h in histories.items():
        check(any("string_acc" in r for r in h),
              f"{info[label]['path']}: the checkpoint has no accuracy history (was it trained?)")
    return compute(histories, info)


# ---------------------------------------------------------------------------- the paper's claims
def _seeded(d: dict) -> bool:
    """A result over seeds and lengths (medium and the levels above it), not one run each."""
    return d.get("level") in SEEDED and "by_length" in d


def _trend_text(gssms, lengths) -> str:
    """What the paper's trend (:func:`paper_gap`) predicts for these GSSMs at these L."""
    return "the paper's trend (gap ∝ L: Mamba 10× at L <= 30, 100× at 300; LSTM 100× at 30) " \
        "predicts " + "; ".join(
            f"L={L}: " + ", ".join(f"{g} {paper_gap(g, L):.1f}×" for g in gssms
                                   if paper_gap(g, L) is not None)
            for L in lengths)


def _combine(failed: list[tuple[str, int]], unlearnt: list[int]) -> Verdict:
    """The claim's verdict from where it failed: (GSSM, L) pairs where a GSSM was as fast as the
    fastest transformer, and lengths where no transformer learnt the task. A failure where the
    paper's trend predicts a clear gap does not hold; one where it predicts <= CLEAR_GAP, or an
    unlearnt length, leaves the claim not decided; none at all: it holds."""
    decided = [(g, L) for g, L in failed if gap_is_clear(g, L)]
    if decided:
        return False
    if failed:
        where = ", ".join(f"{g} at L={L}" for g, L in failed)
        return Undecided.regime(
            f"GSSMs as fast as the transformers only where the paper's own trend predicts a gap "
            f"of at most {CLEAR_GAP:g}× ({where}): too short to show it")
    if unlearnt:
        return Undecided.not_learnt(
            f"no transformer reached 90 % in every seed at L={', '.join(map(str, unlearnt))}")
    return True


def claim_fewer_samples(d: dict) -> Reading:
    """Every GSSM needs more samples to reach 90 % string accuracy than the fastest
    transformer (or never reaches it); n/a without a GSSM. Medium and above: at every length,
    in every seed pairing (each per-seed ratio > 1; a GSSM seed that never got there counts
    as slower). Where a GSSM is not slower the claim does not hold only if the paper's own
    trend (:func:`paper_gap`) predicts a gap above :data:`CLEAR_GAP` at that length; else it
    is not decided at this level (too short to show the gap), as it is when no model learnt."""
    if _seeded(d):
        return _fewer_samples_medium(d)
    key = "string_0.9"
    reach = {k: v.get(key) for k, v in d["samples_to_reach"].items()}
    text = "samples to 90 % string accuracy: " + ", ".join(
        f"{k} {v:,}" if v is not None else f"{k} never" for k, v in reach.items())
    gssm = {k: v for k, v in reach.items() if k.split("'")[0] in GSSMS}
    tf = [v for k, v in reach.items() if k.split("'")[0] not in GSSMS and v is not None]
    if not gssm:
        return text, None
    tops = [i.get("max_len") for i in (d.get("train") or {}).values() if i.get("max_len")]
    L = max(tops) if tops else None
    if L is not None:
        names = sorted({k.split("'")[0] for k in gssm})
        text += f" (strings of length <= {L}; {_trend_text(names, [L])})"
    if not tf:
        if all(v is None for v in gssm.values()):
            return text, Undecided.not_learnt("no model reached 90 %")
        return text, False  # a GSSM got there and no transformer did
    best = min(tf)
    slow = [k.split("'")[0] for k, v in gssm.items() if v is not None and v <= best]
    m = _fewer_margin(d, gssm, best)
    if not slow:
        return Reading(text, True, m)
    if L is None:  # the length is not recorded: nothing says the run is outside the regime
        return Reading(text, False, m)
    return Reading(text, _combine([(g, L) for g in slow], []), m)


def _fewer_margin(d: dict, gssm: dict, best: int) -> Margin:
    """The fastest GSSM's samples to 90 % over the fastest transformer's (> 1: slower); a GSSM
    that never got there counts with the samples it saw, a lower bound of its own."""
    seen = {k: (d.get("train") or {}).get(k, {}).get("samples_seen") for k in gssm}
    need = [v if v is not None else seen[k] for k, v in gssm.items()]
    need = [v for v in need if v is not None]
    never = all(v is None for v in gssm.values())
    return Margin("fastest GSSM's samples to 90 % / fastest transformer's"
                  + (" (never reached: the samples it saw, a lower bound)" if never else ""),
                  min(need) / best if need else float("inf"), ">", 1, "×")


def _fewer_samples_medium(d: dict) -> Reading:
    parts, failed, unlearnt, any_gssm, gssms = [], [], [], False, set()
    for L, m in _by_length(d).items():
        ref = m["reference"]
        if ref is None:
            parts.append(f"L={L}: no transformer reached 90 % in every seed")
            unlearnt.append(L)
            continue
        mean = m["models"][ref][f"string_{LEVELS[-1]}"]["mean"]
        ratios = m["ratio_to_reference"]
        any_gssm |= bool(ratios)
        gssms |= set(ratios)
        parts.append(f"L={L}: {ref} {mean:,.0f} samples; " + ", ".join(
            f"{g} {_ratio_text(r)}" for g, r in ratios.items()))
        failed += [(g, L) for g, r in ratios.items()
                   if not all(x is None or x > 1 for x in r["per_seed"])]
    lengths = list(_by_length(d))
    text = (_not_matched_text(d) + "samples to 90 % string accuracy, GSSM / fastest transformer "
            "(per-seed min–max): " + "; ".join(parts)
            + (f"; {_trend_text(sorted(gssms), lengths)}" if gssms else "") + _setting_text(d))
    if not any_gssm and not unlearnt:
        return Reading(text, None)
    # the margin: the smallest per-seed GSSM / transformer ratio (every one must exceed 1)
    seeds = [(x, g, L) for L, m in _by_length(d).items() if m["reference"] is not None
             for g, r in m["ratio_to_reference"].items() for x in r["per_seed"] if x is not None]
    low = min(seeds, default=None)
    m = None if low is None else Margin(f"smallest per-seed ratio ({low[1]} at L={low[2]})",
                                        low[0], ">", 1, "×")
    return Reading(text, _combine(failed, unlearnt), m)


def _not_matched_text(d: dict) -> str:
    """"not matched: …. " of the zoo's setting, the first words of a medium claim's text."""
    nm = (d.get("setting") or {}).get("not_matched")
    return f"not matched: {nm}. " if nm else ""


def _setting_text(d: dict) -> str:
    """What was trained (each model at its best lr of the sweep, its parameter count), for a
    medium claim's text (what of the paper's setting is not matched comes first:
    :func:`_not_matched_text`)."""
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
                      if swept else "each model at its lr from the full sweep (zoo_copy.COPY_MEDIUM_LR"
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
    return (" [" + "; ".join(parts) + "]") if parts else ""


def _paired(m: dict, g: str) -> dict:
    """{seed: GSSM / reference samples ratio} of GSSM ``g`` at one length (a seed that never
    got there left out); seeds by id where the result has them, else by position."""
    r = m["ratio_to_reference"].get(g)
    if not r:
        return {}
    seeds = (m.get("models", {}).get(g) or {}).get("seeds") or range(len(r["per_seed"]))
    return {s: x for s, x in zip(seeds, r["per_seed"], strict=False) if x is not None}


def claim_gap_grows(d: dict) -> Reading | None:
    """Medium and above: each GSSM needs more samples relative to the fastest transformer as
    the strings get longer. Per GSSM and pair of neighbouring lengths, the per-seed change of
    its ratio (seed s's ratio at the longer L minus at the shorter) with a 95 % bootstrap
    interval of its mean (:func:`mean_interval`): holds when every interval lies above 0; does
    not hold when one lies below 0 at lengths where the paper's trend predicts a clear gap
    (:func:`gap_is_clear` at the shorter L); otherwise not decided (the interval holds 0, or
    the lengths are too short). None on a quick result (one length): left out of its index."""
    if not _seeded(d):
        return None
    at = _by_length(d)
    lengths = list(at)
    parts, up, down, either, short, thin, changes = [], [], [], [], [], [], []
    gssms = list(dict.fromkeys(g for m in at.values() for g in m["ratio_to_reference"]))
    for g in gssms:
        for a, b in zip(lengths, lengths[1:], strict=False):
            pa, pb = _paired(at[a], g), _paired(at[b], g)
            both = [s for s in pa if s in pb]
            if len(both) == 1:  # one seed pairing: a change, but no interval
                s0 = both[0]
                parts.append(f"{g} L={a}→{b}: {pa[s0]:.1f}× → {pb[s0]:.1f}× (one seed)")
                thin.append(f"{g} L={a}→{b}")
            if len(both) < 2:
                continue
            change = [pb[s] - pa[s] for s in both]
            lo, hi = mean_interval(change)
            changes.append(Margin(f"{g} L={a}→{b}: mean change of its ratio", fmean(change), ">",
                                  0, "×", interval=(lo, hi)))
            parts.append(f"{g} L={a}→{b}: {fmean(pa[s] for s in both):.1f}× → "
                         f"{fmean(pb[s] for s in both):.1f}×, change {fmean(change):+.2f} "
                         f"[95 % CI {lo:+.2f}, {hi:+.2f}] ({len(both)} seeds)")
            if lo > 0:
                up.append(g)
            elif hi < 0 and gap_is_clear(g, a):
                down.append(f"{g} L={a}→{b}")
            elif hi < 0:
                short.append(f"{g} L={a}→{b}")
            else:
                either.append(f"{g} L={a}→{b}")
    if len(lengths) < 2:
        return Reading(_not_matched_text(d) + f"one length (L={lengths[0]})" + _setting_text(d),
                       None)
    if not parts:
        return Reading((_not_matched_text(d) + "no GSSM reached 90 % in the same seed at two "
                        "lengths" + _setting_text(d)), Undecided.not_learnt(
                           "no GSSM reached 90 % in the same seed at two lengths"))
    # the margin: the change whose interval's lower end is lowest (every one must clear 0)
    m = min(changes, key=lambda c: c.interval[0]) if changes else None
    text = (_not_matched_text(d) + "GSSM / fastest transformer, samples to 90 %, per-seed "
            "change of the ratio (bootstrap over seeds): " + "; ".join(parts)
            + f"; {_trend_text(gssms, lengths)}" + _setting_text(d))
    if down:
        return Reading(text, False, m)
    if short:
        return Reading(text, Undecided.regime(
            f"the ratio falls ({', '.join(short)}) only where the paper's own trend predicts a "
            f"gap of at most {CLEAR_GAP:g}×"), m)
    if either or thin:
        return Reading(text, Undecided.either_shape(
            "; ".join(([f"the interval of the change holds 0 ({', '.join(either)})"]
                       if either else [])
                      + ([f"one seed pairing, no interval ({', '.join(thin)})"]
                         if thin else []))), m)
    return Reading(text, True, m)


FIGURE = Figure(
    "Copy accuracy vs samples seen", "Copy paper Figs. 1a, 9",
    (Claim("transformers learn to copy from far fewer samples than GSSMs", claim_fewer_samples),
     Claim("the gap grows with string length (Mamba ~10× at length <= 30, Fig. 9b; ~100× at "
           "300, Fig. 1a)", claim_gap_grows)),
    # large: the lr sweep at the sweep seed; the analysis then trains each model's best lr
    # at the other seeds (compute_large)
    recipes=lambda preset: (zoo_copy.copy_medium_recipes() if preset == "medium"
                            else zoo_copy.copy_large_recipes() if preset == "large"
                            else copy_recipes(preset)),
    presets=("quick", "medium", "large", "paper"))


def add_arguments(p) -> None:
    add_copy_models_argument(p)
    p.add_argument("--sweep", action="store_true",
                   help="with --train medium: every lr of the sweep (zoo_copy.COPY_MEDIUM['lrs']) at "
                   "every seed, which picks each model's lr (zoo_copy.COPY_MEDIUM_LR); without it "
                   "only the chosen lrs train (a third of the runs)")
    p.add_argument("--jobs", type=flags.flag("--jobs"), default=None,
                   help="with --train large: the other seeds' runs trained side by side "
                   "(default: this machine's cores)")


def _recipes(args) -> list[str]:
    """``--train PRESET [--models a,b]``; at medium every length and seed of those models (at
    their chosen lr, or every lr with ``--sweep``)."""
    check(not args.sweep or args.train == "medium", "--sweep goes with --train medium")
    if args.train == "large":  # the sweep seed at every lr (compute_large trains the rest)
        return zoo_copy.copy_large_recipes(args.models.split(",") if args.models else None)
    if args.train != "medium":
        return copy_models_recipes(args)
    return zoo_copy.copy_medium_recipes(args.models.split(",") if args.models else None,
                                   sweep=args.sweep)


def main(argv=None) -> int:
    return run_analysis(
        NAME, __doc__, argv, compute=_compute, plot=plot, table=table, figure=FIGURE,
        add_arguments=add_arguments, recipes=_recipes)


if __name__ == "__main__":
    raise SystemExit(main())
