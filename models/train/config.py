"""The training run's config and its learning-rate schedule (a pure function of the step, so a
resumed run needs no scheduler object)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tasks.base import check


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
    # > 0: early stop, once an evaluation's string accuracy reaches this (training "until
    # convergence": ``steps`` is then the most the run may take); needs eval_every > 0
    stop_at: float = 0.0
    eval_batches: int = 4
    eval_batch_size: int = 64
    greedy_eval: bool = True  # False: string accuracy from one teacher-forced pass (exact)
    save_every: int = 0  # > 0: also checkpoint every this many steps (needs an output path)
    seed: int = 0
    # a checkpoint of the same arch and model config whose weights start the run (fine-tuning,
    # e.g. lookup from a copy model); "" = random init. The run's cache hash covers the file's
    # bytes, not its path, so a retrained init file gives a new run.
    init_from: str = field(default="", metadata={"content": "file"})  # hashed by its bytes
    # how the training forward runs; both change the numbers (so they are in the checkpoint's
    # record and the cache hash), neither the weights' or the optimizer's dtype (fp32):
    # "bf16" runs it under torch.autocast (bfloat16 matmuls), "fp32" as it is
    precision: str = "fp32"
    compile: bool = False  # torch.compile the training forward (evaluation runs uncompiled)

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
        check(0 <= self.stop_at <= 1, f"stop_at must be in [0, 1], got {self.stop_at}")
        check(not self.stop_at or self.eval_every,
              "stop_at needs eval_every > 0 (it stops at an evaluation)")
        check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "beta1 and beta2 must be in [0, 1)")
        check(self.precision in ("fp32", "bf16"),
              f"precision must be fp32 or bf16, got {self.precision!r}")
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
