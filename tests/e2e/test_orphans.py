"""No process of a reproduce run outlives it (issue 48, 3): ``kill -9`` of the run ends its jobs
and their workers within a second or so (seqprobe.orphans), forked and subprocess jobs alike."""

from tests import ROOT_DIR
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = ROOT_DIR

# a stand-in for the reproduce process: it starts one job the way the runner does and waits
RUN = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from seqprobe.sweep.fork import ForkedJob
    import subprocess, os
    log = Path(sys.argv[1])
    if sys.argv[2] == "fork":
        ForkedJob("tests.worker_pool_jobs", ["worker"], log, {}, 1)
    else:
        from seqprobe.orphans import PARENT_ENV
        subprocess.Popen([sys.executable, "-m", "tests.worker_pool_jobs_cli", "worker"],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT,
                         env={**os.environ, PARENT_ENV: str(os.getpid())},
                         start_new_session=True)
    print("started", flush=True)
    time.sleep(120)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not reaped by its new parent yet) is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("how", ["fork", "subprocess"])
def test_kill_9_of_the_run_ends_its_job_and_the_jobs_workers(tmp_path, how):
    log = tmp_path / "job.log"
    run = subprocess.Popen([sys.executable, "-c", RUN, str(log), how], cwd=ROOT,
                           stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert run.stdout.readline().strip() == "started"
        deadline = time.time() + 60
        while "worker" not in (log.read_text() if log.exists() else ""):
            assert time.time() < deadline, "the job never started its worker"
            time.sleep(0.1)
        words = log.read_text().split()
        job, worker = int(words[words.index("job") + 1]), int(words[words.index("worker") + 1])
        assert _alive(job) and _alive(worker)
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        deadline = time.time() + 5
        while (_alive(job) or _alive(worker)) and time.time() < deadline:
            time.sleep(0.1)
        assert not _alive(job) and not _alive(worker)
    finally:
        run.kill()


def test_two_runs_into_one_folder_keep_each_jobs_log_whole(tmp_path):
    from seqprobe.sweep.commands import own_log

    log = tmp_path / "logs" / "train-x.log"
    first, held = own_log(log)
    first.write_text("the first run's job\n")
    second, held2 = own_log(log)  # another run while the first one's job is running
    assert first == log and second == log.with_name(f"train-x.{os.getpid()}.log")
    assert log.read_text() == "the first run's job\n"  # not truncated by the second
    os.close(held)
    os.close(held2)
    assert own_log(log)[0] == log  # once the job is over, the name is free again
