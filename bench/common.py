"""Timing helpers for the benchmarks: medians of repeated, warmed-up measurements."""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from seqprobe.sweep import run_fresh

RESULTS = Path(__file__).resolve().parent
# BENCH_CLOCK=cpu: interleaved_times counts this thread's CPU time and torch runs on one thread,
# the steadier measure on a machine shared with other jobs (waiting for a core does not count).
CLOCK = os.environ.get("BENCH_CLOCK", "wall")
if CLOCK not in ("wall", "cpu"):
    raise SystemExit(f"BENCH_CLOCK must be wall or cpu, got {CLOCK!r}")
if CLOCK == "cpu":
    torch.set_num_threads(1)  # every op in this thread, or its CPU time would miss the workers


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
    every contender alike (a side-by-side measurement, not one after the other). Wall time,
    or this thread's CPU time under ``BENCH_CLOCK=cpu`` (see :data:`CLOCK`)."""
    if CLOCK == "cpu" and torch.cuda.is_available():
        raise SystemExit("BENCH_CLOCK=cpu counts CPU work only: unset it where CUDA runs")
    clock = time.thread_time if CLOCK == "cpu" else time.perf_counter
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = clock()
            fn()
            samples[name].append(clock() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory_mb(fn: Callable[[], object]) -> float:
    """Peak memory that ``fn()`` adds, in MiB, measured in a fresh process (``spawn``) so
    that nothing measured before (allocator caches) hides or inflates it. ``fn`` must be a
    module-level function. See :func:`_peak_memory_here` for what is counted."""
    if torch.cuda.is_available():
        return _peak_memory_here(fn)
    return float(in_fresh_process(_peak_memory_here, fn))


def in_fresh_process(fn: Callable[..., object], *args: object,
                     timeout: float | None = None) -> object:
    """``fn(*args)`` in a new interpreter (``fn`` module-level; the one job runner's fresh
    process, :func:`seqprobe.sweep.run_fresh`): a measurement that what ran before in this
    process must not colour (the C allocator keeps or returns memory depending on what was
    allocated earlier, and fresh memory costs page faults). ``timeout``: seconds before the
    process is killed (:class:`~seqprobe.sweep.ProcessFailed`)."""
    return run_fresh(fn, *args, timeout=timeout)


def _peak_memory_here(fn: Callable[[], object]) -> float:
    """Peak memory that ``fn()`` adds, in MiB.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the process' resident set size, sampled
    every 0.2 ms by a thread while ``fn`` runs, minus its value just before (Linux /proc). It
    counts what the allocator had to take from the OS, so memory freed earlier and reused does
    not show: compare contenders measured the same way, not absolute numbers.
    """
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        fn()
        return torch.cuda.max_memory_allocated() / 2**20
    gc.collect()
    base, peak, done = _rss_bytes(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.0002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return max(0, max(peak[0], _rss_bytes()) - base) / 2**20


def machine() -> dict[str, object]:
    return {"python": platform.python_version(), "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
            "clock": CLOCK, "load_avg_1m": round(os.getloadavg()[0], 2),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def write_results(name: str, results: dict) -> Path:
    path = RESULTS / f"results_{name}.json"
    path.write_text(json.dumps({"machine": machine(), **results}, indent=1))
    print(json.dumps(results, indent=1))
    print(f"wrote {path}")
    return path


def train_step_fn(model, tokens: torch.Tensor, hf: bool = False):
    """One AdamW step of next-token loss on ``tokens`` (our model or a HuggingFace one, whose
    output carries ``.logits``), as a closure to time."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step():
        logits = model(tokens).logits if hf else model(tokens)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step
