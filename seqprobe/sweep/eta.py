"""How long the rest of a run of command jobs (:mod:`seqprobe.sweep.commands`) will take.

Each job has an estimate before it has ever run (the caller's: the reproduce plan's come from
its cost tables, :mod:`analyses.reproduce.eta`). The ETA is the makespan of the pending jobs
packed onto the ``workers`` cores the way :func:`~seqprobe.sweep.commands.run_commands` packs
them (:func:`makespan`: the longest chain first, each job after the ones it needs), and the
jobs running now hold their cores for what is left of their estimate.

As jobs finish, :class:`Eta` learns how far this machine (its load, its cores) is from the
estimates: every pending cost is scaled by the ratio of the finished jobs' real seconds to their
estimates, shrunk toward 1 by :data:`PRIOR_SHARE` so that one early job cannot swing it; a job
still running past its estimate counts with the seconds it has run so far, so a machine slower
than the estimates (other work on it) shows in the ETA before its first long job ends.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from seqprobe.sweep.commands import Command, priorities

# The estimates weigh as much as finished jobs whose estimates add up to this share of the
# whole run's: the learned ratio moves only once a real part of the run has run.
PRIOR_SHARE = 0.25


def makespan(jobs: Sequence[Command], cost: Mapping[str, float], workers: int,
             running: Mapping[str, tuple[float, int]] | None = None) -> float:
    """Seconds until every job in ``jobs`` has run, scheduled as
    :func:`~seqprobe.sweep.commands.run_commands` schedules them: whenever cores are free, the
    ready jobs in order of :func:`~seqprobe.sweep.commands.priorities` that fit; a job waits
    for the jobs it names in ``after`` (names outside ``jobs`` count as done). ``running``:
    ``{name: (seconds left, slots held)}`` of jobs already started."""
    running = dict(running or {})
    priority = priorities(jobs, cost)
    order = sorted(jobs, key=lambda j: -priority[j.name])  # stable: list order breaks ties
    names = {j.name for j in jobs} | set(running)
    done: set[str] = set()
    ends = [(left, name, held) for name, (left, held) in running.items()]
    heapq.heapify(ends)
    free = workers - sum(held for _, _, held in ends)
    pending = list(order)
    now = 0.0
    while pending or ends:
        for j in list(pending):
            need = min(j.slots, workers)
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
    """The run's estimates (each with ``seconds`` and ``source``: where it came from), and the
    ratio of real to estimated seconds learned as jobs end."""

    jobs: list[Command]
    workers: int
    estimates: dict[str, Any]
    finished: set[str] = field(default_factory=set)  # ended, run or not
    measured: dict[str, float] = field(default_factory=dict)  # ran to success: real seconds

    @classmethod
    def of(cls, jobs: list[Command], workers: int,
           estimate: Callable[[Command], Any | None]) -> Eta:
        """The ETA of ``jobs`` with ``estimate(job)`` each (None: not known)."""
        found = {j.name: estimate(j) for j in jobs}
        return cls(jobs, workers, {k: v for k, v in found.items() if v is not None})

    def done(self, name: str, seconds: float | None, ok: bool) -> None:
        """Record a job's end; only a job that ran to success teaches the ratio (a failure
        may stop early, a job not run took no time)."""
        self.finished.add(name)
        if ok and seconds is not None:
            self.measured[name] = seconds

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
        running = {n: (max(cost[n] - so_far[n], 0.0), min(by_name[n].slots, self.workers))
                   for n in started}
        pending = [j for j in self.jobs if j.name not in self.finished and j.name not in started]
        return makespan(pending, cost, self.workers, running)

    def counts(self) -> dict[str, int]:
        """How many jobs' estimates come from each source ("none": no estimate)."""
        counts: dict[str, int] = {}
        for j in self.jobs:
            src = self.estimates[j.name].source if j.name in self.estimates else "none"
            counts[src] = counts.get(src, 0) + 1
        return counts
