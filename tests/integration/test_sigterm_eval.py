"""SIGTERM or Ctrl-C during a long evaluation (issue 39 item 3): the evaluation is abandoned
between two of its batches, the run is saved at its step as an interrupted run within seconds,
and ``--resume`` evaluates that step first, so the resumed run ends with the weights, optimizer
state and history of a run never interrupted."""

from __future__ import annotations

from tests import ROOT_DIR

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import models.train.evaluation as E
from analyses.zoo.levels import make_run_config
from models.checkpoint.io import read_checkpoint
from models.registry import build_model
from models.train.cache import entry_state
from models.train.loop import TrainingInterrupted, train
from tasks.registry import make_task
from tests.tiny import TINY_RUN, TINY_RUN_FLAGS

ROOT = ROOT_DIR


def run_config_for(**train_kw):
    cfg = dict(steps=12, eval_every=4, eval_batches=4, eval_batch_size=8, batch_size=4,
               warmup_steps=3, seed=5)
    return make_run_config("transformer", "copy", "quick", model=TINY_RUN,
                     task_config=dict(max_len=6), train={**cfg, **train_kw})


def without_time(history):
    return [{k: v for k, v in h.items() if k != "time_s"} for h in history]


def assert_same_run(a: dict, b: dict):
    for k, v in a["state_dict"].items():
        assert torch.equal(v, b["state_dict"][k]), k
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    for i in sa:
        for k in sa[i]:
            assert torch.equal(torch.as_tensor(sa[i][k]), torch.as_tensor(sb[i][k])), (i, k)
    assert without_time(a["history"]) == without_time(b["history"])
    assert a["train"]["step"] == b["train"]["step"]
    assert a["train"]["samples_seen"] == b["train"]["samples_seen"]


def sigterm_during_eval(monkeypatch, at_step: int, batch: int) -> dict:
    """Send a real SIGTERM to this process while the evaluation after step ``at_step`` (of
    :func:`run_config_for`: one every 4 steps) scores its ``batch``-th batch; counts the batches
    scored after it."""
    seen = {"evals": 0, "calls": 0, "after": 0, "sent": None}
    orig_units, orig_scores = E.length_units, E._scores

    def units(*args, **kwargs):  # one call per evaluation of a copy run
        seen["evals"] += 1
        return orig_units(*args, **kwargs)

    def scores(*args, **kwargs):
        if seen["sent"] is not None:
            seen["after"] += 1
        elif 4 * seen["evals"] == at_step:
            seen["calls"] += 1
            if seen["calls"] == batch:
                seen["sent"] = time.monotonic()
                os.kill(os.getpid(), signal.SIGTERM)
        return orig_scores(*args, **kwargs)

    monkeypatch.setattr(E, "length_units", units)
    monkeypatch.setattr(E, "_scores", scores)
    return seen


@pytest.mark.parametrize("at_step", [8, 12], ids=["mid-run", "last-step"])
def test_sigterm_during_evaluation_saves_at_once_and_resumes_to_the_same_run(
        tmp_path, monkeypatch, capsys, at_step):
    run_config = run_config_for()
    full = train(run_config, out=tmp_path / "full.pt", device="cpu", progress=False)
    assert [h["step"] for h in full["history"]] == [4, 8, 12]

    seen = sigterm_during_eval(monkeypatch, at_step, batch=3)
    part_path = tmp_path / "part.pt"
    with pytest.raises(TrainingInterrupted):
        train(run_config, out=part_path, device="cpu", progress=False)
    saved_after = time.monotonic() - seen["sent"]
    monkeypatch.undo()
    assert seen["after"] == 0, "the evaluation went on after the signal"
    assert saved_after < 5.0
    err = capsys.readouterr().err
    assert f"SIGTERM: interrupted at step {at_step}/12 during its evaluation" in err
    assert f"continue with --resume {part_path}; it evaluates this step first" in err
    part = read_checkpoint(part_path)
    assert part["train"]["step"] == at_step
    assert part["train"]["eval_pending"] == {"loss": full["history"][at_step // 4 - 1]["loss"]}
    assert [h["step"] for h in part["history"]] == [s for s in (4, 8) if s < at_step]
    # an interrupted cache entry (resumed, not served), even at the last step
    assert entry_state(part_path) == "interrupted"

    resumed = train(run_config, out=part_path, device="cpu", resume=part_path, progress=False)
    assert_same_run(full, resumed)
    assert "eval_pending" not in read_checkpoint(part_path)["train"]
    assert entry_state(part_path) == "done"


def test_the_evaluation_asks_stop_before_every_batch():
    """evaluate() raises EvaluationStopped at the first batch after stop() says True."""
    run_config = run_config_for()
    model = build_model(run_config.arch, run_config.model)
    task = make_task(run_config.task_name, run_config.task_dict)
    asked = []

    def stop():
        asked.append(1)
        return len(asked) > 2

    with pytest.raises(E.EvaluationStopped, match="before batch 2"):
        E.evaluate(model, task, run_config.train, torch.device("cpu"), stop=stop)
    assert len(asked) == 3 and model.training  # the model's mode is restored


def test_sigterm_to_models_train_during_a_long_evaluation_exits_in_seconds(tmp_path):
    """A real process whose evaluation would take minutes: SIGTERM while it evaluates ends it
    within seconds, exit 130, saved at the evaluated step."""
    out = tmp_path / "c.pt"
    cmd = [sys.executable, "-m", "models.train", *TINY_RUN_FLAGS, "--max-len", "6",
           "--steps", "10", "--batch-size", "4", "--eval-every", "5", "--save-every", "4",
           "--eval-batches", "10000", "--eval-batch-size", "64", "--out", str(out),
           "--no-progress", "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.time() + 120
        while not out.exists():  # saved at step 4: step 5's evaluation starts next
            assert p.poll() is None and time.time() < deadline, p.stderr.read()
            time.sleep(0.05)
        time.sleep(1.5)  # well inside the evaluation (10,000 batches)
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        p.kill()
    assert p.returncode == 130, stderr
    assert took < 20.0, f"{took:.1f} s from SIGTERM to exit"  # minutes if it finished the eval
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"SIGTERM: interrupted at step 5/10 during its evaluation; checkpoint saved to {out} "
        f"(continue with --resume {out}; it evaluates this step first)")
    ck = read_checkpoint(out)
    assert ck["train"]["step"] == 5 and isinstance(ck["train"]["eval_pending"]["loss"], float)
