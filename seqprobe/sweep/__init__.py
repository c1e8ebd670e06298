"""The suite's one job runner: every training run and every process the suite starts goes
through here (tests/contract/test_one_job_runner.py). A job here is a unit of work to schedule; a *task*
in this suite is only a synthetic task (:mod:`tasks`); the *workers* are how many jobs run at
once (the ``--jobs N`` flag).

* :func:`map_jobs`: ``fn(*args)`` for every ``args`` of ``items`` — the cells of a grid, the
  recipes of an ablation, the seeds of a sweep — with a progress bar over the jobs as they
  finish, and a :class:`Failed` in place of the result of a job that raised on every one of its
  ``1 + retries`` attempts (bad input, a :class:`~seqprobe.errors.InputError`, is not retried:
  it would fail the same way); the other jobs still run.
* :func:`run_fresh`: one such job in a new interpreter of its own.
* :func:`seqprobe.sweep.commands.run_commands`: whole commands (the reproduce plan's analyses
  and training commands), each after the jobs it needs, forked from this process where they
  can be (:mod:`.fork`; never a CUDA job), with an ETA that learns as they end (:mod:`.eta`).
* :func:`run_command`: one command that is not a job of a plan (``git describe``, pytest, a
  stage of the GPU call), in its own process group, stopped at its timeout.

Callers keep their own cache (a finished cell, a trained checkpoint) and hand over only what
is not done yet, so nothing finished runs twice.

Backends of :func:`map_jobs` (:class:`Backend`):

* local (the default): ``workers`` worker processes (joblib), or the calling process when
  ``workers`` is 1. Ray is not imported.
* fresh (``Backend(fresh=True)``, :func:`run_fresh`): each job in a new interpreter of its
  own, started by threads here (the dry run's and the step-cost table's measurements).
* Ray: ``ray.init(num_cpus=workers)`` on this machine (``--ray``), or an existing cluster
  (``--ray ADDRESS``: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``). Every job asks for
  ``num_cpus`` CPUs and ``num_gpus`` GPUs (one when the run is on CUDA) and is retried by Ray
  (``max_retries``, ``retry_exceptions``); a worker that dies is retried the same way. Ray is
  an optional extra (``pip install -e .[cluster]``), imported only here and only then.

:class:`RayCommand` runs a whole command (a job of :func:`~seqprobe.sweep.commands.run_commands`)
as one Ray remote call behind ``subprocess.Popen``'s polling interface, so the command
scheduler can place its jobs on Ray instead of local processes.

The local pool stays joblib rather than Ray's local mode: it needs no extra package, starts
in no time (a Ray instance takes seconds to start on a small machine), and a run without
``--ray`` behaves exactly as before. Ray is used where it earns its start-up: placement of
GPU jobs, several machines, worker failures.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joblib import Parallel, delayed
from tqdm.auto import tqdm

from seqprobe.cli import DEFAULT_RETRIES  # the backend flags are declared there
from seqprobe.config import check
from seqprobe.errors import InputError, RunError

EXIT_SOME_FAILED = 1  # a sweep that ran, but some of its jobs failed after every retry
_ADDRESS = re.compile(r"^(auto|local|(ray://)?[\w.\-]+:\d+)$")


@dataclass(frozen=True)
class Backend:
    """Where the jobs run: ``ray`` false = local processes; ``address`` None = a Ray instance
    started here with ``workers`` CPUs, else an existing cluster."""

    ray: bool = False
    address: str | None = None
    workers: int = 1  # local worker processes / CPUs of a Ray instance started here
    num_cpus: float = 1.0  # per job (Ray's scheduling)
    num_gpus: float = 0.0  # per job (Ray's scheduling)
    retries: int = DEFAULT_RETRIES  # attempts after the first
    # each job in a new interpreter of its own (local only): a measurement that what ran
    # before in a process must not colour, or a run whose crash or out-of-memory kill must
    # be one job's failure, not the caller's
    fresh: bool = False
    timeout: float | None = None  # seconds a fresh job may run before it is killed
    env: tuple[tuple[str, str], ...] = ()  # set in a fresh job's environment

    def __post_init__(self):
        object.__setattr__(self, "env", tuple(dict(self.env).items()))
        check(not (self.fresh and self.ray), "a fresh-process backend is local (no --ray)")
        check(self.workers >= 1, f"--jobs (workers) must be >= 1, got {self.workers}")
        check(self.retries >= 0, f"--retries must be >= 0, got {self.retries}")
        check(self.num_cpus > 0 and self.num_gpus >= 0,
              f"a job needs CPUs > 0 and GPUs >= 0, got {self.num_cpus}, {self.num_gpus}")

    def describe(self) -> str:
        if not self.ray:
            return f"local ({self.workers} process{'es' if self.workers > 1 else ''})"
        where = self.address or f"local Ray, {self.workers} CPUs"
        return f"ray ({where}; {self.num_cpus:g} CPU, {self.num_gpus:g} GPU per job)"


@dataclass(frozen=True)
class Failed:
    """A job that raised on every attempt: its last error, one line."""

    error: str
    attempts: int


def backend_of(args: argparse.Namespace, workers: int = 1, device: str = "cpu",
               num_cpus: float = 1.0) -> Backend:
    """The backend of ``--ray`` / ``--retries``; a job asks for one GPU when ``device`` is
    CUDA."""
    ray = getattr(args, "ray", None)
    if ray is not None:
        check(bool(_ADDRESS.match(ray)), f"--ray {ray!r}: not a Ray address (auto, HOST:PORT or "
              "ray://HOST:PORT); write --ray=ADDRESS, or put --ray after the checkpoints")
    gpus = 1.0 if str(device).startswith("cuda") else 0.0
    return Backend(ray=ray is not None, address=None if ray in (None, "local") else ray,
                   workers=workers, num_cpus=num_cpus, num_gpus=gpus,
                   retries=getattr(args, "retries", DEFAULT_RETRIES))


def _error_line(e: BaseException) -> str:
    lines = [s for s in str(e).strip().splitlines() if s.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}".strip()


def _call(fn: Callable, *args: Any) -> Any:
    """One attempt of a job. Bad input (:class:`InputError`) fails the same way every time:
    reported at once, not retried."""
    try:
        return fn(*args)
    except InputError as e:
        return Failed(_error_line(e), 1)


def _attempts(fn: Callable, i: int, args: tuple, retries: int) -> tuple[int, Any]:
    """Local worker body: ``fn(*args)``, tried up to ``1 + retries`` times."""
    for attempt in range(1, retries + 2):
        try:
            return i, _call(fn, *args)
        except Exception as e:  # noqa: BLE001 - any failure of one job is reported, not fatal
            if attempt == retries + 1:
                if not isinstance(e, ProcessFailed):  # its own process printed its traceback
                    traceback.print_exc()
                return i, Failed(_error_line(e), attempt)
    raise AssertionError("unreachable")


class ProcessFailed(RunError):
    """A fresh job's process crashed, was killed or timed out, or its job raised there."""


