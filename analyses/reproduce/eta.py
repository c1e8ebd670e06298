"""How long the rest of a reproduce run will take, from its first second.

Each job's cost is estimated before it has ever run: a training job from its recipe's steps
times the shipped step cost of its model (:class:`models.train.costs.StepCosts`; a model the
table never measured is projected from its FLOPs, and the start line says so), an analysis
from the seconds its own process took in the run the table was filled from. A job the last run
of this level timed (``reproduce_timings.json``) takes that time instead. The ETA is then the
makespan of the pending jobs packed onto the ``--jobs`` slots the way the scheduler packs them
(:func:`makespan`: the longest chain first, each job after the ones it needs), and the jobs
running now hold their slots for what is left of their estimate.

As jobs finish, :class:`Eta` learns how far this machine (its load, its cores) is from the
estimates: every pending cost is scaled by the ratio of the finished jobs' real seconds to their
estimates, shrunk toward 1 by :data:`PRIOR_SHARE` so that one early job cannot swing it; a job
still running past its estimate counts with the seconds it has run so far, so a machine slower
than the table (other work on it) shows in the ETA before its first long job ends.

The table's seconds are of jobs in processes of their own; the run forks its jobs from a
process that has the imports paid (:mod:`.pool`), so a forked job's estimate is the table's
less a process' start-up (:meth:`~models.train.costs.StepCosts.start_seconds`).
"""

from __future__ import annotations

import heapq
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from analyses.reproduce.plan import Job, priorities
from analyses.reproduce.pool import forkable
from analyses.zoo.dryrun import recipe_run_config
from models.train import gpu_costs
from models.train.costs import Estimate, StepCosts
from models.train.plan import plan_row
from models.train.runconfig import RunConfig
from seqprobe.errors import InputError

# The table's estimate weighs as much as finished jobs whose estimates add up to this share of
# the whole plan's: the learned ratio moves only once a real part of the plan has run.
PRIOR_SHARE = 0.25
# A forked job's estimate keeps at least this share of its own process' estimate.
MIN_SHARE = 0.5


def load_scale(costs: StepCosts) -> float:
    """This machine's reference step now over the one the table was measured with: an
    analysis' seconds in the table (wall seconds of a real run on idle cores) scaled as the
    training rows are (in reference steps), so other work on the machine shows in both."""
    measured = [r["ref_s"] for r in costs.rows.values() if r.get("ref_s")]
    if not measured or costs.unit_s <= 0:
        return 1.0
    return costs.unit_s / statistics.median(measured)


def estimate(job: Job, level: str, costs: StepCosts, timings: Mapping) -> Estimate | None:
    """A job's seconds: the last run's time of it (``timings``, the same level's), else the
    step-cost table's estimate; None when neither knows it."""
    last = timings.get(job.name)
    if isinstance(last, Mapping) and last.get("ok") is True:
        seconds = last.get("seconds")
        if isinstance(seconds, (int, float)) and seconds > 0:
            return Estimate(float(seconds), "timings")
    if not job.recipes:
        found = own_runs_estimate(job, level, costs)
        if found is None:
            found = costs.analysis(job.name, level)
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
        # a GPU job starts as a fresh process (analyses.reproduce.pool): its start-up too
        return Estimate(found.seconds + gpu_costs.JOB_START_S, found.source)
    if found is None or costs.device == "cuda" or forkable(job.argv, job.device) is None:
        return found
    # The table's seconds are of a process of its own, its interpreter and imports included; a
    # forked job (analyses.reproduce.pool) starts with them paid.
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


def makespan(jobs: Sequence[Job], cost: Mapping[str, float], slots: int,
             running: Mapping[str, tuple[float, int]] | None = None) -> float:
    """Seconds until every job in ``jobs`` has run, scheduled as
    :func:`~analyses.reproduce.runner.run_jobs` schedules them: whenever slots are free, the
    ready jobs in order of :func:`~analyses.reproduce.plan.priorities` that fit; a job waits
    for the jobs it names in ``after`` (names outside ``jobs`` count as done). ``running``:
    ``{name: (seconds left, slots held)}`` of jobs already started."""
    running = dict(running or {})
    priority = priorities(jobs, cost)
    order = sorted(jobs, key=lambda j: -priority[j.name])  # stable: list order breaks ties
    names = {j.name for j in jobs} | set(running)
    done: set[str] = set()
    ends = [(left, name, held) for name, (left, held) in running.items()]
    heapq.heapify(ends)
    free = slots - sum(held for _, _, held in ends)
    pending = list(order)
    now = 0.0
    while pending or ends:
        for j in list(pending):
            need = min(j.slots, slots)
            if need <= free and all(a not in names or a in done for a in j.after):
                heapq.heappush(ends, (now + cost.get(j.name, 0.0), j.name, need))
                pending.remove(j)
                free -= need
        if not ends:  # nothing can start: the scheduler raises for such a graph
            break
        now, name, held = heapq.heappop(ends)
        done.add(name)
        free += held
    return now


