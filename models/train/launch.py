"""``python -m models.train.launch [torchrun flags] -m models.train …``: torchrun with a clean end.

The same launcher as ``torchrun`` (:mod:`torch.distributed.run`, same flags, same workers), for
``-m models.train`` and ``-m analyses.zoo train``. What differs is how it ends:

* SIGTERM or SIGINT to the launcher (``timeout``, SLURM, Kubernetes, Ctrl-C): torchrun passes the
  signal to its workers, where the training loop stops between two steps and rank 0 saves the
  checkpoint (:mod:`models.train.loop`); then torchrun raises ``SignalException`` out of its own
  main, so plain ``torchrun`` exits 1 with a traceback although the run stopped as asked. Here
  that is one line and exit 130, the code ``python -m models.train`` alone gives a SIGTERM
  (:data:`seqprobe.cli.EXIT_INTERRUPTED`); ``--resume`` continues the run.
* ``--nproc_per_node`` is bounded before any worker is spawned: a number is checked against
  its row of :data:`seqprobe.flags.BOUNDS` and against this machine (its GPUs where CUDA is
  available, else its CPU cores), one line and exit 2 otherwise; torchrun's words for a count
  (``auto``, ``cpu``, ``gpu``) are torchrun's and already within the machine.
* A worker that fails: each worker has already said why (one line for bad input); the launcher
  adds one line naming the rank and exits with that worker's code (2: bad input, 3: diverged,
  130: interrupted) instead of torchrun's error report and exit 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import torch
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from seqprobe.cli import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from seqprobe.device import cuda_present
from seqprobe.errors import ConfigError
from seqprobe.flags import flag
from seqprobe.orphans import PARENT_ENV

EXIT_WORKER_FAILED = 1  # a worker ended without an exit code of its own (killed, no code)


def machine_slots() -> tuple[int, str]:
    """How many workers this machine runs at once, and what they are: its GPUs where CUDA is
    available (one worker per card), else the CPU cores this process may use."""
    if cuda_present() and torch.cuda.device_count() > 0:  # NVML: this launcher never inits CUDA
        return torch.cuda.device_count(), "GPUs"
    try:
        return len(os.sched_getaffinity(0)), "CPU cores"
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1, "CPU cores"


def check_nproc(text: str) -> None:
    """Raise :class:`ConfigError` (one line) unless ``--nproc_per_node`` is one of torchrun's
    words or a count in its :data:`~seqprobe.flags.BOUNDS` row and within :func:`machine_slots`."""
    if str(text).strip() in ("auto", "cpu", "gpu", "xpu"):
        return
    try:
        n = flag("--nproc_per_node")(str(text))
    except argparse.ArgumentTypeError as e:
        raise ConfigError(f"--nproc_per_node: {e}") from None
    slots, what = machine_slots()
    if n > slots:
        raise ConfigError(f"--nproc_per_node {n}: this machine has {slots} {what}, so at most "
                          f"{slots} workers (or auto)")


def main(argv: list[str] | None = None) -> int:
    """Run torchrun on ``argv`` (default: the command line); the exit code as above."""
    args = torchrun.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_nproc(args.nproc_per_node)  # before any worker is spawned
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # each worker ends with this launcher, even a kill -9 of it (seqprobe.orphans): the
    # workers would otherwise train on, holding the --out lock, until a collective timed out
    os.environ[PARENT_ENV] = str(os.getpid())
    try:
        torchrun.run(args)
    except SignalException as e:
        name = signal.Signals(e.sigval).name
        print(f"{name}: torchrun stopped its workers; a run that had started saved its "
              "checkpoint first (see above)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        code = failure.exitcode
        print(f"torchrun: rank {rank} exited with code {code}", file=sys.stderr)
        return code if 0 < code < 256 else EXIT_WORKER_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
