"""The CUDA step-cost table (models.train.gpu_costs) and the dry run's H100-hours from it:
measured where the table has the run's row, a projection at the run's own precision
otherwise, and every row says which."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from analyses.reproduce import cli as reproduce_cli
from analyses.zoo import dryrun
from analyses.zoo.dryrun import recipe_run_config
from models.train import gpu_costs
from models.train.costs import StepCosts, evaluations
from models.train.gpu_costs import CudaTable, cuda_table, run_settings
from models.train.plan import plan_row

REPORT = "../shared/gpu/h100-2026-11-26.md"


def paper(name: str, **train):
    run_config = recipe_run_config(name, "paper")
    return run_config.replace(train=train) if train else run_config


def test_shipped_rows_are_the_reports_with_their_provenance():
    table = cuda_table()
    rows = table.rows()
    assert rows and table.card() == gpu_costs.REFERENCE_CARD
    for r in rows:
        assert r["seconds_per_step"] > 0 and r["batch_size"] == r["micro_batch"] == 64
        assert r["source"] == REPORT and r["date"] == "2026-11-26"
        assert r["torch"].startswith("2.11") and r["precision"] in ("fp32", "bf16")
        assert gpu_costs._model_of(r) is not None  # every row's config still builds
    got = {(r["recipe"], r["precision"], r["compile"], r["attention"], r["seconds_per_step"])
           for r in rows}
    assert ("copy/rope", "bf16", True, "sdpa", 0.070) in got
    assert ("copy/hard_alibi", "bf16", False, "explicit", 0.178) in got
    assert ("markov/mamba2", "fp32", False, None, 0.034) in got
    assert not any(r["recipe"] == "copy/mamba" for r in rows)  # out of memory: no time


FP32 = {"precision": "fp32", "compile": False}
BF16 = {"precision": "bf16", "compile": False}


@pytest.mark.parametrize("name, train, model, seconds", [
    ("copy/hard_alibi", FP32, {}, 0.626),  # the dry run's row comes before the bench's 0.629
    ("copy/hard_alibi", BF16, {}, 0.104),
    ("copy/hard_alibi", BF16, {"use_sdpa": False}, 0.178),
    ("copy/rope", {"precision": "bf16", "compile": True}, {}, 0.070),
    ("copy/rope", {}, {}, 0.070),  # "auto" on CUDA: bf16 and compiled
    ("copy/hard_alibi", {}, {}, None),  # bf16 + compile: not measured for Hard-ALiBi
    ("copy/alibi", BF16, {}, None),  # not measured: no row
    ("copy/rope", {**FP32, "batch_size": 32}, {}, None),  # another batch
    ("copy/rope", {**FP32, "micro_batch": 16}, {}, None),  # gradient accumulation
    ("copy/mamba", FP32, {}, None),
])
def test_lookup_needs_every_setting_to_agree(name, train, model, seconds):
    run_config = recipe_run_config(name, "paper").replace(train=train or None, model=model or None)
    row = cuda_table().lookup(run_config, 420)
    assert (row and row["seconds_per_step"]) == seconds
    assert cuda_table().lookup(run_config, 421) is None  # another length


def test_auto_settings_resolve_by_device():
    run_config = SimpleNamespace(train=SimpleNamespace(precision="auto", compile="auto"))
    assert run_settings(run_config, "cuda") == ("bf16", True)
    assert run_settings(run_config, "cpu") == ("fp32", False)
    run_config = SimpleNamespace(train=SimpleNamespace(precision="fp32", compile="off"))
    assert run_settings(run_config, "cuda") == ("fp32", False)  # an explicit setting wins


def test_rows_match_across_added_defaults_and_stale_rows_match_nothing(tmp_path):
    run_config = paper("copy/rope", **FP32)
    row = {"arch": "transformer", "model": {**run_config.model_dict, "use_sdpa": True},
           "batch_size": 64, "seq_len": 420, "precision": "fp32", "compile": False,
           "seconds_per_step": 1.5}
    stale = {**row, "model": {**run_config.model_dict, "no_such_field": 1}, "seconds_per_step": 9.0}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": gpu_costs.FORMAT,
                                "cards": {"NVIDIA H100 PCIe": {"rows": [stale, row]}}}))
    table = CudaTable.load(path)
    # a default spelled out still matches; "H100" finds the one H100 card by its name
    assert table.lookup(run_config, 420, card="H100")["seconds_per_step"] == 1.5
    assert table.lookup(run_config, 420, card="A100") is None
    path.write_text(json.dumps({"format": 99, "cards": {"x": {"rows": [row]}}}))
    assert CudaTable.load(path).cards == {} and CudaTable.load(tmp_path / "none").cards == {}


def test_dry_run_hours_measured_or_projected_at_the_runs_precision():
    measured = plan_row("copy/hard_alibi", paper("copy/hard_alibi", **FP32))
    assert measured["gpu_hours_source"] == "measured"
    assert measured["gpu_hours_h100"] == pytest.approx(0.626 * measured["steps"] / 3600)
    fp32 = plan_row("copy/mamba", paper("copy/mamba", **FP32))
    bf16 = plan_row("copy/mamba", paper("copy/mamba"))  # "auto": bf16 on a GPU
    assert fp32["gpu_hours_source"] == bf16["gpu_hours_source"] == "projection"
    assert fp32["gpu_precision"] == "fp32" and bf16["gpu_precision"] == "bf16"
    peak = gpu_costs.PEAK_FLOPS
    assert fp32["gpu_hours_h100"] == pytest.approx(
        fp32["total_flops"] / (gpu_costs.UTILISATION * peak["fp32"]) / 3600)
    assert fp32["gpu_hours_h100"] / bf16["gpu_hours_h100"] == pytest.approx(
        peak["bf16"] / peak["fp32"])
    cells = dryrun.table([measured, fp32])
    assert cells[0][6] == "hours from"
    assert cells[1][6].startswith("measured 0.626") and cells[2][6] == "projection (fp32)"
    doc = dryrun.summary([measured, fp32], "cpu", 1.0)
    assert doc["gpu_hours_measured"] == 1 and doc["gpu_hours_projected"] == 1


def test_step_costs_on_cuda_measured_or_projected():
    costs = StepCosts.load(device="cuda").timed()
    rope = paper("copy/rope")  # "auto": bf16 + compile on a GPU, the report's 0.070 row
    est = costs.run(rope)
    # its steps at the measured row, then its evaluations and its compile (assumed)
    extra = gpu_costs.overhead_seconds(
        rope, 0.070, evaluations(rope.train.steps, rope.train.eval_every))
    assert extra >= gpu_costs.COMPILE_S  # "auto" compiles on a GPU
    assert est.source == "measured" and est.seconds == pytest.approx(
        0.070 * rope.train.steps + extra)
    assert costs.run(paper("copy/mamba")).source == "projection"
    # a job the plan places on the CPU cores of the GPU machine is costed from the CPU table
    quick_copy = dryrun.recipe_run_config("copy/rope", "quick")
    assert costs.run(quick_copy, "cpu").source == "table" and costs.unit_s > 0
    assert costs.run(quick_copy).source in ("measured", "projection")
    assert StepCosts.load(device="cpu").run(rope) is None or \
        StepCosts.load(device="cpu").timed().run(rope).source != "measured"


@pytest.mark.parametrize("level, only, measured", [("quick", "copy_efficiency", False),
                                                   ("paper", "copy_efficiency", True)])
def test_list_estimates_a_gpu_plan_on_a_cpu_machine(level, only, measured, tmp_path, capsys):
    assert reproduce_cli.main([f"--{level}", "--list", "--device", "cuda", "--only", only,
                           "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "GPU estimate: training jobs on one NVIDIA H100" in out
    assert "estimated" in out and "their FLOPs, projected" in out
    assert ("CUDA step-cost table (step times measured on a GPU)" in out) == measured
