"""Does the model predict like the add-β estimator? (Markov paper Figs 1, 7, 8, 10)

``python -m analyses.markov_laplace ckpt.pt [ckpt2.pt ...]`` — for every checkpoint trained on
random Markov chains (``markov``, ``switching_markov`` or ``markov_holdout``):

1. the predicted next-token probability P_θ(x_{t+1} = 1 | x_1^t) against the add-β estimator's
   on one fixed test sequence (Fig. 1);
2. the L1 deviation Σ_j |P_θ(j) − P_β(j)| per position, averaged over fresh test sequences
   (mass the model puts outside the optimal support counts too), and its mean over t ≥ t_min;
3. the test loss L(θ) and its gap to the add-β estimator's L_β on the same sequences (§3;
   Fig. 8 also gives the relative gap (L − L_β)/L_β).

``--train --level quick`` uses the zoo's 1-layer Mamba-2 and 1- and 2-layer transformers on binary
first-order chains (Figs 1a, 7: ``markov/mamba2``, ``markov/transformer_1L``, ``_2L``);
``--sweep`` adds larger state spaces S and orders k for Mamba and the 2-layer transformer
(Figs 1b, 8, 10). Linear attention (Fig. 7) is not a suite architecture yet and is left out.
The comparisons themselves are :mod:`probes.markov`'s.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from analyses.claims import Claim, Figure, Margin, Reading, tightest
from analyses.common import Checkpoint, load_model, need, run_analysis, suite_arch, to_jsonable
from figures.style import COLORS, new_figure
from probes.markov import evaluate_markov, fixed_sequence_curve, markov_task_of
from seqprobe.cli import add_fields
from seqprobe.config import check
from seqprobe.flags import MAX_EXAMPLES, MAX_LENGTH, Config, bound

NAME = "markov_laplace"
# zoo recipe -> the label the figure, the JSON and the claims use (Figs 1a, 7)
QUICK_RECIPES = {
    "markov/mamba2": "mamba2 1L",
    "markov/transformer_1L": "transformer 1L",
    "markov/transformer_2L": "transformer 2L",
}
SWEEP_RECIPES = {  # Figs 1b, 8, 10: more states and higher orders
    "markov/mamba2_S3": "mamba2 1L S=3",
    "markov/mamba2_S4": "mamba2 1L S=4",
    "markov/mamba2_k2": "mamba2 1L k=2",
    "markov/transformer_2L_k2": "transformer 2L k=2",
}
LABELS = {**QUICK_RECIPES, **SWEEP_RECIPES}


# ---------------------------------------------------------------------------- compute
def compute(models: list[tuple[str, object]], n_seqs: int = 256, seed: int = 0,
            t_min: int = 50, seq_len: int | None = None, progress: bool = True) -> dict:
    """Every number of the analysis for ``[(label, model)]`` (each evaluated on its own
    checkpoint's task; ``seq_len`` overrides the test length)."""
    check(len(models) >= 1, "need at least one model")
    check(t_min >= 1, f"t_min must be >= 1, got {t_min}")
    rows = []
    for label, model in tqdm(models, desc=NAME, disable=not progress, leave=False):
        over = {"seq_len": seq_len} if seq_len else {}
        task = markov_task_of(model, **over)
        ev = evaluate_markov(model, task, n_seqs, seed, t_min)
        fixed = fixed_sequence_curve(model, task, seed + 7919)
        cfg = task.cfg
        rows.append({"label": label, "arch": suite_arch(model),
                     "n_layers": getattr(model.cfg, "n_layers", None),
                     "task": task.name, "S": cfg.S, "order": cfg.order, "beta": cfg.beta,
                     **ev, "fixed": fixed})
    return to_jsonable({"n_seqs": n_seqs, "seed": seed, "t_min": t_min, "models": rows})


# ---------------------------------------------------------------------------- plot
def _color(row: dict, i: int) -> str:
    base = COLORS.get(row["arch"], None)
    palette = list(COLORS.values())
    return base if base and i < 1 else palette[i % len(palette)]


def plot(result: dict):
    fig, ax = new_figure(3, width_per_panel=4.3, height=3.3)
    rows = result["models"]
    first = rows[0]["fixed"]
    pos = np.arange(1, len(first["p_beta"]) + 1)
    ax[0].plot(pos, first["p_beta"], color=COLORS["add_beta"], lw=2.2, label="add-β (optimal)")
    for i, r in enumerate(rows):
        if r["S"] != rows[0]["S"] or r["order"] != rows[0]["order"]:
            continue  # the fixed sequence is only shared by models of the same task
        ax[0].plot(pos, r["fixed"]["p_model"], lw=1.0, color=_color(r, i), label=r["label"])
    ax[0].set(xlabel="position t", ylabel="P(x_{t+1} = 1 | x_1^t)", ylim=(-0.02, 1.02),
              title=f"fixed test sequence (S={rows[0]['S']}, k={rows[0]['order']})")
    ax[0].legend(fontsize=6)
    for i, r in enumerate(rows):
        c = np.array(r["l1_curve"], dtype=float)
        ax[1].plot(np.arange(1, len(c) + 1), c, color=_color(r, i), lw=1.0, label=r["label"])
    ax[1].axvline(result["t_min"], color="grey", ls=":", lw=0.8,
                  label=f"mean taken over t ≥ {result['t_min']}")
    ax[1].set(xlabel="position t", ylabel="mean Σ_j |P_θ(j) − P_β(j)|", yscale="log",
              title="L1 deviation from add-β")
    ax[1].legend(fontsize=6)
    labels = [r["label"] for r in rows]
    gaps = [max(r["loss_gap"], 1e-6) for r in rows]
    ax[2].bar(range(len(rows)), gaps, color=[_color(r, i) for i, r in enumerate(rows)])
    ax[2].set(xticks=range(len(rows)), yscale="log", ylabel="L(θ) − L_β (nats)",
              title="test-loss gap to add-β")
    ax[2].set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    return fig


def table(result: dict) -> list[list]:
    out = [["model", "S", "k", "loss", "L_beta", "gap", "L1 mean", f"L1 t>={result['t_min']}"]]
    for r in result["models"]:
        out.append([r["label"], r["S"], r["order"], r["loss"], r["lbeta"], r["loss_gap"],
                    r["l1_mean"], r["l1_mean_t_min"] if r["l1_mean_t_min"] is not None else "-"])
    return out


@dataclass(frozen=True)
class Settings(Config):
    """What the analysis measures (each field is a flag: seqprobe.cli.add_fields)."""

    n_seqs: int = field(default=256, metadata=bound(
        1, MAX_EXAMPLES, "sequences per point", help="test sequences"))
    t_min: int = field(default=50, metadata=bound(
        0, MAX_LENGTH, "a position", help="L1 is also averaged over t >= this"))
    seq_len: int | None = field(default=None, metadata=bound(
        1, MAX_LENGTH, "tokens per sequence", help="test length (default: training's)"))


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    add_fields(p, Settings)
    p.add_argument("--sweep", action="store_true",
                   help="with --train: also larger S and order k (Figs 1b, 8, 10)")


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints)
    models = [(LABELS.get(c.label, c.label), load_model(c.path, device=args.device))
              for c in checkpoints]
    result = compute(models, n_seqs=args.n_seqs, seed=args.seed, t_min=args.t_min,
                     seq_len=args.seq_len)
    result["checkpoints"] = [c.path for c in checkpoints]
    return result


