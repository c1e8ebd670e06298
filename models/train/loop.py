"""The one training loop of the suite.

Deliberately plain: AdamW (no weight decay on biases and gains), the schedule of
:func:`~models.train.config.lr_at`, gradient clipping, periodic evaluation, and checkpoints in
the format of :mod:`models.checkpoint`. What varies between uses goes through arguments, not
copies of the loop: ``evaluate`` (what an evaluation measures) and ``callbacks`` (early stop,
per-step metrics; see :class:`Callback`; ``TrainConfig.stop_at`` is :class:`StopAt`). Every
RNG the run touches is saved, so ``--resume`` continues a run bit-identically on the CPU.
Ctrl-C and SIGTERM (what ``timeout``, Docker, Kubernetes and SLURM send before a kill) stop
between two steps and save.

Under ``torchrun`` the same loop runs DistributedDataParallel (:mod:`models.train.distributed`:
how the global batch is split and why the weights equal a single process's): every rank agrees
each step on whether to stop, evaluation is split over the ranks and gathered, and rank 0 alone
writes checkpoints. ``precision="bf16"`` runs the training forward under ``torch.autocast`` and
``compile=True`` through ``torch.compile``; weights, optimizer state and evaluation stay fp32.
"""

from __future__ import annotations

import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from models.checkpoint import (
    CheckpointError,
    SaveError,
    check_writable,
    exclusive_writer,
    make_checkpoint,
    read_checkpoint,
    resume_digest,
    save_checkpoint,
    state_dict_mismatch,
)
from models.device import resolve_device
from models.generation import evaluate_prompts
from models.registry import build_model
from models.train import distributed
from models.train.config import TrainConfig, lr_at
from models.train.distributed import World
from models.train.spec import RunSpec, check_run_size, validate_spec
from tasks.base import IGNORE, Batch, TaskError, check, config_to_dict, make_generator
from tasks.errors import RunError
from tasks.registry import make_task, packed_batch

EVAL_SEED_OFFSET = 1_000_003  # evaluation data never shares a stream with training data


class TrainingDiverged(RunError):
    """The loss (or the gradient norm) became NaN or infinite."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped training between two steps; a checkpoint was saved (if there
    is an output)."""


@dataclass
class Run:
    """The state of a run that callbacks see (and may read the model of)."""

    spec: RunSpec
    model: torch.nn.Module
    task: Any
    device: torch.device
    step: int = 0
    samples_seen: int = 0
    loss: float = math.nan
    history: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = ""  # set by a callback that ends the run early


class Callback:
    """Hooks of the loop; each returns True to end the run (after this step), else None.

    ``on_step`` runs after every optimiser step, ``on_eval`` after each evaluation with the
    record just appended to ``run.history``.
    """

    def on_step(self, run: Run) -> bool | None:
        return None

    def on_eval(self, run: Run, record: dict[str, Any]) -> bool | None:
        return None


class StopAt(Callback):
    """``TrainConfig.stop_at``: end the run at the first evaluation whose string accuracy
    reaches ``level``; the reason (and so the step it stopped at) goes in the checkpoint."""

    def __init__(self, level: float):
        self.level = level

    def on_eval(self, run: Run, record: dict[str, Any]) -> bool | None:
        check("string_acc" in record, f"stop_at: the {run.spec.task} task's evaluation has no "
              "string accuracy to stop on")
        if record["string_acc"] >= self.level:
            run.stop_reason = (f"stop_at: string_acc {record['string_acc']:.4g} >= "
                               f"{self.level:g} at step {run.step}")
            return True
        return None


# ---------------------------------------------------------------------------- RNG state
def rng_state(data_gen: torch.Generator) -> dict[str, Any]:
    """Every RNG the run reads, as tensors / plain data (torch.load weights_only-safe)."""
    np_state = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    return {
        "data": data_gen.get_state(),
        "torch": torch.get_rng_state(),
        "numpy": {"key": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": {"version": py_version, "internal": torch.tensor(py_internal, dtype=torch.int64),
                   "gauss": py_gauss},
        # CUDA generators (dropout-like randomness on a GPU); only when this run started CUDA
        "cuda": (torch.cuda.get_rng_state_all()
                 if torch.cuda.is_available() and torch.cuda.is_initialized() else []),
    }