class _MainPickler(pickle.Pickler):
    """Pickles a function of the ``python -m MODULE`` being run (``__main__``) by MODULE's
    name, which a fresh interpreter can import (``__main__`` there is another program)."""

    def reducer_override(self, obj):
        main = sys.modules.get("__main__")
        found = getattr(main, "__spec__", None)  # the module python -m ran
        if (isinstance(obj, types.FunctionType) and obj.__module__ == "__main__"
                and found is not None):
            return _import_attr, (found.name, obj.__qualname__)
        return NotImplemented


def _import_attr(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


FRESH_CHILD = "from seqprobe.sweep import _fresh_child; _fresh_child()"


def _fresh(b: Backend, fn: Callable, *args: Any) -> Any:
    """One attempt of a job in a new interpreter (``b.fresh``): ``fn(*args)`` there, its
    result back (a :class:`Failed` for bad input), or :class:`ProcessFailed` in one line."""
    root = str(Path(__file__).resolve().parents[2])  # the child imports this checkout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]), **dict(b.env)}
    with tempfile.TemporaryDirectory(prefix="seqprobe-job-") as tmp:
        job, out = Path(tmp) / "job.pkl", Path(tmp) / "result.pkl"
        with open(job, "wb") as f:
            _MainPickler(f).dump((fn, args))
        try:
            proc = subprocess.run([sys.executable, "-c", FRESH_CHILD, str(job), str(out)],
                                  capture_output=True, text=True, env=env, timeout=b.timeout)
        except subprocess.TimeoutExpired:
            raise ProcessFailed(f"timed out after {b.timeout:.0f} s") from None
        if proc.returncode == 0 and out.is_file():
            raised, value = pickle.loads(out.read_bytes())
            if raised:
                raise ProcessFailed(value)
            return value
    if proc.returncode < 0:
        why = " (out of memory?)" if -proc.returncode == signal.SIGKILL else ""
        raise ProcessFailed(f"killed by {signal.Signals(-proc.returncode).name}{why}")
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise ProcessFailed(f"exit code {proc.returncode}: {tail[:300]}")


def _fresh_child() -> None:
    """The body of a fresh job's interpreter: ``fn(*args)`` from the job file
    (``sys.argv[1]``), its result (or the error it raised, one line) to ``sys.argv[2]``."""
    fn, args = pickle.loads(Path(sys.argv[1]).read_bytes())
    try:
        result = (False, _call(fn, *args))
    except Exception as e:  # noqa: BLE001 - reported to the caller, which may retry it
        traceback.print_exc()
        result = (True, _error_line(e))
    Path(sys.argv[2]).write_bytes(pickle.dumps(result))


def run_fresh(fn: Callable[..., Any], *args: Any, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> Any:
    """``fn(*args)`` as one job of :func:`map_jobs` in a new interpreter, not retried: its
    result, or :class:`ProcessFailed` (one line: the error, the signal that killed it, the
    timeout). For a measurement that must start from a fresh process."""
    b = Backend(fresh=True, retries=0, timeout=timeout, env=tuple((env or {}).items()))
    [result] = map_jobs(fn, [args], b, progress=False)
    if isinstance(result, Failed):
        raise ProcessFailed(result.error.removeprefix(f"{ProcessFailed.__name__}: "))
    return result


def map_jobs(fn: Callable[..., Any], items: Sequence[tuple], backend: Backend, *,
             desc: str = "", progress: bool = True, done_before: int = 0,
             on_done: Callable[[int, Any], dict | None] | None = None) -> list[Any]:
    """``[fn(*args) for args in items]``, run on ``backend``; a :class:`Failed` stands for a
    job that raised on every attempt. ``on_done(i, result)`` runs here, in the calling
    process, as each job finishes (save it, so a stopped sweep loses only the jobs in
    flight); a dict it returns is shown on the progress bar. ``done_before``: jobs finished
    by an earlier run (the bar starts there). ``fn`` must be importable (a module-level
    function): workers import it."""
    results: list[Any] = [None] * len(items)
    if not items:
        return results
    # connected (or refused in one line) before the progress bar shows
    ray, started = _ray(backend) if backend.ray else (None, False)
    bar = tqdm(total=len(items) + done_before, initial=done_before, desc=desc,
               disable=not progress, dynamic_ncols=True)

    def finish(i: int, result: Any) -> None:
        results[i] = result
        post = on_done(i, result) if on_done else None
        bar.update(1)
        if isinstance(result, Failed) and (progress or desc):  # else the caller says it
            bar.write(f"{desc}: job {i} failed after {result.attempts} attempt(s): "
                      f"{result.error}")
        elif post:
            bar.set_postfix(post)

    try:
        if ray is not None:
            _ray_map(ray, started, fn, items, backend, finish)
        elif backend.fresh:  # each its own interpreter, started from threads of this one
            runner = Parallel(n_jobs=min(backend.workers, len(items)), backend="threading",
                              return_as="generator_unordered")
            for i, result in runner(delayed(_attempts)(_fresh, i, (backend, fn, *args),
                                                       backend.retries)
                                    for i, args in enumerate(items)):
                finish(i, result)
        elif backend.workers == 1:
            for i, args in enumerate(items):
                finish(*_attempts(fn, i, args, backend.retries))
        else:
            runner = Parallel(n_jobs=min(backend.workers, len(items)),
                              return_as="generator_unordered")
            for i, result in runner(delayed(_attempts)(fn, i, args, backend.retries)
                                    for i, args in enumerate(items)):
                finish(i, result)
    finally:
        bar.close()
    return results


def _ray(b: Backend):
    """The ``ray`` module, connected to ``b``'s Ray (started here when there is none yet), and
    whether this call started it."""
    try:
        import ray  # optional extra: only a run with --ray needs it
    except ImportError:
        raise InputError("--ray needs Ray: pip install -e .[cluster] (or pip install ray)") \
            from None
    started = not ray.is_initialized()
    if started:
        if b.address:
            _check_reachable(b.address)
            try:
                ray.init(address=b.address)
            except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
                raise InputError(f"--ray {b.address}: cannot connect ({_error_line(e)})") from None
        else:
            ray.init(num_cpus=b.workers, include_dashboard=False)
    return ray, started


RAY_PROBE_S = 5.0  # seconds to wait for a cluster's address before saying it is not there


def _check_reachable(address: str) -> None:
    """One line within seconds when ``address`` has no Ray cluster behind it (``ray.init``
    itself retries an unreachable address for minutes, then raises a traceback)."""
    if address == "auto":
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        address = os.environ.get("RAY_ADDRESS") or (
            current.read_text().strip() if current.is_file() else "")
        if not address:
            raise InputError("--ray auto: no Ray cluster is running on this machine (start one "
                            "with `ray start --head`, or give --ray alone for a Ray instance "
                            "started here)")
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_PROBE_S) as c:
            grpc = _speaks_grpc(c)
    except (OSError, ValueError) as e:
        raise InputError(f"--ray {address}: nothing answers there "
                        f"({getattr(e, 'strerror', None) or type(e).__name__}); is the cluster "
                        "up, and is the address HOST:PORT of its head?") from None
    # something else listens there (ssh, a web server): ray.init would retry it for half a
    # minute, printing Ray's C++ log lines, before its own error
    check(grpc, f"--ray {address}: what answers there is not a Ray cluster (no gRPC server); "
          "is the address HOST:PORT of its head (its GCS port, 6379 by default)?")


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 §3.4, then a SETTINGS frame
HTTP2_SETTINGS = 0x04  # frame type


def _speaks_grpc(conn: socket.socket) -> bool:
    """Whether the server on ``conn`` speaks HTTP/2, as the gRPC servers of a Ray head (its GCS,
    the Ray Client server) do: sent the client preface and an empty SETTINGS frame, an HTTP/2
    server's first frame back is its SETTINGS (9-byte header, type at byte 3)."""
    conn.settimeout(RAY_PROBE_S)
    conn.sendall(HTTP2_PREFACE + bytes([0, 0, 0, HTTP2_SETTINGS, 0, 0, 0, 0, 0]))
    head = b""
    try:
        while len(head) < 9:
            chunk = conn.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    except TimeoutError:  # a server that says nothing is no gRPC server either
        return False
    return head[3] == HTTP2_SETTINGS


def _ray_map(ray, started: bool, fn: Callable, items: Sequence[tuple], b: Backend,
             finish: Callable[[int, Any], None]) -> None:
    """Run the jobs on the connected ``ray``; shut it down after if this sweep ``started`` it."""
    try:
        remote = ray.remote(_call).options(num_cpus=b.num_cpus, num_gpus=b.num_gpus,
                                           max_retries=b.retries, retry_exceptions=True)
        index = {remote.remote(fn, *args): i for i, args in enumerate(items)}
        pending = list(index)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as e:  # raised on its last attempt too
                        cause = getattr(e, "cause", None)
                        result = Failed(_error_line(cause if isinstance(cause, BaseException)
                                                    else e), b.retries + 1)
                    finish(index[ref], result)
        except KeyboardInterrupt:  # stop what is in flight; finished jobs are saved
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started:
            ray.shutdown()


def failures(results: Sequence[Any]) -> list[int]:
    """Indices of the jobs that failed."""
    return [i for i, r in enumerate(results) if isinstance(r, Failed)]


# ---------------------------------------------------------------------------- whole commands
class CommandFailed(RunError):
    """A command's non-zero exit, raised on the worker so that Ray retries it."""

    def __init__(self, returncode: int, output: str):
        super().__init__(f"exit code {returncode}")
        self.returncode, self.output = returncode, output

    def __reduce__(self):  # travels back from a Ray worker with its fields
        return CommandFailed, (self.returncode, self.output)


def _remote_command(argv: Sequence[str], env: Mapping[str, str] | None, cwd: str) -> str:
    """The body of :class:`RayCommand`'s remote call: run ``argv`` in ``cwd`` on the worker (its
    environment plus ``env``); its output, or :class:`CommandFailed`."""
    proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    if proc.returncode != 0:
        raise CommandFailed(proc.returncode, proc.stdout)
    return proc.stdout


class RayCommand:
    """A command (one job of the reproduce plan) run as a Ray remote call, behind the part of
    ``subprocess.Popen`` that a scheduler polls: ``poll()``, ``returncode``, ``kill()``,
    ``wait()``; ``output`` is its stdout and stderr once it has finished. A non-zero exit is
    retried ``backend.retries`` times. ``cwd`` (default: here) must exist on the worker, and
    ``env`` holds only what the command needs beyond the worker's environment."""

    def __init__(self, argv: Sequence[str], backend: Backend,
                 env: Mapping[str, str] | None = None, cwd: str | None = None):
        self._ray, _ = _ray(backend)
        remote = self._ray.remote(_remote_command).options(
            num_cpus=backend.num_cpus, num_gpus=backend.num_gpus, max_retries=backend.retries,
            retry_exceptions=True)
        self._ref = remote.remote(list(argv), dict(env or {}), cwd or os.getcwd())
        self.returncode: int | None = None
        self.output = ""

    def poll(self) -> int | None:
        if self.returncode is None and self._ray.wait([self._ref], timeout=0)[0]:
            try:
                self.output, self.returncode = self._ray.get(self._ref), 0
            except self._ray.exceptions.RayError as e:
                cause = getattr(e, "cause", None)
                if isinstance(cause, CommandFailed):
                    self.returncode, self.output = cause.returncode, cause.output
                else:  # the worker died, or the job was cancelled
                    self.returncode, self.output = 1, _error_line(e)
        return self.returncode

    def wait(self) -> int:
        self._ray.wait([self._ref])
        return self.poll()

    def kill(self) -> None:
        self._ray.cancel(self._ref, force=True)


# ---------------------------------------------------------------------------- one command
@dataclass(frozen=True)
class Completed:
    """How :func:`run_command`'s process ended: its exit code (negative: the signal that ended
    it), its output where it was kept, its seconds, and ``stopped_by`` ("SIGTERM" or
    "SIGKILL") where it was stopped at its timeout."""

    returncode: int
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    stopped_by: str | None = None


OUTPUTS = ("capture", "lines", "inherit", "discard")


def run_command(argv: Sequence[str], *, cwd: str | Path | None = None,
                env: Mapping[str, str] | None = None, timeout: float | None = None,
                grace: float = 0.0, output: str = "capture",
                on_line: Callable[[str], None] | None = None,
                check_exit: bool = False) -> Completed:
    """One command that is not a job of a plan (``git describe``, pytest, a stage of the GPU
    call, a benchmark module), in its own session and process group, so that a timeout or a
    stop ends it and whatever it started: the runner's one way to start a single process.

    ``timeout``: seconds before it is stopped from outside: SIGTERM ``grace`` seconds before
    the timeout where ``grace`` (a training run then saves its checkpoint), SIGKILL at it. A
    stop of this process (Ctrl-C, or SIGTERM raised as KeyboardInterrupt) stops the command the
    same way before it goes on up. Its group is killed once it has ended too (workers it left).
    ``env``: its whole environment (default: this process's). ``output``: "capture" (stdout
    and stderr kept apart), "lines" (both together, each line to ``on_line`` as it comes),
    "inherit" (this process's streams) or "discard". ``check_exit``: a non-zero exit raises
    :class:`subprocess.CalledProcessError`. OSError (no such program) goes to the caller."""
    check(output in OUTPUTS, f"output must be one of {OUTPUTS}, got {output!r}")
    check(output != "lines" or on_line is not None, "output 'lines' needs on_line")
    streams = {"capture": (subprocess.PIPE, subprocess.PIPE),
               "lines": (subprocess.PIPE, subprocess.STDOUT),
               "inherit": (None, None),
               "discard": (subprocess.DEVNULL, subprocess.DEVNULL)}[output]
    t0 = time.time()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=None if env is None else dict(env),
                            stdin=subprocess.DEVNULL, stdout=streams[0], stderr=streams[1],
                            start_new_session=True, text=True, errors="replace",
                            bufsize=1 if output == "lines" else -1)
    # read by threads as it comes, so that a pipe a left-behind child of the command still
    # holds does not keep this waiting past the command's own end
    got: dict[str, list[str]] = {"stdout": [], "stderr": []}

    def pump(stream, into: list[str] | None) -> None:
        for line in stream:
            if into is not None:
                into.append(line)
            else:
                on_line(line.rstrip("\n"))

    readers = [threading.Thread(target=pump, args=(s, got[k] if output == "capture" else None),
                                daemon=True)
               for k, s in (("stdout", proc.stdout), ("stderr", proc.stderr)) if s is not None]
    for r in readers:
        r.start()

    stopped = None
    try:
        try:
            proc.wait(timeout=None if timeout is None else
                      max(timeout - grace, 0.5) if grace else timeout)
        except subprocess.TimeoutExpired:
            stopped = "SIGTERM" if grace else "SIGKILL"
            _signal_group(proc.pid, signal.SIGTERM if grace else signal.SIGKILL)
            try:
                proc.wait(timeout=grace if grace else 5.0)
            except subprocess.TimeoutExpired:
                stopped = "SIGKILL"
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
    except BaseException:  # this process stopped: the command does not outlive it
        if grace:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    _signal_group(proc.pid, signal.SIGKILL)  # whatever it left running in its group
    for r in readers:
        r.join(timeout=5)
    out, err = "".join(got["stdout"]), "".join(got["stderr"])
    if check_exit and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, list(argv), out, err)
    return Completed(proc.returncode, out, err, time.time() - t0, stopped)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
