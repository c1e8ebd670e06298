"""``python -m models.train.launch`` (torchrun with a clean end, issue 29 item 15): a SIGTERM to
the launcher of a 2-process gloo job on the CPU saves the checkpoint and exits 130 with one line
of its own and no traceback; a failed worker ends the job with that worker's exit code."""

from __future__ import annotations

from tests import ROOT_DIR

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

import models
from models.train import launch as launcher
from seqprobe.cli import EXIT_BAD_INPUT, EXIT_INTERRUPTED

ROOT = ROOT_DIR
TINY = ["--task", "copy", "--arch", "transformer", "--d-model", "8", "--n-layers", "1",
        "--n-heads", "2", "--d-mlp", "16", "--max-len", "4", "--batch-size", "4",
        "--eval-every", "0", "--eval-batches", "1", "--eval-batch-size", "4", "--device", "cpu",
        "--no-progress"]
START_S = 120  # the workers' start (imports, rendezvous) on a busy CPU


def launch(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    # --standalone: a rendezvous on a free local port, so jobs side by side never collide
    return subprocess.Popen([sys.executable, "-m", "models.train.launch", "--standalone",
                             "--nproc_per_node", "2", "-m", "models.train", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def training(out: Path) -> subprocess.Popen:
    """A 2-worker run that saves every step, once it has saved its first (training started)."""
    p = launch(*TINY, "--steps", "1000000", "--save-every", "1", "--out", str(out))
    deadline = time.monotonic() + START_S
    while not out.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if not out.exists():
        p.kill()
        raise AssertionError(p.communicate(timeout=60)[1][-3000:])
    return p


def test_sigterm_to_the_launcher_saves_and_exits_130_in_one_line(tmp_path):
    out = tmp_path / "run.pt"
    # every step is saved (--save-every 1): the file's appearance says training has started
    p = training(out)
    try:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == EXIT_INTERRUPTED, err[-3000:]
    assert "Traceback" not in err and "SignalException" not in err, err[-3000:]
    assert "SIGTERM: interrupted at step" in err  # rank 0 saved where it stopped
    assert err.strip().splitlines()[-1].startswith("SIGTERM: torchrun stopped its workers")
    model = models.load(out)  # whole and loadable
    assert 1 <= model.checkpoint["train"]["step"] < 1_000_000
    assert model.checkpoint["train"]["world_size"] == 2
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_failed_worker_ends_the_job_with_its_code_in_one_line(monkeypatch, capsys):
    """torchrun's ChildFailedError (what a worker's bad flag gives) is the worker's exit code and
    one line; a worker killed without a code is 1. In process: no job is started."""
    def fail(code):
        def run(args):
            raise ChildFailedError("models.train", {1: ProcessFailure(1, 123, code, "")})
        return run

    for code, expect in ((EXIT_BAD_INPUT, EXIT_BAD_INPUT), (-9, 1)):
        monkeypatch.setattr(launcher.torchrun, "run", fail(code))
        assert launcher.main(["--nproc_per_node", "2", "-m", "models.train"]) == expect
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"torchrun: rank 1 exited with code {code}"]


@pytest.mark.slow  # two torchrun workers start in a minute on a busy CPU
def test_kill_9_of_the_launcher_takes_its_workers_with_it_after_they_save(tmp_path):
    out = tmp_path / "run.pt"
    p = training(out)
    try:
        workers = [int(pid) for task in Path(f"/proc/{p.pid}/task").iterdir()
                   for pid in (task / "children").read_text().split()]
        assert len(workers) == 2
        os.kill(p.pid, signal.SIGKILL)
        _, err = p.communicate(timeout=60)
        deadline = time.monotonic() + 60
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert "SIGTERM: interrupted at step" in err  # rank 0 saved where it stopped
    assert models.load(out).checkpoint["train"]["world_size"] == 2
    assert not (tmp_path / ".run.pt.lock").exists()  # a rerun is not refused


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
