"""What a training run measures at each evaluation, and the data it trains on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from models.generation import evaluate_prompts
from models.train import distributed
from models.train.distributed import World
from models.train.loss import loss_of, reference_metrics
from models.train.rng import global_rngs_kept
from models.train_config import TrainConfig
from tasks.base import Batch, make_generator
from tasks.registry import packed_batch

EVAL_SEED_OFFSET = 1_000_003  # evaluation data never shares a stream with training data

Evaluator = Callable[[torch.nn.Module, Any, TrainConfig, torch.device], dict[str, float]]


class EvaluationStopped(KeyboardInterrupt):
    """A stop (Ctrl-C, SIGTERM) came during an evaluation, which was abandoned between two of
    its batches: the loop saves the run as interrupted, and ``--resume`` evaluates that step
    again first (an evaluation changes no state of the run, so the resumed run is the
    uninterrupted one). A KeyboardInterrupt, as the user's stop it carries: no ``except
    Exception`` on its way (an evaluator's, a callback's) swallows it."""


@torch.no_grad()
def evaluate(model, task, cfg: TrainConfig, device: torch.device,
             world: World = distributed.SINGLE,
             stop: Callable[[], bool] | None = None) -> dict[str, float]:
    """Loss on fresh batches; for generation tasks greedy string / char accuracy; for tasks
    with a Bayes-optimal predictor the gap to it; and a task's own ``extra_metrics``.

    A task with a length distribution (``eval_lengths``: copy, lookup) is scored at every
    length of it (:func:`length_units`), and the record adds ``string_acc_at`` and
    ``char_acc_at`` ({L: accuracy}); ``string_acc`` / ``char_acc`` are then the mean over
    those lengths, the expectation under the task's uniform length distribution.

    The global RNGs (torch, numpy, python) are left as they were
    (:func:`~models.train.rng.global_rngs_kept`).

    With the ``world`` of a DDP run (every rank calls it), every rank draws every evaluation
    batch (one stream, as in a single process) and scores every ``size``-th one; the per-batch
    scores are gathered and combined in batch order, so the record is the single-process one
    and every rank gets it.

    ``stop`` (None: never) is asked before every batch: when it says True the evaluation is
    abandoned with :class:`EvaluationStopped`, so a SIGTERM during a long evaluation is
    answered within one batch, not after the whole of it."""
    was_training = model.training
    model.eval()
    g = make_generator(cfg.seed + EVAL_SEED_OFFSET)  # the same fresh examples at every eval
    lengths = task.eval_lengths() if hasattr(task, "eval_lengths") else None
    scored: list[tuple[int, dict[str, float]]] = []  # (batch index, its scores) of this rank
    try:
        with global_rngs_kept():
            units = (_drawn_units(task, cfg, g) if lengths is None
                     else length_units(task, cfg, g, lengths))
            for i, (batch, prompts, L) in enumerate(units):
                if stop is not None and stop():
                    raise EvaluationStopped(f"evaluation stopped before batch {i}")
                if i % world.size == world.rank:
                    s = _scores(model, task, cfg, None if batch is None else batch.to(device),
                                prompts, device)
                    if L is not None:  # a batch of prompts at one length of the distribution
                        s.update(length=L, rows=len(prompts.prompts))
                    scored.append((i, s))
    finally:
        model.train(was_training)
    if world.active:
        scored = sorted(x for part in distributed.gather(scored) for x in part)
    per_batch = [scores for _, scores in scored]
    if lengths is not None:
        return _combine_lengths(per_batch)
    out = {"eval_loss": float(np.mean([s["eval_loss"] for s in per_batch]))}
    if "string_acc" in per_batch[0]:
        out["string_acc"] = float(np.mean([s["string_acc"] for s in per_batch]))
        out["char_acc"] = float(np.mean([s["char_acc"] for s in per_batch]))
    rest = [k for k in per_batch[0] if k not in out]
    out.update({k: float(np.mean([s[k] for s in per_batch])) for k in rest})
    return out


def _drawn_units(task, cfg: TrainConfig, g: torch.Generator
                 ) -> Iterator[tuple[Batch, Any, None]]:
    """``eval_batches`` × (loss batch, the task's prompts or None, None), drawn in turn: the
    evaluation of a task without a length distribution (Markov chains, memorization,
    induction at its one length)."""
    for _ in range(cfg.eval_batches):
        yield task.batch(cfg.eval_batch_size, g), task.eval_batch(cfg.eval_batch_size, g), None


def per_length(n_lengths: int, cfg: TrainConfig) -> int:
    """Prompts scored at each length: the ``eval_batches × eval_batch_size`` examples of an
    evaluation spread evenly over the lengths, rounded up, so every length is scored and all
    by the same number of strings."""
    return -(-cfg.eval_batches * cfg.eval_batch_size // n_lengths)  # ceil


def length_units(task, cfg: TrainConfig, g: torch.Generator, lengths
                 ) -> Iterator[tuple[Batch | None, Any, int | None]]:
    """The evaluation of a task with a length distribution: first ``eval_batches`` loss batches
    (``task.batch`` draws each example's length, so the loss is already over the
    distribution), then :func:`per_length` prompts at every one of ``lengths``, shortest first,
    in batches of at most ``eval_batch_size`` (one length per batch: a batch of prompts is one
    forward pass, its rows of one length).

    Stratified, not drawn: one drawn length per batch scored a quick copy model on only as many
    lengths as it had batches, and a model that copied short strings alone could read as
    perfect. Per-example drawn lengths would need prompts of mixed length in one batch, which
    greedy decoding cannot batch; stratified lengths score every length with the same count
    (an exact average over a uniform length distribution) and give the score at exactly L."""
    for _ in range(cfg.eval_batches):
        yield task.batch(cfg.eval_batch_size, g), None, None
    k = per_length(len(lengths), cfg)
    for L in lengths:
        for start in range(0, k, cfg.eval_batch_size):
            yield None, task.eval_batch(min(cfg.eval_batch_size, k - start), g, length=L), L


def _combine_lengths(per_batch: list[dict[str, float]]) -> dict[str, Any]:
    """The record of a by-length evaluation (:func:`length_units`) from its per-batch scores:
    loss and metrics averaged over the loss batches; accuracies per length (weighted by rows),
    and their mean over the lengths."""
    losses = [s for s in per_batch if "eval_loss" in s]
    out: dict[str, Any] = {k: float(np.mean([s[k] for s in losses])) for k in losses[0]}
    rows: dict[int, list[dict[str, float]]] = {}
    for s in per_batch:
        if "length" in s:
            rows.setdefault(int(s["length"]), []).append(s)
    at = {key: {L: float(sum(s[key] * s["rows"] for s in ss) / sum(s["rows"] for s in ss))
                for L, ss in sorted(rows.items())} for key in ("string_acc", "char_acc")}
    out["string_acc"] = float(np.mean(list(at["string_acc"].values())))
    out["char_acc"] = float(np.mean(list(at["char_acc"].values())))
    out["string_acc_at"], out["char_acc_at"] = at["string_acc"], at["char_acc"]
    return out


evaluate.shards_over_ranks = True  # the loop calls it on every rank with its world
evaluate.checks_stop = True  # it takes ``stop`` (run_evaluator passes the loop's)


def _scores(model, task, cfg: TrainConfig, batch: Batch | None, prompts,
            device) -> dict[str, float]:
    """One evaluation batch's numbers: of the loss ``batch`` (None: none) and of ``prompts``
    (the task's generation prompts, or None)."""
    scores: dict[str, float] = {}
    if batch is not None:
        scores["eval_loss"] = loss_of(model, batch).item()
    metrics = {}
    if batch is not None and hasattr(task, "optimal_probs"):
        metrics.update(reference_metrics(model, task, batch))
    if batch is not None and hasattr(task, "extra_metrics"):
        metrics.update(task.extra_metrics(model, batch))
    if prompts is not None:
        acc = evaluate_prompts(model, prompts.to(device), greedy=cfg.greedy_eval)
        scores["string_acc"] = acc["string_acc"]
        scores["char_acc"] = acc["char_acc"]
    scores.update({k: float(v) for k, v in metrics.items()})
    return scores


def run_evaluator(evaluator: Evaluator, model, task, cfg: TrainConfig, dev: torch.device,
                  world: World = distributed.SINGLE,
                  stop: Callable[[], bool] | None = None) -> dict[str, float]:
    """``evaluator``'s record on every rank: split over the ranks when it can be
    (``shards_over_ranks``), else run once on rank 0 and broadcast. ``stop`` reaches an
    evaluator that ``checks_stop`` in one process (it may raise :class:`EvaluationStopped`);
    under DDP the ranks would abandon at different batches and wait on one another in the
    gather, so there a stop is taken between steps, after the evaluation."""
    if not world.active:
        if stop is not None and getattr(evaluator, "checks_stop", False):
            return evaluator(model, task, cfg, dev, stop=stop)
        return evaluator(model, task, cfg, dev)
    if getattr(evaluator, "shards_over_ranks", False):
        return evaluator(model, task, cfg, dev, world=world)
    return distributed.broadcast(evaluator(model, task, cfg, dev) if world.is_main else None,
                                 world)


def batches(task, cfg: TrainConfig, g: torch.Generator, device) -> Iterator[Batch]:
    """The training data: packed contexts (``cfg.context``), epochs over a fixed set (tasks
    with ``epoch``, e.g. memorization: every example once per pass), or fresh i.i.d. batches."""
    while True:
        if cfg.context:
            yield packed_batch(task, cfg.batch_size, cfg.context, g).to(device)
        elif hasattr(task, "epoch"):
            for batch in task.epoch(cfg.batch_size, g):
                yield batch.to(device)
        else:
            yield task.batch(cfg.batch_size, g).to(device)
