"""Train short, test long: induction-heads recall vs sequence length (spectral paper Fig. 5).

``python -m analyses.stu_induction --train --level quick`` trains (cached) a two-layer STU with
filters of length T = 256 — and, beside it, a Hard-ALiBi transformer and a Mamba-2 of
similar size — on the induction-heads task at lengths T^q, several seeds each (the zoo's
``induction/{arch}_L{length}_s{seed}`` recipes; ``--archs``, ``--qs`` and ``--seeds`` pick among
them), then measures greedy recall accuracy at lengths up to T.
``--train --level medium`` trains each run to convergence in the paper's sense (a fixed budget
with a cosine-decayed Adam, no early stop; ``induction_medium/{label}_L{length}_s{seed}``), 8 seeds
of each STU variant at q = 1/2 and 3/4 — the paper's model (tensordot STU, LayerNorm), the
tensordot of the paper's reference code (one filter mixture shared by the ± branches) and the
STU with BLANK's embedding held at zero and no norm — beside Hard-ALiBi and Mamba-2.
``python -m analyses.stu_induction CKPT...`` evaluates given induction checkpoints instead
(any language-model architecture).

Outputs: accuracy vs evaluation length per architecture and training length (every seed a
dot, mean line, min–max band), chance 1/D, a table, and for each (arch, training length) the
pooled accuracy at the longest length with a one-sided binomial p-value against chance
(:mod:`probes.induction`), the fraction of seeds that recall at T, and the "seen lags"
accuracy (right at every lag seen in training, chance beyond). Below the training length each
model is also evaluated on the same sequences left-padded with BLANK to the training length:
the lags are the same, only the start of the sequence (zeros in a filter's window instead of
BLANKs) differs.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from analyses import zoo
from analyses.claims import Claim, Figure
from analyses.common import Checkpoint, load_model, need, run_analysis, to_jsonable
from analyses.stu_induction.claims import (
    GENERALISES,
    SETTING,
    claim_blank_zero,
    claim_generalise,
    claim_generalise_window,
    claim_padding,
    claim_readings_finding,
    claim_recall,
    claim_shared_mixture,
    claim_vs_baselines,
    runs_text,
)
from analyses.zoo import spectral as zoo_spectral
from figures.style import COLORS, new_figure
from models.levels import SEEDED
from probes.induction import (
    binomial_sf,
    lag_parity_reach,
    recall_accuracy,
    recall_by_lag,
    seen_lags_accuracy,
)
from seqprobe.cli import add_fields
from seqprobe.config import check
from seqprobe.flags import MAX_EXAMPLES, MAX_LENGTH, MAX_SEEDS, Config, bound
from tasks.registry import make_task

NAME = "stu_induction"
# any language model can be probed
INDUCTION_ARCHS = ("stu", "transformer", "mamba2", "mamba", "lstm")
DEFAULT_ARCHS = ("stu", "transformer", "mamba2")


def describe(model) -> str:
    """Architecture label: the arch, with the positional encoding for transformers, "shared
    mixture" for Flash STU's tensordot form, "no norm" for a model without normalization
    layers and "<TOKEN> = 0" for embeddings held at zero."""
    cfg = model.cfg
    notes = [n for n in (getattr(cfg, "pe", None),) if n]
    if getattr(cfg, "mixture", "per_branch") == "shared":
        notes.append("shared mixture")
    if getattr(cfg, "normalization", "layernorm") == "none":
        notes.append("no norm")
    notes += [f"{_token_name(model, i)} = 0" for i in getattr(cfg, "zero_embed", ())]
    return f"{model.arch} ({', '.join(notes)})" if notes else model.arch


def _token_name(model, i: int) -> str:
    task = model.task
    return f"token {i}" if task is None else task.vocab.decode([i])


def compute(models: list, lengths: list[int] | None = None, n_eval: int = 512, seed: int = 0,
            progress: bool = True, n_fresh: int = 0) -> dict:
    """Recall accuracy of induction-heads checkpoints at each evaluation length.

    ``models``: loaded suite models (``models.load``) trained on the ``induction`` task; they
    are grouped by (architecture, training length) and averaged over the group (seeds). A
    group trained at several learning rates (the large level's grid) keeps the lrs whose seeds
    recall best at their own training length (within :data:`LR_TIE` of the best) — the paper's
    "tuned Adam", chosen on the lower half of the seeds and read on the upper half — and
    records every lr's score in ``lr_choice``, so runs that never learnt the
    task at a poor lr do not stand for the architecture, and lrs that all learnt it pool.
    ``n_fresh``: each STU seed is also scored at the longest length on this many sequences
    the evaluation does not share (another stream), for the recall claim's test of each seed
    against its seen-lags bound (0: not scored).
    """
    check(len(models) >= 1, "stu_induction needs at least one model")
    check(n_eval >= 1, f"n_eval must be >= 1, got {n_eval}")
    groups: dict[tuple[str, int], list] = defaultdict(list)
    D = None
    for m in models:
        task = m.require_task("stu_induction")
        check(task.name == "induction",
              f"stu_induction needs induction-task checkpoints, got one trained on "
              f"{task.name!r}")
        check(D is None or task.cfg.D == D, "all checkpoints must share the alphabet size D")
        D = task.cfg.D
        groups[(describe(m), task.cfg.length)].append(m)
    if lengths is None:
        top = max(zoo_spectral.INDUCTION_T, max(L for _, L in groups))
        lengths = sorted({2**i for i in range(4, int(math.log2(top)) + 1)} | {L for _, L in groups})
    check(all(L >= 3 for L in lengths), f"evaluation lengths must be >= 3, got {lengths}")
    task = make_task("induction", {"D": D, "length": 3})
    chance = 1.0 / D
    rows = []
    bar = tqdm(total=len(models), desc=NAME, disable=not progress, leave=False)
    for (arch, train_len), ms in sorted(groups.items()):
        ms, lr_choice = _tuned_lr(ms, task, train_len, n_eval, seed)
        per_seed, padded, by_lag = [], [], []
        shorter = [L for L in lengths if L < train_len]
        for m in ms:
            m.eval()
            per_seed.append(recall_accuracy(m, task, lengths, n_eval, seed))
            padded.append(recall_accuracy(m, task, shorter, n_eval, seed, pad_to=train_len))
            by_lag.append(recall_by_lag(m, task, lengths[-1], train_len, n_eval, seed))
            bar.update(1)
        counts = np.array(per_seed)  # [seed, length]
        acc = counts / n_eval
        pooled_right, pooled_n = int(counts[:, -1].sum()), n_eval * len(ms)
        at_T = acc[:, -1]  # [seed]
        rows.append({
            "arch": arch, "train_length": train_len, "n_models": len(ms),
            "n_params": ms[0].n_params(),
            "train_steps": [m.provenance.step for m in ms],
            # per model: a group may pool learning rates as seeds (large: two lrs per seed)
            "lr": [_lr(m) for m in ms],
            "lr_choice": lr_choice,  # lr -> mean recall at the training length ({} if one lr)
            "acc_mean": acc.mean(0).tolist(), "acc_min": acc.min(0).tolist(),
            "acc_max": acc.max(0).tolist(), "acc_per_model": acc.tolist(),
            "stop": [m.provenance.stop for m in ms],
            # convergence at the training length: the last evaluation's loss of each seed
            "final_eval_loss": [_final_eval_loss(m) for m in ms],
            "longest": {"length": lengths[-1], "acc": pooled_right / pooled_n,
                        "n": pooled_n,
                        "p_value_vs_chance": binomial_sf(pooled_right, pooled_n, chance),
                        "median": float(np.median(at_T)),
                        "frac_generalise": float(np.mean(at_T >= GENERALISES)),
                        "seen_lags_acc": seen_lags_accuracy(train_len, lengths[-1], D),
                        # per seed, on other sequences: recall at the lags seen in training
                        # and at the longer ones
                        "acc_seen_lags": [a for a, _ in by_lag],
                        "acc_unseen_lags": [b for _, b in by_lag]},
            # below the training length: [seed, length] as is and left-padded with BLANK
            "shorter": {"lengths": shorter,
                        "acc": acc[:, [lengths.index(L) for L in shorter]].tolist(),
                        "acc_padded": (np.array(padded).reshape(len(ms), len(shorter))
                                       / n_eval).tolist()},
        })
        if arch == "stu" and n_fresh:  # the recall claim's per-seed test, on fresh sequences
            rows[-1]["fresh"] = {"length": lengths[-1], "n": n_fresh, "seed": seed + FRESH,
                                 "right": [recall_accuracy(m, task, [lengths[-1]], n_fresh,
                                                           seed + FRESH)[0] for m in ms]}
        if getattr(ms[0].cfg, "mixture", None) == "shared":
            rows[-1]["parity_reach"] = _parity_reach(ms, D, train_len, seed)
    bar.close()
    return to_jsonable({"lengths": lengths, "n_eval": n_eval, "seed": seed, "D": D,
                        "chance": chance, "rows": rows})


def _parity_reach(ms: list, D: int, train_len: int, seed: int) -> dict:
    """The shared-mixture finding's identity, checked by running it: how far one token at an
    odd lag moves the last position's logits, on a twin of the architecture with random
    weights (seeded) and on each trained seed — rounding only, where the ± branches cancel
    every odd tap whatever the weights (:func:`probes.induction.lag_parity_reach`)."""
    torch.manual_seed(seed)
    twin = type(ms[0])(ms[0].cfg).eval()
    vocab = ms[0].cfg.vocab_size
    return {"random": lag_parity_reach(twin, vocab, train_len, PARITY_N, seed),
            "trained": [lag_parity_reach(m, vocab, train_len, PARITY_N, seed)
                        for m in ms[:PARITY_SEEDS]]}


FRESH = 7919  # the fresh sequences' stream: seed + FRESH, apart from the evaluation's
# sequences a seed is re-scored on at a seeded level: a seed's recall is then read to about
# ±0.011 (binomial sd at 0.5), so Holm over 16 seeds at 0.01 sees a seed 0.04 above its bound
N_FRESH = 2048


# random sequences a parity check reads (an identity: any count shows it; a few keep it cheap)
PARITY_N = 8
PARITY_SEEDS = 4  # trained seeds a group checks it on (the large level has 32 a length)


# two lrs whose seeds recall this close at the training length both learnt the task: their
# runs pool (the sampling error of the mean over 8 seeds x 512 sequences is below it)
LR_TIE = 0.01


def _lr(model) -> float | None:
    return (model.provenance.train.get("config") or {}).get("lr")


def _seed(model) -> int | None:
    return (model.provenance.train.get("config") or {}).get("seed")


def _tuned_lr(ms: list, task, train_len: int, n_eval: int, seed: int
              ) -> tuple[list, dict[str, float]]:
    """``ms`` at the lrs whose seeds recall best at ``train_len`` (within :data:`LR_TIE`; all
    of ``ms`` when they share one lr), and each lr's mean recall there. The lr is chosen on
    seeds the verdict does not read: the lower half of the seed numbers choose, the upper
    half (of the kept lrs) are returned — a choice made on the verdict's own seeds would
    favour whichever lr their luck favoured."""
    by_lr: dict = defaultdict(list)
    for m in ms:
        by_lr[_lr(m)].append(m)
    if len(by_lr) == 1:
        return ms, {}
    numbers = sorted({_seed(m) for m in ms}, key=lambda s: (s is None, s))
    chooser = set(numbers[: len(numbers) // 2])
    check(0 < len(chooser) < len(numbers),
          "choosing an lr needs at least two seed numbers (half choose, half decide)")
    score = {lr: float(np.mean([recall_accuracy(m.eval(), task, [train_len], n_eval, seed)[0]
                                for m in group if _seed(m) in chooser])) / n_eval
             for lr, group in by_lr.items()}
    best = max(score.values())
    kept = [m for lr, group in by_lr.items() if score[lr] >= best - LR_TIE for m in group
            if _seed(m) not in chooser]
    return kept, {f"{lr:g}": v for lr, v in sorted(score.items())}


def _final_eval_loss(model) -> float:
    history = model.provenance.history or ({},)
    return float(history[-1].get("eval_loss", math.nan))


# ---------------------------------------------------------------------------- plot
def _color(arch: str) -> str:
    for key in ("hard_alibi", "alibi", "rope", "nope", "mamba2", "stu", "mamba", "lstm"):
        if key in arch:
            return COLORS.get(key, "#333333")
    return "#333333"


def plot(result: dict):
    archs = sorted({r["arch"] for r in result["rows"]},
                   key=lambda a: (not a.startswith("stu"), a))
    fig, axes = new_figure(len(archs), width_per_panel=3.6, height=3.2)
    x = result["lengths"]
    for ax, arch in zip(axes, archs, strict=True):
        rows = [r for r in result["rows"] if r["arch"] == arch]
        styles = ["-", "--", ":", "-."]
        # one colour per arch: the training lengths differ by line style *and* marker, so
        # their legend entries differ at the legend's size too (a short dashed stub under a
        # round marker read as the solid one)
        markers = ["o", "s", "^", "D"]
        for i, r in enumerate(sorted(rows, key=lambda r: r["train_length"])):
            ls = styles[i % len(styles)]
            ax.plot(x, r["acc_mean"], ls, marker=markers[i % len(markers)], ms=3.5,
                    color=_color(arch), mfc="white" if i % 2 else _color(arch),
                    label=f"trained at L = {r['train_length']} ({runs_text(r)})")
            # every seed a dot, nudged sideways by training length: bimodality shows as two
            # clusters at one length
            nudge = 2 ** (0.06 * (i - (len(rows) - 1) / 2))
            for a in r["acc_per_model"]:
                ax.plot([v * nudge for v in x], a, ".", ms=3, color=_color(arch), alpha=0.35)
            ax.fill_between(x, r["acc_min"], r["acc_max"], color=_color(arch), alpha=0.12)
            ax.axvline(r["train_length"], color=_color(arch), ls=(0, (1, 3)), lw=0.8, alpha=0.8,
                       label="training lengths" if i == 0 else None)
        ax.axhline(result["chance"], color="k", ls=":", lw=1, label="chance")
        ax.set(xscale="log", xlabel="evaluation length", ylabel="recall accuracy",
               ylim=(0, 1.05), title=arch)
        ax.set_xticks(x)
        ax.set_xticklabels([str(v) for v in x], fontsize=7)
        ax.minorticks_off()
        ax.legend(loc="lower left", fontsize=6, handlelength=3.2)
    return fig


def table(result: dict) -> list[list]:
    head = ["arch", "train L", "params"] + [f"L={v}" for v in result["lengths"]] + ["p(longest)"]
    rows = [head]
    for r in result["rows"]:
        rows.append([r["arch"], r["train_length"], r["n_params"]]
                    + [f"{m:.3f}" for m in r["acc_mean"]]
                    + [f"{r['longest']['p_value_vs_chance']:.2g}"])
    return rows


# ---------------------------------------------------------------------------- recipes
def induction_recipes(level: str, archs: tuple[str, ...] | None = None,
                      qs: tuple[float, ...] | None = None, seeds: int | None = None) -> list[str]:
    """The zoo recipes of every (arch, q, seed): training lengths T^q and seeds 0..seeds-1
    (default: the level's ``zoo_spectral.INDUCTION_RUNS``; at medium ``zoo.INDUCTION_MEDIUM_*``, every
    label with its own seeds). A run the zoo has no recipe for is a clear error that names the
    runs it has."""
    if level == "medium":
        return _medium_recipes(archs, qs, seeds)
    if level == "large":  # both STUs at every q, two lrs, 16 seeds (zoo.INDUCTION_LARGE_*)
        return zoo_spectral.induction_large_recipes(archs, qs, seeds)
    archs = archs or DEFAULT_ARCHS
    runs = zoo_spectral.INDUCTION_RUNS[level]
    qs = tuple(qs or runs["qs"])
    seeds = runs["seeds"] if seeds is None else seeds
    check(seeds >= 1 and len(qs) >= 1 and all(0 < q <= 1 for q in qs),
          f"need seeds >= 1 and q in (0, 1], got seeds={seeds}, qs={qs}")
    zoo_archs = sorted({r.arch for r in zoo.RECIPES.values() if r.task == "induction"})
    for arch in archs:
        check(arch in zoo_archs, f"the zoo has no induction recipes for arch {arch!r} (it has "
              f"{', '.join(zoo_archs)}); give such checkpoints as paths instead")
    lengths = sorted({zoo_spectral.induction_length(q) for q in qs})
    names = [zoo_spectral.induction_name(a, L, s) for a in archs for L in lengths for s in range(seeds)]
    for n in names:
        check(n in zoo.RECIPES and zoo.RECIPES[n].available(level),
              f"no {level} recipe {n} in the zoo: its {level} induction runs are q in "
              f"{', '.join(f'{q:.4g}' for q in runs['qs'])} (lengths "
              f"{', '.join(str(zoo_spectral.induction_length(q)) for q in runs['qs'])}) and seeds "
              f"0..{runs['seeds'] - 1} (analyses/zoo/__init__.py INDUCTION_RUNS)")
    return names


def _medium_recipes(labels: tuple[str, ...] | None, qs: tuple[float, ...] | None,
                    seeds: int | None) -> list[str]:
    table = zoo_spectral.INDUCTION_MEDIUM_MODELS
    labels = labels or tuple(table)
    qs = tuple(qs or zoo_spectral.INDUCTION_MEDIUM_QS)
    check(all(lab in table for lab in labels),
          f"the medium induction runs are {', '.join(table)}, got {', '.join(labels)}")
    check(all(q in zoo_spectral.INDUCTION_MEDIUM_QS for q in qs), "the medium induction runs are q in "
          + ", ".join(f"{q:.4g}" for q in zoo_spectral.INDUCTION_MEDIUM_QS))
    check(seeds is None or 1 <= seeds <= min(table[lab][2] for lab in labels),
          f"need 1 <= seeds <= {min(table[lab][2] for lab in labels)} for {', '.join(labels)}")
    return [zoo_spectral.induction_medium_name(lab, zoo_spectral.induction_length(q), s) for lab in labels
            for q in qs for s in range(table[lab][2] if seeds is None else seeds)]


def _selected_recipes(args: argparse.Namespace) -> list[str]:
    archs = tuple(a.strip() for a in args.archs.split(",") if a.strip()) if args.archs else None
    return induction_recipes(args.train, archs, tuple(args.qs) if args.qs else None,
                             args.seeds)


# what each level trains against the paper (the index's scale line)
SCALE = {
    "quick": "3 STU seeds at q = 1/2, 3/4",
    "medium": "STU trained to convergence, 8 seeds per training length",
    "large": "STU at q = 1/2, 5/8, 3/4, 7/8, 16 seeds, 2 lrs",
}
FIGURE = Figure(
    "STU on induction heads, trained short", "Spectral paper Fig. 5",
    (Claim("STU trained short sometimes generalises to length T (above the seen-lags bound: "
           "right at the lags seen in training, chance beyond)", claim_recall),
     Claim(f"Fig. 5 ({SETTING}): STU trained at T^q occasionally recalls all the way to T "
           f"(some seed >= {GENERALISES} at T; bimodal over seeds) — reading 1 of 2 (the paper "
           "publishes neither task nor metric): the flag anywhere, every lag scored",
           claim_generalise),
     Claim("Fig. 5, reading 2 of 2: the flag within T^q of the query (a longer T adds blanks, "
           f"not lags), lags <= T^q scored at T: some seed >= {GENERALISES}",
           claim_generalise_window),
     Claim("(finding) what reconciles Fig. 5's two readings with the suite: generalising seeds "
           "under the flag-within-T^q reading and none when every lag is scored",
           claim_readings_finding),
     Claim("(our comparison, not the paper's: its §5 leaves comparisons with transformers "
           "and SSMs to future work) the STU length-generalises at least as well as Hard-ALiBi "
           "and Mamba-2 trained at the same lengths", claim_vs_baselines),
     Claim("(finding) the STU's lower recall below its training length comes from the "
           "sequence start, not the lags: left-padded with BLANK it recalls", claim_padding),
     Claim("(ablation) with BLANK's embedding held at zero and no norm, the STU recalls below "
           "its training length as is", claim_blank_zero),
     Claim("(finding) the reference code's tensordot STU (one filter mixture shared by the ± "
           "branches) reads even lags only: at its training length it recalls no better than "
           "right at even lags and chance at odd ones", claim_shared_mixture)),
    levels=("quick", "medium", "large", "paper"), recipes=induction_recipes, scale=SCALE.get,
    paper_scale="STU at T = 256 trained at T^q for q in {1/2, 5/8, 3/4, 7/8}")


@dataclass(frozen=True)
class Settings(Config):
    """What the analysis measures (each field is a flag: seqprobe.cli.add_fields)."""

    qs: tuple[float, ...] | None = field(default=None, metadata=bound(
        0.0, 1.0, "fractions of the length", open_lo=True,
        help="training lengths T^q with T = 256, from the zoo's runs (default quick: 1/2,3/4; "
             "paper: 1/2,5/8,3/4,7/8)"))
    seeds: int | None = field(default=None, metadata=bound(
        1, MAX_SEEDS, "independently trained systems per point",
        help="seeds per (arch, q), from the zoo's runs (default quick 3, paper 5)"))
    lengths: tuple[int, ...] | None = field(default=None, metadata=bound(
        1, MAX_LENGTH, "tokens per string", help="evaluation lengths (default 16..256)"))
    n_eval: int = field(default=512, metadata=bound(
        1, MAX_EXAMPLES, "sequences per point", help="sequences per evaluation length"))


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--archs", default=None,
                   help="architectures trained by --train (default: stu,transformer,mamba2; "
                   f"medium: the labels {','.join(zoo_spectral.INDUCTION_MEDIUM_MODELS)}; large: "
                   f"{','.join(zoo_spectral.INDUCTION_LARGE_MODELS)})")
    add_fields(p, Settings)


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints, "induction checkpoints")
    models = [load_model(c.path, archs=INDUCTION_ARCHS, device=args.device, tasks=("induction",))
              for c in checkpoints]
    result = compute(models, lengths=list(args.lengths) if args.lengths else None,
                     n_eval=args.n_eval, seed=args.seed,
                     n_fresh=N_FRESH if args.train in SEEDED else 0)
    result.update({"checkpoints": [c.path for c in checkpoints],
                   "labels": [c.label for c in checkpoints], "level": args.train})
    return result


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=1,
                        recipes=_selected_recipes)

