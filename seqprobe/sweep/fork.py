"""Command jobs forked from this process, which has torch, TransformerLens and the suite
imported already, instead of a fresh ``python -m MODULE`` per job that pays those imports again
(:mod:`seqprobe.sweep.commands` starts them).

A forked job is isolated as a process is: its own process group (a timeout or a stop ends it
and whatever it started), its output in its own log file, its exit code its own, and a crash
(an exception, a segfault, ``os._exit``) ends only it. It runs the module's ``main(argv)`` —
what ``python -m MODULE ARGV`` runs — with the job's thread count, default signal handlers
(SIGTERM reaches the training loop's own handler, which saves the checkpoint) and its unseeded
generators (torch, numpy, random) seeded afresh as a new interpreter seeds them, so a run is the
same run as in its own process.

Only jobs of the form ``python -m MODULE ...`` whose module has a ``main`` are forked; any
other command, and every job on a platform without ``os.fork``, starts as a subprocess.

**CUDA is never forked.** A job that uses a GPU (placed on ``cuda``, or on ``auto`` / its
default on a machine with one) starts as a fresh process, and once this process has
initialised CUDA no job is forked at all: a forked child cannot initialise CUDA again
("Cannot re-initialize CUDA in forked subprocess"). The planning process itself asks about the
GPU without initialising CUDA (:mod:`seqprobe.device`), so the CPU jobs of a GPU machine's
plan still fork.

The runner forks *commands* (the reproduce plan's analyses and ``python -m analyses.zoo
train``), not training runs: each command trains through :func:`seqprobe.sweep.map_jobs`
(tests/contract/test_one_job_runner.py lists every place a run or a process is started).
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import tqdm.std

from seqprobe.atomic import open_own
from seqprobe.device import cuda_present, cuda_touched
from seqprobe.orphans import die_with

# No tqdm monitor thread in a process that forks: a fork copies only the forking thread, and a
# lock the monitor held at that moment would stay held in the job.
tqdm.std.tqdm.monitor_interval = 0


def uses_cuda(device: str | None) -> bool:
    """Whether a job given ``--device device`` (None: its default, which is ``auto``) trains or
    evaluates on a GPU here."""
    if device in (None, "auto"):
        return cuda_present()
    try:
        return torch.device(device).type == "cuda"
    except RuntimeError:  # a bad name: the job itself refuses it, in its own process
        return False


def forkable(argv: Sequence[str], device: str | None = None) -> str | None:
    """The module whose ``main`` runs ``python -m MODULE ...`` if this process can run it
    forked, else None: MODULE itself, or its ``cli`` module (a package that keeps its command
    line out of its ``__init__``). ``device``: the job's ``--device``; a job that uses CUDA,
    and every job once this process has initialised CUDA, is not forkable (module docstring)."""
    if not hasattr(os, "fork") or len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
        return None
    if uses_cuda(device) or cuda_touched():
        return None
    for module in (argv[2], f"{argv[2]}.cli"):
        try:
            mod = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - then it starts as a subprocess, which reports it
            return None
        if callable(getattr(mod, "main", None)):
            return module
        if not hasattr(mod, "__path__"):  # a module, not a package: it has no cli module
            return None
    return None


class ForkedJob:
    """A command forked from this process, with the part of :class:`subprocess.Popen` the
    runner uses: ``pid`` (also its process group), ``poll()``, ``wait(timeout)``, ``returncode``."""

    def __init__(self, module: str, args: Sequence[str], log: Path, env: Mapping[str, str],
                 threads: int):
        sys.stdout.flush()
        sys.stderr.flush()
        self.returncode: int | None = None
        run = os.getpid()
        pid = os.fork()
        if pid == 0:  # the job: never returns into the caller's code
            code = 1
            try:
                code = _child(module, list(args), log, env, threads, run)
            finally:
                os._exit(code)
        self.pid = pid
        self.args = [sys.executable, "-m", module, *args]

    def _reap(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = -1
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reap(os.WNOHANG)

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None:
            return self._reap(0)
        end = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode


def _child(module: str, args: list[str], log: Path, env: Mapping[str, str],
           threads: int, run: int) -> int:
    """The forked job's body: its session, its log, its threads and signals, then main."""
    os.setsid()  # its own process group, as start_new_session gives a subprocess
    die_with(run)  # a killed run takes its job and the job's workers with it
    fd = open_own(log, os.O_WRONLY, 0o644)  # the run checked it (commands.own_log), emptied it
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # new Python streams on the log: the caller's may be wrappers that are not file 1 and 2
    sys.stdout = sys.__stdout__ = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115
    if not os.environ.get("PYTHONFAULTHANDLER"):  # as a new interpreter starts (pytest's
        faulthandler.disable()  # would write a crashing job's traceback to pytest's stderr)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.update(env)
    torch.set_num_threads(threads)
    # unseeded generators seeded afresh, as in a new interpreter (a fork copies this one's:
    # every job would draw the same numbers); the suite's runs seed their own
    torch.seed()
    random.seed()
    np.random.seed()
    interval = env.get("TQDM_MININTERVAL")
    if interval:  # tqdm read its environment when this process imported it
        tqdm.std.tqdm.__init__ = functools.partialmethod(tqdm.std.tqdm.__init__,
                                                         mininterval=float(interval))
    sys.argv = [module, *args]
    try:
        code = importlib.import_module(module).main(args)
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - reported in the job's log, as python -m would
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)  # sys.exit("message"): printed, exit 1
    return 1
