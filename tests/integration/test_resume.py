"""Interrupt, resume, Ctrl-C and divergence (issue 8).

An interrupted and resumed CPU run must end bit-identical to an uninterrupted one with the
same seed: every RNG (task generator, torch, numpy, python) and the optimizer state are saved.
Interruptions here are real SIGINTs (in-process through the trainer's handler, and to a real
``python -m models.train`` process), not simulated flags.
"""

from __future__ import annotations

from tests import ROOT_DIR

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import models.train.loop as L
import models.train.loss as loss_mod
from analyses.zoo.levels import make_run_config
from models.checkpoint.io import read_checkpoint
from models.train.cli import main
from models.train.loop import TrainingDiverged, TrainingInterrupted, train
from seqprobe import atomic
from seqprobe.errors import CheckpointError
from tasks.base import make_generator
from tasks.registry import make_task

ROOT = ROOT_DIR
TINY = dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32)


def run_config_for(steps=12, **train_kw):
    train_cfg = dict(steps=steps, eval_every=4, eval_batches=1, eval_batch_size=8, batch_size=4,
                     warmup_steps=3, seed=5)
    return make_run_config("transformer", "copy", "quick", model=TINY, task_config=dict(max_len=6),
                     train={**train_cfg, **train_kw})


def sigint_after(monkeypatch, n_steps: int) -> None:
    """Send a real SIGINT to this process while step ``n_steps`` runs (the trainer's handler
    turns it into a stop after that step). ``lr_at`` is called at the start of every step."""
    orig, fired = L.lr_at, []

    def lr_at(cfg, step):
        if step == n_steps - 1 and not fired:
            fired.append(step)
            os.kill(os.getpid(), signal.SIGINT)
        return orig(cfg, step)

    monkeypatch.setattr(L, "lr_at", lr_at)


def without_time(history):
    return [{k: v for k, v in h.items() if k != "time_s"} for h in history]


def assert_same_run(a: dict, b: dict):
    for k, v in a["state_dict"].items():
        assert torch.equal(v, b["state_dict"][k]), k  # bit-identical, not merely close
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        for k in sa[i]:
            assert torch.equal(torch.as_tensor(sa[i][k]), torch.as_tensor(sb[i][k])), (i, k)
    assert without_time(a["history"]) == without_time(b["history"])
    for k in ("step", "samples_seen"):
        assert a["train"][k] == b["train"][k]
    assert torch.equal(a["train"]["rng"]["data"], b["train"]["rng"]["data"])
    assert torch.equal(a["train"]["rng"]["torch"], b["train"]["rng"]["torch"])


@pytest.mark.parametrize("stop_at,extra", [
    (6, {}),                       # between two evaluations
    (8, {}),                       # right after an evaluation (eval_every=4)
    (5, {"context": 40}),          # packed contexts: the generator state is mid-example
    (3, {"schedule": "cosine", "grad_clip": 0.0, "save_every": 2}),
], ids=["between-evals", "at-eval", "packed", "cosine-noclip-saveevery"])
def test_interrupted_and_resumed_run_is_bit_identical(tmp_path, monkeypatch, capsys, stop_at,
                                                      extra):
    run_config = run_config_for(**extra)
    full = train(run_config, out=tmp_path / "full.pt", device="cpu", progress=False)

    sigint_after(monkeypatch, stop_at)
    with pytest.raises(TrainingInterrupted):
        train(run_config, out=tmp_path / "part.pt", device="cpu", progress=False)
    monkeypatch.undo()
    assert f"interrupted at step {stop_at}/12" in capsys.readouterr().err
    part = read_checkpoint(tmp_path / "part.pt")
    assert part["train"]["step"] == stop_at
    # a stop before an evaluation abandons it (resumed first): at-eval saves without step 8's
    assert [h["step"] for h in part["history"]] == [s for s in (4, 8) if s < stop_at]

    # scramble every global RNG: resuming must restore them, not rely on them
    torch.manual_seed(999)
    np.random.seed(999)
    random.seed(999)
    resumed = train(run_config, out=tmp_path / "res.pt", device="cpu", resume=tmp_path / "part.pt",
                    progress=False)
    assert_same_run(full, resumed)
    assert [h["step"] for h in resumed["history"]] == [4, 8, 12]
    assert resumed["history"][-1]["time_s"] >= part["train"]["time_s"]  # the clock continues


