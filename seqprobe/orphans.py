"""A job never outlives the run that started it.

``kill -9`` of ``python -m analyses.reproduce`` runs none of its handlers: the jobs it started
(each in a process group of its own, so that a timeout can end a job and what it started) and
their worker processes (joblib's) would go on training and writing outputs for minutes after
the run is gone, and a rerun would meet them. So each job watches the process that started it:
once that process is gone (the job is re-parented), the job ends its whole process group — it
and every worker it started — at once; a training job first saves its checkpoint, as on a
SIGTERM. A job started as a forked process calls :func:`die_with` itself; one started as a
subprocess gets :data:`PARENT_ENV` and the suite's command line (:func:`seqprobe.cli.run_cli`)
calls :func:`die_with_parent_from_env`. ``python -m models.train.launch`` names itself so to
its DDP workers (torchrun starts each in a session of its own): ``kill -9`` of the launcher
takes them with it instead of leaving them holding the ``--out`` lock.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time

PARENT_ENV = "SEQPROBE_RUN_PID"  # the pid of the run a subprocess job belongs to
POLL_S = 0.1  # how often a job looks for its run: it outlives a killed run by about this
_WATCHING: set[int] = set()  # the processes (pids) already watching their run
STOP_GRACE_S = 30.0  # an orphaned job that saves on SIGTERM (training) has this long to save


def _group_others(pgid: int) -> list[int]:
    """The live processes of group ``pgid`` other than this one (Linux: read from /proc)."""
    me, others = os.getpid(), []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != me:
                with contextlib.suppress(OSError):
                    if os.getpgid(int(name)) == pgid:
                        others.append(int(name))
    return others


def _saves_on_sigterm() -> bool:
    """Whether this process handles SIGTERM in Python now: a training run, which saves its
    checkpoint on it (:mod:`models.train.loop`), rather than dying at once."""
    return callable(signal.getsignal(signal.SIGTERM))


def die_with(parent_pid: int, poll_s: float = POLL_S, grace_s: float = STOP_GRACE_S) -> None:
    """From now on, when ``parent_pid`` is no longer this process's parent, end this process's
    group (this process and the workers it started in it). A job that saves on SIGTERM (a
    training run: one DDP worker of many, say) gets one SIGTERM, as a stopped run would, and
    saves its checkpoint; its group is SIGKILLed when it exits, or after ``grace_s`` (a rank
    waiting on a dead peer). Any other job's group is SIGKILLed at once. Call it in the job,
    after it has its own process group: the run's own group is never touched."""
    if os.getpgid(0) != os.getpid() or os.getpid() in _WATCHING:
        return  # not a group leader: killing the group would reach the run itself
    pgid = me = os.getpid()
    _WATCHING.add(me)  # once a process: each command of a test session calls this

    def orphaned() -> bool:
        return os.getppid() != parent_pid

    def end_the_rest() -> None:  # at exit, orphaned: the workers this job leaves behind
        if os.getpid() == me and orphaned():  # not in a child forked since
            for pid in _group_others(pgid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def watch() -> None:
        while not orphaned():
            time.sleep(poll_s)
        if _saves_on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(grace_s)
        os.killpg(pgid, signal.SIGKILL)

    atexit.register(end_the_rest)
    threading.Thread(target=watch, name="seqprobe-die-with-run", daemon=True).start()


def die_with_parent_from_env() -> None:
    """:func:`die_with` the run named by :data:`PARENT_ENV`, in a job that run started itself
    (its grandchildren, which inherit the variable, are ended by the job's group kill)."""
    text = os.environ.get(PARENT_ENV, "")
    if text.isascii() and text.isdigit() and os.getppid() == int(text):
        die_with(int(text))
