"""The one training loop of the suite.

Deliberately plain: AdamW (no weight decay on biases and gains), the schedule of
:func:`~models.train_config.lr_at`, gradient clipping, periodic evaluation, and checkpoints in
the format of :mod:`models.checkpoint`. What varies between uses goes through arguments, not
copies of the loop: ``evaluator`` (what an evaluation measures) and ``callbacks`` (early stop,
per-step metrics; see :class:`~models.train.callbacks.Callback`; ``TrainConfig.stop_at`` is
:class:`~models.train.callbacks.StopAt`). Every RNG the run touches is saved
(:mod:`models.train.rng`), so ``--resume`` continues a run bit-identically on the CPU. Ctrl-C
and SIGTERM (what ``timeout``, Docker, Kubernetes and SLURM send before a kill) stop between
two steps and save; one that comes during an evaluation abandons it between two of its batches
(a long evaluation would outlast the grace before the kill) and saves the run at its step, and
``--resume`` runs that evaluation first.

The parts, each in its own module: the loss and how a step runs it (:mod:`models.train.loss`),
evaluation and the training data (:mod:`models.train.evaluation`), writing and resuming
checkpoints (:mod:`models.train.writer`). This module is the loop itself, read top to bottom.

Under ``torchrun`` the same loop runs DistributedDataParallel (:mod:`models.train.distributed`:
how the global batch is split and why the weights equal a single process's): every rank agrees
each step on whether to stop, evaluation is split over the ranks and gathered, and rank 0 alone
writes checkpoints. ``precision="bf16"`` runs the training forward under ``torch.autocast`` and
``compile=True`` through ``torch.compile``; weights, optimizer state and evaluation stay fp32.
Two settings trade compute for memory without changing the numbers: ``micro_batch`` runs the
global batch as micro-batches whose gradients add up to its own
(:func:`models.train.loss.backward`), ``checkpoint_blocks`` recomputes each block in the
backward pass (:meth:`models.base.SuiteModel.run_blocks`).
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from models.checkpoint.io import read_checkpoint
from models.checkpoint.paths import check_writable
from models.checkpoint.write import exclusive_writer
from models.registry import build_model
from models.train import distributed
from models.train.build import check_run_size, validate_run_config
from models.train.callbacks import Callback, Run, StopAt
from models.train.distributed import World
from models.train.evaluation import (
    EVAL_SEED_OFFSET,
    EvaluationStopped,
    Evaluator,
    batches,
    evaluate,
    run_evaluator,
)
from models.train.loss import backward, loss_of, nll, reference_metrics, step_loss
from models.train.rng import rng_state, seed_all, set_rng_state
from models.train.runconfig import RunConfig
from models.train.writer import CheckpointWriter, check_resumable, rescue_dirs, restore
from models.train_config import TrainConfig, lr_at
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.errors import InputError, RunError
from tasks.base import make_generator
from tasks.registry import make_task

# what callers import from the loop (its parts' modules hold them)
__all__ = ["EVAL_SEED_OFFSET", "Callback", "Evaluator", "Run", "StopAt", "TrainingDiverged",
           "TrainingInterrupted", "batches", "check_resumable", "evaluate", "loss_of", "nll",
           "reference_metrics", "rescue_dirs", "rng_state", "set_rng_state", "train"]


class TrainingDiverged(RunError):
    """The loss (or the gradient norm) became NaN or infinite."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped training between two steps; a checkpoint was saved (if there
    is an output)."""


class _StopSignals:
    """Ctrl-C and SIGTERM set a flag that the loop checks between steps, and an evaluation
    between its batches, so a save is never half a step; a second signal gives up at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.stop = False
        self.signal_name = ""
        self.signum = 0  # of the first signal (0: none), what DDP ranks agree on
        self._old: dict[int, Any] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.stop:
            raise KeyboardInterrupt
        self.stop = True
        self.signum = int(signum)
        self.signal_name = signal.Signals(signum).name

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)


