"""Induction-heads recall (spectral paper §4.2, Fig. 5): greedy recall accuracy of a model at
given sequence lengths (as is, or left-padded to a length), recall split by the recalled
token's lag (seen in training or longer), and an exact binomial test of a recall count against
chance."""

from __future__ import annotations

import math

import torch

from models.generation import evaluate_prompts
from tasks.base import PromptBatch, make_generator

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
                    batch_size: int = 256, pad_to: int | None = None) -> list[int]:
    """Number of correctly recalled tokens (greedy, out of ``n_eval``) at each length of an
    induction ``task``; the same evaluation sequences for every model (seeded by ``seed`` and
    the length), so models are compared on identical data. With ``pad_to`` each sequence of
    length L < ``pad_to`` is left-padded with BLANK to ``pad_to``: the recalled token's lag is
    unchanged, a convolution's window sees BLANKs instead of zeros before the start."""
    out = []
    for L in lengths:
        g = make_generator(seed * EVAL_SEED_STRIDE + L)
        right = 0
        for start in range(0, n_eval, batch_size):
            b = task.eval_batch(min(batch_size, n_eval - start), g, length=L)
            if pad_to is not None and pad_to > L:
                pad = torch.full((b.prompts.shape[0], pad_to - L), task.vocab.id("BLANK"),
                                 dtype=b.prompts.dtype)
                b = PromptBatch(torch.cat([pad, b.prompts], 1), b.answers)  # [batch, pad_to]
            acc = evaluate_prompts(model, b.to(model.device), greedy=True)["string_acc"]
            right += round(acc * b.prompts.shape[0])
        out.append(right)
    return out


@torch.no_grad()
def recall_by_lag(model, task, length: int, train_length: int, n_eval: int, seed: int,
                  batch_size: int = 256) -> tuple[float, float]:
    """Recall at ``length`` split by the recalled token's lag (query position minus its
    position): ``(accuracy at lags seen at train_length, accuracy at longer lags)``; nan where
    a part is empty. Extrapolating to lags never trained on is length generalisation proper."""
    g = make_generator(seed * EVAL_SEED_STRIDE + length + 1)  # not recall_accuracy's stream
    right, seen = [], []
    for start in range(0, n_eval, batch_size):
        tokens, x, pos = task.sequences(min(batch_size, n_eval - start), length, g)
        pred = model(tokens.to(model.device))[:, -1].argmax(-1).cpu()  # [batch]
        right.append(pred == x)
        seen.append(length - 2 - pos <= train_length - 2)  # query at length-1, token at pos+1
    right, seen = torch.cat(right).float(), torch.cat(seen)
    return (float(right[seen].mean()) if seen.any() else math.nan,
            float(right[~seen].mean()) if (~seen).any() else math.nan)


def seen_lags_accuracy(train_length: int, length: int, D: int) -> float:
    """Accuracy at ``length`` of a model right at every lag seen at ``train_length`` (query to
    recalled token: 1 .. L − 2, uniform) and at chance 1/D beyond."""
    seen = min(1.0, (train_length - 2) / (length - 2))
    return seen + (1 - seen) / D


def even_lags_accuracy(length: int, D: int) -> float:
    """Accuracy at ``length`` of a model right at every even lag (query to recalled token,
    1 .. L − 2, uniform) and at chance 1/D at the odd ones: the best a stack of layers that
    read even lags only can do (Flash STU's shared-mixture tensordot, models.stu)."""
    even = ((length - 2) // 2) / (length - 2)
    return even + (1 - even) / D


@torch.no_grad()
def lag_parity_reach(model, vocab: int, length: int, n: int = 64, seed: int = 0,
                     lags: int = 8) -> dict[str, float]:
    """How much the last position's logits move when one token at lag j (j positions before
    it) changes, for the first ``lags`` odd and even lags (j >= 1): the largest change at an
    odd lag, the mean change at an even lag, and the logits' mean size — on ``n`` random
    sequences of ``length`` tokens from ``vocab``. A model that cannot read odd lags (the
    shared-mixture tensordot STU, whose ± branches cancel every odd tap) moves by rounding
    only at odd lags whatever its weights: a check of that identity on any model, trained
    or random, in float64 so that rounding is far below any real reach."""
    check_len = max(2, min(length, 2 * lags + 1))
    g = make_generator(seed)
    x = torch.randint(0, vocab, (n, check_len), generator=g)
    was = next(model.parameters()).dtype
    model = model.double()
    try:
        dev = next(model.parameters()).device
        ref = model(x.to(dev))[:, -1].double()
        odd, even = [], []
        for j in range(1, check_len):
            y = x.clone()
            shift = 1 + torch.randint(0, vocab - 1, (n,), generator=g)  # another token
            y[:, -1 - j] = (y[:, -1 - j] + shift) % vocab
            d = (model(y.to(dev))[:, -1].double() - ref).abs().amax(-1)  # [n]
            (odd if j % 2 else even).append(d)
    finally:
        model.to(was)
    return {"odd_max": float(torch.stack(odd).max()) if odd else math.nan,
            "even_mean": float(torch.stack(even).mean()) if even else math.nan,
            "scale": float(ref.abs().mean()), "length": check_len, "n": n}
