"""Hold-out experiment: train on part of the simplex, test on the rest (Markov paper App. E.5,
Table 2).

``python -m analyses.markov_holdout ckpt.pt`` (a checkpoint trained on ``markov_holdout``) or
``--train quick``: a 1-layer Mamba-2 is trained only on binary chains whose transition
probabilities P(1 | ·) all lie in [0, 0.5], and tested on chains with P(1 | ·) in [0.5, 1].
The add-β estimator is minimax optimal as t → ∞, so the model's predictions should approach it
even on the held-out part of the simplex, after a start where they are far off (Table 2):
|P_θ(x_{t+1} = 1 | x_1^t) − P_β(x_{t+1} = 1 | x_1^t)| at t = 1, 50, 100, 300 (t = tokens seen),
mean ± std over test sequences; the same on in-range test chains ([0, 0.5]) for reference.

The training task ``markov_holdout`` (:class:`HoldoutMarkovTask`, registered in
tasks/registry.py) is the binary random Markov task with each P(1 | context) drawn from the
Dirichlet (Beta(β, β)) prior *conditioned* on [p_lo, p_hi] (inverse-CDF sampling).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import beta as beta_dist

from analyses.common import base_parser, load_model, run_main, to_jsonable, write_outputs
from analyses.markov_laplace import model_probs
from figures.style import COLORS, new_figure
from tasks.base import check, make_generator
from tasks.markov import MarkovConfig, MarkovTask, _context, _numpy_rng

NAME = "markov_holdout"
ARCHS = ("mamba2", "mambazero", "transformer")
TABLE_T = (1, 50, 100, 300)


@dataclass(frozen=True)
class HoldoutMarkovConfig(MarkovConfig):
    p_lo: float = 0.0  # every P(1 | context) is drawn from Beta(β, β) restricted to [p_lo, p_hi]
    p_hi: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        check(self.S == 2, f"the hold-out task is binary (App. E.5), got S={self.S}")
        check(0.0 <= self.p_lo < self.p_hi <= 1.0,
              f"need 0 <= p_lo < p_hi <= 1, got [{self.p_lo}, {self.p_hi}]")


class HoldoutMarkovTask(MarkovTask):
    """Binary order-k chains with P(1 | context) ~ Beta(β, β) conditioned on [p_lo, p_hi]."""

    name = "markov_holdout"
    config_cls = HoldoutMarkovConfig

    def kernels(self, n: int, g: torch.Generator) -> torch.Tensor:
        """[n, 2^k, 2] kernels: inverse CDF of Beta(β, β) on uniform draws in [F(p_lo), F(p_hi)]."""
        cfg = self.cfg
        rng = _numpy_rng(g)
        lo, hi = beta_dist.cdf([cfg.p_lo, cfg.p_hi], cfg.beta, cfg.beta)
        u = lo + (hi - lo) * rng.random((n, 2**cfg.order))
        p1 = np.clip(beta_dist.ppf(u, cfg.beta, cfg.beta), cfg.p_lo, cfg.p_hi)
        p1 = torch.from_numpy(p1)
        return torch.stack([1 - p1, p1], dim=-1)  # [n, ctx, 2]

    def sample(self, batch_size: int, g: torch.Generator):
        """``(x, P)`` as :meth:`MarkovTask.sample`, with the restricted kernels."""
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        cfg = self.cfg
        k, T1 = cfg.order, cfg.seq_len + 1
        P = self.kernels(batch_size, g)
        cdf = P.cumsum(-1)
        u = torch.rand(batch_size, T1, generator=g, dtype=torch.float64)
        x = torch.empty(batch_size, T1, dtype=torch.long)
        first = min(k, T1)
        x[:, :first] = torch.randint(0, 2, (batch_size, first), generator=g)
        rows = torch.arange(batch_size)
        for t in range(k, T1):
            c = _context(x[:, t - k : t], 2)
            x[:, t] = (u[:, t, None] > cdf[rows, c]).sum(-1).clamp(max=1)
        return x, P


def deviation_table(model, order: int, beta: float, p_range: tuple[float, float],
                    n_seqs: int, seed: int, seq_len: int, ts=TABLE_T) -> dict:
    """|P_θ(1) − P_β(1)| after t tokens, t in ``ts``, on chains with P(1|·) in ``p_range``."""
    task = HoldoutMarkovTask(HoldoutMarkovConfig(S=2, order=order, beta=beta, seq_len=seq_len,
                                                 p_lo=p_range[0], p_hi=p_range[1]))
    x = task.batch(n_seqs, make_generator(seed)).tokens
    p = model_probs(model, x)[..., 1]  # [batch, pos]
    q = task.optimal_probs(x)[..., 1]  # add-β under the full prior (the paper's optimum)
    d = (p - q).abs()  # position t − 1 holds the prediction after t tokens
    rows = {int(t): {"mean": float(d[:, t - 1].mean()), "std": float(d[:, t - 1].std())}
            for t in ts if t <= seq_len}
    return {"range": list(p_range), "by_t": rows, "curve": d.mean(0)}


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


def quick_checkpoint(preset: str, cache_dir: str, device: str) -> str:
    """Mamba-2 trained on [0, 0.5] with the preset's Markov rows (model, task, training)."""
    from models.presets import preset_overrides
    from models.train import train_cached

    rows = preset_overrides(preset, "markov", "mamba2")
    return str(train_cached("mamba2", "markov_holdout", preset, cache_dir, model=rows["model"],
                            task_config={**rows["task"], "p_lo": 0.0, "p_hi": 0.5},
                            train_overrides=rows["train"], device=device))


def _main(argv):
    p = base_parser(NAME, __doc__.splitlines()[0], training=True)
    p.add_argument("--n-seqs", type=int, default=256, help="test sequences per range")
    p.add_argument("--seq-len", type=int, default=300, help="test length (≥ 300 for Table 2)")
    args = p.parse_args(argv)
    # the models are tiny: one thread avoids oversubscribing shared cores (an L1 MambaZero
    # run: 65 s single-threaded; a 1.5x longer one took 1281 s with 2 threads on busy cores)
    torch.set_num_threads(1)
    ckpts = list(args.checkpoints)
    if not ckpts and args.train:
        ckpts = [quick_checkpoint(args.train, args.cache_dir, args.device)]
    check(len(ckpts) == 1, f"markov_holdout takes exactly one checkpoint, got {len(ckpts)}")
    model = load_model(ckpts[0], archs=ARCHS, device=args.device)
    result = compute(model, n_seqs=args.n_seqs, seed=args.seed, seq_len=args.seq_len)
    result["checkpoint"] = ckpts[0]
    write_outputs(NAME, result, plot(result), args.out, table(result))
    return 0


def main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
