"""Induction-heads recall (spectral paper §4.2, Fig. 5): greedy recall accuracy of a model at
given sequence lengths, and an exact binomial test of a recall count against chance."""

from __future__ import annotations

import math

import torch

from models.generation import evaluate_prompts
from tasks.base import make_generator

EVAL_SEED_STRIDE = 1_000_003  # evaluation streams of different seeds never overlap


def binomial_sf(k: int, n: int, p: float) -> float:
    """P[X >= k] for X ~ Binomial(n, p) (exact, in log space): the one-sided p-value of ``k``
    successes in ``n`` trials against success probability ``p`` (chance)."""
    if k <= 0:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p) for i in range(k, n + 1)]
    m = max(logs)
    return float(min(1.0, math.exp(m) * sum(math.exp(v - m) for v in logs)))


@torch.no_grad()
def recall_accuracy(model, task, lengths: list[int], n_eval: int, seed: int,
                    batch_size: int = 256) -> list[int]:
    """Number of correctly recalled tokens (greedy, out of ``n_eval``) at each length of an
    induction ``task``; the same evaluation sequences for every model (seeded by ``seed`` and
    the length), so models are compared on identical data."""
    out = []
    for L in lengths:
        g = make_generator(seed * EVAL_SEED_STRIDE + L)
        right = 0
        for start in range(0, n_eval, batch_size):
            b = task.eval_batch(min(batch_size, n_eval - start), g, length=L)
            acc = evaluate_prompts(model, b.to(model.device), greedy=True)["string_acc"]
            right += round(acc * b.prompts.shape[0])
        out.append(right)
    return out
