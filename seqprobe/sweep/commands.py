"""Command jobs with dependencies: each :class:`Command` in its own process (or Ray remote call),
at most ``workers`` cores' worth at once, each after the jobs it needs; a failure is reported,
the jobs that needed it are not run, and the rest still run (:func:`run_commands`).

This is :mod:`seqprobe.sweep`'s scheduler for whole commands (the reproduce plan's analyses
and ``python -m analyses.zoo train``), beside :func:`~seqprobe.sweep.map_jobs` for a
function over independent items. A command job starts:

* forked from this process where it can be (:mod:`.fork`: ``python -m MODULE`` whose module has
  a ``main``, on a machine with ``os.fork``, never a CUDA job or after this process touched
  CUDA),
* else as a subprocess in a session of its own,
* or, on a Ray backend (:class:`~seqprobe.sweep.Backend` with ``ray``), as a Ray remote call
  (:class:`~seqprobe.sweep.RayCommand`) with the job's cores (and a GPU) and the backend's
  retries.

Each job's output goes to ``logs/NAME.log`` (:func:`own_log`: a link planted there is refused,
two runs into one folder each keep their own log). A job past ``timeout`` seconds is killed
with its process group; a stopped run (Ctrl-C, SIGTERM) gives its jobs :data:`STOP_GRACE`
seconds to save their checkpoints (SIGTERM), then kills their groups.

Single processes that are not jobs of a plan (``git describe``, pytest, the GPU call's stages)
start through :func:`~seqprobe.sweep.run_command`.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from seqprobe.atomic import open_own
from seqprobe.config import check
from seqprobe.errors import InputError, OutputError
from seqprobe.orphans import PARENT_ENV
from seqprobe.sweep import Backend, RayCommand
from seqprobe.sweep.fork import ForkedJob, forkable

# seconds a stopped run's jobs get to save their checkpoints before they are killed
STOP_GRACE = 30.0
# what a job's process reads at start-up: its share of the cores, a progress line every half
# minute in its log
_OWN_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TQDM_MININTERVAL")


@dataclass(frozen=True)
class Command:
    """One job of :func:`run_commands`: a command (``argv``) of its own process."""

    name: str
    argv: tuple[str, ...]
    slots: int = 1  # cores it keeps busy
    after: tuple[str, ...] = ()  # jobs that must have succeeded first
    device: str | None = None  # the --device it was given (None: its default)

    @property
    def log_name(self) -> str:
        """Its log's file name without ``.log``: the name with ``:`` and ``/`` made safe."""
        return self.name.replace(":", "-").replace("/", "_")


@dataclass(frozen=True)
class Ended:
    """How a job ended: ``status`` "ok", "failed" (a non-zero exit), "timed out" or "not run"
    (a job it needed failed); ``log`` is its whole log, with a note of why it failed."""

    command: Command
    status: str
    seconds: float
    log: str
    returncode: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class _Outcome(Protocol):
    ok: bool


R = TypeVar("R", bound=_Outcome)


@dataclass
class Running:
    command: Command
    proc: subprocess.Popen | ForkedJob | RayCommand
    log: Path
    t0: float
    slots: int
    log_lock: int | None = None  # this run's hold on its log (see own_log)


