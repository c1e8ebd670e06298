"""The one line every command prints before it trains: what, where, how many steps, and how
long it should take — before the progress bar, so nobody learns from the bar that a command
they thought would read a checkpoint is training one.

    about to train NAME (ARCH on TASK): STEPS steps -> CACHE PATH; ETA TIME (SOURCE)

With ``measure`` (``python -m models.train``, ``python -m analyses.zoo train``, an analysis'
``--train``) a few real steps of this very run are timed first, on a throwaway copy of it in
this process (:func:`step_seconds`): the load of the machine now, the run's own threads and
their fight with other work all show in them, which a one-thread reference step on an idle
core does not see. The step-cost table then only says how the run's evaluations compare with
its steps (:meth:`~models.train.costs.StepCosts.in_steps`). Without ``measure`` (an ensemble's
members, whose steps run together), and where no step can be timed (a GPU, torchrun), the ETA
is the table's (:class:`models.train.costs.StepCosts`: this run's row, else its
architecture's cost per FLOP; on a GPU the CUDA table or a projection) in this machine's
seconds now (the table's reference step is timed here first). "ETA unknown" where neither
can say. Other work that starts later is never in the ETA.
Called by :func:`models.train.cache.train_run_cached` and by ``python -m models.train``.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import torch

from models.train import distributed
from models.train.costs import Estimate, StepCosts
from models.train.evaluation import evaluate
from models.train.loop import Trainee
from models.train.loss import backward, step_loss
from models.train.rng import global_rngs_kept
from models.train.runconfig import RunConfig
from seqprobe.device import resolve_device

# where an estimate comes from, as the line says it
SOURCES = {"table": "step-cost table", "flops": "step-cost table, its architecture's rate",
           "measured": "CUDA step-cost table", "projection": "projected from FLOPs"}
PROBE_WARMUP = 1  # steps of the throwaway copy before the timed ones (allocations, lazy init)
PROBE_MIN_S = 1.0  # wall seconds of timed steps, at least one step (a busy core's share varies)
PROBE_SHARE = 0.02  # ... or this share of the table's ETA, where that is less


@functools.cache
def _costs(kind: str) -> StepCosts:
    """The table for ``kind`` ("cpu" / "cuda"), timed once per process (the reference step
    takes a fraction of a second, once)."""
    costs = StepCosts.load(device=kind)
    return costs.timed() if kind == "cpu" else costs


def estimate(run_config: RunConfig, device: str | torch.device = "auto") -> Estimate | None:
    """Seconds of ``run_config``'s whole run on ``device`` from the step-cost tables, or None."""
    kind = "cuda" if resolve_device(device).type == "cuda" else "cpu"
    try:
        return _costs(kind).run(run_config)
    except Exception:  # noqa: BLE001 - an estimate is a convenience, never a reason to fail
        return None


def step_seconds(run_config: RunConfig, device: str | torch.device = "auto",
                 budget_s: float = PROBE_MIN_S) -> float | None:
    """Wall seconds of one training step of ``run_config`` here, now: a throwaway copy of the run
    (the same model, batches, threads and loss; no output, no evaluation) takes
    ``PROBE_WARMUP`` steps, then timed ones for ``budget_s`` (at least one: where a step takes
    seconds, the timing stays a step or two). Torch's, numpy's and python's global RNGs are
    left as they were (the run seeds its own anyway). None on a GPU (the CUDA table is
    measured there) or under torchrun (a step there waits on the other ranks), or when the
    copy cannot step: an ETA is a convenience, never a reason to fail."""
    dev = resolve_device(device)
    if dev.type != "cpu" or distributed.world().active:
        return None
    try:
        with global_rngs_kept():
            run_config = run_config.resolved(dev)
            copy = Trainee(run_config, None, dev, None, False, (), evaluate)
            copy.bar.close()
            loss_fn = step_loss(copy.model, run_config.train, dev)

            def step() -> None:  # the loop's step, at the optimiser's first learning rate
                batch = next(copy.data)
                copy.opt.zero_grad(set_to_none=True)
                backward(loss_fn, batch, run_config.train.micro_batch)
                torch.nn.utils.clip_grad_norm_(copy.model.parameters(), copy.clip)
                copy.opt.step()

            for _ in range(PROBE_WARMUP):
                step()
            n, t0 = 0, time.perf_counter()
            while n < 1 or time.perf_counter() - t0 < budget_s:
                step()
                n += 1
            return (time.perf_counter() - t0) / n
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def measured_estimate(run_config: RunConfig,
                      device: str | torch.device = "auto") -> Estimate | None:
    """Seconds of ``run_config``'s whole run from :func:`step_seconds` (its evaluations from the
    step-cost table's ratio of an evaluation to a step; left out, and said so, where the table
    has no row of the architecture); None where no step can be timed."""
    table = estimate(run_config, device)  # a short run spends a small share of itself on the timing
    budget = PROBE_MIN_S if table is None else min(PROBE_MIN_S, PROBE_SHARE * table.seconds)
    per_step = step_seconds(run_config, device, budget)
    if per_step is None:
        return None
    try:
        steps = StepCosts.load().in_steps(run_config)
    except Exception:  # noqa: BLE001 - as estimate()
        steps = None
    if steps is None:
        return Estimate(per_step * run_config.train.steps,
                        f"{per_step:.3g} s per step of this run now, evaluations not included")
    return Estimate(per_step * steps, f"{per_step:.3g} s per step of this run now")


def human_seconds(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    if s < 3 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} days"


def training_line(run_config: RunConfig, out: str | Path | None, *, what: str | None = None,
                  device: str | torch.device = "auto", resume_step: int | None = None,
                  detail: str | None = None, measure: bool = False) -> str:
    """The line (see the module docstring). ``what``: the recipe's name, where there is one;
    ``resume_step``: the step a resumed run continues from (the ETA is of the steps left);
    ``detail``: more about the run, in the parentheses (parameters, DDP); ``measure``: time
    steps of this run for the ETA (:func:`measured_estimate`)."""
    steps = run_config.train.steps
    run = f"{run_config.arch} on {run_config.task_name}" + (f", {detail}" if detail else "")
    head = f"about to train {what} ({run})" if what else f"about to train ({run})"
    todo = f"{steps:,} steps"
    left = 1.0
    if resume_step:
        todo = f"steps {resume_step:,} to {steps:,} (resumed)"
        left = max(steps - resume_step, 0) / max(steps, 1)
    est = (measured_estimate(run_config, device) if measure else None) or estimate(run_config,
                                                                                   device)
    if est is None:
        eta = f"ETA unknown (no step cost of a {run_config.arch} in the step-cost table)"
    else:
        eta = f"ETA {human_seconds(est.seconds * left)} ({SOURCES.get(est.source, est.source)})"
    where = f" -> {out}" if out is not None else " (no output file)"
    stop_at = run_config.train.stop_at
    stop = f", stops early at accuracy {stop_at:g}" if stop_at else ""
    return f"{head}: {todo}{stop}{where}; {eta}"


def announce(run_config: RunConfig, out: str | Path | None, *, what: str | None = None,
             device: str | torch.device = "auto", resume_step: int | None = None,
             detail: str | None = None, measure: bool = False) -> None:
    """Print :func:`training_line` to stderr (rank 0 alone under torchrun)."""
    if distributed.world().is_main:
        print(training_line(run_config, out, what=what, device=device, resume_step=resume_step,
                            detail=detail, measure=measure), file=sys.stderr, flush=True)
