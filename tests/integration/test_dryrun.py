"""``--dry-run`` (analyses.zoo.dryrun): two steps of each model at its real size, a table of
sizes, step times and projected H100 hours; a model that cannot run is a row, not a crash."""

from __future__ import annotations

from tests import ROOT_DIR

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import seqprobe.device
from analyses import markov_holdout as holdout
from analyses.common import run_analysis
from analyses.memorization import cli as memorization
from analyses.reproduce import cli as reproduce_cli
from analyses.reproduce import plan as reproduce_plan
from analyses.zoo import dryrun
from analyses.zoo.levels import make_run_config
from models.registry import build_model
from models.train import plan as train_plan
from seqprobe.errors import InputError
from tasks.base import IGNORE

ROOT = ROOT_DIR


def tiny_run_config(seed: int = 0, arch: str = "transformer", **model):
    base = {"d_model": 16, "n_layers": 1, "n_heads": 2} if arch == "transformer" else \
        {"d_model": 8, "n_layers": 1, "d_state": 4}
    return make_run_config(arch, "copy", "quick", model={**base, **model},
                     task_config={"min_len": 1, "max_len": 5},
                     train={"steps": 50, "batch_size": 4, "seed": seed})


def test_dry_run_rows_failures_and_nothing_written(tmp_path, monkeypatch, capsys):
    """Rows with positive numbers; a config that fails to build and one that fails in its first
    step are rows with their one-line reason, the others still run, exit 1; no checkpoint."""
    monkeypatch.chdir(tmp_path)

    def bad_config():
        return make_run_config("transformer", "copy", "quick", model={"d_model": 10, "n_heads": 3})

    items = [("bad_config", bad_config), ("tiny", tiny_run_config),
             ("tiny_seed1", lambda: tiny_run_config(seed=1)),
             # valid, but fails in its first step (no mamba-ssm kernels on a CPU)
             ("fails_to_step", lambda: tiny_run_config(arch="mamba", scan="kernel"))]
    # a large parent: each run's peak is its own process's, not the parent's resident set
    ballast = torch.ones(75_000_000)  # 300 MB
    assert dryrun.report(items, "cpu", tmp_path / "out") == dryrun.EXIT_SOME_FAILED
    del ballast
    captured = capsys.readouterr()
    doc = json.loads((tmp_path / "out" / "dry_run.json").read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    first, second = rows["tiny"], rows["tiny_seed1"]
    for key in ("params", "tokens_per_step", "seconds_per_step", "gpu_hours_h100",
                "flops_per_token", "first_step_s"):
        assert first[key] > 0, key
    assert 0 <= first["peak_memory_bytes"] < 150e6 and first["memory"] == "rss_delta"
    assert first["dry_batch_size"] == 1 and first["batch_size"] == 4 and first["steps"] == 50
    assert first["tokens_per_step"] == 4 * first["seq_len"]
    # a seed changes no cost: one run serves every seed
    assert second["measured_as"] == "tiny"
    assert second["seconds_per_step"] == first["seconds_per_step"]
    # the failures, each with its reason on one line
    assert doc["failed"] == ["bad_config", "fails_to_step"]
    assert "n_heads" in rows["bad_config"]["error"] or "d_model" in rows["bad_config"]["error"]
    assert "kernel" in rows["fails_to_step"]["error"]
    assert "\n" not in rows["fails_to_step"]["error"]
    assert rows["fails_to_step"]["params"] > 0  # the configs alone still size it
    assert "Traceback" not in captured.out + captured.err
    assert "cannot run: bad_config, fails_to_step" in captured.err
    assert "tiny_seed1" in captured.out and "H100-hours" in captured.out
    # no checkpoint anywhere: only the JSON
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.is_file()) == ["out/dry_run.json"]


def test_projection_formula():
    run_config = tiny_run_config()
    n, L = 1000, 10
    assert train_plan.flops_per_token(run_config, n, L) == 6 * n + 12 * 1 * 16 * L
    assert train_plan.flops_per_token(tiny_run_config(arch="mamba"), n, L) == 6 * n
    assert train_plan.gpu_hours(dryrun.UTILISATION * dryrun.H100_PEAK * 3600) == pytest.approx(1.0)


