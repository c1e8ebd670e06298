"""What a training run measures at each evaluation, and the data it trains on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from models.generation import evaluate_prompts
from models.train import distributed
from models.train.config import TrainConfig
from models.train.distributed import World
from models.train.loss import loss_of, reference_metrics
from models.train.rng import global_rngs_kept
from tasks.base import Batch, make_generator
from tasks.registry import packed_batch

EVAL_SEED_OFFSET = 1_000_003  # evaluation data never shares a stream with training data

Evaluator = Callable[[torch.nn.Module, Any, TrainConfig, torch.device], dict[str, float]]


@torch.no_grad()
def evaluate(model, task, cfg: TrainConfig, device: torch.device,
             world: World = distributed.SINGLE) -> dict[str, float]:
    """Loss on fresh batches; for generation tasks greedy string / char accuracy; for tasks
    with a Bayes-optimal predictor the gap to it; and a task's own ``extra_metrics``.

    The global RNGs (torch, numpy, python) are left as they were
    (:func:`~models.train.rng.global_rngs_kept`).

    With the ``world`` of a DDP run (every rank calls it), every rank draws every evaluation
    batch (one stream, as in a single process) and scores every ``size``-th one; the per-batch
    scores are gathered and averaged in batch order, so the record is the single-process one
    and every rank gets it."""
    was_training = model.training
    model.eval()
    g = make_generator(cfg.seed + EVAL_SEED_OFFSET)  # the same fresh examples at every eval
    scored: list[tuple[int, dict[str, float]]] = []  # (batch index, its scores) of this rank
    try:
        with global_rngs_kept():
            for i in range(cfg.eval_batches):
                batch = task.batch(cfg.eval_batch_size, g)
                prompts = task.eval_batch(cfg.eval_batch_size, g)
                if i % world.size == world.rank:
                    scored.append((i, _scores(model, task, cfg, batch.to(device), prompts,
                                              device)))
    finally:
        model.train(was_training)
    if world.active:
        scored = sorted(x for part in distributed.gather(scored) for x in part)
    per_batch = [scores for _, scores in scored]
    out = {"eval_loss": float(np.mean([s["eval_loss"] for s in per_batch]))}
    if "string_acc" in per_batch[0]:
        out["string_acc"] = float(np.mean([s["string_acc"] for s in per_batch]))
        out["char_acc"] = float(np.mean([s["char_acc"] for s in per_batch]))
    rest = [k for k in per_batch[0] if k not in out]
    out.update({k: float(np.mean([s[k] for s in per_batch])) for k in rest})
    return out


evaluate.shards_over_ranks = True  # the loop calls it on every rank with its world


def _scores(model, task, cfg: TrainConfig, batch: Batch, prompts, device) -> dict[str, float]:
    """One evaluation batch's numbers (``prompts``: the task's generation prompts, or None)."""
    scores = {"eval_loss": loss_of(model, batch).item()}
    metrics = {}
    if hasattr(task, "optimal_probs"):
        metrics.update(reference_metrics(model, task, batch))
    if hasattr(task, "extra_metrics"):
        metrics.update(task.extra_metrics(model, batch))
    if prompts is not None:
        acc = evaluate_prompts(model, prompts.to(device), greedy=cfg.greedy_eval)
        scores["string_acc"] = acc["string_acc"]
        scores["char_acc"] = acc["char_acc"]
    scores.update({k: float(v) for k, v in metrics.items()})
    return scores


def run_evaluator(evaluator: Evaluator, model, task, cfg: TrainConfig, dev: torch.device,
                  world: World = distributed.SINGLE) -> dict[str, float]:
    """``evaluator``'s record on every rank: split over the ranks when it can be
    (``shards_over_ranks``), else run once on rank 0 and broadcast."""
    if not world.active:
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
