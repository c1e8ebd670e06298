"""Hold-out experiment: train on part of the simplex, test on the rest (Markov paper App. E.5,
Table 2).

``python -m analyses.markov_holdout ckpt.pt`` (a checkpoint trained on ``markov_holdout``) or
``--train quick`` (the zoo's ``markov_holdout/mamba2``): a 1-layer Mamba-2 is trained only on
binary chains whose transition probabilities P(1 | ·) all lie in [0, 0.5], and tested on chains
with P(1 | ·) in [0.5, 1]. The add-β estimator is minimax optimal as t → ∞, so the model's
predictions should approach it even on the held-out part of the simplex, after a start where
they are far off (Table 2): |P_θ(x_{t+1} = 1 | x_1^t) − P_β(x_{t+1} = 1 | x_1^t)| at t = 1, 50,
100, 300 (t = tokens seen), mean ± std over test sequences; the same on in-range test chains
([0, 0.5]) for reference.

The task ``markov_holdout`` (:class:`tasks.markov.HoldoutMarkovTask`) is the binary random
Markov task with each P(1 | context) drawn from the Dirichlet (Beta(β, β)) prior *conditioned*
on [p_lo, p_hi]; the table is :func:`probes.markov.deviation_table`.
"""

from __future__ import annotations

import argparse

import numpy as np

from analyses.common import Checkpoint, Claim, Figure, load_model, run_analysis, to_jsonable
from figures.style import COLORS, new_figure
from probes.markov import TABLE_T, deviation_table
from tasks.base import check

NAME = "markov_holdout"
ARCHS = ("mamba2", "mambazero", "transformer")
RECIPE = "markov_holdout/mamba2"  # a 1-layer Mamba-2 trained on P(1|·) in [0, 0.5]


def compute(model, n_seqs: int = 256, seed: int = 0, seq_len: int = 300) -> dict:
    """Table 2 on held-out ([0.5, 1]) and in-range ([0, 0.5]) test chains."""
    ck = getattr(model, "checkpoint", None) or {}
    task = ck.get("task", {})
    cfg = task.get("config", {})
    check(task.get("name") in (None, "markov_holdout", "markov"),
          f"markov_holdout needs a Markov checkpoint, got one trained on {task.get('name')!r}")
    check(cfg.get("S", 2) == 2, "the hold-out experiment is binary (S = 2)")
    train_range = (cfg.get("p_lo", 0.0), cfg.get("p_hi", 1.0))
    held = (train_range[1], 1.0) if train_range[1] < 1.0 else (0.5, 1.0)
    order, beta = cfg.get("order", 1), cfg.get("beta", 1.0)
    return to_jsonable({
        "train_range": list(train_range), "order": order, "beta": beta, "seq_len": seq_len,
        "n_seqs": n_seqs, "seed": seed,
        "held_out": deviation_table(model, order, beta, held, n_seqs, seed, seq_len),
        "in_range": deviation_table(model, order, beta, train_range, n_seqs, seed + 1, seq_len),
    })


def plot(result: dict):
    fig, ax = new_figure(1, width_per_panel=5.0, height=3.4)
    for key, color in (("held_out", COLORS["rope"]), ("in_range", COLORS["mamba2"])):
        c = np.array(result[key]["curve"], dtype=float)
        ax[0].plot(np.arange(1, len(c) + 1), c, color=color,
                   label=f"{key.replace('_', '-')} P(1|·) ∈ {result[key]['range']}")
    for t in TABLE_T:
        ax[0].axvline(t, color="grey", ls=":", lw=0.6)
    ax[0].set(xlabel="tokens seen t", ylabel="mean |P_θ(1) − P_β(1)|", yscale="log",
              title=f"hold-out (App. E.5): trained on P(1|·) ∈ {result['train_range']}")
    ax[0].legend()
    return fig


def table(result: dict) -> list[list]:
    out = [["t", "held-out mean", "held-out std", "in-range mean", "in-range std"]]
    for t, r in result["held_out"]["by_t"].items():
        ir = result["in_range"]["by_t"][t]
        out.append([t, r["mean"], r["std"], ir["mean"], ir["std"]])
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-seqs", type=int, default=256, help="test sequences per range")
    p.add_argument("--seq-len", type=int, default=300, help="test length (≥ 300 for Table 2)")


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    check(len(checkpoints) == 1, f"markov_holdout takes exactly one checkpoint (or --train "
          f"quick), got {len(checkpoints)}")
    model = load_model(checkpoints[0].path, archs=ARCHS, device=args.device)
    result = compute(model, n_seqs=args.n_seqs, seed=args.seed, seq_len=args.seq_len)
    result["checkpoint"] = checkpoints[0].path
    return result


# ---------------------------------------------------------------------------- the paper's claims
def claim_shrinks(d: dict) -> tuple[str, bool]:
    """Table 2: on held-out kernels the deviation at the largest t is below the one at the
    smallest."""
    by_t = d["held_out"]["by_t"]
    ts = sorted(by_t, key=int)
    text = "held-out |model − add-β| at " + ", ".join(
        f"t={t}: {by_t[t]['mean']:.3f}" for t in ts)
    return text, by_t[ts[-1]]["mean"] < by_t[ts[0]]["mean"]


FIGURE = Figure(
    "Hold-out kernels", "Markov paper App. E.5, Table 2",
    (Claim("trained on P(1|·) in [0, 0.5], tested on [0.5, 1]: the deviation from add-β "
           "shrinks as t grows", claim_shrinks),),
    recipes=lambda preset: (RECIPE,))


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
