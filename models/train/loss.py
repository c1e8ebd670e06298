"""The one loss of the suite and how a training step runs it.

:func:`nll` is the loss: mean (or summed) negative log-likelihood over the target positions
that are not ``IGNORE`` (the papers' loss mask). Every task is trained and evaluated on it.
What differs between runs is only how the forward pass producing the log-probabilities runs:
the model's own ``log_probs``, a ``torch.compile``d wrapper, or DistributedDataParallel over
this rank's slice of the global batch. :func:`step_loss` picks that once, before the first
step, and returns one function the loop calls on every batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from models.train import distributed
from models.train.compiled import CompiledForward
from models.train.distributed import World
from models.train_config import TrainConfig, resolve_train
from seqprobe.config import check
from tasks.base import IGNORE, Batch

# (batch, count=None) -> (loss to backpropagate, its value): the batch's summed NLL over
# ``count`` target positions (a micro-batch's share of its global batch), or its mean NLL
StepLoss = Callable[..., tuple[torch.Tensor, float]]


def nll(logp: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """NLL of ``targets`` under ``logp`` ([batch, pos, vocab]), positions equal to ``IGNORE``
    left out; ``reduction`` "mean" (over the counted positions) or "sum"."""
    return F.nll_loss(logp.reshape(-1, logp.shape[-1]), targets.reshape(-1),
                      ignore_index=IGNORE, reduction=reduction)


def loss_of(model, batch: Batch) -> torch.Tensor:
    """Mean NLL of a model on a batch (the paper's loss mask): what evaluation reports."""
    return nll(model.log_probs(batch.tokens), batch.targets)


def reference_metrics(model, task, batch: Batch) -> dict[str, float]:
    """Against a task's Bayes-optimal predictor (``task.optimal_probs``, e.g. add-β for Markov
    chains): ``lbeta`` its loss, ``loss_gap`` the model's loss minus it (the Markov paper's
    |L(θ) − L_β| without the bars, §3), ``kl_beta`` the mean KL(P_opt ‖ P_θ) per position."""
    probs = task.optimal_probs(batch.tokens.cpu()).to(batch.tokens.device)  # [batch, pos, V]
    mask = batch.targets != IGNORE
    idx = batch.targets.clamp(min=0)[..., None]
    lbeta = -(probs.gather(-1, idx).squeeze(-1).clamp_min(1e-300).log() * mask).sum() / mask.sum()
    logp = model.log_probs(batch.tokens).double()  # [batch, pos, vocab]
    model_loss = -(logp.gather(-1, idx).squeeze(-1) * mask).sum() / mask.sum()
    logq = logp[..., : probs.shape[-1]]
    kl = (probs * (probs.clamp_min(1e-300).log() - logq)).sum(-1)  # [batch, pos]
    return {"lbeta": float(lbeta), "loss_gap": float(model_loss - lbeta),
            "kl_beta": float(kl.mean())}


class _LogProbs(torch.nn.Module):
    """A model's ``log_probs`` as its ``forward``: DDP synchronises gradients, and
    ``torch.compile`` traces, through a module's forward call only."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.log_probs(tokens)


def _shard_loss(forward, batch: Batch, world: World, count: int | None = None
                ) -> tuple[torch.Tensor, float]:
    """``(loss to backpropagate, the global batch's mean loss)`` of this rank's slice.

    The slice's summed NLL over the global batch's target count, times the world size: DDP
    averages the ranks' gradients, so the sum is the gradient of the single-process loss. A rank
    left without rows (the last, short batch of an epoch) runs one row at weight 0, so every
    parameter still gets its (zero) gradient from this rank. ``count``: the target count to
    divide by (a micro-batch's global batch's; default the batch's own)."""
    if count is None:
        count = int((batch.targets != IGNORE).sum())
    lo, hi = distributed.shard_bounds(len(batch.tokens), world)
    weight = world.size / count if count else math.nan
    if lo == hi:
        lo, hi, weight = 0, 1, 0.0
    loss = nll(forward(batch.tokens[lo:hi]), batch.targets[lo:hi], reduction="sum")
    (total,) = distributed.all_sum([loss.item() if weight else 0.0], batch.tokens.device)
    return loss * weight, (total / count if count else math.nan)


def step_loss(model: torch.nn.Module, cfg: TrainConfig, dev: torch.device,
              world: World = distributed.SINGLE) -> StepLoss:
    """The training loss of one batch, its forward chosen once: ``model.log_probs``; under
    DDP, a DistributedDataParallel wrapper over this rank's slice (:func:`_shard_loss`); with
    ``cfg.compile``, either through ``torch.compile`` (:class:`CompiledForward`: eager after
    one warning if the compile fails). ``precision="bf16"`` runs the forward under
    ``torch.autocast``. An "auto" field of ``cfg`` is resolved for ``dev`` first. Build it
    after the model's weights are final (a resume's): DDP starts every rank from rank 0's
    weights."""
    cfg = resolve_train(cfg, dev)  # "auto" is never truthy here: it means "decide per device"
    forward: Callable[[torch.Tensor], torch.Tensor] = model.log_probs
    if cfg.checkpoint_blocks:
        check(hasattr(model, "run_blocks"),
              f"checkpoint_blocks needs a suite model's blocks; {type(model).__name__} has none")
        model.checkpoint_blocks = True
    no_sync = nullcontext  # what skips DDP's gradient sync for all but the last micro-batch
    if world.active:
        forward = DistributedDataParallel(
            _LogProbs(model), device_ids=[dev.index] if dev.type == "cuda" else None)
        no_sync = forward.no_sync
    elif cfg.compile:
        forward = _LogProbs(model)
    if cfg.compile:  # a compile failure falls back to eager with one warning (compiled.py)
        forward = CompiledForward(forward)

    def autocast():
        return (torch.autocast(dev.type, dtype=torch.bfloat16) if cfg.precision == "bf16"
                else nullcontext())

    if world.active:
        def sharded(batch: Batch, count: int | None = None) -> tuple[torch.Tensor, float]:
            with autocast():
                return _shard_loss(forward, batch, world, count)
        sharded.no_sync = no_sync
        sharded.compiled = forward if cfg.compile else None
        return sharded

    def single(batch: Batch, count: int | None = None) -> tuple[torch.Tensor, float]:
        with autocast():
            if count is None:
                loss = nll(forward(batch.tokens), batch.targets)
            else:
                loss = nll(forward(batch.tokens), batch.targets, "sum") / (count or math.nan)
        return loss, loss.item()
    single.no_sync = no_sync
    single.compiled = forward if cfg.compile else None  # its .fallback says if it went eager
    return single


def backward(loss_fn: StepLoss, batch: Batch, micro_batch: int = 0) -> float:
    """Backpropagate ``loss_fn``'s loss of ``batch`` (gradients add up in ``.grad``) and return
    its value, the batch's mean NLL.

    With ``micro_batch`` (``TrainConfig.micro_batch``) the batch runs as micro-batches of that
    many rows, one forward and backward each, so only one micro-batch's activations are alive
    at a time. Each one's loss is its summed NLL over the *whole* batch's target count, so the
    gradients add up to the whole batch's and the values to its mean loss (the same numbers,
    up to rounding). Under DDP all but the last micro-batch skip the gradient sync
    (``no_sync``): the ranks exchange gradients once per step, as without micro-batches."""
    n = len(batch.tokens)
    if not micro_batch or micro_batch >= n:
        loss, value = loss_fn(batch)
        loss.backward()
        return value
    count = int((batch.targets != IGNORE).sum())
    no_sync = getattr(loss_fn, "no_sync", nullcontext)
    value = 0.0
    for lo in range(0, n, micro_batch):
        part = Batch(batch.tokens[lo:lo + micro_batch], batch.targets[lo:lo + micro_batch])
        with nullcontext() if lo + micro_batch >= n else no_sync():
            loss, part_value = loss_fn(part, count)
            loss.backward()
        value += part_value
    return value
