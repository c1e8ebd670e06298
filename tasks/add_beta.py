"""The Bayes-optimal predictor of the Markov tasks: the add-β (Laplacian smoothing) estimator.

Markov paper (Bondaschi et al.) §2.4 and App. A: when every row of an order-k kernel is drawn
from Dir(β·1) and the first k symbols are uniform, the Bayes-optimal next-token predictor is

    P_β^(k)(x_{t+1} = j | x_1^t) = (n_j + β) / (n + S·β),

where n_j counts how often symbol j followed the current context x_{t−k+1..t} within x_1^t and
n = Σ_j n_j. (The paper prints n + 2β: its binary case, S = 2.) Before a full context exists
(t < k) the next symbol is uniform, and so is the estimator (all counts are zero). Its average
cross-entropy over positions is L_β, the floor a trained model is compared with (§3).

It lives with the tasks because it is a property of their data (``MarkovTask.optimal_probs``,
which the training loop's evaluation compares a model with); :mod:`probes.estimators` and
:mod:`probes.counts` re-export it beside the instruments built on it.

Conventions (0-based positions): ``tokens[b, t]`` is x_{t+1} in the paper's 1-based time, and
``add_beta_probs(tokens)[b, t]`` is the prediction for ``tokens[b, t + 1]`` (the task's
``targets[b, t]``). A *context* is a length-k window of symbols indexed base S with the oldest
symbol most significant, so for k = 1 it is the symbol itself. Tokens outside 0..S−1 (a SWITCH
token, padding) are not symbols: a context window that holds one is no context (uniform
prediction) and no transition through one counts. With ``reset_token`` the counts restart
after every occurrence (switching Markov, §5.1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from seqprobe.config import check


def window_index(window: Int[Tensor, "batch k"], S: int) -> Int[Tensor, " batch"]:
    """Index (base S, oldest symbol most significant) of each row's window of symbols."""
    idx = torch.zeros(window.shape[0], dtype=torch.long, device=window.device)
    for m in range(window.shape[1]):
        idx = idx * S + window[:, m]
    return idx


def context_index(tokens: Int[Tensor, "batch pos"], S: int, k: int) -> Int[Tensor, "batch pos"]:
    """Index (base S) of the length-k context *ending* at each position; −1 where the window
    starts before position 0 or holds a non-symbol token (≥ S or < 0)."""
    check(S >= 1 and k >= 1, f"S and k must be >= 1, got S={S}, k={k}")
    B, T = tokens.shape
    tokens = tokens.long()
    valid = (tokens >= 0) & (tokens < S)
    idx = torch.zeros(B, T, dtype=torch.long, device=tokens.device)
    ok = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
    for m in range(k):  # symbol m of the window sits k − 1 − m positions back
        back = k - 1 - m
        shifted = torch.full_like(tokens, -1)
        sv = torch.zeros_like(valid)
        if back < T:
            shifted[:, back:] = tokens[:, : T - back]
            sv[:, back:] = valid[:, : T - back]
        idx = idx * S + shifted.clamp(min=0)
        ok &= sv
    return torch.where(ok, idx, torch.full_like(idx, -1))


def last_reset(tokens: Int[Tensor, "batch pos"], reset_token: int | None
               ) -> Int[Tensor, "batch pos"]:
    """Position of the latest ``reset_token`` at or before t (−1 if none, or no reset token)."""
    B, T = tokens.shape
    pos = torch.arange(T, device=tokens.device).expand(B, T)
    if reset_token is None:
        return torch.full((B, T), -1, dtype=torch.long, device=tokens.device)
    marks = torch.where(tokens == reset_token, pos, torch.full_like(pos, -1))
    return torch.cummax(marks, dim=1).values


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
        r = last_reset(tokens, reset_token)  # [batch, pos]: latest reset at or before t
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
