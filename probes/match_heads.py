"""n-gram match heads and the heads that feed them (copy paper §2.2, Fig. 3, App. C).

* :func:`find_match_heads`: every head's n-gram match score for n = 1..n_max over probe data
  (:mod:`probes.ngram_data`); a head's *match score* is its best over n, and the match heads
  are those reaching a threshold (or the k best). A head's score is at its better match lag
  (:func:`probes.attention.ngram_match_mask`): the successor, or one past it. Attention heads
  and SSM heads (their effective attention, :mod:`probes.effective_attention`) alike.
* :func:`ablation_controls`: ablating as many randomly chosen other heads, from anywhere and
  from the match heads' own layers, the control of the causal check (§3.1).
* :func:`per_head_drops`: the string accuracy each head costs when ablated alone.
* :func:`feeding_heads`: the earlier-layer heads whose ablation lowers the match heads' score
  most: the construction's hashing heads (Lemma C.1).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from models.generation import copy_accuracy, greedy_decode, teacher_forced_argmax
from probes import effective_attention as ea
from probes.attention import pattern_scores
from probes.ngram_data import ProbeData
from seqprobe.config import check

Head = tuple[int, int]  # (layer, head)


def _no_tick() -> None:
    """The default progress callback: nothing to show."""


@dataclass(frozen=True)
class MatchHeads:
    """What :func:`find_match_heads` found. Score tensors are [layer, head] unless noted."""

    match_by_n: torch.Tensor  # [layer, head, n]: mass on the n-gram matches at the head's lag
    lag: torch.Tensor  # the match lag of each head's best score: 0 successor, 1 one past it
    queries_by_n: torch.Tensor  # [layer, head, n]: queries with an n-gram match
    target: torch.Tensor  # mass on the true source position
    profile: torch.Tensor  # [layer, head, offset]: previous-token profile
    match_score: torch.Tensor  # best match over n (0 where no n had a query)
    best_n: torch.Tensor  # the n of that best (1-based)
    heads: tuple[Head, ...]  # the match heads, best first
    threshold_met: bool  # every one of them reaches the threshold

    def best_n_score(self, by_n: torch.Tensor) -> float:
        """Mean over the match heads of ``by_n`` ([lag, layer, head, n] as pattern_scores
        gives it, or [layer, head, n] at each head's lag) at each head's lag and best n."""
        if by_n.dim() == 4:
            by_n = _at_lag(by_n, self.lag)
        return float(np.mean([float(by_n[i, h, self.best_n[i, h] - 1]) for i, h in self.heads]))


def _at_lag(by_lag: torch.Tensor, lag: torch.Tensor) -> torch.Tensor:
    """``by_lag`` [lag, layer, head, ...] at each head's ``lag`` [layer, head]."""
    idx = lag.reshape(1, *lag.shape, *([1] * (by_lag.dim() - 3)))
    return by_lag.gather(0, idx.expand(1, *by_lag.shape[1:]))[0]


def _nanmax(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Max over the last axis, NaN counted as no score: (value clamped at 0, 1-based index)."""
    filled = torch.nan_to_num(x, nan=-1.0)
    v, i = filled.max(dim=-1)
    return v.clamp(min=0), i + 1


def find_match_heads(model, data: ProbeData, n_max: int, threshold: float = 0.5,
                     top_k: int | None = None) -> MatchHeads:
    """Score every head on ``data`` and pick the match heads: the ``top_k`` best, else every
    head whose match score reaches ``threshold`` (or the best one when none does)."""
    sc = pattern_scores(model, data, n_max, patterns=ea.head_patterns)
    by_lag, n_by_lag = _nanmax(sc["match"])  # [lag, layer, head]
    match_score = by_lag.max(dim=0).values  # [layer, head]
    lag = (by_lag == match_score).int().argmax(dim=0)  # the first lag reaching it: ties go to 0
    best_n = _at_lag(n_by_lag, lag)
    layers, n_heads = match_score.shape
    order = sorted(((float(match_score[i, h]), i, h) for i in range(layers)
                    for h in range(n_heads)), reverse=True)
    if top_k:
        heads = [(i, h) for _, i, h in order[:top_k]]
    else:
        heads = [(i, h) for s, i, h in order if s >= threshold] or [(order[0][1], order[0][2])]
    return MatchHeads(match_by_n=_at_lag(sc["match"], lag), lag=lag, queries_by_n=sc["counts"],
                      target=sc["target"],
                      profile=sc["profile"], match_score=match_score, best_n=best_n,
                      heads=tuple(heads),
                      threshold_met=all(float(match_score[i, h]) >= threshold
                                        for i, h in heads))


@torch.no_grad()
def greedy_predictions(model, prompts: Tensor, answers: Tensor) -> Tensor:
    """[batch, answer]: what greedy decoding (:func:`~models.generation.greedy_decode`) gives
    for each row, decoding only the rows that need it. One teacher-forced pass first: a row
    whose every argmax given the true prefix is right decodes to its answer (greedy decoding
    sees that same prefix at every step, the model being causal), so only the other rows are
    decoded. Where a model copies most probe strings (the unablated model, most ablation
    controls) that is one forward pass instead of one per answer token."""
    right = (teacher_forced_argmax(model, prompts, answers) == answers).all(dim=1)
    pred = answers.clone()
    if not right.all():
        pred[~right] = greedy_decode(model, prompts[~right], answers.shape[1])
    return pred


def accuracy(model, data: ProbeData) -> dict[str, float]:
    """Greedy string- and character-level accuracy over the probe batches (paper §3.1), each
    batch weighted by its rows (:func:`~probes.copying.accuracy_on`'s sums, over
    :func:`greedy_predictions`)."""
    was_training = model.training
    model.eval()
    s = c = 0.0
    done = 0
    try:
        for batch, _ in data:
            batch = batch.to(model.device)
            b = batch.prompts.shape[0]
            acc = copy_accuracy(greedy_predictions(model, batch.prompts, batch.answers),
                                batch.answers)
            s, c, done = s + acc["string_acc"] * b, c + acc["char_acc"] * b, done + b
    finally:
        model.train(was_training)
    check(done > 0, "accuracy over no examples")
    return {"string_acc": s / done, "char_acc": c / done}


def mean_activations(model, data: ProbeData) -> dict[int, torch.Tensor]:
    """Each layer's per-head mean output over all probe batches (what mean-ablation writes)."""
    tokens = [torch.cat([b.prompts, b.answers], 1) for b, _ in data]
    means: dict[int, torch.Tensor] = {}
    for tok in tokens:
        for i, m in ea.head_means(model, tok.to(model.device)).items():
            means[i] = means.get(i, 0) + m / len(tokens)
    return means


def ablated_accuracy(model, data: ProbeData, heads: list[Head], mode: str,
                     means: dict[int, torch.Tensor]) -> dict[str, float]:
    """:func:`accuracy` with ``heads`` mean- or zero-ablated."""
    with ea.ablated_heads(model, heads, mode, means):
        return accuracy(model, data)


def _control_summary(runs: list[dict], base: dict, exhaustive: bool = False) -> dict:
    """The accuracy drop over the control's head sets: mean, min, max, sd and quartiles of
    the string drop (its spread), mean and max of the character drop; ``exhaustive``: every
    set of that size was ablated (else a draw of distinct sets, :func:`control_sets`)."""
    if not runs:
        return {"runs": [], "n_sets": 0, "exhaustive": exhaustive, "string_drop_mean": None,
                "string_drop_max": None, "string_drop_min": None, "string_drop_sd": None,
                "string_drop_quartiles": None, "char_drop_mean": None, "char_drop_max": None}
    ds = [base["string_acc"] - r["string_acc"] for r in runs]
    dc = [base["char_acc"] - r["char_acc"] for r in runs]
    return {"runs": runs, "n_sets": len(runs), "exhaustive": exhaustive,
            "string_drop_mean": float(np.mean(ds)), "string_drop_max": float(max(ds)),
            "string_drop_min": float(min(ds)),
            "string_drop_sd": float(np.std(ds, ddof=1)) if len(ds) > 1 else 0.0,
            "string_drop_quartiles": [float(q) for q in np.percentile(ds, [25, 50, 75])],
            "char_drop_mean": float(np.mean(dc)), "char_drop_max": float(max(dc))}


def control_sets(pool: list[Head], k: int, most: int, seed: int
                 ) -> tuple[list[list[Head]], bool]:
    """``(sets, exhaustive)``: the sets of ``k`` heads of ``pool`` a random-ablation control
    ablates, drawn without replacement. Every such set, in order (deterministic, no draw),
    when there are at most ``most``; else ``most`` distinct sets dealt from seeded shuffles of
    the pool, each shuffle cut into disjoint sets of ``k``, so every head of the pool is
    ablated about equally often: a draw with replacement can hit the same few heads (those a
    copy model cannot lose, as its first layer's) again and again, and its mean then says
    more about them than about "random heads"."""
    n = len(pool)
    if k <= 0 or most <= 0 or n < k:
        return [], True
    if math.comb(n, k) <= most:
        return [list(c) for c in itertools.combinations(pool, k)], True
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, ...]] = set()
    out: list[list[Head]] = []
    while len(out) < most:
        perm = rng.permutation(n)
        for i in range(0, n - k + 1, k):
            key = tuple(sorted(int(j) for j in perm[i:i + k]))
            if key not in seen:
                seen.add(key)
                out.append([pool[j] for j in key])
            if len(out) == most:
                break
    return out, False


