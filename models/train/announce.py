"""The one line every command prints before it trains: what, where, how many steps, and how
long it should take — before the progress bar, so nobody learns from the bar that a command
they thought would read a checkpoint is training one.

    about to train NAME (ARCH on TASK): STEPS steps -> CACHE PATH; ETA TIME (SOURCE)

The ETA is the shipped step-cost table's (:class:`models.train.costs.StepCosts`: this run's
row, else its architecture's cost per FLOP; on a GPU the CUDA table or a projection), in this
machine's seconds now (the table's reference step is timed here first, a busy machine's wait
included; other work that starts later is not); "ETA unknown" where the table cannot say.
Called by :func:`models.train.cache.train_run_cached` (``python -m analyses.zoo train``, every
analysis' ``--train``) and by ``python -m models.train``.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

from models.train import distributed
from models.train.costs import Estimate, StepCosts
from models.train.runconfig import RunConfig
from seqprobe.device import resolve_device

# where an estimate comes from, as the line says it
SOURCES = {"table": "step-cost table", "flops": "step-cost table, its architecture's rate",
           "measured": "CUDA step-cost table", "projection": "projected from FLOPs"}


@functools.cache
def _costs(kind: str) -> StepCosts:
    """The table for ``kind`` ("cpu" / "cuda"), timed once per process (the reference step
    takes a fraction of a second, once)."""
    costs = StepCosts.load(device=kind)
    return costs.timed() if kind == "cpu" else costs


def estimate(spec: RunConfig, device: str | torch.device = "auto") -> Estimate | None:
    """Seconds of ``spec``'s whole run on ``device`` from the step-cost tables, or None."""
    kind = "cuda" if resolve_device(device).type == "cuda" else "cpu"
    try:
        return _costs(kind).run(spec)
    except Exception:  # noqa: BLE001 - an estimate is a convenience, never a reason to fail
        return None


def human_seconds(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    if s < 3 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} days"


def training_line(spec: RunConfig, out: str | Path | None, *, what: str | None = None,
                  device: str | torch.device = "auto", resume_step: int | None = None,
                  detail: str | None = None) -> str:
    """The line (see the module docstring). ``what``: the recipe's name, where there is one;
    ``resume_step``: the step a resumed run continues from (the ETA is of the steps left);
    ``detail``: more about the run, in the parentheses (parameters, DDP)."""
    steps = spec.train.steps
    run = f"{spec.arch} on {spec.task_name}" + (f", {detail}" if detail else "")
    head = f"about to train {what} ({run})" if what else f"about to train ({run})"
    todo = f"{steps:,} steps"
    left = 1.0
    if resume_step:
        todo = f"steps {resume_step:,} to {steps:,} (resumed)"
        left = max(steps - resume_step, 0) / max(steps, 1)
    est = estimate(spec, device)
    if est is None:
        eta = f"ETA unknown (no step cost of a {spec.arch} in the step-cost table)"
    else:
        eta = f"ETA {human_seconds(est.seconds * left)} ({SOURCES.get(est.source, est.source)})"
    where = f" -> {out}" if out is not None else " (no output file)"
    stop = f", stops early at accuracy {spec.train.stop_at:g}" if spec.train.stop_at else ""
    return f"{head}: {todo}{stop}{where}; {eta}"


def announce(spec: RunConfig, out: str | Path | None, *, what: str | None = None,
             device: str | torch.device = "auto", resume_step: int | None = None,
             detail: str | None = None) -> None:
    """Print :func:`training_line` to stderr (rank 0 alone under torchrun)."""
    if distributed.world().is_main:
        print(training_line(spec, out, what=what, device=device, resume_step=resume_step,
                            detail=detail), file=sys.stderr, flush=True)