@dataclass
class Eta:
    """The run's estimates, and the ratio of real to estimated seconds learned as jobs end."""

    jobs: list[Job]
    slots: int
    estimates: dict[str, Estimate]
    finished: set[str] = field(default_factory=set)  # ended, run or not
    measured: dict[str, float] = field(default_factory=dict)  # ran to success: real seconds

    def done(self, name: str, seconds: float | None, ok: bool) -> None:
        """Record a job's end; only a job that ran to success teaches the ratio (a failure
        may stop early, a job not run took no time)."""
        self.finished.add(name)
        if ok and seconds is not None:
            self.measured[name] = seconds

    @classmethod
    def of(cls, jobs: list[Job], slots: int, level: str, costs: StepCosts,
           timings: Mapping) -> Eta:
        found = {j.name: estimate(j, level, costs, timings) for j in jobs}
        return cls(jobs, slots, {k: v for k, v in found.items() if v is not None})

    def ratio(self, running: Mapping[str, float] | None = None) -> float:
        """Real over estimated seconds of the finished jobs, shrunk toward 1. ``running``:
        seconds so far of the jobs still running; one already past its estimate is at least
        that much slower, and counts so (a loaded machine shows before its jobs end)."""
        prior = PRIOR_SHARE * sum(e.seconds for e in self.estimates.values())
        real = sum(s for n, s in self.measured.items() if n in self.estimates)
        est = sum(self.estimates[n].seconds for n in self.measured if n in self.estimates)
        for n, so_far in (running or {}).items():
            if n in self.estimates and so_far > self.estimates[n].seconds:
                real += so_far
                est += self.estimates[n].seconds
        return (real + prior) / (est + prior) if est + prior > 0 else 1.0

    def costs(self, running: Mapping[str, float] | None = None) -> dict[str, float]:
        """Each job's expected seconds now (``running``: as :meth:`ratio`); a job without an
        estimate gets the mean of the others (0 when none has one)."""
        known = [e.seconds for e in self.estimates.values()]
        fill = sum(known) / len(known) if known else 0.0
        r = self.ratio(running)
        return {j.name: r * (self.estimates[j.name].seconds if j.name in self.estimates
                             else fill) for j in self.jobs}

    def remaining(self, started: Mapping[str, float], now: float | None = None) -> float:
        """Seconds until the run ends: ``started`` maps each running job to its start time."""
        now = time.time() if now is None else now
        so_far = {n: now - t0 for n, t0 in started.items()}
        cost = self.costs(so_far)
        by_name = {j.name: j for j in self.jobs}
        running = {n: (max(cost[n] - so_far[n], 0.0), min(by_name[n].slots, self.slots))
                   for n in started}
        pending = [j for j in self.jobs if j.name not in self.finished and j.name not in started]
        return makespan(pending, cost, self.slots, running)

    def sources(self) -> str:
        """Where the estimates come from, for the line printed at the start."""
        counts: dict[str, int] = {}
        for j in self.jobs:
            src = self.estimates[j.name].source if j.name in self.estimates else "none"
            counts[src] = counts.get(src, 0) + 1
        words = {"timings": "the last run's times", "table": "the step-cost table",
                 "flops": "the table's rate for their architecture",
                 "median": "the table's median analysis", "none": "no estimate (mean used)",
                 "its own runs": "the runs they train themselves (a search's expected cells)",
                 "measured": "the CUDA step-cost table (step times measured on a GPU)",
                 "projection": "their FLOPs, projected (no measured step of their model: "
                               "a new architecture, or a GPU without its row)"}
        return ", ".join(f"{n} from {words.get(s, 'the table: ' + s)}"
                         for s, n in counts.items())
