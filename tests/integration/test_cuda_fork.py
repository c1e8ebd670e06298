"""A GPU machine's reproduce run never forks a job after CUDA was touched: a process that
initialised CUDA cannot fork a job that uses it ("Cannot re-initialize CUDA in forked
subprocess"). With the suite's fake GPU (tests/cuda_fakes.py): GPU jobs start as fresh
processes, nothing is forked once the parent touched CUDA, and planning a GPU run asks about
the card without initialising CUDA in the planning process."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from analyses.reproduce.index import run_plan
from analyses.reproduce.plan import Job, build_jobs
from models.train_config import TrainConfig, resolve_train
from seqprobe.device import gpu_name, memory_bytes, resolve_device
from seqprobe.sweep import commands as runner
from seqprobe.sweep.fork import forkable
from tests.cuda_fakes import fake_gpu

MOD = "tests.worker_pool_jobs"
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")


def _spy_forks(monkeypatch) -> list[str]:
    forked: list[str] = []
    real = runner.ForkedJob

    def spy(module, args, *rest, **kw):
        forked.append(module)
        return real(module, args, *rest, **kw)

    monkeypatch.setattr(runner, "ForkedJob", spy)
    return forked


def _jobs(*devices: str | None) -> list[Job]:
    return [Job(f"j{i}", (sys.executable, "-m", MOD, "ok"), device=d)
            for i, d in enumerate(devices)]


def test_a_plan_on_cuda_never_forks_once_the_parent_touched_cuda(monkeypatch, tmp_path):
    fake_gpu(monkeypatch, touched=True)
    forked = _spy_forks(monkeypatch)
    outcomes = run_plan(_jobs("cuda", None, "auto", "cpu"), tmp_path, workers=2)
    assert forked == []  # every job a fresh process, the CPU job too
    assert all(o.ok for o in outcomes), [o.log_tail for o in outcomes]


def test_gpu_jobs_start_fresh_and_cpu_jobs_still_fork_from_an_untouched_parent(monkeypatch,
                                                                               tmp_path):
    fake_gpu(monkeypatch, touched=False)
    forked = _spy_forks(monkeypatch)
    outcomes = run_plan(_jobs("cuda", "cuda:0", None, "auto", "cpu"), tmp_path, workers=2)
    assert forked == [MOD]  # only the job placed on the CPU cores
    assert all(o.ok for o in outcomes)
    assert forkable((sys.executable, "-m", MOD), "cpu") == MOD
    assert forkable((sys.executable, "-m", MOD), "cuda") is None


def test_without_a_gpu_every_job_forks_as_before(tmp_path, monkeypatch):
    forked = _spy_forks(monkeypatch)
    run_plan(_jobs(None, "auto", "cpu"), tmp_path, workers=2)
    assert forked == [MOD] * 3


def test_planning_a_gpu_run_never_initialises_cuda_here(monkeypatch, tmp_path):
    """What the reproduce process asks before and while it forks: the device, each recipe's
    cache state (which resolves bf16 for the card), the card's name and memory."""
    inits = fake_gpu(monkeypatch, bf16=True)
    assert resolve_device("auto").type == "cuda"
    assert resolve_train(TrainConfig(), torch.device("cuda")).precision == "bf16"
    assert gpu_name() == "NVIDIA H200" and memory_bytes("cuda") == 141 << 30
    jobs = build_jobs(["stu_induction", "markov_holdout"], "large", tmp_path / "out",
                      tmp_path / "cache", workers=16)
    assert jobs and any(j.recipes for j in jobs)
    assert inits == []


def test_a_touched_process_asks_torch_itself(monkeypatch):
    inits = fake_gpu(monkeypatch, bf16=False, touched=True)
    monkeypatch.setattr("seqprobe.device._facts_from_child",
                        lambda i: pytest.fail("a child asked although CUDA is up here"))
    props = type("P", (), {"name": "NVIDIA H200", "total_memory": 1 << 30})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 0))
    assert resolve_train(TrainConfig(), torch.device("cuda")).precision == "fp32"
    assert inits == []