def fused_adamw(device: torch.device) -> bool:
    """Whether AdamW runs fused (one kernel for all parameters) on ``device``: on CUDA, where
    it saves a launch per parameter tensor and step. The CPU keeps the per-tensor loop, so
    CPU runs keep their numbers bit for bit (and resume bit-identically across versions)."""
    return device.type == "cuda"


def make_optimizer(model, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on the matrices only (not on biases and norm gains); fused on
    the devices of :func:`fused_adamw` (the model's device).

    Every matrix: the embedding and (Mamba's, Mamba-2's) conv filters are decayed too. The
    papers' optimisers differ: the Markov paper's scripts (Bond1995/Markov-Mamba) decay the
    Linear layers' weights only, so a level copying their weight decay is that much
    stronger here on the embedding and the conv."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    device = next(model.parameters()).device
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                             fused=fused_adamw(device) or None)


def train(run_config: RunConfig, out: str | Path | None = None, device: str = "auto",
          resume: str | Path | None = None, progress: bool = True,
          callbacks: Sequence[Callback] = (), evaluator: Evaluator = evaluate) -> dict[str, Any]:
    """Run (or continue) training; returns the final checkpoint dict (also saved to ``out``).

    Everything is validated before the first step (configs, sizes against the device's memory,
    device, that ``out`` is writable, that ``resume`` holds this run). ``out`` is locked for the
    whole run, so a second live writer of the same file is refused. Ctrl-C or SIGTERM stops
    between two steps, saves and raises :class:`TrainingInterrupted`. Raises
    :class:`TrainingDiverged` on a non-finite loss or gradient norm without saving, so the last
    good checkpoint on disk is kept. A save that fails (disk full) puts the run's state in a
    :func:`~models.train.writer.rescue_dirs` directory and raises
    :class:`~models.checkpoint.SaveError` saying where.
    """
    validate_run_config(run_config)
    dev = distributed.rank_device(resolve_device(device))
    # "auto" precision / compile set for this device: the checkpoint records what was used
    run_config = run_config.resolved(dev)
    world = distributed.world()
    check(run_config.train.batch_size >= world.size,
          f"batch_size {run_config.train.batch_size} is smaller than the {world.size} processes of "
          "this job: each process trains on a slice of the global batch")
    if (run_config.train.precision == "bf16" and dev.type == "cuda"
            and not torch.cuda.is_bf16_supported()):
        raise InputError(f"precision bf16: {torch.cuda.get_device_name(dev)} has no bfloat16; "
                        "use --precision fp32")
    if out is None or not world.is_main:  # under DDP only rank 0 writes
        world = distributed.process_group(dev)
        return _train(run_config, None, dev, resume, progress, callbacks, evaluator, world)
    out = check_writable(out)
    with exclusive_writer(out):
        world = distributed.process_group(dev)
        return _train(run_config, out, dev, resume, progress, callbacks, evaluator, world)


def _train(run_config: RunConfig, out: Path | None, dev: torch.device, resume, progress: bool,
           callbacks: Sequence[Callback], evaluator: Evaluator,
           world: World = distributed.SINGLE) -> dict[str, Any]:
    t = Trainee(run_config, out, dev, resume, progress, callbacks, evaluator, world)
    # after the restore: DDP copies rank 0's
    loss_fn = step_loss(t.model, run_config.train, dev, world)
    t.compiled = getattr(loss_fn, "compiled", None)
    try:
        with _StopSignals() as signals:
            try:
                t.start(signals)
                while t.active:
                    batch = t.begin_step()
                    t.end_step(backward(loss_fn, batch, run_config.train.micro_batch), batch)
                    t.after_step(signals)
            except EvaluationStopped:
                # the weights are this step's; the evaluation changed nothing of the run
                raise t.interrupted(signals.signal_name, " during its evaluation") from None
            # the final save is inside the handler too: a SIGTERM now lets it finish
            return t.writer.save(final=True)
    finally:
        t.bar.close()


class Trainee:
    """One run being trained: its model, optimiser, data stream, checkpoint writer, progress bar
    and callbacks, and the steps of the loop around the forward and backward pass. The loop of
    :func:`train` drives one; :mod:`models.train.ensemble` drives several whose forward and
    backward run as one batched computation, each otherwise exactly its solo run."""

    def __init__(self, run_config: RunConfig, out: Path | None, dev: torch.device, resume,
                 progress: bool, callbacks: Sequence[Callback], evaluator: Evaluator,
                 world: World = distributed.SINGLE, position: int | None = None):
        cfg = run_config.train
        self.callbacks = [*callbacks, StopAt(cfg.stop_at)] if cfg.stop_at else list(callbacks)
        self.evaluator, self.world, self.out, self.resume = evaluator, world, out, resume
        self.compiled = None  # a torch.compile'd forward, whose .fallback the records note
        task = make_task(run_config.task_name, run_config.task_dict)
        if dev.type != "cpu":  # validate_run_config checked the host's memory
            check_run_size(run_config, task, dev)
        data_gen = make_generator(cfg.seed)
        seed_all(cfg.seed)
        model = build_model(run_config.arch, run_config.model)
        if cfg.init_from and resume is None:  # validate_run_config checked its arch and config
            model.load_state_dict(read_checkpoint(cfg.init_from)["state_dict"])
        model = model.to(dev)
        self.model, self.opt = model, make_optimizer(model, cfg)
        self.run = Run(run_config, model, task, dev)
        self.writer = CheckpointWriter(self.run, self.opt, data_gen, out, world)
        if resume is not None:
            self.run.step, self.run.samples_seen, self.run.history, self.run.time_before = \
                restore(run_config, resume, model, self.opt, data_gen)
            self.writer.last_good = (Path(resume), self.run.step)
        model.train()
        self.bar = tqdm(total=cfg.steps, initial=self.run.step, position=position,
                        disable=not progress or not world.is_main,
                        desc=f"{run_config.arch}/{run_config.task_name}", dynamic_ncols=True,
                        leave=False)
        # without clipping, an infinite max_norm measures the norm and scales by exactly 1.0
        self.clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
        self.data = batches(task, cfg, data_gen, dev)

    @property
    def cfg(self) -> TrainConfig:
        return self.run.run_config.train

    @property
    def active(self) -> bool:
        """Whether the run takes another step."""
        return self.run.step < self.cfg.steps and not self.run.stop_reason

    def start(self, signals: _StopSignals) -> None:
        """Before the first step: a resumed run whose evaluation a stop abandoned runs it now."""
        self.run.started = time.time()
        if self.resume is not None and _eval_missing(self.run):
            self.run.loss = _pending_loss(self.resume)
            self.evaluate_now(signals)

    def begin_step(self):
        """The step's learning rate set, gradients cleared; returns the step's batch."""
        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.cfg, self.run.step)
        self.opt.zero_grad(set_to_none=True)
        return next(self.data)

    def end_step(self, value: float, batch) -> None:
        """After the backward pass of ``batch`` (whose mean loss is ``value``): the optimiser
        step. Raises :class:`TrainingDiverged` before a non-finite loss or gradient can reach
        the weights, so the last good checkpoint on disk is kept."""
        run = self.run
        if not math.isfinite(value):
            raise _diverged(run, self.writer, "loss", value)
        # a finite loss can still give inf gradients; stepping on them would write NaN weights
        # that the next save would keep as "good"
        norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), self.clip)
        if not torch.isfinite(norm):
            raise _diverged(run, self.writer, "gradient norm", norm.item())
        self.opt.step()
        run.step += 1
        run.samples_seen += len(batch.tokens)
        run.loss = value

    def after_step(self, signals: _StopSignals) -> None:
        """The callbacks, the evaluation when one is due, a periodic save; a stop signal saves
        and raises :class:`TrainingInterrupted`."""
        run, cfg = self.run, self.cfg
        self.bar.update(1)
        if any([cb.on_step(run) for cb in self.callbacks]):
            run.stop_reason = run.stop_reason or "callback"
        if _eval_due(cfg, run.step):
            self.evaluate_now(signals)
        signal_name = _agree_on_stop(run, signals, self.world, run.device)
        if cfg.save_every and run.step % cfg.save_every == 0 and run.step < cfg.steps:
            self.writer.save()
        if signal_name and run.step < cfg.steps and not run.stop_reason:
            raise self.interrupted(signal_name)

    def evaluate_now(self, signals: _StopSignals) -> None:
        """The evaluation at ``run.step``: its record, then the callbacks' ``on_eval``. A stop
        during it raises :class:`EvaluationStopped` (one process: see ``run_evaluator``)."""
        run, cfg = self.run, self.cfg
        run.eval_pending = {"loss": run.loss}  # until its record is in the history
        record = {"step": run.step, "samples_seen": run.samples_seen,
                  "loss": run.loss, "lr": lr_at(cfg, run.step - 1),
                  "time_s": run.time_s(),
                  **run_evaluator(self.evaluator, self.model, run.task, cfg, run.device,
                                  self.world, stop=lambda: signals.stop)}
        if self.compiled is not None and self.compiled.fallback:  # the record says compile
            record["compile_fallback"] = self.compiled.fallback  # but it ran eager
        run.history.append(record)
        run.eval_pending = None
        self.bar.set_postfix({k: round(v, 4) for k, v in record.items()
                              if k in ("loss", "eval_loss", "string_acc", "char_acc")})
        if any([cb.on_eval(run, record) for cb in self.callbacks]):
            run.stop_reason = run.stop_reason or "callback"

    def interrupted(self, signal_name: str, during: str = "") -> TrainingInterrupted:
        """Save the run (a stop signal came) and return the exception to raise."""
        run, out = self.run, self.out
        self.bar.close()
        self.writer.save()
        where = (f"; checkpoint saved to {out} (continue with --resume {out}"
                 + ("; it evaluates this step first)" if during else ")")
                 if out is not None else "; no output path, nothing saved")
        if self.world.is_main:
            print(f"{signal_name}: interrupted at step {run.step}/{self.cfg.steps}{during}"
                  f"{where}", file=sys.stderr)
        return TrainingInterrupted(f"interrupted at step {run.step}")


