"""A job never outlives the run that started it.

``kill -9`` of ``python -m analyses.reproduce`` runs none of its handlers: the jobs it started
(each in a process group of its own, so that a timeout can end a job and what it started) and
their worker processes (joblib's) would go on training and writing outputs for minutes after
the run is gone, and a rerun would meet them. So each job watches the process that started it:
once that process is gone (the job is re-parented), the job ends its whole process group — it
and every worker it started — at once. A job started as a forked process calls
:func:`die_with` itself; one started as a subprocess gets :data:`PARENT_ENV` and the suite's
command line (:func:`seqprobe.cli.run_cli`) calls :func:`die_with_parent_from_env`.
"""

from __future__ import annotations

import os
import signal
import threading
import time

PARENT_ENV = "SEQPROBE_RUN_PID"  # the pid of the run a subprocess job belongs to
POLL_S = 0.5  # how often a job looks for its run: it outlives a killed run by at most this


def die_with(parent_pid: int, poll_s: float = POLL_S) -> None:
    """From now on, when ``parent_pid`` is no longer this process's parent, SIGKILL this
    process's group (this process and the workers it started in it). Call it in the job,
    after it has its own process group: the run's own group is never touched."""
    if os.getpgid(0) != os.getpid():
        return  # not a group leader: killing the group would reach the run itself

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, name="seqprobe-die-with-run", daemon=True).start()


def die_with_parent_from_env() -> None:
    """:func:`die_with` the run named by :data:`PARENT_ENV`, in a job that run started itself
    (its grandchildren, which inherit the variable, are ended by the job's group kill)."""
    text = os.environ.get(PARENT_ENV, "")
    if text.isascii() and text.isdigit() and os.getppid() == int(text):
        die_with(int(text))
