"""Device names -> ``torch.device``, with one clear error for a device this machine lacks, and the
memory a device has (size checks refuse a model that cannot fit before anything is allocated)."""

from __future__ import annotations

import os

import torch

from seqprobe.errors import InputError
from seqprobe.memory import (
    address_space_headroom,
    human_bytes,  # noqa: F401 - imported from here by models.*
)


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto`` -> cuda if available; a device that does not exist is a clear error."""
    if isinstance(name, torch.device):
        return name
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise InputError(f"unknown device {name!r}; allowed: cpu, cuda, cuda:N, auto") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"unsupported device {name!r}; allowed: cpu, cuda, cuda:N, auto")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {name!r} asked for, but CUDA is not available here; "
                        "use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InputError(f"device {name!r} does not exist: this machine has "
                        f"{torch.cuda.device_count()} CUDA device(s) (cuda:0..)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"device {name!r} asked for, but MPS is not available here; "
                        "use --device cpu")
    return dev


def memory_bytes(device: str | torch.device = "cpu") -> int:
    """The memory of ``device``: physical RAM for the CPU, the GPU's total memory for CUDA.

    Totals, not what is free now: a size check refuses only what cannot fit however the machine
    is shared (what is free changes while the run waits for its turn)."""
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(dev.index or 0).total_memory)
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not POSIX: no check rather than a wrong one
        return 1 << 62


def check_fits(n_bytes: int, what: str, device: str | torch.device = "cpu") -> None:
    """Raise :class:`InputError` (one line) when ``n_bytes`` exceed the memory of ``device``."""
    total = memory_bytes(device)
    where = "this machine's memory" if torch.device(device).type == "cpu" else \
        f"the memory of {device}"
    if torch.device(device).type == "cpu" and address_space_headroom() < total:
        # an address-space limit (ulimit -v) bounds this process however much RAM there is:
        # the allocator fails beyond it (a long traceback), so the check reads it as the
        # evaluation's check does (seqprobe.memory)
        total, where = address_space_headroom(), "what this process's address-space limit " \
            "(ulimit -v) leaves"
    if n_bytes > total:
        raise InputError(f"{what} needs at least {human_bytes(n_bytes)}, more than "
                        f"{where} ({human_bytes(total)})")