def _eval_due(cfg: TrainConfig, step: int) -> bool:
    """Whether the loop evaluates after optimiser step ``step``: every ``eval_every`` steps and
    after the last."""
    return bool(cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps


def _pending_loss(resume) -> float:
    """The training loss of the step whose evaluation a stop abandoned, as the checkpoint kept
    it for the evaluation's record (NaN where it kept none)."""
    pending = read_checkpoint(resume)["train"].get("eval_pending")
    loss = pending.get("loss") if isinstance(pending, dict) else None
    return float(loss) if isinstance(loss, (int, float)) else math.nan


def _eval_missing(run: Run) -> bool:
    """Whether a resumed run stopped during the evaluation of its step: one is due there and the
    history has none (a stop between steps saves after the evaluation's record)."""
    last = run.history[-1].get("step") if run.history else None
    return run.step > 0 and _eval_due(run.run_config.train, run.step) and last != run.step


def _diverged(run: Run, writer: CheckpointWriter, what: str, value: float) -> TrainingDiverged:
    return TrainingDiverged(f"{what} is {value} at step {run.step + 1} "
                            f"(lr {lr_at(run.run_config.train, run.step):.3g}); training "
                            f"stopped and nothing was saved; {writer.kept()}")


def _agree_on_stop(run: Run, signals: _StopSignals, world: World, dev: torch.device) -> str:
    """The name of the signal that stops the run ("" for none). Under DDP every rank stops at
    the same step or none does: the ranks take the first signal any of them got, and a
    callback's stop on any rank stops them all."""
    if not world.active:
        return signals.signal_name
    signum, stop = distributed.all_max([signals.signum, bool(run.stop_reason)], dev)
    run.stop_reason = run.stop_reason or ("callback" if stop else "")
    return signal.Signals(signum).name if signum else ""