def test_resume_through_the_cli(tmp_path, monkeypatch, capsys):
    argv = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--d-mlp", "32",
            "--max-len", "6", "--steps", "10", "--eval-every", "5", "--eval-batches", "1",
            "--eval-batch-size", "8", "--batch-size", "4", "--seed", "3", "--no-progress",
            "--device", "cpu"]
    assert main([*argv, "--out", str(tmp_path / "full.pt")]) == 0
    sigint_after(monkeypatch, 4)
    assert main([*argv, "--out", str(tmp_path / "part.pt")]) == 130
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert f"continue with --resume {tmp_path / 'part.pt'}" in err and "Traceback" not in err
    assert main(["--resume", str(tmp_path / "part.pt"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("done: step 10, samples 40")
    assert_same_run(read_checkpoint(tmp_path / "full.pt"), read_checkpoint(tmp_path / "part.pt"))


def test_ctrl_c_before_the_first_step_says_nothing_was_saved(tmp_path, monkeypatch, capsys):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(L, "make_generator", interrupted)  # Ctrl-C while the run is set up
    argv = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "3",
            "--no-progress", "--device", "cpu", "--out", str(tmp_path / "c.pt")]
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("interrupted; no checkpoint was saved by this run "
                       "(any earlier file is intact)")
    assert not (tmp_path / "c.pt").exists()


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path):
    train(run_config_for(steps=2), out=tmp_path / "a.pt", device="cpu", progress=False)
    other = make_run_config("transformer", "copy", "quick", model={**TINY, "d_model": 32},
                      task_config=dict(max_len=6), train=dict(steps=4, batch_size=4))
    with pytest.raises(CheckpointError, match="weights do not match the model config"):
        train(other, device="cpu", resume=tmp_path / "a.pt", progress=False)
    lookup = make_run_config("transformer", "lookup", "quick", model=TINY, train=dict(steps=4))
    with pytest.raises(CheckpointError, match="not transformer on lookup"):
        train(lookup, device="cpu", resume=tmp_path / "a.pt", progress=False)


def test_rng_state_round_trip_restores_every_stream():
    g = make_generator(1)
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    np.random.normal()  # leaves a cached gaussian in numpy's state
    state = L.rng_state(g)
    draws = (torch.rand(3, generator=g), torch.rand(3), np.random.rand(3), np.random.normal(),
             random.random(), random.gauss(0, 1))
    g2 = make_generator(77)
    torch.manual_seed(77)
    np.random.seed(77)
    random.seed(77)
    # the state must survive the checkpoint file (weights_only load)
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    L.set_rng_state(torch.load(buf, weights_only=True), g2)
    again = (torch.rand(3, generator=g2), torch.rand(3), np.random.rand(3), np.random.normal(),
             random.random(), random.gauss(0, 1))
    for a, b in zip(draws, again, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_evaluation_does_not_disturb_any_rng_stream():
    run_config = run_config_for()
    task = make_task(run_config.task_name, run_config.task_dict)
    model = L.build_model(run_config.arch, run_config.model)
    g = make_generator(4)
    before = L.rng_state(g)
    L.evaluate(model, task, run_config.train, torch.device("cpu"))
    after = L.rng_state(g)
    assert torch.equal(before["data"], after["data"])
    assert torch.equal(before["torch"], after["torch"])
    assert torch.equal(before["numpy"]["key"], after["numpy"]["key"])
    assert before["numpy"]["pos"] == after["numpy"]["pos"]
    assert before["python"]["gauss"] == after["python"]["gauss"]
    assert torch.equal(before["python"]["internal"], after["python"]["internal"])


# ---------------------------------------------------------------------------- real Ctrl-C
def test_ctrl_c_in_a_real_process_saves_and_exits_130(tmp_path):
    out = tmp_path / "c.pt"
    cmd = [sys.executable, "-m", "models.train", "--steps", "100000", "--d-model", "16",
           "--n-layers", "1", "--n-heads", "2", "--batch-size", "4", "--max-len", "5",
           "--eval-every", "0", "--save-every", "10", "--out", str(out), "--no-progress",
           "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.time() + 120
        while not out.exists():  # the first periodic save: the loop is running
            assert p.poll() is None and time.time() < deadline, p.stderr.read()
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr and stdout == ""
    last = stderr.strip().splitlines()[-1]
    step = read_checkpoint(out)["train"]["step"]
    assert last == (f"SIGINT: interrupted at step {step}/100000; checkpoint saved to {out} "
                    f"(continue with --resume {out})")
    assert step >= 10  # saved at the interruption, after at least one periodic save
    # and the saved run continues
    assert main(["--resume", str(out), "--steps", str(step + 2), "--no-progress"]) == 0
    assert read_checkpoint(out)["train"]["step"] == step + 2


# ---------------------------------------------------------------------------- divergence
def test_nan_loss_names_the_step_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    run_config = run_config_for(steps=10, save_every=2)
    out = tmp_path / "c.pt"
    orig, calls = loss_mod.nll, []

    def nll(logp, targets, reduction="mean"):  # the 5th training step's loss is NaN
        loss = orig(logp, targets, reduction)
        if logp.requires_grad:  # a training step (evaluations run under no_grad)
            calls.append(1)
            if len(calls) == 5:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(loss_mod, "nll", nll)
    with pytest.raises(TrainingDiverged) as e:
        train(run_config, out=out, device="cpu", progress=False)
    msg = str(e.value)
    assert "loss is nan at step 5" in msg and f"last good checkpoint: {out} (step 4)" in msg
    ck = read_checkpoint(out)
    assert ck["train"]["step"] == 4
    assert all(torch.isfinite(v).all() for v in ck["state_dict"].values())


def test_infinite_gradient_stops_before_the_weights_are_spoiled(tmp_path, monkeypatch):
    run_config = run_config_for(steps=10, save_every=1)
    out = tmp_path / "c.pt"
    orig, calls = loss_mod.nll, []

    def nll(logp, targets, reduction="mean"):  # finite loss, infinite gradient at the 3rd step
        loss = orig(logp, targets, reduction)
        if logp.requires_grad:
            calls.append(1)
            if len(calls) == 3:
                loss = loss + torch.sqrt((logp - logp.detach()).sum())  # value 0, d/dw = inf
        return loss

    monkeypatch.setattr(loss_mod, "nll", nll)
    with pytest.raises(TrainingDiverged, match=r"gradient norm is (inf|nan) at step 3"):
        train(run_config, out=out, device="cpu", progress=False)
    ck = read_checkpoint(out)
    assert ck["train"]["step"] == 2
    assert all(torch.isfinite(v).all() for v in ck["state_dict"].values())


def test_divergence_through_the_cli_exits_3_and_keeps_the_file(tmp_path, capsys, monkeypatch):
    out = tmp_path / "c.pt"
    base = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--max-len", "5",
            "--batch-size", "4", "--eval-batches", "1", "--eval-batch-size", "4",
            "--no-progress", "--device", "cpu"]
    assert main([*base, "--steps", "3", "--out", str(out)]) == 0
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    capsys.readouterr()
    orig = loss_mod.nll  # --lr is bounded (seqprobe.flags.BOUNDS): the loss is made NaN instead
    monkeypatch.setattr(loss_mod, "nll", lambda logp, targets, reduction="mean": (
        orig(logp, targets, reduction) * (float("nan") if logp.requires_grad else 1.0)))
    # (a constant schedule: --steps on --resume is refused where it changes the schedule)
    code = main(["--resume", str(out), "--steps", "40", "--lr", "10", "--warmup-steps", "0",
                 "--schedule", "constant", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3
    assert err[-1].startswith("error: loss is nan at step ") and "Traceback" not in "".join(err)
    assert f"last good checkpoint: {out} (step 3)" in err[-1]
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest  # untouched


def test_failed_save_during_training_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    run_config = run_config_for(steps=8, save_every=2)
    out = tmp_path / "c.pt"
    saves = []

    def disk_full_on_second_save(tmp):
        saves.append(tmp)
        if len(saves) == 2:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "_before_rename_hook", disk_full_on_second_save)
    with pytest.raises(CheckpointError, match="could not save"):
        train(run_config, out=out, device="cpu", progress=False)
    assert read_checkpoint(out)["train"]["step"] == 2
    assert not list(tmp_path.glob(".*.tmp"))
