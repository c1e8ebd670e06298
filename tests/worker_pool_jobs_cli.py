"""tests/worker_pool_jobs.py's jobs run as ``python -m`` through the suite's command line
(seqprobe.cli.run_cli), as a reproduce job started as a subprocess runs."""

import sys

from seqprobe.cli import run_cli
from tests import worker_pool_jobs

if __name__ == "__main__":
    sys.exit(run_cli(worker_pool_jobs.main, sys.argv[1:]))