def set_rng_state(state: dict[str, Any], data_gen: torch.Generator) -> None:
    data_gen.set_state(state["data"])
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["internal"].tolist()), p["gauss"]))
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


# ---------------------------------------------------------------------------- loss and eval
def loss_of(model, batch: Batch) -> torch.Tensor:
    """Mean NLL over the target positions that are not ``IGNORE`` (the paper's loss mask)."""
    logp = model.log_probs(batch.tokens)
    return F.nll_loss(logp.reshape(-1, logp.shape[-1]), batch.targets.reshape(-1),
                      ignore_index=IGNORE)


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


@torch.no_grad()
def evaluate(model, task, cfg: TrainConfig, device: torch.device,
             world: World = distributed.SINGLE) -> dict[str, float]:
    """Loss on fresh batches; for generation tasks greedy string / char accuracy; for tasks
    with a Bayes-optimal predictor the gap to it; and a task's own ``extra_metrics``.

    The global RNGs (torch, numpy, python) are left as they were: evaluating must not change
    the training run, whatever the code it calls draws (a runtime type checker such as beartype
    draws from python's ``random`` to sample the items it checks).

    With the ``world`` of a DDP run (every rank calls it), every rank draws every evaluation
    batch (one stream, as in a single process) and scores every ``size``-th one; the per-batch
    scores are gathered and averaged in batch order, so the record is the single-process one
    and every rank gets it."""
    was_training = model.training
    model.eval()
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    g = make_generator(cfg.seed + EVAL_SEED_OFFSET)  # the same fresh examples at every eval
    scored: list[tuple[int, dict[str, float]]] = []  # (batch index, its scores) of this rank
    try:
        for i in range(cfg.eval_batches):
            batch = task.batch(cfg.eval_batch_size, g)
            prompts = task.eval_batch(cfg.eval_batch_size, g)
            if i % world.size != world.rank:
                continue
            batch = batch.to(device)
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
            scored.append((i, scores))
    finally:
        model.train(was_training)
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
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


Evaluator = Callable[[torch.nn.Module, Any, TrainConfig, torch.device], dict[str, float]]


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


class _StopSignals:
    """Ctrl-C and SIGTERM set a flag that the loop checks between steps, so a save is never
    half a step; a second signal gives up at once."""

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


# ---------------------------------------------------------------------------- the run
def _optimizer(model, cfg: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases and norm gains
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def rescue_dirs() -> list[Path]:
    """Where a checkpoint goes when its own directory cannot take it (disk full, a directory
    that went away): the system's temp directory, then the user's cache."""
    dirs = [Path(tempfile.gettempdir())]
    try:
        dirs.append(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "seqprobe")
    except RuntimeError:  # no home directory
        pass
    return dirs


def _rescue(ck: dict[str, Any], out: Path) -> Path | None:
    """Save ``ck`` under ``out``'s name in the first :func:`rescue_dirs` entry that takes it
    (never over an existing file); None when none does."""
    for d in rescue_dirs():
        try:
            if d.resolve() == out.parent.resolve():
                continue
            target = d / out.name
            if target.exists():
                target = d / f"{out.stem}.{os.getpid()}{out.suffix}"
            if target.exists():
                continue
            return save_checkpoint(ck, target)
        except (CheckpointError, OSError):
            continue
    return None


def train(spec: RunSpec, out: str | Path | None = None, device: str = "auto",
          resume: str | Path | None = None, progress: bool = True,
          callbacks: Sequence[Callback] = (), evaluator: Evaluator = evaluate) -> dict[str, Any]:
    """Run (or continue) training; returns the final checkpoint dict (also saved to ``out``).

    Everything is validated before the first step (configs, sizes against the device's memory,
    device, that ``out`` is writable, that ``resume`` holds this run). ``out`` is locked for the
    whole run, so a second live writer of the same file is refused. Ctrl-C or SIGTERM stops
    between two steps, saves and raises :class:`TrainingInterrupted`. Raises
    :class:`TrainingDiverged` on a non-finite loss or gradient norm without saving, so the last
    good checkpoint on disk is kept. A save that fails (disk full) puts the run's state in a
    :func:`rescue_dirs` directory and raises :class:`~models.checkpoint.SaveError` saying where.
    """
    validate_spec(spec)
    dev = distributed.rank_device(resolve_device(device))
    world = distributed.world()
    check(spec.train.batch_size >= world.size,
          f"batch_size {spec.train.batch_size} is smaller than the {world.size} processes of "
          "this job: each process trains on a slice of the global batch")
    _check_precision(spec.train, dev)
    if out is None or not world.is_main:  # under DDP only rank 0 writes
        world = distributed.process_group(dev)
        return _train(spec, None, dev, resume, progress, callbacks, evaluator, world)
    out = check_writable(out)
    with exclusive_writer(out):
        world = distributed.process_group(dev)
        return _train(spec, out, dev, resume, progress, callbacks, evaluator, world)


def _check_precision(cfg: TrainConfig, dev: torch.device) -> None:
    if cfg.precision == "bf16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise TaskError(f"precision bf16: {torch.cuda.get_device_name(dev)} has no bfloat16; "
                        "use --precision fp32")


