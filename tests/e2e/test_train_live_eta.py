"""Training at the prompt says what this machine will do now (issue 47 item 4): the first ETA
times real steps of the run, ``--no-progress`` keeps a line per evaluation, and ``--steps``
that would change a resumed run's schedule is refused in one line."""

from __future__ import annotations

import time

import torch

import models.train.announce as A
from analyses.zoo.levels import make_run_config
from models.checkpoint.io import read_checkpoint
from models.train.cli import main
from tests.tiny import TINY_RUN_FLAGS

TINY = dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32)
FLAGS = [*TINY_RUN_FLAGS, "--max-len", "5", "--batch-size", "4", "--eval-batches", "1",
         "--eval-batch-size", "4", "--no-progress", "--device", "cpu", "--warmup-steps", "2"]


def run_config(steps=400, **train):
    return make_run_config("transformer", "copy", "quick", model=TINY,
                           task_config=dict(max_len=5), train=dict(steps=steps, **train))


def test_the_first_eta_times_steps_of_this_run_and_sees_a_slow_machine(monkeypatch):
    """A step made slower (as a busy core makes it) shows in the ETA before training: the
    measured seconds per step, times the steps (and the evaluations, at the table's ratio)."""
    fast = A.step_seconds(run_config(), "cpu", budget_s=0.05)
    assert fast is not None and fast > 0
    backward = A.backward

    def slow(*a, **k):
        time.sleep(0.05)
        return backward(*a, **k)

    monkeypatch.setattr(A, "backward", slow)
    est = A.measured_estimate(run_config(), "cpu")
    assert est is not None and "s per step of this run now" in est.source
    assert est.seconds >= 400 * 0.05
    line = A.training_line(run_config(), "c.pt", device="cpu", measure=True)
    assert "s per step of this run now)" in line
    # without measure (an ensemble's member) the table's estimate, as before
    assert "(step-cost table" in A.training_line(run_config(), "c.pt", device="cpu")


def test_timing_the_run_leaves_the_process_rngs_and_the_run_as_they_were(tmp_path):
    torch.manual_seed(7)
    before = torch.get_rng_state()
    assert A.step_seconds(run_config(steps=3), "cpu", budget_s=0.01) is not None
    assert torch.equal(torch.get_rng_state(), before)


def test_no_progress_prints_a_line_per_evaluation(tmp_path, capsys):
    assert main([*FLAGS, "--steps", "4", "--eval-every", "2", "--out",
                 str(tmp_path / "c.pt")]) == 0
    err = capsys.readouterr().err.splitlines()
    evals = [ln for ln in err if ln.startswith("step ")]
    assert [ln.split(":")[0] for ln in evals] == ["step 2/4", "step 4/4"], err
    assert all("loss=" in ln and "eval_loss=" in ln for ln in evals)
    assert err[0].startswith("about to train (transformer on copy")


def test_steps_changed_on_resume_is_refused_unless_the_schedule_stays(tmp_path, capsys):
    path = tmp_path / "c.pt"
    assert main([*FLAGS, "--steps", "4", "--out", str(path)]) == 0
    capsys.readouterr()
    # linear decay past the warm-up: the steps taken had other learning rates in a 6-step run
    assert main(["--resume", str(path), "--steps", "6", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--steps 6 would change the linear schedule" in err
    assert read_checkpoint(path)["train"]["step"] == 4  # nothing trained
    # a constant schedule does not depend on the run's length: more steps continue it
    const = tmp_path / "k.pt"
    assert main([*FLAGS, "--steps", "4", "--schedule", "constant", "--out", str(const)]) == 0
    assert main(["--resume", str(const), "--steps", "6", "--no-progress"]) == 0
    assert read_checkpoint(const)["train"]["step"] == 6
    # the same --steps is no change
    assert main(["--resume", str(path), "--steps", "4", "--no-progress"]) == 0
