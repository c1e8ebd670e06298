"""Jobs for tests/integration/test_worker_pool.py: a module with ``main(argv)``, as the suite's CLIs have,
so the runner forks it (seqprobe.sweep.fork)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import torch


def main(argv: list[str] | None = None) -> int:
    what = (argv or ["ok"])[0]
    if what == "ok":
        print(f"pid {os.getpid()} pgid {os.getpgid(0)} threads {torch.get_num_threads()} "
              f"omp {os.environ.get('OMP_NUM_THREADS')}")
        print("rand", torch.rand(1).item())
        return 0
    if what == "code":
        return int(argv[1])
    if what == "raise":
        raise ValueError("boom in the job")
    if what == "exit-text":
        sys.exit("a message")
    if what == "sleep":
        time.sleep(float(argv[1]))
        return 0
    if what == "sigterm":  # a job's own SIGTERM handler runs (the training loop saves so)
        def save(signum, frame):
            print("saved on SIGTERM", flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, save)
        print("waiting", flush=True)
        time.sleep(30)
        return 0
    if what == "worker":  # a job that started a worker of its own (joblib's do), in its group
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(f"job {os.getpid()} worker {worker.pid}", flush=True)
        time.sleep(120)
        return 0
    if what == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