def control_plan(model, top: list[Head], draws: int, seed: int
                 ) -> dict[str, tuple[list[list[Head]], bool]]:
    """The head sets each control of :func:`ablation_controls` ablates, and whether they are
    every such set (:func:`control_sets`; deterministic, so a caller can count them first)."""
    layers, n_heads = model.cfg.n_layers, ea.n_heads(model)
    others = [(i, h) for i in range(layers) for h in range(n_heads) if (i, h) not in top]
    top_layers = {i for i, _ in top}
    same_layer = [(i, h) for i, h in others if i in top_layers]
    return {name: control_sets(pool, min(len(top), len(pool)), draws, seed + i)
            for i, (name, pool) in enumerate((("random", others),
                                              ("random_same_layer", same_layer)))}


def feeding_candidates(model, found: MatchHeads) -> list[Head]:
    """The heads :func:`feeding_heads` ablates one at a time: every head of the layers below
    the last match head."""
    return [(i, h) for i in range(max(i for i, _ in found.heads))
            for h in range(ea.n_heads(model))]


def ablation_controls(model, data: ProbeData, top: list[Head], base: dict, mode: str,
                      means: dict[int, torch.Tensor], draws: int, seed: int,
                      tick: Callable[[], object] = _no_tick) -> dict[str, dict]:
    """``{"random": …, "random_same_layer": …}``: ablations of as many heads as ``top``, from
    the other heads anywhere and from the other heads of ``top``'s layers — every such set
    when there are at most ``draws``, else ``draws`` distinct sets (:func:`control_sets`);
    each control with its runs and the spread of the accuracy drop against ``base``."""
    controls = {}
    for name, (sets, exhaustive) in control_plan(model, top, draws, seed).items():
        runs = []
        for pick in sets:
            runs.append({"heads": pick, **ablated_accuracy(model, data, pick, mode, means)})
            tick()
        controls[name] = _control_summary(runs, base, exhaustive)
    return controls


