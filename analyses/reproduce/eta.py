"""The reproduce plan's estimates: how long each of its jobs will take, from its first second
(the ETA itself, packing and learning, is the runner's: :mod:`seqprobe.sweep.eta`).

Each job's cost is estimated before it has ever run: a training job from its recipe's steps
times the shipped step cost of its model (:class:`models.train.costs.StepCosts`; a model the
table never measured is projected from its FLOPs, and the start line says so), an analysis
from the seconds its own process took in a real run of the level (:data:`ANALYSIS_TABLE`,
:class:`AnalysisSeconds`: the plan's own table, in ``costs/`` beside this module). A job the
last run of this level timed (``reproduce_timings.json``) takes that time instead.

The table's seconds are of jobs in processes of their own; the run forks its jobs from a
process that has the imports paid (:mod:`seqprobe.sweep.fork`), so a forked job's estimate is
the table's less a process' start-up (:meth:`~models.train.costs.StepCosts.start_seconds`).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analyses.reproduce.plan import Job
from analyses.zoo.dryrun import recipe_run_config
from models.train import gpu_costs
from models.train.costs import Estimate, StepCosts
from models.train.plan import plan_row
from models.train.runconfig import RunConfig
from seqprobe.atomic import read_table
from seqprobe.errors import InputError
from seqprobe.sweep.eta import Eta
from seqprobe.sweep.fork import forkable

# A forked job's estimate keeps at least this share of its own process' estimate.
MIN_SHARE = 0.5
# wall seconds of each analysis' own process in a real run (python -m bench.step_costs
# --analyses-from writes it)
ANALYSIS_TABLE = Path(__file__).with_name("costs") / "analysis_seconds.json"
ANALYSIS_FORMAT = 1
# What a GPU job of the plan pays before its first step, assumed until a GPU run times it (the
# run's timings then replace every estimate): it starts as a fresh process (never forked:
# seqprobe.sweep.fork), so it pays the interpreter, the imports, the CUDA context and building
# its models.
JOB_START_S = 20.0


@dataclass(frozen=True)
class AnalysisSeconds:
    """``seconds[level][name]``: wall seconds of analysis ``name``'s own process at ``level``
    in a real run (models it reads from the zoo not included: they are jobs of their own),
    and where they were taken (``meta``)."""

    seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path = ANALYSIS_TABLE) -> AnalysisSeconds:
        """The table at ``path``; an empty one when it is missing, unreadable or of another
        format (an estimate is a convenience, never a reason to refuse a run)."""
        doc = read_table(path, ANALYSIS_FORMAT)
        return cls(dict(doc.get("analysis_s", {})), dict(doc.get("meta", {})))

    def estimate(self, name: str, level: str, device: str = "cpu") -> Estimate | None:
        """Seconds of analysis ``name``'s own process at ``level``; else the median analysis
        of that level; None when the table has none. ``device`` "cuda": a GPU plan of a level
        no run has timed yet takes the largest level timed (its analyses' own processes are
        CPU work beside the GPU's training: the closest in size)."""
        known = self.seconds.get(level, {})
        if not known and device == "cuda" and self.seconds:
            largest = max(self.seconds, key=lambda lv: sum(self.seconds[lv].values()))
            est = self.estimate(name, largest)
            return Estimate(est.seconds, f"level {largest}") if est else None
        if name in known:
            return Estimate(float(known[name]), "table")
        if known:
            return Estimate(statistics.median(known.values()), "median")
        return None


@functools.cache
def shipped_analysis_seconds() -> AnalysisSeconds:
    return AnalysisSeconds.load()


def load_scale(costs: StepCosts) -> float:
    """This machine's reference step now over the one the table was measured with: an
    analysis' seconds in the table (wall seconds of a real run on idle cores) scaled as the
    training rows are (in reference steps), so other work on the machine shows in both."""
    measured = [r["ref_s"] for r in costs.rows.values() if r.get("ref_s")]
    if not measured or costs.unit_s <= 0:
        return 1.0
    return costs.unit_s / statistics.median(measured)


def estimate(job: Job, level: str, costs: StepCosts, timings: Mapping,
             analyses: AnalysisSeconds | None = None) -> Estimate | None:
    """A job's seconds: the last run's time of it (``timings``, the same level's), else the
    step-cost table's estimate (an analysis: ``analyses``', default the shipped
    :data:`ANALYSIS_TABLE`); None when neither knows it."""
    last = timings.get(job.name)
    if isinstance(last, Mapping) and last.get("ok") is True:
        seconds = last.get("seconds")
        if isinstance(seconds, (int, float)) and seconds > 0:
            return Estimate(float(seconds), "timings")
    if not job.recipes:
        found = own_runs_estimate(job, level, costs)
        if found is None:
            table = shipped_analysis_seconds() if analyses is None else analyses
            found = table.estimate(job.name, level, costs.device)
            if found is not None and costs.device != "cuda":
                found = Estimate(found.seconds * load_scale(costs), found.source)
    else:
        try:
            run_configs = [recipe_run_config(r, level) for r in job.recipes]
        except InputError:
            return None
        found = (costs.run(run_configs[0], job.device) if len(run_configs) == 1
                 else ensemble_estimate(run_configs, costs, job.device))
    if found is not None and costs.device == "cuda" and job.recipes and job.device != "cpu":
        # a GPU job starts as a fresh process (seqprobe.sweep.fork): its start-up too
        return Estimate(found.seconds + JOB_START_S, found.source)
    if found is None or costs.device == "cuda" or forkable(job.argv, job.device) is None:
        return found
    # The table's seconds are of a process of its own, its interpreter and imports included; a
    # forked job (seqprobe.sweep.fork) starts with them paid.
    start = costs.start_seconds()
    return Estimate(max(found.seconds - start, MIN_SHARE * found.seconds), found.source)


def own_runs_estimate(job: Job, level: str, costs: StepCosts) -> Estimate | None:
    """Seconds of an analysis that trains its own runs (``Figure.own_runs``: a search's
    cells), from the runs' costs on its device spread over the cores its job holds; None when
    it declares none at this level or the table cannot cost them."""
    if job.figure is None:
        return None
    runs = job.figure.own_runs(level)
    if not runs:
        return None
    cpu = job.device == "cpu" or costs.device != "cuda"
    total = 0.0
    for count, build in runs:
        one = costs.run(build(), "cpu" if cpu else job.device)
        if one is None:
            return None
        # a CPU estimate counts each run's process start-up: the cells share the job's process
        start = costs.start_seconds() if cpu else 0.0
        total += count * max(one.seconds - start, 0.0)
    return Estimate(total / max(job.slots, 1), "its own runs")


def ensemble_estimate(run_configs: Sequence[RunConfig], costs: StepCosts,
                      device: str | None) -> Estimate | None:
    """Seconds of an ensemble of ``run_configs`` (:mod:`models.train.ensemble`). On CPU cores: its
    members' runs one after another, less all but one start-up (a CPU step is bound by its
    arithmetic, which an ensemble does not share: bench/results.json ``ensemble``). On a
    GPU, where a small model's step is bound by kernel launches: the longest member's
    steps at the slowest member step, or the members' FLOPs together at the assumed
    utilisation where those take longer (source ``ensemble projection`` until a CUDA table
    has ensemble rows)."""
    if costs.device == "cuda" and device != "cpu":
        per_step = max(costs.gpu_step(s).seconds for s in run_configs)
        flops = 0.0
        for s in run_configs:
            row = plan_row(s.arch, s)
            flops += row["flops_per_token"] * row["tokens_per_step"]
        precision = gpu_costs.run_settings(run_configs[0], "cuda")[0]
        step = max(per_step, gpu_costs.projected_seconds(flops, precision))
        longest = max(run_configs, key=lambda s: s.train.steps)  # one compile, shared evals
        return Estimate(step * longest.train.steps + costs.gpu_overhead(longest, step),
                        "ensemble projection")
    runs = [costs.run(s, device) for s in run_configs]
    if any(r is None for r in runs):
        return None
    start = costs.start_seconds()
    seconds = sum(r.seconds for r in runs) - start * (len(runs) - 1)
    return Estimate(max(seconds, max(r.seconds for r in runs)), runs[0].source)


def plan_eta(jobs: list[Job], workers: int, level: str, costs: StepCosts,
             timings: Mapping, analyses: AnalysisSeconds | None = None) -> Eta:
    """The run's :class:`~seqprobe.sweep.eta.Eta`, each job estimated by :func:`estimate`."""
    return Eta.of(jobs, workers, lambda j: estimate(j, level, costs, timings, analyses))


def sources(eta: Eta) -> str:
    """Where the estimates come from, for the line printed at the start."""
    words = {"timings": "the last run's times", "table": "the step-cost table",
             "flops": "the table's rate for their architecture",
             "median": "the table's median analysis", "none": "no estimate (mean used)",
             "its own runs": "the runs they train themselves (a search's expected cells)",
             "measured": "the CUDA step-cost table (step times measured on a GPU)",
             "projection": "their FLOPs, projected (no measured step of their model: "
                           "a new architecture, or a GPU without its row)"}
    return ", ".join(f"{n} from {words.get(s, 'the table: ' + s)}"
                     for s, n in eta.counts().items())
