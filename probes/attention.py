"""Attention-pattern scores over ``blocks.{i}.attn.hook_pattern`` ([batch, head, q_pos, k_pos]).

* n-gram match score (copy paper, Fig. 3 and Algorithm 1): at query position p with current
  n-gram s_{p−n+1..p}, the attention mass on the keys q whose *preceding* n tokens
  s_{q−n..q−1} equal that n-gram — the successors of its earlier occurrences, i.e. the
  positions a hash-based copier reads its next token from. n = 1 is the induction-head score
  (Olsson et al.): attend to the token after an earlier occurrence of the current token.
  With ``lag`` 1 the keys are one further on (their preceding n tokens are the n-gram and its
  successor): a head there reads the successor from the key's previous-token slot, which a
  layer-0 previous-token head wrote — the same lookup, one position later. A 2-layer copy
  model trained from another seed formed this one instead of the lag-0 head.
* target score: the attention mass on one given source position per query (in copying, the
  position of the token that must be output next).
* previous-token profile: the mass a query puts on the tokens o = 0, 1, 2, … positions back
  (the "hashing" heads of the construction, Lemma C.1, attend uniformly to o < window).

All scores are means over the query positions selected by ``query_mask`` ([batch, q_pos] bool,
``None`` = every position); queries with no matching key are left out of the n-gram score.
:func:`pattern_scores` runs a transformer over copy-style batches and gathers all three per
layer and head at the answer-phase queries.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from tasks.base import PromptBatch


def ngram_match_mask(tokens: Int[Tensor, "batch pos"], n: int, lag: int = 0,
                     ) -> Bool[Tensor, "batch q k"]:
    """``mask[b, p, q]``: q ≤ p and s_{q−lag−t} = s_{p−t+1} for t = 1..n (q ≥ n + lag,
    p ≥ n − 1). ``lag`` 0: the successors of the n-gram's earlier occurrences."""
    if n < 1 or lag < 0:
        raise ValueError(f"n must be >= 1 and lag >= 0, got n = {n}, lag = {lag}")
    B, T = tokens.shape
    if n + lag > T:  # no key q >= n + lag exists in a shorter sequence: no match anywhere
        return torch.zeros(B, T, T, dtype=torch.bool, device=tokens.device)
    eq = tokens[:, :, None] == tokens[:, None, :]  # [batch, p, q]: s_p == s_q
    mask = torch.ones(B, T, T, dtype=torch.bool, device=tokens.device)
    for t in range(1, n + 1):
        # need eq[p − t + 1, q − t − lag]: shift the p axis down by t − 1, the q axis by t + lag
        shifted = torch.zeros_like(mask)
        shifted[:, t - 1 :, t + lag :] = eq[:, : T - t + 1, : T - t - lag]
        mask &= shifted
    causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
    return mask & causal


LAGS = 2  # the match lags pattern_scores scores: 0 (the successor) and 1 (one past it)


def _select(query_mask: Tensor | None, B: int, T: int, device) -> Tensor:
    if query_mask is None:
        return torch.ones(B, T, dtype=torch.bool, device=device)
    if query_mask.shape != (B, T):
        raise ValueError(f"query_mask must be [batch, pos] = {(B, T)}, "
                         f"got {tuple(query_mask.shape)}")
    return query_mask.bool()


def ngram_match_score(pattern: Float[Tensor, "batch head q k"], tokens: Int[Tensor, "batch pos"],
                      n: int, query_mask: Bool[Tensor, "batch q"] | None = None, lag: int = 0,
                      match: Bool[Tensor, "batch q k"] | None = None,
                      ) -> tuple[Float[Tensor, " head"], int]:
    """``(score [head], n_queries)``: mean attention mass on the n-gram matches of each query.

    Only queries selected by ``query_mask`` that have at least one match count; with none, the
    score is NaN.
    """
    B, H, T, _ = pattern.shape
    if match is None:  # callers scoring many layers of one batch pass it in, built once
        match = ngram_match_mask(tokens, n, lag)  # [batch, q, k]
    sel = _select(query_mask, B, T, pattern.device) & match.any(-1)  # [batch, q]
    mass = (pattern * match[:, None].to(pattern.dtype)).sum(-1)  # [batch, head, q]
    count = int(sel.sum())
    if count == 0:
        return torch.full((H,), float("nan")), 0
    score = (mass * sel[:, None].to(mass.dtype)).sum((0, 2)) / count  # [head]
    return score, count


def induction_score(pattern: Float[Tensor, "batch head q k"], tokens: Int[Tensor, "batch pos"],
                    query_mask: Bool[Tensor, "batch q"] | None = None) -> Float[Tensor, " head"]:
    """Mass on the token after an earlier occurrence of the current token (n-gram score, n=1).

    On a random sequence repeated twice this is the usual induction-head score."""
    return ngram_match_score(pattern, tokens, 1, query_mask)[0]


def target_score(pattern: Float[Tensor, "batch head q k"], target: Int[Tensor, "batch q"],
                 ) -> Float[Tensor, " head"]:
    """Mean mass each head puts on ``target[b, p]`` (a key position; −1 leaves the query out)."""
    B, H, T, K = pattern.shape
    sel = target >= 0  # [batch, q]
    if not sel.any():
        return torch.full((H,), float("nan"))
    idx = target.clamp(min=0)[:, None, :, None].expand(B, H, T, 1)
    mass = pattern.gather(-1, idx)[..., 0]  # [batch, head, q]
    return (mass * sel[:, None].to(mass.dtype)).sum((0, 2)) / sel.sum()


