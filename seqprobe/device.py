"""Device names -> ``torch.device``, with one clear error for a device this machine lacks, and the
memory a device has (size checks refuse a model that cannot fit before anything is allocated).

**Asking about CUDA without touching it.** A process that has initialised CUDA cannot fork a
job that uses it (the child fails with "Cannot re-initialize CUDA in forked subprocess", or
the driver's "initialization error"), and the reproduce run forks its jobs
(:mod:`seqprobe.sweep.fork`). So the questions a planning process asks — is there a GPU,
what is it called, how much memory has it, has it bfloat16 — are answered here without
initialising CUDA in this process: :func:`cuda_present` through NVML (torch's own
``PYTORCH_NVML_BASED_CUDA_CHECK``, which :mod:`seqprobe` sets for every process of the
suite), the card's facts
by a child interpreter (:func:`gpu_facts`, once per process) unless this process has
initialised CUDA already (:func:`cuda_touched`), in which case it asks torch directly.
"""

from __future__ import annotations

import functools
import json
import os
import sys

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
        return torch.device("cuda" if cuda_present() else "cpu")
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
    if dev.type == "cuda" and cuda_present():
        return int(gpu_facts(dev.index or 0)["total_memory"])
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


def cuda_present() -> bool:
    """Whether this machine has a CUDA device torch can use, asked without initialising CUDA
    (NVML; see the module docstring). Tests fake a GPU by replacing
    ``torch.cuda.is_available``."""
    return bool(torch.cuda.is_available())


def cuda_touched() -> bool:
    """Whether this process has initialised CUDA: from then on it must not fork a job (the
    child could not use CUDA, and a fork of a process holding a CUDA context is unsafe)."""
    return bool(torch.cuda.is_initialized())


# what a child reports of the card (:func:`gpu_facts`); a module-level string so that the same
# code runs in this process once CUDA is up
_FACTS = """
import json, sys, torch
i = int(sys.argv[1])
p = torch.cuda.get_device_properties(i)
print(json.dumps({"name": p.name, "total_memory": int(p.total_memory),
                  "capability": list(torch.cuda.get_device_capability(i)),
                  "bf16": bool(torch.cuda.is_bf16_supported())}))
"""


@functools.cache
def _facts_from_child(index: int) -> dict:
    from seqprobe.sweep import run_command  # the runner; not needed by most callers here

    env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    proc = run_command([sys.executable, "-c", _FACTS, str(index)], env=env, timeout=120)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"cuda:{index}: could not read the card's properties ({tail})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gpu_facts(index: int = 0) -> dict:
    """``{"name", "total_memory", "capability", "bf16"}`` of CUDA device ``index``: from
    torch in this process where it has initialised CUDA already, else from a child interpreter
    (once per process), so that asking never makes this process unable to fork."""
    if cuda_touched():
        props = torch.cuda.get_device_properties(index)
        return {"name": props.name, "total_memory": int(props.total_memory),
                "capability": list(torch.cuda.get_device_capability(index)),
                "bf16": bool(torch.cuda.is_bf16_supported())}
    return _facts_from_child(index)


def gpu_name(index: int = 0) -> str | None:
    """The card's name as torch gives it (None without CUDA), asked as :func:`gpu_facts`."""
    return gpu_facts(index)["name"] if cuda_present() else None
