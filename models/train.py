"""Train any suite model on any suite task: ``python -m models.train --task T --arch A``.

The loop is deliberately plain: AdamW, warm-up then linear / cosine decay (the learning rate is
a pure function of the step, so resuming needs no scheduler object), gradient clipping,
periodic evaluation on fresh examples (loss, and for generation tasks greedy string- and
character-level accuracy, copy paper §3.1), and a checkpoint in the format of
:mod:`models.checkpoint`. Every RNG the run touches is saved, so ``--resume`` continues a run
bit-identically on the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import random
import signal
import sys
import threading
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from models.checkpoint import (
    FORMAT,
    CheckpointError,
    check_writable,
    read_checkpoint,
    save_checkpoint,
)
from models.generation import evaluate_prompts
from models.presets import preset_overrides
from models.registry import ARCHS, build_model, model_class
from tasks.base import IGNORE, TaskError, check, config_from_dict, config_to_dict, make_generator
from tasks.registry import TASKS, make_task, packed_batch, task_class

EVAL_SEED_OFFSET = 1_000_003  # evaluation data never shares a stream with training data


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.999
    warmup_steps: int = 100
    schedule: str = "linear"  # linear | cosine | constant (after warm-up)
    grad_clip: float = 1.0  # 0 disables clipping
    context: int = 0  # > 0: pack i.i.d. examples into contexts of this many tokens (App. A.2)
    eval_every: int = 250  # 0: evaluate only at the end
    eval_batches: int = 4
    eval_batch_size: int = 64
    greedy_eval: bool = True  # False: string accuracy from one teacher-forced pass (exact)
    save_every: int = 0  # > 0: also checkpoint every this many steps (needs an output path)
    seed: int = 0
    # a checkpoint of the same arch and model config whose weights start the run (fine-tuning,
    # e.g. lookup from a copy model); "" = random init. The run's cache hash covers the file's
    # bytes, not its path, so a retrained init file gives a new run.
    init_from: str = ""

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_batches", "eval_batch_size"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "context", "eval_every", "save_every", "weight_decay",
                     "grad_clip"):
            check(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("lr", "weight_decay", "grad_clip", "beta1", "beta2"):
            value = getattr(self, name)
            check(math.isfinite(value), f"{name} must be finite, got {value}")
        check(self.lr > 0, f"lr must be > 0, got {self.lr}")
        check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "beta1 and beta2 must be in [0, 1)")
        check(self.schedule in ("linear", "cosine", "constant"),
              f"schedule must be linear, cosine or constant, got {self.schedule!r}")


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate for optimiser step ``step`` (0-based): linear warm-up, then the decay."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    frac = min(max(frac, 0.0), 1.0)
    if cfg.schedule == "linear":
        return cfg.lr * (1.0 - frac)
    if cfg.schedule == "cosine":
        return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * frac))
    return cfg.lr


class TrainingDiverged(RuntimeError):
    """The loss (or the gradient norm) became NaN or infinite."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped training between two steps; a checkpoint was saved (if there is an output)."""


def resolve_device(name: str) -> torch.device:
    from analyses.common import resolve_device as _resolve

    return _resolve(name)


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


# ---------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(model, task, cfg: TrainConfig, device: torch.device) -> dict[str, float]:
    """Loss on fresh batches and, for generation tasks, greedy string / char accuracy."""
    was_training = model.training
    model.eval()
    g = make_generator(cfg.seed + EVAL_SEED_OFFSET)  # the same fresh examples at every eval
    losses, strings, chars = [], [], []
    extra: dict[str, list[float]] = {}
    try:
        for _ in range(cfg.eval_batches):
            batch = task.batch(cfg.eval_batch_size, g).to(device)
            losses.append(loss_of(model, batch).item())
            if hasattr(task, "extra_metrics"):
                for k, v in task.extra_metrics(model, batch).items():
                    extra.setdefault(k, []).append(float(v))
            prompts = task.eval_batch(cfg.eval_batch_size, g)
            if prompts is not None:
                acc = evaluate_prompts(model, prompts.to(device), greedy=cfg.greedy_eval)
                strings.append(acc["string_acc"])
                chars.append(acc["char_acc"])
    finally:
        model.train(was_training)
    out = {"eval_loss": float(np.mean(losses))}
    if strings:
        out["string_acc"] = float(np.mean(strings))
        out["char_acc"] = float(np.mean(chars))
    out.update({k: float(np.mean(v)) for k, v in extra.items()})
    return out


