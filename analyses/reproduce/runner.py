"""Running the jobs: each in its own process (or Ray remote call), at most ``jobs`` cores' worth at
once, each after the jobs it needs; a failure is reported and the rest still run."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from analyses.reproduce.index import Outcome, read_claim_margins
from analyses.reproduce.plan import TRAIN, Job, priorities
from analyses.reproduce.pool import ForkedJob, forkable
from seqprobe.atomic import open_own
from seqprobe.config import check
from seqprobe.errors import InputError, OutputError
from seqprobe.orphans import PARENT_ENV
from seqprobe.sweep import Backend, RayCommand


@dataclass
class _Running:
    job: Job
    proc: subprocess.Popen | ForkedJob | RayCommand
    log: Path
    t0: float
    slots: int
    log_lock: int | None = None  # this run's hold on its log (see _own_log)


def log_name(job: Job) -> str:
    return job.name.replace(TRAIN, "train-").replace("/", "_")


def _start(job: Job, out: Path, slots: int, threads_per_slot: int,
           backend: Backend | None = None) -> _Running:
    """Start a job in its own process (and process group, so a timeout also stops its
    workers): forked from this one where it can be (:mod:`.pool`), else a subprocess; its
    output goes to ``out/logs/NAME.log``."""
    log, lock = _own_log(out / "logs" / f"{log_name(job)}.log")
    # torch, MKL and OpenMP read these at start-up: each process gets its share of the cores
    n = str(slots * threads_per_slot)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
           "TQDM_MININTERVAL": "30",  # a progress line every half minute in the log
           PARENT_ENV: str(os.getpid())}  # a subprocess job ends when this run is killed
    if backend is not None and backend.ray:  # on Ray, with the job's cores (and a GPU)
        own = {k: env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TQDM_MININTERVAL")}
        cmd = RayCommand(job.argv, replace(backend, num_cpus=slots), env=own)
        return _Running(job, cmd, log, time.time(), slots, lock)
    module = forkable(job.argv, job.device)
    if module is not None:  # forked from this process: torch and the suite imported once
        own = {k: env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TQDM_MININTERVAL")}
        proc = ForkedJob(module, job.argv[3:], log, own, slots * threads_per_slot)
        return _Running(job, proc, log, time.time(), slots, lock)
    with os.fdopen(open_own(log, os.O_WRONLY), "w") as f:  # log was checked by _own_log
        proc = subprocess.Popen(list(job.argv), stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    return _Running(job, proc, log, time.time(), slots, lock)


def _own_log(log: Path) -> tuple[Path, int]:
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


def _check_logs(jobs: list[Job], out: Path) -> None:
    """Every job's log that is there already is one this run may write (:func:`_own_log`'s
    checks), before any job starts: a planted link is one line, not a run stopped halfway."""
    for job in jobs:
        log = out / "logs" / f"{log_name(job)}.log"
        if os.path.lexists(log):
            try:
                os.close(open_own(log, os.O_RDONLY))
            except OSError as e:
                raise OutputError(f"{log}: cannot write the job's log ({e.strerror})") from None


def _finish(r: _Running, out: Path, timed_out: float | None = None) -> Outcome:
    if r.log_lock is not None:
        os.close(r.log_lock)
    seconds = time.time() - r.t0
    if isinstance(r.proc, RayCommand):  # its output came back with the result
        with os.fdopen(open_own(r.log, os.O_WRONLY), "w") as f:
            f.truncate(0)
            f.write(r.proc.output)
    log = r.log.read_text(errors="replace")
    if timed_out is not None:
        ok, log = False, log + f"\n(timed out after {timed_out:.0f} s)"
    else:
        ok = r.proc.returncode == 0
        if not ok:
            log += f"\n(exit code {r.proc.returncode})"
    missing = r.job.missing(out)
    if ok and missing:
        ok, log = False, log + f"\n(no {', '.join(missing)} written in {out})"
    read = []
    if ok and r.job.figure:
        try:
            read = read_claim_margins(r.job, out)
        except InputError as e:
            ok, log = False, log + f"\n({e})"
    return Outcome(r.job, ok, seconds, log[-3000:], [c[:3] for c in read],
                   [c.margin for c in read], [c.tests for c in read])


# seconds a stopped run's jobs get to save their checkpoints before they are killed
STOP_GRACE = 30.0


def _kill(r: _Running, grace: float = 0.0) -> None:
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


def run_jobs(jobs: list[Job], out: Path, slots: int = 1, timeout: float = 3600.0,
             on_start: Callable[[list[str]], None] = lambda names: None,
             on_done: Callable[[Outcome], None] = lambda o: None, poll: float = 0.2,
             expected: Mapping[str, float] | None = None,
             backend: Backend | None = None) -> list[Outcome]:
    """Run every job, at most ``slots`` cores' worth at once (``--jobs``), each after the jobs
    it names in ``after``. Of the jobs ready to start, the one with the highest
    :func:`~analyses.reproduce.plan.priorities` of ``expected`` seconds goes first; list order
    breaks ties. A job that fails or times out is reported through ``on_done``, and so are the
    jobs that needed it (not run); the rest still run. Outcomes come back in list order."""
    check(slots >= 1, f"--jobs must be >= 1, got {slots}")
    _check_logs(jobs, out)
    threads = max(1, (os.cpu_count() or 1) // slots)
    by_name = {j.name: j for j in jobs}
    waiting_on: dict[str, list[str]] = {j.name: [] for j in jobs}
    for j in jobs:
        for a in j.after:
            if a in waiting_on:
                waiting_on[a].append(j.name)
    priority = priorities(jobs, expected or {})
    pending: list[Job] = list(jobs)
    running: list[_Running] = []
    done: dict[str, Outcome] = {}

    def fail_dependents(name: str) -> None:
        for n in waiting_on[name]:
            j = by_name[n]
            if j in pending:
                pending.remove(j)
                done[n] = o = Outcome(j, False, 0.0, f"not run: {name} failed", [],
                                      status="not run")
                on_done(o)
                fail_dependents(n)

    try:
        while pending or running:
            free = slots - sum(r.slots for r in running)
            started = False
            for j in sorted(pending, key=lambda j: -priority[j.name]):
                need = min(j.slots, slots)
                ready = all(a not in by_name or (a in done and done[a].ok) for a in j.after)
                if need <= free and ready:
                    running.append(_start(j, out, need, threads, backend))
                    pending.remove(j)
                    free -= need
                    started = True
            if started:
                on_start([r.job.name for r in running])
            if not running and pending:  # nothing can start: a bug in the job graph
                raise InputError(f"jobs wait on nothing that runs: "
                                f"{', '.join(j.name for j in pending)}")
            time.sleep(poll)
            for r in list(running):
                if r.proc.poll() is None:
                    timed_out = time.time() - r.t0 > timeout
                    if not timed_out:
                        continue
                    _kill(r)
                else:  # finished, even if the poll came after the deadline
                    timed_out = False
                running.remove(r)
                done[r.job.name] = o = _finish(r, out, timeout if timed_out else None)
                on_done(o)
                if not o.ok:
                    fail_dependents(r.job.name)
    finally:  # Ctrl-C / SIGTERM: no orphaned processes left training in the background
        for r in running:
            _kill(r, grace=STOP_GRACE)
    return [done[j.name] for j in jobs]
