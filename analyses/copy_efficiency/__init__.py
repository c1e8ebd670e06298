"""How many training samples does each model need to learn to copy? (copy paper §3.2, Figs. 1a, 9)

``python -m analyses.copy_efficiency ckpt.pt ...`` (or ``--train --level quick``): string- and
character-level copy accuracy against the number of training examples seen, read from the
evaluation history the trainer stores in every checkpoint (``history``: samples_seen,
string_acc, char_acc, eval_loss; evaluated on fresh strings of the training distribution). For
each model: the samples needed to first reach 50 % and 90 % string accuracy, and their ratio to
the fastest model (paper: transformers need ~100× fewer samples than GSSMs on length-300
strings, ~10× fewer on length ≤ 30, Fig. 9b).

With ``--train`` it reads the zoo's copy models of Fig. 1, the same checkpoints as
``length_generalization`` (``analyses.copy_models.COPY_LABELS``; trained once, cached); the quick
level evaluates every 100 steps.

``--level medium`` (with ``--train``): the comparison as a number with an error bar, in the paper's
setting as far as a CPU allows (the zoo's ``copy_medium/*`` recipes;
``zoo_copy.COPY_MEDIUM_SETTING`` says what is matched and what is not): parameter-matched
models (the transformer as the authors' GPT-NeoX: a quarter of each head rotated, parallel
residual), strings of random length 1..L up to where the paper's trend predicts a clear gap,
the seeds the a-priori design asks for (:mod:`analyses.copy_efficiency.regime`), a run stopped
once past 90 % (one that never got there is censored at the samples it saw), every model at its
own learning rate, chosen on seeds that are not the verdict's (:func:`best_lr` over the sweep
seeds; ``zoo_copy.COPY_MEDIUM_LR``; ``--sweep`` trains that sweep of
``zoo_copy.COPY_MEDIUM["lrs"]`` again; a chosen lr at an end of its grid is flagged,
``lr_edge``); then
samples to 50 % and 90 % at exactly L, as Fig. 1a's caption scores (the score over the
training distribution 1..L beside it, ``dist_string_*``; mean ± sd over seeds), per GSSM
the ratio of its samples to the fastest transformer's (ratio of the means, and the per-seed
ratios, seeds paired; each seed's log ratio with whether it is a bound), and each seed's slope
of its log ratio on log L, where the paper finds the gap grows (Fig. 9b vs 1a; ``slopes``).

``--level large`` (with ``--train``; the smallest settings that decide the claim): the same at
L <= 10, 20, 30 over 26 letters in packed contexts, models matched at ~1M parameters
(``zoo_copy.COPY_LARGE_SETTING``): a sweep of four lrs at seed 0 (the zoo's ``copy_large/*``
recipes the plan trains), then each model's best lr of it at the other seeds, trained here side
by side (:func:`compute_large`, ``--jobs``).
"""

from __future__ import annotations

import os

import numpy as np

from analyses import zoo
from analyses.claims import Claim, Figure
from analyses.common import Checkpoint, need, run_analysis, to_jsonable
from analyses.copy_efficiency.claims import claim_fewer_samples, claim_gap_grows
from analyses.copy_efficiency.seeded import (
    _run_of,
    compute_large,
    compute_medium,
    plot_medium,
    table_medium,
)
from analyses.copy_models import (
    add_copy_models_argument,
    copy_models_recipes,
    copy_recipes,
    load_copy_models,
)
from analyses.zoo import copy as zoo_copy
from figures.style import COLORS, new_figure, shared_legend
from models.levels import SEEDED
from probes.sample_efficiency import (
    THRESHOLDS,
    acc_at,
    samples_to_reach,
)
from seqprobe.cli import add_workers_flag
from seqprobe.config import check

# The scheduler (seqprobe.sweep) is imported where the large level trains: --help and the
# refusals read no scheduler.
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
        reach[label] = {f"string_{lv}": samples_to_reach(rows, "string_acc", lv)
                        for lv in THRESHOLDS}
        reach[label].update({f"char_{lv}": samples_to_reach(rows, "char_acc", lv)
                             for lv in THRESHOLDS})
        reach[label].update({f"exact_string_{lv}": samples_to_reach(rows, "string_acc_at_L", lv)
                             for lv in THRESHOLDS})
    ratios = {}
    for key in (f"string_{THRESHOLDS[-1]}", f"string_{THRESHOLDS[0]}"):
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
    # pass over prompt and true answer), as is the quick level's; greedy decoding gives the
    # same string accuracy but counts the characters of its own continuation
    forced = any(not i.get("greedy_eval", True) for i in result["train"].values())
    axes[1].set(ylabel="character-level accuracy" + ("\n(teacher forced)" if forced else ""),
                title="character level (Fig. 9)")
    for ax in axes:
        ax.set(xscale="log", xlabel="training examples seen", ylim=(-0.02, 1.02))
    shared_legend(fig, axes[0])  # the same models in both panels
    return fig


