"""A model against the add-β estimator on Markov data (Markov paper §3, Figs. 1, 5b, 7, 8, 10,
App. E.5).

The Bayes-optimal predictor of each Markov task is its ``optimal_probs`` (add-β, or add-β
since the last switch, :mod:`tasks.add_beta`). The instruments here run a trained model and
that predictor on the same fresh test sequences and compare them:

* :func:`evaluate_markov`: the test loss L(θ), L_β, their gap (§3; Fig. 8 also gives the
  relative gap), the mean KL(P_β ‖ P_θ), and the L1 deviation Σ_j |P_θ(j) − P_β(j)| per
  position (mass the model puts outside the optimal support counts too);
* :func:`fixed_sequence_curve`: P_θ(next = 1) and P_β(next = 1) along one test sequence (Fig. 1);
* :func:`deviation_table`: |P_θ(1) − P_β(1)| after t tokens on chains drawn from part of the
  simplex (the hold-out experiment, App. E.5, Table 2), the test loss gap to add-β there, and
  per chain the deviation at the last t beside the chain's empirical P̂(1 | ·);
* :func:`restricted_table`: the same chains against the *restricted* predictor
  (:func:`restricted_probs`, the posterior mean under the prior conditioned on the training
  range), :func:`fixed_sequence` (Table 2 along one sequence) and :func:`p_hat_bins` (the
  per-chain view in bins of P̂), the hold-out analysis' instruments;
* :func:`fitted_beta`: the β whose add-β estimator is closest to the model's predictions
  (Fig. 5b's count-independent part, for any model).

:func:`markov_task_of` rebuilds the task a checkpoint was trained on (or another one), and
:func:`markov_batch` draws the test sequences, so every analysis scores the same data.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from probes.estimators import cross_entropy, empirical_probs
from seqprobe.config import check, config_to_dict
from tasks.add_beta import add_beta_counts, add_beta_probs
from tasks.base import Batch, make_generator

# scipy (a large import) is imported in the functions that fit or integrate: the Markov
# analyses import this module, and their --help and refusals compute nothing.
from tasks.markov import HoldoutMarkovConfig, HoldoutMarkovTask
from tasks.registry import make_task

MARKOV_TASKS = ("markov", "switching_markov", "markov_holdout")
# the Markov paper's Mamba-2 and its simplification MambaZero (§4.1), whose mixer probes.ssm reads
MAMBA2_ARCHS = ("mamba2", "mambazero")
MARKOV_ARCHS = (*MAMBA2_ARCHS, "transformer")  # the archs the Markov paper trains and compares
TABLE_T = (1, 50, 100, 300)  # Table 2's t (tokens seen)


def markov_task_of(model, task_name: str | None = None, task_config: dict | None = None,
                   **overrides):
    """The Markov task a model was trained on (``model.task``), or the one given.

    ``overrides`` replace config fields (e.g. a longer ``seq_len`` for evaluation)."""
    if task_name is None:
        trained = model.task
        task_name = trained.name if trained is not None else "markov"
        if task_config is None:
            task_config = config_to_dict(trained.cfg) if trained is not None else {}
    check(task_name in MARKOV_TASKS,
          f"this analysis needs a Markov-chain checkpoint ({', '.join(MARKOV_TASKS)}), "
          f"got one trained on {task_name!r}")
    task = make_task(task_name, dict(task_config or {}), **overrides)
    vocab = getattr(model.cfg, "vocab_size", None)
    if vocab is not None:
        check(vocab >= task.vocab.size, f"the model's vocabulary ({vocab}) is smaller than the "
              f"{task_name} task's ({task.vocab.size} tokens)")
    return task


def markov_batch(task, n_seqs: int, seed: int) -> Batch:
    """``n_seqs`` fresh test sequences (tokens x_1..x_T, targets x_2..x_{T+1})."""
    check(n_seqs >= 1, f"n_seqs must be >= 1, got {n_seqs}")
    return task.batch(n_seqs, make_generator(seed))


@torch.no_grad()
def model_probs(model, tokens: Int[Tensor, "batch pos"], chunk: int = 64
                ) -> Float[Tensor, "batch pos vocab"]:
    """Next-token probabilities (float64, on the CPU) from ``model.log_probs`` (softmax, or
    MambaZero's L1-normalised prediction), in chunks of sequences."""
    model.eval()
    out = []
    for i in range(0, tokens.shape[0], chunk):
        lp = model.log_probs(tokens[i : i + chunk].to(model.device))
        out.append(lp.double().exp().cpu())
    return torch.cat(out)


def l1_deviation(p_model: Float[Tensor, "batch pos vocab"], p_opt: Float[Tensor, "batch pos V"]
                 ) -> Float[Tensor, "batch pos"]:
    """Σ_j |P_θ(j) − P*(j)| per position; the model's mass on tokens outside the optimal
    predictor's support (padding ids beyond its vocabulary) counts as error."""
    V = p_opt.shape[-1]
    return (p_model[..., :V] - p_opt).abs().sum(-1) + p_model[..., V:].sum(-1)


def evaluate_markov(model, task, n_seqs: int = 256, seed: int = 0, t_min: int = 50) -> dict:
    """Loss, add-β loss, their gap, KL and the L1 deviation curve of ``model`` on ``task``."""
    batch = markov_batch(task, n_seqs, seed)
    p = model_probs(model, batch.tokens)  # [batch, pos, vocab]
    q = task.optimal_probs(batch.tokens).double()  # [batch, pos, S(+1)]
    check(p.shape[-1] >= q.shape[-1], "the model predicts fewer tokens than the task has")
    l1 = l1_deviation(p, q)  # [batch, pos]
    curve = l1.mean(0)
    T = curve.shape[0]
    lm = float(cross_entropy(p, batch.targets))
    lb = float(cross_entropy(q, batch.targets))
    kl = (q * (q.clamp_min(1e-300).log() - p[..., : q.shape[-1]].clamp_min(1e-300).log())
          ).sum(-1)  # [batch, pos]
    return {
        "n_seqs": n_seqs, "seq_len": T, "t_min": t_min,
        "loss": lm, "lbeta": lb, "loss_gap": lm - lb, "rel_gap": (lm - lb) / lb,
        "kl_mean": float(kl.mean()),
        "l1_curve": curve, "l1_mean": float(l1.mean()),
        # positions are 0-based here; the paper's t = position + 1
        "l1_mean_t_min": float(l1[:, t_min - 1 :].mean()) if T >= t_min else None,
    }


def fixed_sequence_curve(model, task, seed: int) -> dict:
    """Fig. 1: P_θ(next = 1) and P_β(next = 1) along one fixed test sequence."""
    batch = markov_batch(task, 1, seed)
    p = model_probs(model, batch.tokens)[0]
    q = task.optimal_probs(batch.tokens).double()[0]
    return {"tokens": batch.tokens[0], "p_model": p[:, 1], "p_beta": q[:, 1]}


def deviation_table(model, order: int, beta: float, p_range: tuple[float, float],
                    n_seqs: int, seed: int, seq_len: int, ts=TABLE_T) -> dict:
    """|P_θ(1) − P_β(1)| after t tokens, t in ``ts`` (mean and std over sequences), and its
    mean per position, on binary chains with every P(1 | ·) in ``p_range`` (App. E.5); the
    test loss of the model and of add-β on those chains; per chain, the deviation after the
    largest t and the chain's empirical P̂(1 | current context) there (NaN: context unseen)."""
    task = HoldoutMarkovTask(HoldoutMarkovConfig(S=2, order=order, beta=beta, seq_len=seq_len,
                                                 p_lo=p_range[0], p_hi=p_range[1]))
    batch = markov_batch(task, n_seqs, seed)
    x = batch.tokens
    probs = model_probs(model, x)  # [batch, pos, 2]
    opt = task.optimal_probs(x).double()  # add-β under the full prior (the paper's optimum)
    p, q = probs[..., 1], opt[..., 1]  # [batch, pos]
    d = (p - q).abs()  # position t − 1 holds the prediction after t tokens
    rows = {int(t): {"mean": float(d[:, t - 1].mean()), "std": float(d[:, t - 1].std())}
            for t in ts if t <= seq_len}
    t_last = max(rows)
    lm, lb = float(cross_entropy(probs, batch.targets)), float(cross_entropy(opt, batch.targets))
    return {"range": list(p_range), "by_t": rows, "curve": d.mean(0),
            # the test loss over all positions, the model's and add-β's (nats per token)
            "loss": {"model": lm, "add_beta": lb, "gap": lm - lb},
            # per chain after t_last tokens: its empirical P̂(1 | current context) and the
            # model's deviation from add-β there (the chains are the same for every model)
            "per_chain": {"t": t_last,
                          "p_hat": empirical_probs(x, 2, order)[:, t_last - 1, 1],
                          "deviation": d[:, t_last - 1]}}


def fitted_beta(model, task, n_seqs: int = 64, seed: int = 0, t_min: int = 1) -> dict:
    """The β whose add-β estimator is closest in mean KL(P_β ‖ P_θ) to the model's
    predictions at positions ≥ t_min (Fig. 5b's "count-independent part", for any model)."""
    from scipy.optimize import minimize_scalar

    cfg = task.cfg
    check(not hasattr(task, "switch_id"), "fitted_beta needs plain Markov data")
    x = markov_batch(task, n_seqs, seed).tokens
    p = model_probs(model, x)[:, t_min:, : cfg.S]
    logp = p.clamp_min(1e-300).log()

    def loss(logb: float) -> float:
        q = add_beta_probs(x, cfg.S, cfg.order, math.exp(logb))[:, t_min:]
        return float((q * (q.log() - logp)).sum(-1).mean())

    res = minimize_scalar(loss, bounds=(math.log(1e-3), math.log(1e3)), method="bounded",
                          options={"xatol": 1e-6})
    return {"beta_fit": math.exp(res.x), "kl_at_fit": float(res.fun),
            "kl_at_true_beta": loss(math.log(cfg.beta)), "beta_true": cfg.beta}


# P̂(1|·) bins of the per-chain view (held-out chains have P(1|·) ≥ 0.5)
P_HAT_BINS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


# ---------------------------------------------------------------------------- restricted prior
def restricted_probs(tokens: torch.Tensor, order: int, beta: float,
                     p_range: tuple[float, float]) -> torch.Tensor:
    """P_R(next = 1 | tokens[b, :t+1]) [batch, pos] (float64): the posterior mean of P(1 | ctx)
    under Beta(β, β) conditioned on ``p_range``, from the counts of the current context — the
    Bayes-optimal predictor of chains drawn as :class:`HoldoutMarkovTask` draws them."""
    from scipy.special import betainc

    lo, hi = p_range
    n = add_beta_counts(tokens, 2, order).double().numpy()  # [batch, pos, 2]
    a, b = n[..., 1] + beta, n[..., 0] + beta  # posterior Beta(a, b) before conditioning
    with np.errstate(divide="ignore", invalid="ignore"):
        mass = betainc(a, b, hi) - betainc(a, b, lo)
        mean = a / (a + b) * (betainc(a + 1, b, hi) - betainc(a + 1, b, lo)) / mass
    # Counts far outside the range: the conditioned mass underflows and the posterior piles
    # up at the nearer end, about 1 / |d log density / dp| inside it.
    tiny = ~(mass > 1e-250) | ~np.isfinite(mean)
    if tiny.any():
        def slope(p):
            return (a - 1) / p - (b - 1) / (1 - p)
        with np.errstate(divide="ignore", invalid="ignore"):
            at_hi = hi - 1.0 / np.maximum(slope(min(hi, 1 - 1e-12)), 1e-12)
            at_lo = lo + 1.0 / np.maximum(-slope(max(lo, 1e-12)), 1e-12)
        edge = np.where(a / (a + b) > hi, at_hi, at_lo)
        mean = np.where(tiny, np.clip(edge, lo, hi), mean)
    return torch.from_numpy(np.clip(mean, lo, hi))


def restricted_table(model, order: int, beta: float, p_range: tuple[float, float],
                     train_range: tuple[float, float], n_seqs: int, seed: int, seq_len: int,
                     ts=TABLE_T) -> dict:
    """On the chains :func:`deviation_table` draws for ``p_range`` (same seed): the mean
    |P_θ − P_R| (model against the training prior's Bayes predictor) and |P_R − P_β| after t
    tokens, and the latter per position."""
    task = HoldoutMarkovTask(HoldoutMarkovConfig(S=2, order=order, beta=beta, seq_len=seq_len,
                                                 p_lo=p_range[0], p_hi=p_range[1]))
    batch = markov_batch(task, n_seqs, seed)
    x = batch.tokens
    p = model_probs(model, x)[..., 1]  # [batch, pos]
    r = restricted_probs(x, order, beta, train_range)  # [batch, pos]
    q = task.optimal_probs(x)[..., 1]
    model_r, r_q = (p - r).abs(), (r - q).abs()
    rows = {int(t): {"model_vs_restricted": float(model_r[:, t - 1].mean()),
                     "restricted_vs_add_beta": float(r_q[:, t - 1].mean())}
            for t in ts if t <= seq_len}
    lr = float(cross_entropy(torch.stack([1 - r, r], dim=-1), batch.targets))
    lb = float(cross_entropy(task.optimal_probs(x).double(), batch.targets))
    return {"by_t": rows, "curve": r_q.mean(0), "loss_gap": lr - lb}


def fixed_sequence(model, order: int, beta: float, p_range: tuple[float, float], seed: int,
                   seq_len: int, ts=TABLE_T) -> dict:
    """The paper's view of Table 2: P_θ(1) and P_β(1) along *one* fixed test sequence with
    every P(1 | ·) in ``p_range``, |P_θ − P_β| after t tokens for t in ``ts``, and the
    sequence's empirical P̂(1 | 0), P̂(1 | 1) over its whole length (order 1)."""
    task = HoldoutMarkovTask(HoldoutMarkovConfig(S=2, order=order, beta=beta, seq_len=seq_len,
                                                 p_lo=p_range[0], p_hi=p_range[1]))
    c = fixed_sequence_curve(model, task, seed)
    d = (c["p_model"] - c["p_beta"]).abs()
    x = c["tokens"].long()
    p_hat = {f"P(1|{a})": float(x[1:][x[:-1] == a].double().mean()) if (x[:-1] == a).any()
             else None for a in (0, 1)} if order == 1 else {}
    return {"range": list(p_range), "seed": seed, "tokens": x, "p_model": c["p_model"],
            "p_beta": c["p_beta"], "by_t": {int(t): float(d[t - 1]) for t in ts if t <= seq_len},
            "p_hat": p_hat}


def p_hat_bins(p_hat, deviation, edges=P_HAT_BINS) -> list[dict]:
    """The per-chain view in bins of the chain's empirical P̂(1 | ·): how many chains and
    their mean deviation from add-β (None for an empty bin; chains with NaN P̂ left out)."""
    ph, dev = np.asarray(p_hat, dtype=float), np.asarray(deviation, dtype=float)
    out = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        last = i == len(edges) - 2
        m = (ph >= lo) & ((ph <= hi) if last else (ph < hi))
        out.append({"lo": lo, "hi": hi, "n": int(m.sum()),
                    "mean": float(dev[m].mean()) if m.any() else None})
    return out
