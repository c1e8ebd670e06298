"""What a training run costs on a CPU before it has ever run: its steps times a step cost
measured once per model and shipped.

The table (:data:`TABLE`, written by ``python -m bench.step_costs``) holds, per
:func:`cost_key` (the model, the batch, the sequence length, how the forward runs), the
seconds of one optimizer step, of one evaluation and of a process's start-up, measured in a
fresh process with the threads the run gets in the reproduce plan. Seconds there are CPU
seconds per thread, not wall seconds: the table is measured once, often on a machine busy
with other work, and CPU time is what a step costs on idle cores (a busy machine's wall time
is that times the load, which no table can know; the reproduce ETA learns it from the jobs
that finish).

A run whose key is not in the table (a new recipe, another size) is estimated from the
table's rows of its architecture: their seconds per training FLOP (:func:`~models.train.
dryrun.flops_per_token`) times this run's FLOPs per step. None when the table has no row of
the architecture: the caller says it cannot estimate, never guesses.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.train.dryrun import plan_row
from models.train.spec import RunSpec

TABLE = Path(__file__).with_name("step_costs.json")
FORMAT = 1  # of the table file; another format is ignored (estimates then come from timings)


def cost_key(spec: RunSpec) -> str:
    """What a step's and an evaluation's cost depend on: the model, the task's data (its
    config sets the sequence lengths), the batches and how the forward runs. Seeds, learning
    rates and step counts do not change it, so all seeds of a recipe share one row."""
    cfg = spec.train
    return json.dumps([spec.arch, spec.model, spec.task, spec.task_config, cfg.batch_size,
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
    source: str  # "table" (this run's row), "flops" (its architecture's rate), or "timings"


@dataclass(frozen=True)
class StepCosts:
    """The shipped table: ``rows[key]`` = {"step_s", "eval_s", "start_s", "flops_per_step",
    "arch", ...}, ``analysis_s[preset][name]`` = seconds of an analysis' own process, and the
    conditions it was measured under (``meta``)."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    analysis_s: dict[str, dict[str, float]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path = TABLE) -> StepCosts:
        """The table at ``path``; an empty one when it is missing, unreadable or of another
        format (estimates are a convenience: never a reason to refuse a run)."""
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            return cls()
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            return cls()
        return cls(dict(doc.get("rows", {})), dict(doc.get("analysis_s", {})),
                   dict(doc.get("meta", {})))

    def start_s(self) -> float:
        """A process's start-up (interpreter, imports, building the run): the rows' median."""
        starts = [r["start_s"] for r in self.rows.values() if "start_s" in r]
        return statistics.median(starts) if starts else 0.0

    def run(self, spec: RunSpec) -> Estimate | None:
        """Seconds of ``spec``'s whole run: start-up, every step, every evaluation."""
        evals = evaluations(spec.train.steps, spec.train.eval_every)
        r = self.rows.get(cost_key(spec))
        if r is not None:
            return Estimate(r["start_s"] + spec.train.steps * r["step_s"] + evals * r["eval_s"],
                            "table")
        same = [r for r in self.rows.values() if r.get("arch") == spec.arch]
        if not same:
            return None
        row = plan_row(spec.arch, spec)  # this run's FLOPs (meta-device build, one batch)
        per_flop = statistics.median(r["step_s"] / r["flops_per_step"] for r in same)
        eval_ratio = statistics.median(r["eval_s"] / r["step_s"] for r in same)
        step = per_flop * row["flops_per_token"] * row["tokens_per_step"]
        return Estimate(self.start_s() + spec.train.steps * step + evals * eval_ratio * step,
                        "flops")

    def analysis(self, name: str, preset: str) -> Estimate | None:
        """Seconds of analysis ``name``'s own process at ``preset`` (models it reads from the
        zoo not included: they are jobs of their own); else the median analysis of that
        preset; None when the table has none."""
        known = self.analysis_s.get(preset, {})
        if name in known:
            return Estimate(float(known[name]), "table")
        if known:
            return Estimate(statistics.median(known.values()), "median")
        return None
