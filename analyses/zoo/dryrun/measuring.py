"""One dry run measured: :data:`DRY_STEPS` optimizer steps of a run at its real size through
the training loop (:func:`measure`; on a GPU the largest micro-batch that fits,
:func:`micro_batches`), its step time and peak memory (the RSS it added on a CPU,
``torch.cuda.max_memory_allocated`` on a GPU), each in a fresh Python process
(:func:`run_isolated`, a task of :func:`seqprobe.sweep.run_fresh`), so that a crash,
an out-of-memory kill or a timeout (:data:`CHILD_TIMEOUT`) is one row of the table.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from typing import Any

import torch

from models.train.build import validate_run_config
from models.train.callbacks import Callback, Run
from models.train.loop import train
from models.train.runconfig import RunConfig
from seqprobe.device import resolve_device
from seqprobe.errors import InputError
from seqprobe.sweep import ProcessFailed, run_fresh

DRY_STEPS = 2  # the first step pays one-off allocations; the second is the one timed
MALLOC_TRIM_THRESHOLD = 2**20  # bytes: see run_isolated
CHILD_TIMEOUT = 1800.0  # seconds for one model's two steps before it is listed as timed out


class _StopAfter(Callback):
    """Ends the run after ``steps`` optimizer steps and keeps the time each one ended."""

    def __init__(self, steps: int, device: torch.device):
        self.steps, self.device = steps, device
        self.ends: list[float] = []
        self.params = 0
        self.paths: set[str] = set()  # the computation paths the layers took (Mamba's scan)

    def on_step(self, run: Run) -> bool:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the step's kernels, not their launch
        self.ends.append(time.perf_counter())
        self.params = sum(p.numel() for p in run.model.parameters())
        self.paths |= {m.last_path for m in run.model.modules() if hasattr(m, "last_path")}
        return run.step >= self.steps


def _max_rss() -> int:
    """The process's peak resident set so far, in bytes: Linux's VmHWM, which is this
    program's own (``ru_maxrss`` keeps the parent's resident set at the fork that started
    it), else ``ru_maxrss`` (Linux reports kB, macOS bytes)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _rss() -> int:
    """The resident set now, in bytes (the peak so far where /proc is missing: the imports'
    transient peak then hides a small run's own)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return _max_rss()


def _warm_up() -> None:
    """A few ops of a tiny model: the library code torch pages in on first use is then in the
    baseline, not in the run's RSS delta."""
    model = torch.nn.Sequential(torch.nn.Embedding(8, 8), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 8))
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        torch.log_softmax(model(torch.zeros(2, 4, dtype=torch.long)), -1).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def micro_batches(batch_size: int) -> list[int]:
    """The micro-batches a GPU dry run tries, largest first: the whole batch, then halving
    (the largest divisor of the batch at most half the last one tried) down to one row."""
    out = [batch_size]
    while out[-1] > 1:
        out.append(max(d for d in range(1, out[-1] // 2 + 1) if batch_size % d == 0))
    return out


def _out_of_memory(e: BaseException) -> bool:
    """A CUDA out-of-memory error, also where torch.compile wraps it in its own."""
    return isinstance(e, torch.cuda.OutOfMemoryError) or "CUDA out of memory" in str(e)


def measure(run_config: RunConfig, device: str | torch.device) -> dict[str, Any]:
    """Train ``run_config`` (already the dry RunConfig) for :data:`DRY_STEPS` steps here:
    parameters, seconds of the last step, seconds to the end of the first (build and start-up
    included), peak memory and the memory settings used (``micro_batch``,
    ``checkpoint_blocks``, ``scan_paths``). On a GPU the largest micro-batch that fits the
    card: the whole batch first, then smaller ones (:func:`micro_batches`) after each
    out-of-memory error. Meant for a fresh process (:func:`run_isolated`): the RSS delta is the
    run's own only there."""
    dev = resolve_device(device)
    # also imports what the checks import: in the baseline, not the run
    validate_run_config(run_config)
    if dev.type != "cuda":
        return _measure_once(run_config, dev)
    batch = run_config.train.batch_size
    for micro in micro_batches(batch):
        try:
            return _measure_once(run_config.replace(train={"micro_batch": 0 if micro == batch
                                                           else micro}), dev)
        except Exception as e:  # noqa: BLE001 - only out-of-memory errors try a smaller one
            if not _out_of_memory(e):
                raise
        # outside the handler: the traceback that held the failed try's tensors is gone
        gc.collect()
        torch.cuda.empty_cache()
    raise InputError(f"out of memory on {dev} even at micro-batch 1")


def _measure_once(run_config: RunConfig, dev: torch.device) -> dict[str, Any]:
    """:func:`measure` of one setting."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    else:
        _warm_up()
    rss0 = _rss()
    stop = _StopAfter(DRY_STEPS, dev)
    t0 = time.perf_counter()
    train(run_config, out=None, device=str(dev), progress=False, callbacks=[stop])
    if len(stop.ends) < 2:
        raise InputError(f"the run stopped after {len(stop.ends)} step(s)")
    peak = (torch.cuda.max_memory_allocated(dev) if dev.type == "cuda"
            else _max_rss() - rss0)
    return {"params": stop.params, "seconds_per_step": stop.ends[-1] - stop.ends[-2],
            "first_step_s": stop.ends[0] - t0, "peak_memory_bytes": int(peak),
            "memory": "cuda_max_allocated" if dev.type == "cuda" else "rss_delta",
            "device": str(dev),
            "micro_batch": run_config.train.micro_batch or run_config.train.batch_size,
            "checkpoint_blocks": run_config.train.checkpoint_blocks,
            "scan_paths": sorted(stop.paths)}


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


def measure_dict(run: dict[str, Any], device: str) -> dict[str, Any]:
    """:func:`measure` of a run given as :meth:`RunConfig.to_dict` (what a fresh process is
    handed): the measurement, or ``{"error": "one line"}``."""
    try:
        return measure(RunConfig.from_dict(run), device)
    except InputError as e:
        return {"error": str(e).splitlines()[0]}
    except Exception as e:  # noqa: BLE001 - any failure of a run is one row of the table
        return {"error": _one_line(e)}


def run_isolated(run_config: RunConfig, device: torch.device,
                 timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:
    """:func:`measure` in a fresh Python process (the one job runner's,
    :func:`seqprobe.sweep.run_fresh`): the result, or ``{"error": ...}`` for a run that raised,
    was killed (the kernel's out-of-memory killer sends SIGKILL) or timed out."""
    # glibc's malloc keeps freed memory once its mmap threshold has grown (it does, after the
    # first large free), so a run that allocates and frees chunk after chunk (the chunked scan,
    # checkpointed blocks) would show the memory it freed in its RSS: the CPU's peak would
    # then measure the allocator, not what the run needs at once, which is what the
    # extrapolation to a GPU batch stands on. A fixed trim threshold returns it (and turns the
    # dynamic threshold off); other C libraries ignore the variable. A user's setting wins.
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_", str(MALLOC_TRIM_THRESHOLD))
    run = json.loads(json.dumps(run_config.to_dict(), default=list))
    try:
        return run_fresh(measure_dict, run, str(device), timeout=timeout,
                         env={"MALLOC_TRIM_THRESHOLD_": trim})
    except ProcessFailed as e:
        return {"error": str(e)}
