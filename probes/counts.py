"""In-context transition counts of order-k chains, vectorised over batch and positions.

These are the sufficient statistics of the add-β (Laplacian) estimator (Markov paper §2.4):
for the current length-k context c = x_{t−k+1..t}, P_β(x_{t+1} = j | x_1^t) = (n_{c,j} + β) /
(n_c + Sβ). The Markov paper's Thm 1 construction stores n_{ij}(t) in the Mamba state H_t
(Eq. 4); :mod:`analyses.state_probe` reads them back with linear probes. The context
indexing is the add-β estimator's (:mod:`tasks.add_beta`, re-exported here: ``context_index``).

Conventions (0-based positions t = 0..T−1; the paper's time is t + 1):

* a *context* is a length-k window of symbols, indexed base S with the oldest symbol most
  significant: ``ctx = Σ_m x_{t−k+1+m} · S^(k−1−m)``, so for k = 1 it is the symbol itself;
* ``n[b, t, c, j]`` = #{i ≤ t : x_{i−k..i−1} = c and x_i = j} — the transitions completed
  within x_0..x_t (the paper's n_{ij} "in the input sequence x_1^t");
* ``n_ctx[b, t, c]`` = Σ_j n[b, t, c, j] — how often c has been *followed* by a symbol, the
  paper's n = |{i : x_{i−k}^{i−1} = c}| over i ≤ t;
* tokens ≥ S (padding, the switching process' switch token) are not symbols: no window that
  contains one is a transition; with ``reset_token`` the counts restart after each
  occurrence of it (the optimal strategy on switching Markov data, §5.1).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from seqprobe.config import check
from tasks.add_beta import context_index, last_reset


def transition_counts(tokens: Int[Tensor, "batch pos"], S: int, k: int = 1,
                      reset_token: int | None = None) -> Float[Tensor, "batch pos ctx S"]:
    """``n[b, t, c, j]``: transitions context c → symbol j completed within x_0..x_t
    (``ctx`` axis has S**k entries; see the module docstring). With ``reset_token``, only the
    transitions after the latest reset token count (a transition whose window contains the
    reset token is never counted, since that token is not a symbol)."""
    check(tokens.dim() == 2, f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    B, T = tokens.shape
    tokens = tokens.long()
    prev_ctx = torch.full((B, T), -1, dtype=torch.long, device=tokens.device)
    if T > 1:
        prev_ctx[:, 1:] = context_index(tokens, S, k)[:, :-1]  # context before x_i
    sym_ok = (tokens >= 0) & (tokens < S)
    event_ok = (prev_ctx >= 0) & sym_ok  # [batch, pos]: x_i completes a transition
    event = torch.where(event_ok, prev_ctx * S + tokens.clamp(0, S - 1), torch.zeros_like(prev_ctx))
    onehot = F.one_hot(event, S**k * S).float() * event_ok[..., None]  # [batch, pos, ctx*S]
    cum = onehot.cumsum(dim=1)  # [batch, pos, ctx*S]
    if reset_token is not None:
        r = last_reset(tokens, reset_token)  # [batch, pos]
        base = torch.where((r >= 0)[..., None],
                           cum.gather(1, r.clamp(min=0)[..., None].expand_as(cum)),
                           torch.zeros_like(cum))
        cum = cum - base
    return cum.reshape(B, T, S**k, S)  # [batch, pos, ctx, S]


def context_counts(tokens: Int[Tensor, "batch pos"], S: int, k: int = 1,
                   reset_token: int | None = None) -> Float[Tensor, "batch pos ctx"]:
    """``n_ctx[b, t, c] = Σ_j n[b, t, c, j]``: how often context c was followed by a symbol."""
    return transition_counts(tokens, S, k, reset_token).sum(-1)


def current_counts(tokens: Int[Tensor, "batch pos"], S: int, k: int = 1,
                   reset_token: int | None = None) -> Float[Tensor, "batch pos S"]:
    """``n[b, t, c_t, :]`` for the context c_t ending at t: the counts the add-β estimator of
    the next token uses (zeros where there is no full context yet, t < k − 1)."""
    n = transition_counts(tokens, S, k, reset_token)  # [batch, pos, ctx, S]
    c = context_index(tokens, S, k)  # [batch, pos]
    if reset_token is not None:  # a context reaching back over the reset is not in the counts
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        c = torch.where(pos - last_reset(tokens, reset_token) >= k, c, torch.full_like(c, -1))
    got = n.gather(2, c.clamp(min=0)[..., None, None].expand(-1, -1, 1, S)).squeeze(2)
    return got * (c >= 0)[..., None]


def add_beta_from_counts(counts: Float[Tensor, "... S"], beta: float) -> Float[Tensor, "... S"]:
    """(n_j + β) / (n + Sβ) from the current context's counts (Laplacian smoothing, §2.4)."""
    check(beta > 0, f"beta must be > 0, got {beta}")
    S = counts.shape[-1]
    return (counts + beta) / (counts.sum(-1, keepdim=True) + S * beta)


def count_names(S: int, k: int = 1) -> list[str]:
    """Readable names ``"01->1"`` of the flattened (ctx, j) axis, in the order of
    ``transition_counts(...).reshape(..., S**k * S)``."""
    out = []
    for c in range(S**k):
        digits, v = [], c
        for _ in range(k):
            digits.append(v % S)
            v //= S
        ctx = "".join(str(d) if S <= 10 else f"{d}," for d in reversed(digits)).rstrip(",")
        out += [f"{ctx}->{j}" for j in range(S)]
    return out


def count_targets(tokens: Int[Tensor, "batch pos"], S: int, k: int = 1,
                  reset_token: int | None = None) -> dict[str, np.ndarray | list[str]]:
    """Everything a probe of the counts reads, as float64 arrays: ``transitions`` [batch, pos,
    S^k·S], ``contexts`` [batch, pos, S^k], ``current`` (the current context's counts
    n_{c_t, ·}) [batch, pos, S], and the names of the first two (``names``, ``context_names``)."""
    n = transition_counts(tokens, S, k, reset_token)  # [batch, pos, ctx, S]
    names = count_names(S, k)
    return {"transitions": n.flatten(2).double().numpy(),
            "contexts": n.sum(-1).double().numpy(),
            "current": current_counts(tokens, S, k, reset_token).double().numpy(),
            "names": names,
            "context_names": [f"n({name.split('->')[0]})" for name in names[::S]]}