def previous_token_profile(pattern: Float[Tensor, "batch head q k"], max_offset: int,
                           query_mask: Bool[Tensor, "batch q"] | None = None,
                           ) -> Float[Tensor, "head offset"]:
    """``profile[h, o]``: mean mass head h puts on the key o positions back, o = 0..max_offset.

    Queries with p < o contribute 0 at offset o (there is no such key)."""
    B, H, T, _ = pattern.shape
    sel = _select(query_mask, B, T, pattern.device).to(pattern.dtype)  # [batch, q]
    count = sel.sum().clamp(min=1)
    out = []
    for o in range(max_offset + 1):
        diag = pattern.diagonal(offset=-o, dim1=-2, dim2=-1)  # [batch, head, T − o]: (p=o+i, k=i)
        mass = torch.zeros(B, H, T, dtype=pattern.dtype, device=pattern.device)
        mass[..., o:] = diag
        out.append((mass * sel[:, None]).sum((0, 2)) / count)
    return torch.stack(out, dim=-1)  # [head, offset]


def answer_queries(batch: PromptBatch, period: int) -> tuple[Int[Tensor, "batch pos"],
                                                             Bool[Tensor, "batch pos"],
                                                             Int[Tensor, "batch pos"]]:
    """``(tokens, query_mask, target)`` of a copy-style batch: the full sequences, the queries
    that predict an answer token, and the position each copies from (−1 elsewhere): the answer
    token at position i was seen before at i − ``period``."""
    tokens = torch.cat([batch.prompts, batch.answers], dim=1)  # [batch, pos]
    B, T = tokens.shape
    P, A = batch.prompts.shape[1], batch.answers.shape[1]
    qmask = torch.zeros(B, T, dtype=torch.bool)
    qmask[:, P - 1 : P - 1 + A] = True  # queries that predict an answer token
    pos = torch.arange(T)
    target = torch.where(qmask, (pos + 1 - period).expand(B, T), torch.full((B, T), -1))
    return tokens, qmask, target


@torch.no_grad()
def attention_patterns(model, tokens: Int[Tensor, "batch pos"]) -> list[Tensor]:
    """Per layer, the ``[batch, head, q, k]`` hook_pattern of a transformer (float32, CPU)."""
    names = {f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)}
    _, cache = model.run_with_cache(tokens.to(model.device), names_filter=lambda n: n in names)
    return [cache["pattern", i].float().cpu() for i in range(model.cfg.n_layers)]


@torch.no_grad()
def pattern_scores(model, data: list[tuple[PromptBatch, int]], n_max: int,
                   patterns: Callable[..., list[Tensor]] = attention_patterns,
                   ) -> dict[str, Tensor]:
    """Over the answer-phase queries of ``data`` (``[(batch, period)]``, see
    :func:`answer_queries`), weighted by query counts: ``match`` [lag, layer, head, n] (lag 0
    and 1, n = 1..n_max; NaN where no query has an earlier n-gram), ``counts`` [n] (queries
    with a lag-0 match),
    ``target`` [layer, head] and ``profile`` [layer, head, offset 0..n_max].

    ``patterns(model, tokens)`` gives the per-layer ``[batch, head, q, k]`` patterns scored
    (default: attention patterns; SSM heads: probes.effective_attention.head_patterns)."""
    s_sum = s_cnt = t_sum = prof_sum = None
    t_cnt = q_cnt = 0
    for batch, period in data:
        tokens, qmask, target = answer_queries(batch, period)
        pats = patterns(model, tokens)
        if s_sum is None:  # sizes from the first batch: heads per layer differ by model kind
            Lh, H = len(pats), pats[0].shape[1]
            s_sum, s_cnt = torch.zeros(LAGS, Lh, H, n_max), torch.zeros(LAGS, n_max)
            t_sum, prof_sum = torch.zeros(Lh, H), torch.zeros(Lh, H, n_max + 1)
        masks = {(lag, n): ngram_match_mask(tokens, n, lag)  # the same for every layer
                 for lag, n in itertools.product(range(LAGS), range(1, n_max + 1))}
        nq = int(qmask.sum())
        nt = int((target >= 0).sum())
        for i in range(Lh):
            pat = pats[i]  # [batch, head, q, k]
            for lag, n in itertools.product(range(LAGS), range(1, n_max + 1)):
                score, count = ngram_match_score(pat, tokens, n, qmask, lag, masks[lag, n])
                if count:
                    s_sum[lag, i, :, n - 1] += score * count
                if i == 0:
                    s_cnt[lag, n - 1] += count  # queries with a match: the same for every head
            t_sum[i] += target_score(pat, target) * nt
            prof_sum[i] += previous_token_profile(pat, n_max, qmask) * nq
        t_cnt += nt
        q_cnt += nq
    match = s_sum / s_cnt[:, None, None].clamp(min=1)  # [lag, layer, head, n]
    match.masked_fill_((s_cnt == 0)[:, None, None], float("nan"))
    return {"match": match, "counts": s_cnt[0], "target": t_sum / max(t_cnt, 1),
            "profile": prof_sum / max(q_cnt, 1)}
