"""``python -m models.train.launch [torchrun flags] -m models.train …``: torchrun with a clean end.

The same launcher as ``torchrun`` (:mod:`torch.distributed.run`, same flags, same workers), for
``-m models.train`` and ``-m models.zoo train``. What differs is how it ends:

* SIGTERM or SIGINT to the launcher (``timeout``, SLURM, Kubernetes, Ctrl-C): torchrun passes the
  signal to its workers, where the training loop stops between two steps and rank 0 saves the
  checkpoint (:mod:`models.train.loop`); then torchrun raises ``SignalException`` out of its own
  main, so plain ``torchrun`` exits 1 with a traceback although the run stopped as asked. Here
  that is one line and exit 130, the code ``python -m models.train`` alone gives a SIGTERM
  (:data:`models.cli.EXIT_INTERRUPTED`); ``--resume`` continues the run.
* A worker that fails: each worker has already said why (one line for bad input); the launcher
  adds one line naming the rank and exits with that worker's code (2: bad input, 3: diverged,
  130: interrupted) instead of torchrun's error report and exit 1.
"""

from __future__ import annotations

import signal
import sys

from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from models.cli import EXIT_INTERRUPTED

EXIT_WORKER_FAILED = 1  # a worker ended without an exit code of its own (killed, no code)


def main(argv: list[str] | None = None) -> int:
    """Run torchrun on ``argv`` (default: the command line); the exit code as above."""
    args = torchrun.parse_args(sys.argv[1:] if argv is None else argv)
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