def table(result: dict) -> list[list]:
    if result.get("level") in SEEDED:
        return table_medium(result)
    rows = [["model", "final string", "final char", "samples→50%", "samples→90%", "×fastest"]]
    ratio = result["ratio_to_fastest"].get(f"string_{THRESHOLDS[-1]}", {})
    for label, r in result["curves"].items():
        last = r[-1] if r else {}
        reach = result["samples_to_reach"][label]
        rows.append([label, last.get("string_acc", "-"), last.get("char_acc", "-"),
                     reach[f"string_{THRESHOLDS[0]}"] or "never",
                     reach[f"string_{THRESHOLDS[-1]}"] or "never",
                     "-" if ratio.get(label) is None else ratio[label]])
    return rows


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints, "copy checkpoints")
    if (args.train or args.level) == "medium":
        return compute_medium([_run_of(c.path) for c in checkpoints], zoo_copy.COPY_MEDIUM_SETTING)
    if (args.train or args.level) == "large":
        def train(names: list[str]) -> list[dict]:
            from seqprobe.sweep import Failed, backend_of

            jobs = args.workers or os.cpu_count() or 1
            done = zoo.train_recipes(names, "large", args.cache_dir, args.device,
                                     backend_of(args, jobs, args.device), progress=False,
                                     seed_offset=zoo.seed_offset())
            return [_run_of(str(p)) for p in done.values() if not isinstance(p, Failed)]
        return compute_large([_run_of(c.path) for c in checkpoints],
                             train if args.train else None)
    models, info, _ = load_copy_models([c.path for c in checkpoints], args.device)
    histories = {label: list(m.provenance.history) for label, m in models.items()}
    for label, h in histories.items():
        check(any("string_acc" in r for r in h),
              f"{info[label]['path']}: the checkpoint has no accuracy history (was it trained?)")
    return compute(histories, info)


# what each level trains against the paper (the index's scale line; ngram_lookup, the Markov
# and STU analyses say theirs)
SCALE = {
    "quick": "copy transformers of ~0.4M parameters and an LSTM of ~1M on strings of length "
             "<= 20, one seed, the GSSMs far from trained",
    "medium": "parameter-matched copy models of ~100k parameters (RoPE, Mamba, LSTM) on strings "
              "of length <= 4, 6, 8, 10, 5 seeds (lrs chosen on 3 others)",
    "large": "parameter-matched copy models of ~1M parameters on strings of length <= 10, 20, "
             "30 over 26 letters, 3 seeds",
}
FIGURE = Figure(
    "Copy accuracy vs samples seen", "Copy paper Figs. 1a, 9",
    (Claim("transformers learn to copy from far fewer samples than GSSMs", claim_fewer_samples),
     Claim("the gap grows with string length (Mamba ~10× at length <= 30, Fig. 9b; ~100× at "
           "300, Fig. 1a)", claim_gap_grows)),
    # large: the lr sweep at the sweep seed; the analysis then trains each model's best lr
    # at the other seeds (compute_large)
    recipes=lambda level: (zoo_copy.copy_medium_recipes() if level == "medium"
                           else zoo_copy.copy_large_recipes() if level == "large"
                           else copy_recipes(level)),
    levels=("quick", "medium", "large", "paper"), scale=SCALE.get,
    paper_scale="copy models of ~160M parameters on strings of length <= 300 (copy Fig. 1a; "
                "<= 30 in Fig. 9b)")


def add_arguments(p) -> None:
    add_copy_models_argument(p)
    p.add_argument("--sweep", action="store_true",
                   help="with --level medium --train: every lr of the sweep "
                   "(zoo_copy.COPY_MEDIUM['lrs']) "
                   "at every seed, which picks each model's lr (zoo_copy.COPY_MEDIUM_LR); without "
                   "it only the chosen lrs train (a third of the runs)")
    add_workers_flag(p, help="with --train --level large: the other seeds' runs trained side "
                     "by side (default: this machine's cores)")


def _recipes(args) -> list[str]:
    """``--train LEVEL [--models a,b]``; at medium every length and seed of those models (at
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
