"""The training run's config and its learning-rate schedule (a pure function of the step, so a
resumed run needs no scheduler object). Below :mod:`models.train` and :mod:`models.checkpoint`:
a checkpoint's train section and a model's ``train_config`` are this, read without importing
the loop."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from seqprobe.config import check
from seqprobe.device import gpu_facts
from seqprobe.flags import (
    MAX_BATCH,
    MAX_EVAL_BATCHES,
    MAX_HORIZON,
    MAX_LR,
    MAX_STEPS,
    SEED_FIELD,
    STEPS_WHY,
    Config,
    bound,
)

# How a run uses its device. "auto" is resolved for the device the run trains on
# (:func:`resolve_train`) before the run starts and before its cache key is taken, so the
# checkpoint's record and the key hold what was used: a CPU run is never served as a CUDA run
# or the reverse. Each field's metadata "cpu" is its value on a CPU: the cache key leaves that
# value out (as it leaves out "auto"), so every CPU run keeps the key it had before "auto".
DEVICE_TYPES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class TrainConfig(Config):
    steps: int = field(default=1000, metadata=bound(1, MAX_STEPS, STEPS_WHY))
    batch_size: int = field(
        default=32, metadata=bound(1, MAX_BATCH, "rows per step; the suite's levels: 4 to 512"))
    lr: float = field(
        default=1e-3,
        metadata=bound(0.0, MAX_LR, "Adam's learning rate; papers: 1e-5 to 1e-2", open_lo=True))
    weight_decay: float = field(
        default=0.1, metadata=bound(0.0, 100.0, "AdamW's decay; papers: 0 to 0.1"))
    beta1: float = field(default=0.9, metadata=bound(0.0, 1.0, "Adam's beta1; must be < 1"))
    beta2: float = field(default=0.999, metadata=bound(0.0, 1.0, "Adam's beta2; must be < 1"))
    warmup_steps: int = field(default=100, metadata=bound(0, MAX_STEPS, STEPS_WHY))
    schedule: str = "linear"  # linear | cosine | constant (after warm-up)
    grad_clip: float = field(  # 0 disables clipping
        default=1.0, metadata=bound(0.0, 1e6, "a gradient norm; 0: no clipping; papers: 1"))
    context: int = field(  # > 0: pack i.i.d. examples into contexts of this many tokens (App. A.2)
        default=0, metadata=bound(0, MAX_HORIZON, "tokens of a packed context; paper: 420"))
    eval_every: int = field(  # 0: evaluate only at the end
        default=250, metadata=bound(0, MAX_STEPS, STEPS_WHY))
    # > 0: early stop, once an evaluation's string accuracy reaches this (training "until
    # convergence": ``steps`` is then the most the run may take); needs eval_every > 0
    stop_at: float = field(default=0.0, metadata=bound(0.0, 1.0, "a string accuracy"))
    eval_batches: int = field(
        default=4, metadata=bound(1, MAX_EVAL_BATCHES, "batches of one evaluation"))
    eval_batch_size: int = field(
        default=64, metadata=bound(1, MAX_BATCH, "rows per evaluation batch"))
    greedy_eval: bool = True  # False: string accuracy from one teacher-forced pass (exact)
    save_every: int = field(  # > 0: also checkpoint every this many steps (needs an output path)
        default=0, metadata=bound(0, MAX_STEPS, STEPS_WHY))
    seed: int = field(default=0, metadata=SEED_FIELD)
    # a checkpoint of the same arch and model config whose weights start the run (fine-tuning,
    # e.g. lookup from a copy model); "" = random init. The run's cache hash covers the file's
    # bytes, not its path, so a retrained init file gives a new run.
    init_from: str = field(default="", metadata={"content": "file"})  # hashed by its bytes
    # how the training forward runs; all three change the numbers (so they are in the
    # checkpoint's record and the cache hash), none the weights' or the optimizer's dtype
    # (fp32). "auto" (module comment): bf16 autocast and torch.compile on CUDA, fp32 eager
    # elsewhere; an explicit value wins. device_type: the kind of device the run trains on
    # (an explicit one refuses to train on another kind)
    device_type: str = field(default="auto", metadata={"cpu": "cpu"})
    # "bf16" runs the forward under torch.autocast (bfloat16 matmuls), "fp32" as it is
    precision: str = field(default="auto", metadata={"cpu": "fp32"})
    # True: torch.compile the training forward (evaluation runs uncompiled); "auto" or a bool
    compile: bool | str = field(default="auto", metadata={"cpu": False})
    # memory, not numbers (the same loss and gradients up to rounding, so neither is in the
    # cache key: metadata "hash" False): recompute each block's activations in the backward
    # pass instead of keeping them (torch.utils.checkpoint, every architecture), and run the
    # global batch as micro-batches of this many rows whose gradients add up to the whole
    # batch's (0: the whole batch at once)
    checkpoint_blocks: bool = field(default=False, metadata={"hash": False})
    micro_batch: int = field(
        default=0,
        metadata=bound(0, MAX_BATCH, "rows per micro-batch; 0: the whole batch", hash=False))

    def __post_init__(self):
        # the ranges (>= 1, >= 0, finite, lr > 0) are the fields' bounds, checked by Config
        check(not self.stop_at or self.eval_every,
              "stop_at needs eval_every > 0 (it stops at an evaluation)")
        check(self.beta1 < 1 and self.beta2 < 1, "beta1 and beta2 must be in [0, 1)")
        check(not self.micro_batch or self.batch_size % self.micro_batch == 0,
              f"batch_size {self.batch_size} must be a multiple of micro_batch "
              f"{self.micro_batch}: the global batch is split into equal micro-batches")
        check(self.precision in PRECISIONS,
              f"precision must be auto, fp32 or bf16, got {self.precision!r}")
        check(self.compile is True or self.compile is False or self.compile == "auto",
              f"compile must be true, false or auto, got {self.compile!r}")
        check(self.device_type in DEVICE_TYPES,
              f"device_type must be one of {', '.join(DEVICE_TYPES)}, got {self.device_type!r}")
        check(self.schedule in ("linear", "cosine", "constant"),
              f"schedule must be linear, cosine or constant, got {self.schedule!r}")


def resolve_train(cfg: TrainConfig, device: torch.device) -> TrainConfig:
    """``cfg`` as it runs on ``device``: every "auto" field set (CUDA: bf16 autocast where the
    card has bfloat16, and torch.compile; any other device: fp32, eager), ``device_type`` the
    device's kind. Explicit values are kept. Raises :class:`InputError` when ``cfg`` names
    another kind of device (a CUDA run's record resumed on a CPU, say): that would be another
    run under this one's name."""
    check(cfg.device_type in ("auto", device.type),
          f"this run is a {cfg.device_type} run (device_type {cfg.device_type}) and would train "
          f"on {device.type}; use --device {cfg.device_type}, or --device-type {device.type} "
          "for a run of its own")
    cuda = device.type == "cuda"
    precision = cfg.precision
    if precision == "auto":
        # asked without initialising CUDA here: a planning process resolves runs too, and one
        # that touched CUDA could not fork their jobs (seqprobe.device)
        precision = "bf16" if cuda and gpu_facts(device.index or 0)["bf16"] else "fp32"
    compile_ = cuda if cfg.compile == "auto" else cfg.compile
    return dataclasses.replace(cfg, device_type=device.type, precision=precision,
                               compile=compile_)


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
