"""What a training run costs on a CPU before it has ever run: its steps times a step cost
measured once per model and shipped.

The table (:data:`TABLE`, written by ``python -m bench.step_costs``) holds, per
:func:`cost_key` (the model, the task's data, the batches, how the forward runs), the cost of
one optimizer step, of one evaluation and of a process's start-up, each in *reference steps*:
multiples of the CPU time of :func:`reference_step`, a fixed small training step timed in the
same process at the same moment. A ratio survives what a number of seconds does not: the
table is measured once, often on a machine busy with other work (whose every CPU second does
less: shared caches and cores), and read on another. :func:`reference_seconds` times the
reference step where the estimate is wanted (wall time: a busy machine's wait included) and
turns the table into this machine's seconds.
Jobs that use several threads are costed at their one-thread time: the suite's models gain
little from a second thread, and the ETA learns the rest from the jobs that finish.

A run whose key is not in the table (a new recipe, another size) is estimated from the
table's rows of its architecture: their cost per training FLOP (:func:`~models.train.plan.
flops_per_token`, the class's own count) times this run's FLOPs per step. An architecture with
no row at all (a new one) is projected from its FLOPs at the rate of every row, its source
``"projection"`` so the ETA says so. None only when the table is empty.

On a GPU (``StepCosts.load(device="cuda")``) a run costs its steps times the seconds per step
of the CUDA table (:mod:`models.train.gpu_costs`: measured on a named card) where it has the
run's row, else its FLOPs at the assumed utilisation of its precision's peak (a projection);
the estimate's ``source`` says which. Start-up, ``torch.compile`` and evaluations are not in a
GPU estimate: no GPU measurement of them is in the table.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from models.train import gpu_costs
from models.train.plan import plan_row
from models.train.runconfig import RunConfig
from models.train_config import resolve_train
from seqprobe.atomic import read_table

TABLE = Path(__file__).with_name("step_costs.json")
# the source of an estimate from FLOPs alone (the same word as the GPU's projection)
PROJECTED = gpu_costs.PROJECTION
# of the table file, and of the reference step its units are: changing either makes old tables
# unreadable (estimates then come from timings only), never silently wrong
FORMAT = 2
REFERENCE_WARMUP = 5  # reference steps before the timed ones (allocations, lazy init)
REFERENCE_MIN_S = 0.3  # CPU seconds of timed reference steps: a few dozen at today's speeds


def reference_step() -> Callable[[], None]:
    """One step of a fixed small training run: an embedding, an MLP and a LayerNorm on a batch
    of 32 x 64 tokens, cross-entropy, backward, AdamW. The same mix of small matmuls and
    per-op overhead as the suite's CPU models, so the two slow down alike on a busy machine."""
    g = torch.Generator().manual_seed(0)
    vocab, width = 32, 64
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, width), torch.nn.Linear(width, 4 * width),
                                torch.nn.GELU(), torch.nn.Linear(4 * width, width),
                                torch.nn.LayerNorm(width), torch.nn.Linear(width, vocab))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randint(0, vocab, (32, 64), generator=g)  # [batch, pos]
    y = torch.randint(0, vocab, (32 * 64,), generator=g)

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def reference_seconds(clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of one :func:`reference_step` on one thread of this machine, now. By default
    wall seconds: what a job started now will meet, the other work on the machine included;
    the table is measured in CPU seconds (``clock=time.thread_time``), steadier beside
    other work and the same as wall on an idle core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        step = reference_step()
        for _ in range(REFERENCE_WARMUP):
            step()
        n, t0 = 0, clock()
        while clock() - t0 < REFERENCE_MIN_S:
            step()
            n += 1
        return (clock() - t0) / n
    finally:
        torch.set_num_threads(threads)


def cost_key(run_config: RunConfig) -> str:
    """What a step's and an evaluation's cost depend on: the model, the task's data (its
    config sets the sequence lengths), the batches and how the forward runs. Seeds, learning
    rates and step counts do not change it, so all seeds of a recipe share one row."""
    cfg = run_config.train
    if cfg.device_type == "auto":  # the table is measured on CPUs: an unresolved run as there
        cfg = resolve_train(cfg, torch.device("cpu"))
    return json.dumps([run_config.arch, run_config.model_dict, run_config.task_name,
                       run_config.task_dict, cfg.batch_size,
                       cfg.context, cfg.eval_batches, cfg.eval_batch_size, cfg.greedy_eval,
                       cfg.precision, cfg.compile], sort_keys=True, default=list)


def evaluations(steps: int, eval_every: int) -> int:
    """How many evaluations the loop runs in ``steps`` steps: every ``eval_every``-th step and
    always at the last (:func:`models.train.loop.train`)."""
    if not eval_every:
        return 1
    return steps // eval_every + (1 if steps % eval_every else 0)


@dataclass(frozen=True)
class Estimate:
    """Seconds a run is expected to take on idle cores, and where the number comes from."""

    seconds: float
    # "table" (this run's row), "flops" (its architecture's rate), "projection" (FLOPs at
    # every row's rate: no row of its architecture), "timings"; on a GPU "measured" (a row of
    # the CUDA table) or "projection" (FLOPs at an assumed utilisation)
    source: str


@dataclass(frozen=True)
class StepCosts:
    """The shipped table: ``rows[key]`` = {"step", "eval", "start" (in reference steps),
    "flops_per_step", "arch", ...}, and the conditions it was measured under (``meta``).
    (What other processes of a plan cost is the plan's to know, not training's.)
    ``unit_s``: seconds of a reference step here (:func:`reference_seconds`; 0 until timed).
    ``device``: the kind of device the runs train on; ``"cuda"`` costs them from ``cuda``
    (:class:`~models.train.gpu_costs.CudaTable`)."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    unit_s: float = 0.0
    device: str = "cpu"
    cuda: gpu_costs.CudaTable = field(default_factory=gpu_costs.CudaTable)

    @classmethod
    def load(cls, path: Path = TABLE, device: str = "cpu",
             cuda_path: Path = gpu_costs.TABLE) -> StepCosts:
        """The table at ``path``; an empty one when it is missing, unreadable or of another
        format (estimates are a convenience: never a reason to refuse a run). ``device``
        ``"cuda"``: runs are costed from the CUDA table at ``cuda_path``."""
        cuda = gpu_costs.CudaTable.load(cuda_path) if device == "cuda" else gpu_costs.CudaTable()
        doc = read_table(path, FORMAT)
        return cls(dict(doc.get("rows", {})), dict(doc.get("meta", {})), device=device,
                   cuda=cuda)

    def timed(self) -> StepCosts:
        """This table with the reference step timed on this machine now. A GPU plan's CPU work
        (its analyses, memorization's cells) is costed on the table's own machine instead, at
        the reference step it was measured with: the plan of a lent machine's calls is the
        same whoever asks, and however loaded their machine is."""
        measured = [r["ref_s"] for r in self.rows.values() if r.get("ref_s")]
        if self.device == "cuda" and measured:
            unit = statistics.median(measured)
        else:
            unit = reference_seconds() if self.rows else 0.0
        return StepCosts(self.rows, self.meta, unit, self.device, self.cuda)

    def _start(self) -> float:
        """A process's start-up (interpreter, imports), in reference steps: the rows' median."""
        starts = [r["start"] for r in self.rows.values() if "start" in r]
        return statistics.median(starts) if starts else 0.0

    def start_seconds(self) -> float:
        """A process's start-up here, in seconds (needs :meth:`timed`)."""
        return self._start() * self.unit_s

    def run(self, run_config: RunConfig, device: str | None = None) -> Estimate | None:
        """Seconds of ``run_config``'s whole run here: start-up, every step, every evaluation (needs
        :meth:`timed`); on a GPU, its steps (:meth:`gpu_run`). ``device`` "cpu": a job the plan
        places on the CPU cores (the tiny models of a GPU machine's plan), costed as one."""
        if self.device == "cuda" and device != "cpu":
            return self.gpu_run(run_config)
        parts = self._parts(run_config)
        if parts is None:
            return None
        start, step, evaluation, source = parts
        evals = evaluations(run_config.train.steps, run_config.train.eval_every)
        units = start + run_config.train.steps * step + evals * evaluation
        return Estimate(units * self.unit_s, source)

    def in_steps(self, run_config: RunConfig) -> float | None:
        """``run_config``'s steps and evaluations in units of one of its own steps (no start-up: the
        process asking has started): what a step of this run timed here now turns into the
        run's seconds (:mod:`models.train.announce`). None where :meth:`run` is."""
        parts = self._parts(run_config)
        if parts is None:
            return None
        _, step, evaluation, _ = parts
        evals = evaluations(run_config.train.steps, run_config.train.eval_every)
        return run_config.train.steps + evals * evaluation / step

    def _parts(self, run_config: RunConfig) -> tuple[float, float, float, str] | None:
        """(start-up, one step, one evaluation) of ``run_config`` in reference steps, and where they
        come from: this run's row ("table"), else its architecture's rate per FLOP ("flops"),
        else every row's rate ("projection": an architecture never measured); None when the
        table has no row at all."""
        r = self.rows.get(cost_key(run_config))
        if r is not None:
            return r["start"], r["step"], r["eval"], "table"
        rated = [r for r in self.rows.values() if r.get("flops_per_step")]
        same = [r for r in rated if r.get("arch") == run_config.arch]
        # an architecture the table has never measured (a new one) is not left out of an ETA:
        # its FLOPs at the rate of every measured row, and the estimate says it is projected
        source = "flops" if same else PROJECTED
        same = same or rated
        if not same:
            return None
        # this run's FLOPs (meta-device build, one batch)
        row = plan_row(run_config.arch, run_config)
        per_flop = statistics.median(r["step"] / r["flops_per_step"] for r in same)
        eval_ratio = statistics.median(r["eval"] / r["step"] for r in same)
        step = per_flop * row["flops_per_token"] * row["tokens_per_step"]
        return self._start(), step, eval_ratio * step, source

    def gpu_run(self, run_config: RunConfig) -> Estimate:
        """Seconds of ``run_config``'s run on one GPU: steps x the CUDA table's measured seconds
        per step of this run (source ``"measured"``), else its FLOPs at the utilisation assumed
        for its precision (``"projection"``); plus its evaluations and its compilation
        (:func:`~models.train.gpu_costs.overhead_seconds`)."""
        step = self.gpu_step(run_config)
        return Estimate(step.seconds * run_config.train.steps
                        + self.gpu_overhead(run_config, step.seconds), step.source)

    def gpu_step(self, run_config: RunConfig) -> Estimate:
        """Seconds of one training step of ``run_config`` on one GPU (:meth:`gpu_run`)."""
        # this run's length and FLOPs (one batch, on the CPU)
        row = plan_row(run_config.arch, run_config)
        cost = gpu_costs.measured_or_projected(
            run_config, row["seq_len"], row["flops_per_token"] * row["tokens_per_step"], self.cuda)
        return Estimate(cost["seconds_per_step"], cost["source"])

    @staticmethod
    def gpu_overhead(run_config: RunConfig, seconds_per_step: float) -> float:
        """A GPU run's evaluations and compilation
        (:func:`~models.train.gpu_costs.overhead_seconds`)."""
        return gpu_costs.overhead_seconds(
            run_config, seconds_per_step,
            evaluations(run_config.train.steps, run_config.train.eval_every))