def test_flops_formula_against_flop_counter():
    """6 N + the attention term is what torch's FLOP counter finds in a transformer's training
    step (forward and backward), up to the ops it does not count (norms, softmax)."""
    run_config = tiny_run_config(d_model=64, n_heads=4, n_layers=2, use_sdpa=False)
    model = build_model(run_config.arch, run_config.model)
    L = 32
    tokens = torch.randint(0, run_config.model.vocab_size, (2, L))
    with FlopCounterMode(display=False) as counter:
        logp = model.log_probs(tokens)
        torch.nn.functional.nll_loss(logp.reshape(-1, logp.shape[-1]), tokens.reshape(-1),
                                     ignore_index=IGNORE).backward()
    n_params = sum(p.numel() for p in model.parameters())
    predicted = train_plan.flops_per_token(run_config, n_params, L) * tokens.numel()
    assert counter.get_total_flops() == pytest.approx(predicted, rel=0.15)


def test_too_large_for_this_machine_is_one_line(monkeypatch):
    """The meta-device size check answers before anything is allocated."""
    monkeypatch.setattr(seqprobe.device, "memory_bytes", lambda device="cpu": 10_000)
    rows = dryrun.dry_run([("big", tiny_run_config)], "cpu", log=lambda text: None)
    assert "more than this machine's memory" in rows[0]["error"]


def test_reproduce_flag_collects_the_plan(tmp_path, monkeypatch):
    seen = {}

    def fake_report(items, device, out, name="dry_run"):
        seen.update(names=[n for n, _ in items], device=device, out=out)
        return 0

    monkeypatch.setattr(dryrun, "report", fake_report)
    argv = ["--paper", "--dry-run", "--device", "cpu", "--out", str(tmp_path),
            "--only", "markov_holdout", "--only", "memorization", "--only", "spectral_lds"]
    assert reproduce_cli.main(argv) == 0
    assert seen["names"] == ["markov_holdout/mamba2", "memorization_synthetic_token/m120_f1",
                             "memorization_synthetic_token/m12_f0.1"]
    assert seen["device"] == "cpu" and Path(seen["out"]) == tmp_path
    assert not (tmp_path / "index.md").exists()  # no analysis ran


def test_analysis_flag(tmp_path, monkeypatch):
    seen = {}

    def fake_report(items, device, out, name="dry_run"):
        seen[name] = [(n, build()) for n, build in items]
        return 0

    monkeypatch.setattr(dryrun, "report", fake_report)
    assert holdout.main(["--train", "paper", "--dry-run", "--out", str(tmp_path)]) == 0
    [(label, run_config)] = seen["markov_holdout_dry_run"]
    assert label == "markov_holdout/mamba2" and run_config.train.steps == 10000  # the paper level
    assert memorization.main(["--paper", "--dry-run", "--n-examples", "500", "--out",
                              str(tmp_path)]) == 0
    cells = dict(seen["memorization_dry_run"])
    widest = cells["memorization_synthetic_token/m120_f1"]
    assert widest.model.d_model == 120 and widest.task.fraction == 1.0
    assert widest.task.n_examples == 500  # the flags' task config, as a real run's
    assert list(tmp_path.iterdir()) == []  # nothing computed, nothing written


def test_dry_run_needs_a_training_analysis(capsys):
    def compute(args, checkpoints):
        raise AssertionError("a dry run computes nothing")

    code = run_analysis("x", "doc", ["--dry-run"], compute=compute, plot=lambda r: None)
    assert code == 2 and "--dry-run" in capsys.readouterr().err


def test_unknown_device_is_refused_before_any_work():
    with pytest.raises(InputError):
        dryrun.dry_run([("tiny", tiny_run_config)], "nodevice")


@pytest.mark.slow
def test_paper_plan_dry_run(tmp_path):
    """The whole --paper plan: every model builds at its real size and takes two steps."""
    proc = subprocess.run([sys.executable, "-m", "analyses.reproduce", "--paper", "--dry-run",
                           "--device", "cpu", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "dry_run.json").read_text())
    names = [r["name"] for r in doc["rows"]]
    plan = [n for n, _ in reproduce_plan.plan_models(reproduce_plan.PLAN, "paper")]
    assert names == plan and "copy/hard_alibi" in names
    assert all(r["seconds_per_step"] > 0 and r["gpu_hours_h100"] > 0 for r in doc["rows"])
