"""Device names -> ``torch.device``, with one clear error for a device this machine lacks."""

from __future__ import annotations

import torch

from tasks.base import TaskError


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto`` -> cuda if available; a device that does not exist is a clear error."""
    if isinstance(name, torch.device):
        return name
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise TaskError(f"unknown device {name!r}; allowed: cpu, cuda, cuda:N, auto") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise TaskError(f"unsupported device {name!r}; allowed: cpu, cuda, cuda:N, auto")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TaskError(f"device {name!r} asked for, but CUDA is not available here; "
                        "use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise TaskError(f"device {name!r} does not exist: this machine has "
                        f"{torch.cuda.device_count()} CUDA device(s) (cuda:0..)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise TaskError(f"device {name!r} asked for, but MPS is not available here; "
                        "use --device cpu")
    return dev