def loss_of(model, batch) -> torch.Tensor:
    """Mean NLL over the target positions that are not ``IGNORE`` (the paper's loss mask)."""
    logp = model.log_probs(batch.tokens)
    return F.nll_loss(logp.reshape(-1, logp.shape[-1]), batch.targets.reshape(-1),
                      ignore_index=IGNORE)


# ---------------------------------------------------------------------------- the run
@dataclass
class RunSpec:
    """Everything that defines a run (all plain data)."""

    arch: str
    task: str
    model: dict[str, Any]
    task_config: dict[str, Any]
    train: TrainConfig

    def hash(self) -> str:
        train = config_to_dict(self.train)
        if self.train.init_from:
            train["init_from"] = file_digest(self.train.init_from)
        else:  # left out, so runs from random init keep the hashes they had before the field
            del train["init_from"]
        blob = json.dumps({"arch": self.arch, "task": self.task, "model": self.model,
                           "task_config": self.task_config, "train": train},
                          sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (first 16 hex digits)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def make_spec(arch: str, task: str, preset: str = "quick", model: dict | None = None,
              task_config: dict | None = None, train: dict | None = None) -> RunSpec:
    """Preset rows, then the task's derived model fields (vocab size…), then user overrides.
    With ``init_from``, the model config starts from that checkpoint's instead of the preset's
    (fine-tuning a checkpoint needs no model flags)."""
    if arch not in ARCHS:
        raise TaskError(f"unknown arch {arch!r}; allowed: {', '.join(sorted(ARCHS))}")
    if task not in TASKS:
        raise TaskError(f"unknown task {task!r}; allowed: {', '.join(sorted(TASKS))}")
    rows = preset_overrides(preset, task, arch)
    task_cfg = {**rows["task"], **(task_config or {})}
    task_obj = make_task(task, task_cfg)  # validates the task config
    train_cfg = config_from_dict(TrainConfig, {**rows["train"], **(train or {})})
    base = rows["model"]
    if train_cfg.init_from:
        init = _init_model_entry(train_cfg.init_from)
        base = init["config"] if init["arch"] == arch else base
    model_cfg = {**base, **model_fields_for(task_obj, arch), **(model or {})}
    spec = RunSpec(arch, task, model_cfg, config_to_dict(task_obj.cfg), train_cfg)
    validate_spec(spec)  # every config checked before any compute
    return spec


def validate_spec(spec: RunSpec) -> None:
    """Raise :class:`TaskError` unless the run can start: names, configs and their fit.

    Cheap (no training step); called by :func:`make_spec`, by ``--resume`` and by :func:`train`.
    """
    if spec.arch not in ARCHS:
        raise TaskError(f"unknown arch {spec.arch!r}; allowed: {', '.join(sorted(ARCHS))}")
    if spec.task not in TASKS:
        raise TaskError(f"unknown task {spec.task!r}; allowed: {', '.join(sorted(TASKS))}")
    check(isinstance(spec.train, TrainConfig), "spec.train must be a TrainConfig")
    task = make_task(spec.task, spec.task_config)
    build_model(spec.arch, spec.model)
    vocab = spec.model.get("vocab_size")
    if vocab is not None and hasattr(task, "vocab") and spec.model.get("head", "lm") == "lm":
        check(vocab >= task.vocab.size,
              f"vocab_size {vocab} is smaller than the {spec.task} task's vocabulary "
              f"({task.vocab.size} tokens)")
    if spec.train.init_from:
        _check_init(spec)
    if spec.train.context:
        check(spec.train.context >= task.max_example_len(),
              f"context {spec.train.context} is shorter than the longest {spec.task} example "
              f"({task.max_example_len()} tokens); use --context 0 (no packing) or >= "
              f"{task.max_example_len()}")


def _init_model_entry(path: str) -> dict:
    """The ``model`` entry (arch, config) of an ``init_from`` checkpoint. make_spec and
    validate_spec both ask: the file is read once per version of it (a paper-scale checkpoint
    is hundreds of MB), not once per question."""
    p = Path(path)
    if not p.is_file():
        return read_checkpoint(p)["model"]  # raises the clear error
    st = p.stat()
    return _model_entry(str(p.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _model_entry(path: str, mtime_ns: int, size: int) -> dict:
    # mtime and size only key the cache: a rewritten file is read again
    return read_checkpoint(path)["model"]


def _check_init(spec: RunSpec) -> None:
    """The ``init_from`` checkpoint must hold this run's arch and model config."""
    path = spec.train.init_from
    entry = _init_model_entry(path)
    arch = entry["arch"]
    check(arch == spec.arch, f"init_from {path} holds a {arch} model, not {spec.arch}")
    cls = model_class(arch).config_cls  # full configs: a default left out is not a difference
    config = config_to_dict(config_from_dict(cls, entry["config"]))
    ours = config_to_dict(config_from_dict(cls, spec.model))
    differ = sorted(k for k in set(config) | set(ours) if config.get(k) != ours.get(k))
    check(not differ, f"init_from {path}: its model config differs from this run's in "
          + ", ".join(f"{k} ({config.get(k)!r} vs {ours.get(k)!r})" for k in differ[:4]))


def model_fields_for(task, arch: str) -> dict[str, Any]:
    """Model config fields the task decides (vocabulary size, classification head…)."""
    fields = {f.name for f in dataclasses.fields(model_class(arch).config_cls)}
    wanted = (task.model_fields() if hasattr(task, "model_fields")
              else {"vocab_size": task.vocab.size})
    return {k: v for k, v in wanted.items() if k in fields}


class _StopFlag:
    """Ctrl-C sets a flag that the loop checks between steps, so a save is never half a step."""

    def __init__(self):
        self.stop = False
        self._old = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.stop:  # second Ctrl-C: give up at once
            raise KeyboardInterrupt
        self.stop = True

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def train(spec: RunSpec, out: str | Path | None = None, device: str = "auto",
          resume: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Run (or continue) training; returns the final checkpoint dict (also saved to ``out``).

    Everything is validated before the first step (configs, device, that ``out`` is writable,
    that ``resume`` holds this run). Ctrl-C stops between two steps, saves and raises
    :class:`TrainingInterrupted`. Raises :class:`TrainingDiverged` on a non-finite loss or
    gradient norm without saving, so the last good checkpoint on disk is kept.
    """
    validate_spec(spec)
    dev = resolve_device(device)
    if out is not None:
        check_writable(out)
    cfg = spec.train
    task = make_task(spec.task, spec.task_config)
    data_gen = make_generator(cfg.seed)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed % 2**32)
    model = build_model(spec.arch, spec.model)
    if cfg.init_from and resume is None:  # validate_spec checked its arch and config
        model.load_state_dict(read_checkpoint(cfg.init_from)["state_dict"])
    model = model.to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))
    step, samples_seen, history, elapsed = 0, 0, [], 0.0
    last_good: tuple[Path, int] | None = None  # (file, step) of the newest sound checkpoint
    if resume is not None:
        step, samples_seen, history, elapsed = _restore(spec, resume, model, opt, data_gen, dev)
        last_good = (Path(resume), step)

    def checkpoint() -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": {"arch": spec.arch, "config": dict(spec.model)},
            "task": {"name": spec.task, "config": dict(spec.task_config)},
            "train": {"config": config_to_dict(cfg), "seed": cfg.seed, "step": step,
                      "samples_seen": samples_seen, "rng": rng_state(data_gen),
                      "time_s": round(elapsed + time.time() - t0, 2)},
            "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "optimizer": opt.state_dict(),
            "history": history,
        }

    def save():
        nonlocal last_good
        if out is not None:
            save_checkpoint(checkpoint(), out)
            last_good = (Path(out), step)

    def diverged(what: str, value: float) -> TrainingDiverged:
        kept = (f"last good checkpoint: {last_good[0]} (step {last_good[1]})" if last_good else
                "no checkpoint was written by this run (--save-every N keeps intermediate ones)")
        return TrainingDiverged(f"{what} is {value} at step {step + 1} "
                                f"(lr {lr_at(cfg, step):.3g}); training stopped and nothing was "
                                f"saved; {kept}")

    model.train()
    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, desc=f"{spec.arch}/{spec.task}",
               dynamic_ncols=True, leave=False)
    t0 = time.time()
    # without clipping, an infinite max_norm measures the norm and scales by exactly 1.0
    clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
    try:
        with _StopFlag() as flag:
            while step < cfg.steps:
                batch = (packed_batch(task, cfg.batch_size, cfg.context, data_gen) if cfg.context
                         else task.batch(cfg.batch_size, data_gen)).to(dev)
                for group in opt.param_groups:
                    group["lr"] = lr_at(cfg, step)
                loss = loss_of(model, batch)
                if not torch.isfinite(loss):
                    raise diverged("loss", loss.item())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                # a finite loss can still give inf gradients; stepping on them would write NaN
                # weights that the next save would keep as "good"
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                if not torch.isfinite(norm):
                    raise diverged("gradient norm", norm.item())
                opt.step()
                step += 1
                samples_seen += cfg.batch_size
                bar.update(1)
                if (cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps:
                    last = {"step": step, "samples_seen": samples_seen, "loss": loss.item(),
                            "lr": lr_at(cfg, step - 1),
                            "time_s": round(elapsed + time.time() - t0, 2),
                            **evaluate(model, task, cfg, dev)}
                    history.append(last)
                    bar.set_postfix({k: round(v, 4) for k, v in last.items()
                                     if k in ("loss", "eval_loss", "string_acc", "char_acc")})
                if cfg.save_every and step % cfg.save_every == 0 and step < cfg.steps:
                    save()
                if flag.stop and step < cfg.steps:
                    bar.close()
                    save()
                    where = (f"; checkpoint saved to {out} (continue with --resume {out})"
                             if out is not None else "; no output path, nothing saved")
                    print(f"interrupted at step {step}/{cfg.steps}{where}", file=sys.stderr)
                    raise TrainingInterrupted(f"interrupted at step {step}")
    finally:
        bar.close()
    ck = checkpoint()
    if out is not None:
        save_checkpoint(ck, out)
    return ck


def check_resumable(ck: dict, model, path) -> None:
    """Raise :class:`CheckpointError` unless ``ck`` holds a run state that ``model`` can take."""
    from models.checkpoint import _state_dict_mismatch

    missing = [k for k in ("config", "step", "samples_seen", "rng") if k not in ck["train"]]
    if missing:
        raise CheckpointError(f"{path}: cannot resume: the train entry lacks {missing} "
                              "(not saved by models.train)")
    mismatch = _state_dict_mismatch(model, ck["state_dict"])
    if mismatch:
        raise CheckpointError(f"{path}: weights do not match the model config: {mismatch}")


def _restore(spec: RunSpec, resume, model, opt, data_gen, dev) -> tuple[int, int, list, float]:
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


def train_cached(arch: str, task: str, preset: str = "quick", cache_dir: str | Path = "checkpoints",
                 model: dict | None = None, task_config: dict | None = None,
                 train_overrides: dict | None = None, device: str = "auto",
                 progress: bool = True) -> Path:
    """Train once per distinct config and reuse: ``cache_dir/{arch}-{task}-{hash}.pt``.

    A lock file beside the entry makes a second process that asks for the same checkpoint
    (two analyses run side by side) wait for the first and reuse it, not train it again."""
    from filelock import FileLock

    spec = make_spec(arch, task, preset, model, task_config, train_overrides)
    path = Path(cache_dir) / f"{arch}-{task}-{spec.hash()}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.exists():
            try:
                read_checkpoint(path)
                return path
            except CheckpointError:
                pass  # a broken cache entry is retrained, never trusted
        train(spec, out=path, device=device, progress=progress)
    return path


# ---------------------------------------------------------------------------- command line
ALIASES = {"layers": "n_layers", "heads": "n_heads", "lr": "lr"}


def _field_type(cls, name: str):
    return typing.get_type_hints(cls)[name]


def _parse_value(text: str, tp, flag: str):
    origin = typing.get_origin(tp)
    try:
        if tp is bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if origin is tuple:
            inner = typing.get_args(tp)[0]
            return tuple(inner(v) for v in text.split(",") if v.strip() != "")
        if tp in (int, float, str):
            return tp(text)
    except ValueError:
        pass
    else:
        return text
    raise TaskError(f"{flag}: cannot read {text!r} as {getattr(tp, '__name__', tp)}")


def build_parser(arch: str | None, task: str | None) -> tuple[argparse.ArgumentParser, dict]:
    p = _OneLineParser(
        prog="python -m models.train",
        description="Train a suite model on a synthetic task and write a checkpoint. Every field "
        "of the model, task and training configs is a flag (shown below once --arch and --task "
        "are given).")
    p.add_argument("--task", default="copy", help=f"one of: {', '.join(sorted(TASKS))}")
    p.add_argument("--arch", default="transformer", help=f"one of: {', '.join(sorted(ARCHS))}")
    p.add_argument("--preset", default="quick", choices=["quick", "paper"])
    p.add_argument("--out", default=None, help="checkpoint path (.pt)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--resume", default=None, help="continue the run saved in this checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    owners: dict[str, tuple[str, str, Any]] = {}  # dest -> (part, field, type)
    parts = [("train", TrainConfig)]
    if arch in ARCHS:
        parts.append(("model", model_class(arch).config_cls))
    if task in TASKS:
        parts.append(("task", task_class(task).config_cls))
    seen: dict[str, int] = {}
    for _, cls in parts:
        for f in dataclasses.fields(cls):
            seen[f.name] = seen.get(f.name, 0) + 1
    for part, cls in parts:
        group = p.add_argument_group(f"{part} config ({cls.__name__})")
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            tp = _field_type(cls, f.name)
            flags = [f"--{part}.{f.name}"]
            reserved = ("task", "arch", "preset", "out", "device", "resume")
            if seen[f.name] == 1 and f.name not in reserved:
                flags = [f"--{f.name}", f"--{f.name.replace('_', '-')}", *flags]
                flags += [f"--{a}" for a, target in ALIASES.items()
                          if target == f.name and a != f.name]
            dest = f"{part}__{f.name}"
            owners[dest] = (part, f.name, tp)
            group.add_argument(*dict.fromkeys(flags), dest=dest, default=None, metavar="V",
                               help=f"{getattr(tp, '__name__', tp)} (default {f.default!r})")
    return p, owners


class _OneLineParser(argparse.ArgumentParser):
    """A bad flag is one stderr line and exit code 2, not the whole usage block."""

    def error(self, message: str):
        raise TaskError(f"{message}; see `{self.prog} --help` for the flags")


def main(argv: list[str] | None = None) -> int:
    """The ``python -m models.train`` command. Exit codes: 0 done, 2 bad input (one line on
    stderr, nothing computed), 3 training diverged, 130 interrupted (Ctrl-C)."""
    argv = sys.argv[1:] if argv is None else argv
    pre = _OneLineParser(prog="python -m models.train", add_help=False)
    pre.add_argument("--task", default=None)
    pre.add_argument("--arch", default=None)
    pre.add_argument("--resume", default=None)
    try:
        known, _ = pre.parse_known_args(argv)
        arch, task = known.arch or "transformer", known.task or "copy"
        if known.resume:  # the checkpoint says what is being trained
            ck = read_checkpoint(known.resume)
            arch, task = ck["model"]["arch"], ck["task"]["name"]
            for flag, given, saved in (("--arch", known.arch, arch), ("--task", known.task, task)):
                if given is not None and given != saved:
                    raise TaskError(f"{flag} {given} conflicts with {known.resume}, which holds "
                                    f"a {arch} model trained on {task}; drop {flag} to resume")
        # names first, so an unknown one is reported as such (not as unknown per-field flags)
        if arch not in ARCHS:
            raise TaskError(f"unknown arch {arch!r}; allowed: {', '.join(sorted(ARCHS))}")
        if task not in TASKS:
            raise TaskError(f"unknown task {task!r}; allowed: {', '.join(sorted(TASKS))}")
        parser, owners = build_parser(arch, task)
        args = parser.parse_args(argv)
        given: dict[str, dict[str, Any]] = {"model": {}, "task": {}, "train": {}}
        for dest, (part, name, tp) in owners.items():
            value = getattr(args, dest)
            if value is not None:
                given[part][name] = _parse_value(value, tp, f"--{name}")
        resolve_device(args.device)
        if args.resume:
            spec = RunSpec(arch, task, {**ck["model"]["config"], **given["model"]},
                           {**ck["task"]["config"], **given["task"]},
                           config_from_dict(TrainConfig, {**ck["train"].get("config", {}),
                                                          **given["train"]}))
            validate_spec(spec)
            out = args.out or args.resume
        else:
            spec = make_spec(arch, task, args.preset, given["model"], given["task"], given["train"])
            out = args.out
        if out is None:
            raise TaskError("--out is required (where to write the checkpoint)")
        check_writable(out)
        model = build_model(spec.arch, spec.model)
        if args.resume:
            check_resumable(ck, model, args.resume)
        n_params = model.n_params()
        del model
        print(f"training {spec.arch} ({n_params:,} parameters) on {spec.task} for "
              f"{spec.train.steps} steps -> {out}", file=sys.stderr)
        ck = train(spec, out=out, device=args.device, resume=args.resume,
                   progress=not args.no_progress)
    except TrainingDiverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except TrainingInterrupted:
        return 130  # train() said where the checkpoint is
    except KeyboardInterrupt:
        print("interrupted; no checkpoint was saved by this run (any earlier file is intact)",
              file=sys.stderr)
        return 130
    except TaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    last = ck["history"][-1] if ck["history"] else {}
    summary = ", ".join(f"{k}={v:.4g}" for k, v in last.items() if isinstance(v, float))
    print(f"done: step {ck['train']['step']}, samples {ck['train']['samples_seen']}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
