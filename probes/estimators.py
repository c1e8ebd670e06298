"""Reference estimators for Markov data: the add-β (Laplacian smoothing) estimator and its loss.

The estimator itself (``add_beta_counts``, ``add_beta_probs``, ``switching_probs``) is the
Bayes-optimal predictor of the Markov tasks and lives with them in :mod:`tasks.add_beta`
(Markov paper §2.4, App. A; its docstring gives the formula and the conventions); it is
re-exported here beside what is built on it: the cross-entropy of a predictor
(:func:`add_beta_loss` is L_β, the floor a trained model is compared with, §3) and a brute-force
reference that counts with plain Python loops (:func:`add_beta_brute_force`, for tests), and the
empirical P̂(j | context) = n_j / n of a chain (:func:`empirical_probs`, add-β at β → 0).
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

from seqprobe.config import check
from tasks.add_beta import add_beta_counts, add_beta_probs, switching_probs
from tasks.base import IGNORE

__all__ = ["add_beta_brute_force", "add_beta_counts", "add_beta_loss", "add_beta_probs",
           "cross_entropy", "empirical_probs", "switching_probs"]


def cross_entropy(probs: Float[Tensor, "batch pos V"], targets: Int[Tensor, "batch pos"]
                  ) -> Tensor:
    """Mean −log probs[target] over the positions whose target is not ``IGNORE``."""
    mask = targets != IGNORE
    check(bool(mask.any()), "no target positions to score")
    p = probs.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)  # [batch, pos]
    return -(p.clamp_min(1e-300).log() * mask).sum() / mask.sum()


def empirical_probs(tokens: Int[Tensor, "batch pos"], S: int, k: int = 1
                    ) -> Float[Tensor, "batch pos S"]:
    """P̂(next = j | tokens[b, :t+1]) = n_j / Σ n from the counts of the current context
    (float64); NaN where that context has not been followed by anything yet."""
    n = add_beta_counts(tokens, S, k).double()  # [batch, pos, S]
    tot = n.sum(-1, keepdim=True)
    return torch.where(tot > 0, n / tot.clamp_min(1), torch.full_like(n, float("nan")))


def add_beta_loss(tokens: Int[Tensor, "batch pos"], targets: Int[Tensor, "batch pos"], S: int,
                  k: int = 1, beta: float = 1.0, reset_token: int | None = None) -> float:
    """L_β: the add-β estimator's average cross-entropy on ``targets`` (nats)."""
    return float(cross_entropy(add_beta_probs(tokens, S, k, beta, reset_token), targets))


def add_beta_brute_force(seq: list[int], S: int, k: int = 1, beta: float = 1.0,
                         reset_token: int | None = None) -> list[list[float]]:
    """Reference for one sequence by direct counting (no vectorisation, for tests).

    At each t: the context is seq[t−k+1..t] (none if it is cut off or holds a non-symbol or
    reaches back to the latest reset); n_j = #{i ≤ t : i − k ≥ start, seq[i−k..i−1] = context,
    seq[i] = j} where ``start`` is one past the latest reset at or before t.
    """
    out = []
    for t in range(len(seq)):
        start = 0
        if reset_token is not None:
            hits = [i for i in range(t + 1) if seq[i] == reset_token]
            start = hits[-1] + 1 if hits else 0
        n = [0] * S
        ctx = seq[t - k + 1 : t + 1] if t - k + 1 >= start else None
        if ctx is not None and all(0 <= s < S for s in ctx):
            for i in range(start + k, t + 1):
                if seq[i - k : i] == ctx and 0 <= seq[i] < S:
                    n[seq[i]] += 1
        total = sum(n)
        out.append([(n[j] + beta) / (total + S * beta) for j in range(S)])
    return out