# ---------------------------------------------------------------------------- the paper's claims
def _row(d: dict, label: str) -> dict | None:
    return next((r for r in d["models"] if r.get("label") == label), None)


def claim_l1(d: dict) -> Reading:
    """Fig. 1: the 1-layer Mamba-2 follows add-β (mean L1 deviation < 0.05 after t_min)."""
    r = _row(d, "mamba2 1L")
    v = r["l1_mean_t_min"]
    m = Margin("mean L1 deviation from add-β", v, "<", 0.05)
    return Reading(f"1-layer Mamba-2: mean L1 deviation {v:.4f} over t >= {d['t_min']}, loss "
                   f"gap {r['loss_gap']:.4f} nats", m.holds, m)


def claim_vs_transformers(d: dict) -> Reading:
    """Fig. 7: Mamba-2's gap is below both transformers', and one transformer layer is worse
    than two."""
    m, t1, t2 = (_row(d, lab) for lab in QUICK_RECIPES.values())
    text = (f"loss gap: Mamba-2 1L {m['loss_gap']:.4f}, transformer 1L {t1['loss_gap']:.4f}, "
            f"2L {t2['loss_gap']:.4f} nats")
    gaps = m["loss_gap"], t1["loss_gap"], t2["loss_gap"]
    margin = tightest(Margin("Mamba-2 loss gap vs the best transformer's", gaps[0], "<",
                             min(gaps[1:]), "nats"),
                      Margin("1-layer transformer's gap vs 2 layers'", gaps[1], ">", gaps[2],
                             "nats"))
    return Reading(text, gaps[0] < min(gaps[1:]) and gaps[1] > gaps[2], margin)


FIGURE = Figure(
    "Mamba vs the add-β estimator", "Markov paper Figs. 1, 7, 8, 10",
    (Claim("a 1-layer Mamba learns the add-β (Laplacian) estimator in context", claim_l1),
     Claim("1-layer transformers cannot; Mamba's gap is smaller than transformers'",
           claim_vs_transformers)),
    recipes=lambda level: list(QUICK_RECIPES))


def main(argv=None) -> int:
    return run_analysis(
        NAME, __doc__, argv, compute=_compute, plot=plot, table=table, figure=FIGURE,
        add_arguments=add_arguments, threads=1,
        recipes=lambda a: list(QUICK_RECIPES) + (list(SWEEP_RECIPES) if a.sweep else []))


if __name__ == "__main__":
    raise SystemExit(main())
