"""Train short, test long: induction-heads recall vs sequence length (spectral paper Fig. 5).

``python -m analyses.stu_induction --train quick`` trains (cached) a two-layer STU with
filters of length T = 256 — and, beside it, a Hard-ALiBi transformer and a Mamba-2 of
similar size — on the induction-heads task at lengths T^q, several seeds each (the zoo's
``induction/{arch}_L{length}_s{seed}`` recipes; ``--archs``, ``--qs`` and ``--seeds`` pick among
them), then measures greedy recall accuracy at lengths up to T.
``python -m analyses.stu_induction CKPT...`` evaluates given induction checkpoints instead
(any language-model architecture).

Outputs: accuracy vs evaluation length per architecture and training length (mean over seeds,
min–max band), chance 1/D, a table, and for each (arch, training length) the pooled accuracy
at the longest length with a one-sided binomial p-value against chance
(:mod:`probes.induction`).
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict

import numpy as np
from tqdm.auto import tqdm

from analyses.common import (
    Checkpoint,
    Claim,
    Figure,
    ints,
    load_model,
    need,
    numbers,
    run_analysis,
    to_jsonable,
)
from figures.style import COLORS, new_figure
from models import zoo
from probes.induction import binomial_sf, recall_accuracy
from tasks.base import check
from tasks.registry import make_task

NAME = "stu_induction"
ARCHS = ("stu", "transformer", "mamba2", "mamba", "lstm")  # any language model can be probed
DEFAULT_ARCHS = ("stu", "transformer", "mamba2")


def describe(model) -> str:
    """Architecture label: the arch, with the positional encoding for transformers."""
    pe = getattr(model.cfg, "pe", None)
    return f"{model.arch} ({pe})" if pe else model.arch


def compute(models: list, lengths: list[int] | None = None, n_eval: int = 512, seed: int = 0,
            progress: bool = True) -> dict:
    """Recall accuracy of induction-heads checkpoints at each evaluation length.

    ``models``: loaded suite models (``models.load``) trained on the ``induction`` task; they
    are grouped by (architecture, training length) and averaged over the group (seeds).
    """
    check(len(models) >= 1, "stu_induction needs at least one model")
    check(n_eval >= 1, f"n_eval must be >= 1, got {n_eval}")
    groups: dict[tuple[str, int], list] = defaultdict(list)
    D = None
    for m in models:
        task_info = m.checkpoint["task"]
        check(task_info["name"] == "induction",
              f"stu_induction needs induction-task checkpoints, got one trained on "
              f"{task_info['name']!r}")
        task = make_task("induction", task_info["config"])
        check(D is None or task.cfg.D == D, "all checkpoints must share the alphabet size D")
        D = task.cfg.D
        groups[(describe(m), task.cfg.length)].append(m)
    if lengths is None:
        top = max(zoo.INDUCTION_T, max(L for _, L in groups))
        lengths = sorted({2**i for i in range(4, int(math.log2(top)) + 1)} | {L for _, L in groups})
    check(all(L >= 3 for L in lengths), f"evaluation lengths must be >= 3, got {lengths}")
    task = make_task("induction", {"D": D, "length": 3})
    chance = 1.0 / D
    rows = []
    bar = tqdm(total=len(models), desc=NAME, disable=not progress, leave=False)
    for (arch, train_len), ms in sorted(groups.items()):
        per_seed = []
        for m in ms:
            m.eval()
            per_seed.append(recall_accuracy(m, task, lengths, n_eval, seed))
            bar.update(1)
        counts = np.array(per_seed)  # [seed, length]
        acc = counts / n_eval
        pooled_right, pooled_n = int(counts[:, -1].sum()), n_eval * len(ms)
        rows.append({
            "arch": arch, "train_length": train_len, "n_models": len(ms),
            "n_params": ms[0].n_params(),
            "train_steps": [m.checkpoint["train"].get("step") for m in ms],
            "acc_mean": acc.mean(0).tolist(), "acc_min": acc.min(0).tolist(),
            "acc_max": acc.max(0).tolist(), "acc_per_model": acc.tolist(),
            "longest": {"length": lengths[-1], "acc": pooled_right / pooled_n,
                        "n": pooled_n,
                        "p_value_vs_chance": binomial_sf(pooled_right, pooled_n, chance)},
        })
    bar.close()
    return to_jsonable({"lengths": lengths, "n_eval": n_eval, "seed": seed, "D": D,
                        "chance": chance, "rows": rows})


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
        for i, r in enumerate(sorted(rows, key=lambda r: r["train_length"])):
            ls = styles[i % len(styles)]
            ax.plot(x, r["acc_mean"], ls, marker="o", ms=3, color=_color(arch),
                    label=f"trained at L = {r['train_length']} ({r['n_models']} seeds)")
            ax.fill_between(x, r["acc_min"], r["acc_max"], color=_color(arch), alpha=0.12)
            ax.axvline(r["train_length"], color=_color(arch), ls=ls, lw=0.6, alpha=0.6)
        ax.axhline(result["chance"], color="k", ls=":", lw=1, label="chance")
        ax.set(xscale="log", xlabel="evaluation length", ylabel="recall accuracy",
               ylim=(0, 1.05), title=arch)
        ax.set_xticks(x)
        ax.set_xticklabels([str(v) for v in x], fontsize=7)
        ax.minorticks_off()
        ax.legend(loc="lower left", fontsize=6)
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
def induction_recipes(preset: str, archs: tuple[str, ...] = DEFAULT_ARCHS,
                      qs: tuple[float, ...] | None = None, seeds: int | None = None) -> list[str]:
    """The zoo recipes of every (arch, q, seed): training lengths T^q and seeds 0..seeds-1
    (default: the preset's ``zoo.INDUCTION_RUNS``). A run the zoo has no recipe for is a
    clear error that names the runs it has."""
    runs = zoo.INDUCTION_RUNS[preset]
    qs = tuple(qs or runs["qs"])
    seeds = runs["seeds"] if seeds is None else seeds
    check(seeds >= 1 and len(qs) >= 1 and all(0 < q <= 1 for q in qs),
          f"need seeds >= 1 and q in (0, 1], got seeds={seeds}, qs={qs}")
    zoo_archs = sorted({r.arch for r in zoo.RECIPES.values() if r.task == "induction"})
    for arch in archs:
        check(arch in zoo_archs, f"the zoo has no induction recipes for arch {arch!r} (it has "
              f"{', '.join(zoo_archs)}); give such checkpoints as paths instead")
    lengths = sorted({zoo.induction_length(q) for q in qs})
    names = [zoo.induction_name(a, L, s) for a in archs for L in lengths for s in range(seeds)]
    for n in names:
        check(n in zoo.RECIPES and zoo.RECIPES[n].available(preset),
              f"no {preset} recipe {n} in the zoo: its {preset} induction runs are q in "
              f"{', '.join(f'{q:.4g}' for q in runs['qs'])} (lengths "
              f"{', '.join(str(zoo.induction_length(q)) for q in runs['qs'])}) and seeds "
              f"0..{runs['seeds'] - 1} (models/zoo.py INDUCTION_RUNS)")
    return names


def _selected_recipes(args: argparse.Namespace) -> list[str]:
    return induction_recipes(args.train, tuple(a.strip() for a in args.archs.split(",")
                                               if a.strip()),
                             tuple(numbers(args.qs)) if args.qs else None, args.seeds)


# ---------------------------------------------------------------------------- the paper's claim
def claim_recall(d: dict) -> tuple[str, bool]:
    """Fig. 5: some STU trained short recalls above chance at the longest length (pooled over
    seeds, one-sided binomial p < 0.01)."""
    rows = [r for r in d["rows"] if r["arch"] == "stu"]
    parts = [f"trained at {r['train_length']}: {r['longest']['acc']:.2f} at "
             f"{r['longest']['length']}"
             f" (best seed {max(a[-1] for a in r['acc_per_model']):.2f}, p = "
             f"{r['longest']['p_value_vs_chance']:.1e})" for r in rows]
    ok = any(r["longest"]["p_value_vs_chance"] < 0.01 for r in rows)
    return f"STU (chance {d['chance']:.2f}): " + "; ".join(parts), ok


FIGURE = Figure(
    "STU on induction heads, trained short", "Spectral paper Fig. 5",
    (Claim("STU trained short sometimes generalises to length T (above chance)",
           claim_recall),),
    recipes=induction_recipes)


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--archs", default=",".join(DEFAULT_ARCHS),
                   help="architectures trained by --train (default: stu,transformer,mamba2)")
    p.add_argument("--qs", default=None, help="training lengths T^q with T = 256, from the "
                   "zoo's runs (default quick: 1/2,3/4; paper: 1/2,5/8,3/4,7/8)")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds per (arch, q), from the zoo's runs (default quick 3, paper 5)")
    p.add_argument("--lengths", default=None, help="evaluation lengths (default 16..256)")
    p.add_argument("--n-eval", type=int, default=512, help="sequences per evaluation length")


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints, "induction checkpoints")
    models = [load_model(c.path, archs=ARCHS, device=args.device, tasks=("induction",))
              for c in checkpoints]
    result = compute(models, lengths=ints(args.lengths) if args.lengths else None,
                     n_eval=args.n_eval, seed=args.seed)
    result.update({"checkpoints": [c.path for c in checkpoints],
                   "labels": [c.label for c in checkpoints], "preset": args.train})
    return result


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=1,
                        recipes=_selected_recipes)


if __name__ == "__main__":
    raise SystemExit(main())