class _LogProbs(torch.nn.Module):
    """A model's ``log_probs`` as its ``forward``: DDP synchronises gradients, and
    ``torch.compile`` traces, through a module's forward call only."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.log_probs(tokens)


def _shard_loss(step_model, batch: Batch, world: World) -> tuple[torch.Tensor, float]:
    """``(loss to backpropagate, the global batch's mean loss)`` of this rank's slice.

    The slice's summed NLL over the global batch's target count, times the world size: DDP
    averages the ranks' gradients, so the sum is the gradient of the single-process loss. A rank
    left without rows (the last, short batch of an epoch) runs one row at weight 0, so every
    parameter still gets its (zero) gradient from this rank."""
    count = int((batch.targets != IGNORE).sum())
    lo, hi = distributed.shard_bounds(len(batch.tokens), world)
    weight = world.size / count if count else math.nan
    if lo == hi:
        lo, hi, weight = 0, 1, 0.0
    logp = step_model(batch.tokens[lo:hi])  # [rows, pos, vocab]
    nll = F.nll_loss(logp.reshape(-1, logp.shape[-1]), batch.targets[lo:hi].reshape(-1),
                     ignore_index=IGNORE, reduction="sum")
    (total,) = distributed.all_sum([nll.item() if weight else 0.0], batch.tokens.device)
    return nll * weight, (total / count if count else math.nan)


def _train(spec: RunSpec, out: Path | None, dev: torch.device, resume, progress: bool,
           callbacks: Sequence[Callback], evaluator: Evaluator,
           world: World = distributed.SINGLE) -> dict[str, Any]:
    cfg = spec.train
    if cfg.stop_at:
        callbacks = [*callbacks, StopAt(cfg.stop_at)]
    task = make_task(spec.task, spec.task_config)
    if dev.type != "cpu":  # validate_spec checked the host's memory
        check_run_size(spec, task, dev)
    data_gen = make_generator(cfg.seed)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed % 2**32)
    model = build_model(spec.arch, spec.model)
    if cfg.init_from and resume is None:  # validate_spec checked its arch and config
        model.load_state_dict(read_checkpoint(cfg.init_from)["state_dict"])
    model = model.to(dev)
    opt = _optimizer(model, cfg)
    run = Run(spec, model, task, dev)
    elapsed = 0.0
    last_good: tuple[Path, int] | None = None  # (file, step) of the newest sound checkpoint
    if resume is not None:
        run.step, run.samples_seen, run.history, elapsed = _restore(spec, resume, model, opt,
                                                                    data_gen)
        last_good = (Path(resume), run.step)
    # the module the training forward runs through: the model itself, or (DDP, compile) a
    # wrapper whose forward is its log_probs; evaluation and checkpoints use the model
    step_model: torch.nn.Module | None = None
    if world.active:  # after the restore: DDP starts from rank 0's weights (all loaded one file)
        step_model = DistributedDataParallel(
            _LogProbs(model), device_ids=[dev.index] if dev.type == "cuda" else None)
    elif cfg.compile:
        step_model = _LogProbs(model)
    if cfg.compile:
        step_model = torch.compile(step_model)
    autocast = (torch.autocast(dev.type, dtype=torch.bfloat16) if cfg.precision == "bf16"
                else nullcontext())
    t0 = time.time()

    def checkpoint() -> dict[str, Any]:
        train_meta = {"config": config_to_dict(cfg), "seed": cfg.seed, "step": run.step,
                      "samples_seen": run.samples_seen, "rng": rng_state(data_gen),
                      "time_s": round(elapsed + time.time() - t0, 2), "world_size": world.size,
                      **({"stop": run.stop_reason} if run.stop_reason else {})}
        return make_checkpoint(spec.arch, spec.model, spec.task, spec.task_config, train_meta,
                               model.state_dict(), run.history, opt.state_dict())

    def kept() -> str:
        return (f"last good checkpoint: {last_good[0]} (step {last_good[1]})" if last_good else
                "no checkpoint was written by this run (--save-every N keeps intermediate ones)")

    def save(ck: dict[str, Any] | None = None) -> dict[str, Any]:
        nonlocal last_good
        ck = checkpoint() if ck is None else ck
        if out is None:
            return ck
        try:
            save_checkpoint(ck, out)
        except CheckpointError as e:  # disk full, a directory gone: the weights are not lost
            rescued = _rescue(ck, out)
            where = (f"this run's state at step {run.step} was saved to {rescued} instead "
                     f"(continue with --resume {rescued})" if rescued else
                     f"no other place took it either ({', '.join(map(str, rescue_dirs()))}); "
                     + kept())
            raise SaveError(f"{e}; {where}", getattr(e, "reason", "")) from None
        last_good = (out, run.step)
        return ck

    def save_all(final: bool = False) -> dict[str, Any] | None:
        """:func:`save` on rank 0 (others build the dict only for the value ``train`` returns)
        and, under DDP, every rank waits for it and learns whether it worked, so none leaves
        while rank 0 writes (a launcher tears down the rest when one process exits)."""
        if not world.active:
            return save()
        ck, failed = None, None
        try:
            ck = save() if world.is_main or final else None
        except SaveError as e:
            failed = e
        word = distributed.broadcast(str(failed) if failed else "", world)
        if failed is not None:
            raise failed
        if word:
            raise SaveError(f"rank 0: {word}")
        return ck

    def run_evaluator() -> dict[str, float]:
        if not world.active:
            return evaluator(model, task, cfg, dev)
        if getattr(evaluator, "shards_over_ranks", False):
            return evaluator(model, task, cfg, dev, world=world)
        # an evaluator that knows nothing of ranks runs once, on rank 0
        return distributed.broadcast(evaluator(model, task, cfg, dev) if world.is_main else None,
                                     world)

    def diverged(what: str, value: float) -> TrainingDiverged:
        return TrainingDiverged(f"{what} is {value} at step {run.step + 1} "
                                f"(lr {lr_at(cfg, run.step):.3g}); training stopped and nothing "
                                f"was saved; {kept()}")

    model.train()
    bar = tqdm(total=cfg.steps, initial=run.step, disable=not progress or not world.is_main,
               desc=f"{spec.arch}/{spec.task}", dynamic_ncols=True, leave=False)
    # without clipping, an infinite max_norm measures the norm and scales by exactly 1.0
    clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
    data = batches(task, cfg, data_gen, dev)
    try:
        with _StopSignals() as signals:
            while run.step < cfg.steps and not run.stop_reason:
                batch = next(data)
                for group in opt.param_groups:
                    group["lr"] = lr_at(cfg, run.step)
                with autocast:
                    if world.active:
                        loss, loss_value = _shard_loss(step_model, batch, world)
                    elif step_model is not None:
                        logp = step_model(batch.tokens)
                        loss = F.nll_loss(logp.reshape(-1, logp.shape[-1]),
                                          batch.targets.reshape(-1), ignore_index=IGNORE)
                    else:
                        loss = loss_of(model, batch)
                if not world.active:
                    loss_value = loss.item()
                if not math.isfinite(loss_value):
                    raise diverged("loss", loss_value)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                # a finite loss can still give inf gradients; stepping on them would write NaN
                # weights that the next save would keep as "good"
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                if not torch.isfinite(norm):
                    raise diverged("gradient norm", norm.item())
                opt.step()
                run.step += 1
                run.samples_seen += len(batch.tokens)
                run.loss = loss_value
                bar.update(1)
                if any([cb.on_step(run) for cb in callbacks]):
                    run.stop_reason = run.stop_reason or "callback"
                if (cfg.eval_every and run.step % cfg.eval_every == 0) or run.step == cfg.steps:
                    record = {"step": run.step, "samples_seen": run.samples_seen,
                              "loss": run.loss, "lr": lr_at(cfg, run.step - 1),
                              "time_s": round(elapsed + time.time() - t0, 2),
                              **run_evaluator()}
                    run.history.append(record)
                    bar.set_postfix({k: round(v, 4) for k, v in record.items()
                                     if k in ("loss", "eval_loss", "string_acc", "char_acc")})
                    if any([cb.on_eval(run, record) for cb in callbacks]):
                        run.stop_reason = run.stop_reason or "callback"
                signal_name = signals.signal_name
                if world.active:  # every rank stops at the same step, or none does
                    signum, stop = distributed.all_max([signals.signum, bool(run.stop_reason)],
                                                       dev)
                    run.stop_reason = run.stop_reason or ("callback" if stop else "")
                    signal_name = signal.Signals(signum).name if signum else ""
                if cfg.save_every and run.step % cfg.save_every == 0 and run.step < cfg.steps:
                    save_all()
                if signal_name and run.step < cfg.steps and not run.stop_reason:
                    bar.close()
                    save_all()
                    where = (f"; checkpoint saved to {out} (continue with --resume {out})"
                             if out is not None else "; no output path, nothing saved")
                    if world.is_main:
                        print(f"{signal_name}: interrupted at step {run.step}/{cfg.steps}"
                              f"{where}", file=sys.stderr)
                    raise TrainingInterrupted(f"interrupted at step {run.step}")
            # the final save is inside the handler too: a SIGTERM now lets it finish
            return save_all(final=True)
    finally:
        bar.close()


def check_resumable(ck: dict, model, path) -> None:
    """Raise :class:`CheckpointError` unless ``ck`` holds a run state that ``model`` can take."""
    missing = [k for k in ("config", "step", "samples_seen", "rng") if k not in ck["train"]]
    if missing:
        raise CheckpointError(f"{path}: cannot resume: the train entry lacks {missing} "
                              "(not saved by models.train)")
    stored = ck.get("resume_digest")  # absent in checkpoints written before it existed
    if stored is not None and stored != resume_digest(ck):
        raise CheckpointError(f"{path}: corrupt: its RNG or optimizer state does not match the "
                              "digest stored with it; cannot resume from it")
    mismatch = state_dict_mismatch(model, ck["state_dict"])
    if mismatch:
        raise CheckpointError(f"{path}: weights do not match the model config: {mismatch}")


def _restore(spec: RunSpec, resume, model, opt, data_gen) -> tuple[int, int, list, float]:
    """Load a run's state from ``resume`` into the model, optimizer and every RNG."""
    ck = read_checkpoint(resume)
    if (ck["model"]["arch"], ck["task"]["name"]) != (spec.arch, spec.task):
        raise CheckpointError(
            f"{resume}: holds a {ck['model']['arch']} model trained on {ck['task']['name']}, "
            f"not {spec.arch} on {spec.task}")
    tr = ck["train"]
    check_resumable(ck, model, resume)
    try:
        model.load_state_dict(ck["state_dict"])
        if "optimizer" in ck:
            opt.load_state_dict(ck["optimizer"])  # torch moves the state to the params' device
        set_rng_state(tr["rng"], data_gen)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as e:
        detail = str(e).splitlines()[0][:160] if str(e) else ""
        raise CheckpointError(f"{resume}: cannot resume from this file "
                              f"({type(e).__name__}: {detail})") from None
    time_s = tr.get("time_s", ck["history"][-1].get("time_s", 0.0) if ck["history"] else 0.0)
    return tr["step"], tr["samples_seen"], list(ck["history"]), float(time_s or 0.0)