def per_head_drops(model, data: ProbeData, base: dict, mode: str,
                   means: dict[int, torch.Tensor], tick: Callable[[], object] = _no_tick
                   ) -> torch.Tensor:
    """[layer, head]: the string accuracy lost when that head alone is ablated."""
    drop = torch.zeros(model.cfg.n_layers, ea.n_heads(model))
    for i in range(drop.shape[0]):
        for h in range(drop.shape[1]):
            acc = ablated_accuracy(model, data, [(i, h)], mode, means)
            drop[i, h] = base["string_acc"] - acc["string_acc"]
            tick()
    return drop


def feeding_heads(model, data: ProbeData, found: MatchHeads, n_max: int, mode: str,
                  means: dict[int, torch.Tensor], tick: Callable[[], object] = _no_tick
                  ) -> list[dict]:
    """Every head of the layers below the last match head, with ``match_score_drop``: how much
    ablating it alone lowers the match heads' mean score at their best n; largest drop first."""
    ref = found.best_n_score(found.match_by_n)
    out = []
    for i, h in feeding_candidates(model, found):
        with ea.ablated_heads(model, [(i, h)], mode, means):
            after = pattern_scores(model, data, n_max, patterns=ea.head_patterns)["match"]
        out.append({"layer": i, "head": h,
                    "match_score_drop": ref - found.best_n_score(after)})
        tick()
    out.sort(key=lambda r: -r["match_score_drop"])
    return out
