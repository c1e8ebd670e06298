"""Timing helpers for the benchmarks: medians of repeated, warmed-up measurements."""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

RESULTS = Path(__file__).resolve().parent


def median_time(fn: Callable[[], object], repeats: int = 7, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` in seconds (CUDA synchronised when in use)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_times(fns: dict[str, Callable[[], object]], repeats: int = 7,
                      warmup: int = 2) -> dict[str, float]:
    """Median time of each function, measured round-robin so that drifting machine load hits
    every contender alike (a side-by-side measurement, not one after the other)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def _peak_child(fn, queue):
    import resource

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fn()
    queue.put((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)


def peak_memory_mb(fn: Callable[[], object]) -> float:
    """Peak resident memory that ``fn()`` adds, in MiB, measured in a fresh process.

    On CUDA this is ``torch.cuda.max_memory_allocated``; on the CPU the growth of the process'
    peak RSS (``ru_maxrss``) over its value after imports — a fresh ``spawn`` process per call,
    since ru_maxrss never goes down. ``fn`` must be a module-level function (picklable).
    """
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        fn()
        return torch.cuda.max_memory_allocated() / 2**20
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_child, args=(fn, queue))
    proc.start()
    value = queue.get(timeout=600)
    proc.join()
    return float(value)


def machine() -> dict[str, object]:
    return {"python": platform.python_version(), "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def write_results(name: str, results: dict) -> Path:
    path = RESULTS / f"results_{name}.json"
    path.write_text(json.dumps({"machine": machine(), **results}, indent=1))
    print(json.dumps(results, indent=1))
    print(f"wrote {path}")
    return path

