"""Reference estimators for Markov data: the add-β (Laplacian smoothing) estimator and its loss.

Markov paper (Bondaschi et al.) §2.4 and App. A: when every row of an order-k kernel is drawn
from Dir(β·1) and the first k symbols are uniform, the Bayes-optimal next-token predictor is

    P_β^(k)(x_{t+1} = j | x_1^t) = (n_j + β) / (n + S·β),

where n_j counts how often symbol j followed the current context x_{t−k+1..t} within x_1^t and
n = Σ_j n_j. (The paper prints n + 2β: its binary case, S = 2.) Before a full context exists
(t < k) the next symbol is uniform, and so is the estimator (all counts are zero). Its average
cross-entropy over positions is L_β, the floor a trained model is compared with (§3).

Conventions (0-based positions): ``tokens[b, t]`` is x_{t+1} in the paper's 1-based time, and
``add_beta_probs(tokens)[b, t]`` is the prediction for ``tokens[b, t + 1]`` (the task's
``targets[b, t]``). Tokens outside 0..S−1 (a SWITCH token, padding) are not symbols: a context
window that holds one is no context (uniform prediction) and no transition through one counts.
With ``reset_token`` the counts restart after every occurrence (switching Markov, §5.1).

The vectorised estimator loops over the S**k contexts, each step O(batch·pos·S); the brute
force reference (:func:`add_beta_brute_force`) counts with plain Python loops.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from probes.counts import _last_reset, context_index
from tasks.base import IGNORE, check


def add_beta_counts(tokens: Int[Tensor, "batch pos"], S: int, k: int = 1,
                    reset_token: int | None = None) -> Float[Tensor, "batch pos S"]:
    """``n[b, t, j]``: how often j followed the context ending at t, within tokens[b, :t+1]
    (since the latest ``reset_token``); zeros where there is no valid context."""
    check(tokens.dim() == 2, f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    check(S >= 1 and k >= 1, f"S and k must be >= 1, got S={S}, k={k}")
    tokens = tokens.long()
    B, T = tokens.shape
    dev = tokens.device
    ctx = context_index(tokens, S, k)  # [batch, pos]: context ending at t (−1: none)
    prev = torch.full_like(ctx, -1)
    if T > 1:
        prev[:, 1:] = ctx[:, :-1]  # context that precedes tokens[t]
    sym = (tokens >= 0) & (tokens < S)
    onehot = F.one_hot(tokens.clamp(0, S - 1), S).double() * sym[..., None]  # [batch, pos, S]
    if reset_token is not None:
        r = _last_reset(tokens, reset_token)  # [batch, pos]: latest reset at or before t
        # a context that reaches back over the reset holds the reset token itself (not a
        # symbol), so it is already −1; counts before the reset are removed below
        start = r.clamp(min=0)[..., None].expand(B, T, S)
    out = torch.zeros(B, T, S, dtype=torch.float64, device=dev)
    for c in range(S**k):
        # why a loop over contexts: one [batch, pos, S] cumulative sum per context keeps memory
        # linear in the sequence length, whatever S**k is
        events = onehot * (prev == c)[..., None]  # transitions c -> j completed at i
        cum = events.cumsum(dim=1)  # [batch, pos, S]
        if reset_token is not None:
            base = torch.where((r >= 0)[..., None], cum.gather(1, start), torch.zeros_like(cum))
            cum = cum - base
        out = torch.where((ctx == c)[..., None], cum, out)
    return out


def add_beta_probs(tokens: Int[Tensor, "batch pos"], S: int, k: int = 1, beta: float = 1.0,
                   reset_token: int | None = None) -> Float[Tensor, "batch pos S"]:
    """P_β^(k)(next = j | tokens[b, :t+1]) = (n_j + β) / (n + Sβ) at every position (float64)."""
    check(beta > 0, f"beta must be > 0, got {beta}")
    n = add_beta_counts(tokens, S, k, reset_token)
    return (n + beta) / (n.sum(-1, keepdim=True) + S * beta)


def switching_probs(tokens: Int[Tensor, "batch pos"], S: int, k: int, beta: float,
                    p_switch: float, switch_token: int | None = None
                    ) -> Float[Tensor, "batch pos S1"]:
    """Optimal predictor of the switching Markov process (§5.1, App. E.7) over S + 1 tokens:
    SWITCH with probability p_switch, else add-β on the counts since the last SWITCH."""
    check(0.0 <= p_switch < 1.0, f"p_switch must be in [0, 1), got {p_switch}")
    switch_token = S if switch_token is None else switch_token
    check(switch_token == S, f"the switch token must be id S={S}, got {switch_token}")
    p = add_beta_probs(tokens, S, k, beta, reset_token=switch_token) * (1.0 - p_switch)
    return torch.cat([p, torch.full_like(p[..., :1], p_switch)], dim=-1)


def cross_entropy(probs: Float[Tensor, "batch pos V"], targets: Int[Tensor, "batch pos"]
                  ) -> Tensor:
    """Mean −log probs[target] over the positions whose target is not ``IGNORE``."""
    mask = targets != IGNORE
    check(bool(mask.any()), "no target positions to score")
    p = probs.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)  # [batch, pos]
    return -(p.clamp_min(1e-300).log() * mask).sum() / mask.sum()


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