def _start(job: Command, logs: Path, slots: int, threads_per_slot: int,
           backend: Backend | None = None) -> Running:
    """Start a job in its own process (and process group, so a timeout also stops its
    workers): forked from this one where it can be (:mod:`.fork`), else a subprocess; its
    output goes to ``logs/NAME.log``."""
    log, lock = own_log(logs / f"{job.log_name}.log")
    # torch, MKL and OpenMP read these at start-up: each process gets its share of the cores
    n = str(slots * threads_per_slot)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
           "TQDM_MININTERVAL": "30",  # a progress line every half minute in the log
           PARENT_ENV: str(os.getpid())}  # a subprocess job ends when this run is killed
    own = {k: env[k] for k in _OWN_ENV}
    if backend is not None and backend.ray:  # on Ray, with the job's cores (and a GPU)
        cmd = RayCommand(job.argv, replace(backend, num_cpus=slots), env=own)
        return Running(job, cmd, log, time.time(), slots, lock)
    module = forkable(job.argv, job.device)
    if module is not None:  # forked from this process: torch and the suite imported once
        proc = ForkedJob(module, job.argv[3:], log, own, slots * threads_per_slot)
        return Running(job, proc, log, time.time(), slots, lock)
    with os.fdopen(open_own(log, os.O_WRONLY), "w") as f:  # log was checked by own_log
        proc = subprocess.Popen(list(job.argv), stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    return Running(job, proc, log, time.time(), slots, lock)


def own_log(log: Path) -> tuple[Path, int]:
    """``log``, or ``NAME.PID.log`` beside it when another live run holds ``log`` (two runs
    into one folder: each keeps its own job's log whole), with this run's lock on it (an
    exclusive ``flock``, released when the job ends or this run dies), emptied. A log that is a
    symbolic link, a hard link or no regular file is refused (:func:`seqprobe.atomic.open_own`):
    writing it would overwrite the file it leads to."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{log.parent}: cannot create the log folder ({e.strerror})") from None
    for path in (log, log.with_name(f"{log.stem}.{os.getpid()}.log")):
        try:
            fd = open_own(path, os.O_RDWR, 0o644)
        except OSError as e:
            raise OutputError(f"{path}: cannot write the job's log ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        return path, fd
    raise InputError(f"{log}: held by another run, and so is this run's own name for it")


def check_logs(jobs: Sequence[Command], logs: Path) -> None:
    """Every job's log that is there already is one this run may write (:func:`own_log`'s
    checks), before any job starts: a planted link is one line, not a run stopped halfway."""
    for job in jobs:
        log = logs / f"{job.log_name}.log"
        if os.path.lexists(log):
            try:
                os.close(open_own(log, os.O_RDONLY))
            except OSError as e:
                raise OutputError(f"{log}: cannot write the job's log ({e.strerror})") from None


def _ended(r: Running, timed_out: float | None = None) -> Ended:
    if r.log_lock is not None:
        os.close(r.log_lock)
    seconds = time.time() - r.t0
    if isinstance(r.proc, RayCommand):  # its output came back with the result
        with os.fdopen(open_own(r.log, os.O_WRONLY), "w") as f:
            f.truncate(0)
            f.write(r.proc.output)
    log = r.log.read_text(errors="replace")
    if timed_out is not None:
        return Ended(r.command, "timed out", seconds,
                     log + f"\n(timed out after {timed_out:.0f} s)", r.proc.returncode)
    code = r.proc.returncode
    if code == 0:
        return Ended(r.command, "ok", seconds, log, 0)
    return Ended(r.command, "failed", seconds, log + f"\n(exit code {code})", code)


def kill(r: Running, grace: float = 0.0) -> None:
    """Stop a job's process group: SIGTERM first when ``grace`` > 0 (a training job then saves
    its checkpoint, which the next run resumes), SIGKILL after ``grace`` seconds."""
    if isinstance(r.proc, RayCommand):
        r.proc.kill()
        return
    try:
        if grace > 0:
            os.killpg(r.proc.pid, signal.SIGTERM)
            try:
                r.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # the group again, even after the job itself ended: workers it started (joblib's, say)
        # may outlive the SIGTERM that stopped it
        os.killpg(r.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    r.proc.wait()


def priorities(jobs: Sequence[Command], expected: Mapping[str, float]) -> dict[str, float]:
    """Each job's expected seconds plus the longest chain of expected seconds that waits on
    it: of the jobs ready to start, the highest goes first, so that no long chain is left to
    run alone at the end (the scheduler and the ETA's packing both use it)."""
    waiting_on: dict[str, list[str]] = {j.name: [] for j in jobs}
    for j in jobs:
        for a in j.after:
            if a in waiting_on:
                waiting_on[a].append(j.name)
    memo: dict[str, float] = {}

    def chain(name: str) -> float:
        if name not in memo:
            memo[name] = expected.get(name, 0.0) + max(
                (chain(n) for n in waiting_on[name]), default=0.0)
        return memo[name]

    return {j.name: chain(j.name) for j in jobs}


def _as_is(ended: Ended) -> Any:
    return ended


def run_commands(jobs: Sequence[Command], logs: Path, workers: int = 1,
                 timeout: float = 3600.0,
                 on_start: Callable[[list[str]], None] = lambda names: None,
                 on_done: Callable[[R], None] = lambda o: None, poll: float = 0.2,
                 expected: Mapping[str, float] | None = None,
                 backend: Backend | None = None,
                 outcome: Callable[[Ended], R] = _as_is) -> list[R]:
    """Run every job, at most ``workers`` cores' worth at once (a job holds its ``slots``),
    each after the jobs it names in ``after``. Of the jobs ready to start, the one with the
    highest :func:`priorities` of ``expected`` seconds goes first; list order breaks ties.

    ``outcome(ended)`` turns each job's :class:`Ended` into the caller's result (default: the
    :class:`Ended` itself), whose ``ok`` says whether the jobs after it may run (a caller may
    fail a job that exited 0 but left no output). A job that fails or times out is reported
    through ``on_done``, and so are the jobs that needed it (not run); the rest still run.
    Results come back in list order."""
    check(workers >= 1, f"--jobs must be >= 1, got {workers}")
    check_logs(jobs, logs)
    threads = max(1, (os.cpu_count() or 1) // workers)
    by_name = {j.name: j for j in jobs}
    waiting_on: dict[str, list[str]] = {j.name: [] for j in jobs}
    for j in jobs:
        for a in j.after:
            if a in waiting_on:
                waiting_on[a].append(j.name)
    priority = priorities(jobs, expected or {})
    pending: list[Command] = list(jobs)
    running: list[Running] = []
    done: dict[str, R] = {}

    def fail_dependents(name: str) -> None:
        for n in waiting_on[name]:
            j = by_name[n]
            if j in pending:
                pending.remove(j)
                done[n] = o = outcome(Ended(j, "not run", 0.0, f"not run: {name} failed"))
                on_done(o)
                fail_dependents(n)

    try:
        while pending or running:
            free = workers - sum(r.slots for r in running)
            started = False
            for j in sorted(pending, key=lambda j: -priority[j.name]):
                need = min(j.slots, workers)
                ready = all(a not in by_name or (a in done and done[a].ok) for a in j.after)
                if need <= free and ready:
                    running.append(_start(j, logs, need, threads, backend))
                    pending.remove(j)
                    free -= need
                    started = True
            if started:
                on_start([r.command.name for r in running])
            if not running and pending:  # nothing can start: a bug in the job graph
                raise InputError(f"jobs wait on nothing that runs: "
                                f"{', '.join(j.name for j in pending)}")
            time.sleep(poll)
            for r in list(running):
                if r.proc.poll() is None:
                    timed_out = time.time() - r.t0 > timeout
                    if not timed_out:
                        continue
                    kill(r)
                else:  # finished, even if the poll came after the deadline
                    timed_out = False
                running.remove(r)
                done[r.command.name] = o = outcome(_ended(r, timeout if timed_out else None))
                on_done(o)
                if not o.ok:
                    fail_dependents(r.command.name)
    finally:  # Ctrl-C / SIGTERM: no orphaned processes left training in the background
        for r in running:
            kill(r, grace=STOP_GRACE)
    return [done[j.name] for j in jobs]
