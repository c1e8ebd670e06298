"""Memory a command may take, checked before it starts (so an impossible one fails in a line,
not in the allocator minutes in).

Per-flag bounds (:mod:`seqprobe.flags`) keep each number sane, but a product of in-range numbers
can still ask for more than the machine holds (a hash-copy construction for n = 64 is a
42,240-wide model; an LDS horizon of 2^20 with 4,096 filters is a 2^32-entry tensor). Each
command estimates its dominant allocations from its flags and configs, and
:func:`check_fits` refuses, in one line, an estimate above what this process can still get —
before any of it is allocated.

What this process can still get (:func:`available_bytes`) is the least of:

* the kernel's ``MemAvailable`` (``/proc/meminfo``; psutil's ``available`` elsewhere): free
  pages plus what the page cache would give back;
* the address-space limit (``RLIMIT_AS``, e.g. ``ulimit -v``) minus the address space this
  process already maps (``VmSize``): the kernel refuses any mapping beyond it;
* the cgroup's memory limit minus its usage (v2 ``memory.max``, v1 ``memory.limit_in_bytes``):
  a container or a batch job's share of the machine.

This is what is free *now*, for work that starts now. :func:`seqprobe.device.check_fits` is the
other check: a model whose size exceeds the machine's *total* memory, refused however the
machine is shared (a training run may wait for its turn while others free memory).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from seqprobe.errors import InputError

CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
UNLIMITED = 1 << 62  # no bound from a source (it is absent or says "max")


def human_bytes(n: float) -> str:
    """``1.5 GB``-style size (powers of 1000, as disk and memory sizes are quoted)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"


def _meminfo_kb(field: str, path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def system_available() -> int:
    """The kernel's estimate of memory available to new work (bytes)."""
    kb = _meminfo_kb("MemAvailable")
    if kb is not None:
        return kb * 1024
    try:
        import psutil  # noqa: PLC0415 - optional: only where /proc/meminfo is missing

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no psutil, or it cannot tell: the physical total
        try:
            return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return UNLIMITED


def address_space_headroom() -> int:
    """``RLIMIT_AS`` minus this process's mapped address space (bytes); UNLIMITED if none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return UNLIMITED
    vm_kb = _meminfo_kb("VmSize", "/proc/self/status")
    return max(0, soft - (vm_kb or 0) * 1024)


def cgroup_headroom() -> int:
    """The cgroup's memory limit minus its usage (bytes); UNLIMITED when there is none."""
    for limit_file, usage_file in ((CGROUP_V2 / "memory.max", CGROUP_V2 / "memory.current"),
                                   (CGROUP_V1 / "memory.limit_in_bytes",
                                    CGROUP_V1 / "memory.usage_in_bytes")):
        limit = _read_int(limit_file)
        if limit is not None and limit < UNLIMITED:
            return max(0, limit - (_read_int(usage_file) or 0))
    return UNLIMITED


def available_bytes() -> int:
    """What this process can still allocate: the least of the three bounds above (bytes)."""
    return min(system_available(), address_space_headroom(), cgroup_headroom())


def check_fits(estimate_bytes: float, what: str, hint: str = "") -> None:
    """Raise :class:`InputError` (one line: the estimate and the free memory) when
    ``estimate_bytes`` exceed :func:`available_bytes`; ``hint`` says what to lower."""
    free = available_bytes()
    if estimate_bytes > free:
        raise InputError(f"{what} needs about {human_bytes(estimate_bytes)} of memory, more than "
                        f"the {human_bytes(free)} free for this process"
                        + (f"; {hint}" if hint else ""))
