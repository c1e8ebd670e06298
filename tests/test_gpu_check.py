"""``python -m bench.gpu_check``: refuses a machine without CUDA in one line and writes nothing;
its pipeline (GPU tests, the copy models' bench, the dry run, one JSON) runs on tiny models on
the CPU."""

from __future__ import annotations

import json

import pytest
import torch

from analyses.zoo import dryrun
from analyses.zoo.dryrun import measuring
from bench import bench_cuda, gpu_check

TESTS = '''
import pytest

@pytest.mark.gpu
def test_passes():
    pass

@pytest.mark.gpu
def test_fails():
    assert False

@pytest.mark.gpu
def test_skips():
    pytest.skip("no device")

def test_not_gpu():
    assert False  # deselected by -m gpu
'''


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_one_line_and_nothing_written(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert gpu_check.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0] and "--tiny" in err[0]
    assert gpu_check.main(["--device", "cpu", "--out", str(out)]) == 2  # paper models: no
    assert gpu_check.main(["--device", "cpu", "--tiny", "--only", "gpt", "--out", str(out)]) == 2
    assert not out.exists()


def test_tiny_pipeline_on_cpu(tmp_path, monkeypatch):
    # in this process, not one per model: the fresh-process plumbing is the dry run's (tested
    # in test_dryrun.py); here the stages and the JSON
    monkeypatch.setattr(bench_cuda, "in_fresh_process", lambda fn, *args: fn(*args))
    monkeypatch.setattr(dryrun, "run_isolated", lambda spec, dev, timeout: measuring.measure(
        spec, dev))
    tests = tmp_path / "test_fake_gpu.py"
    tests.write_text(TESTS)
    out = tmp_path / "r.json"
    code = gpu_check.main(["--device", "cpu", "--tiny", "--out", str(out), "--tests",
                           str(tests), "--only", "transformer_rope", "--only", "mamba2"])
    doc = json.loads(out.read_text())
    assert code == 1  # a test failed
    assert doc["card"] == "cpu" and doc["tiny"] and doc["torch"] == torch.__version__
    t = doc["tests"]
    assert (t["passed"], t["failed"], t["skipped"]) == (1, 1, 1)
    assert t["failures"] == ["test_fake_gpu::test_fails"]
    assert set(doc["bench"]) == {"transformer_rope", "mamba2"}
    for row in doc["bench"].values():
        assert row["seconds_per_step"] > 0 and row["tokens_per_s"] > 0 and row["mfu_bf16"] > 0
        assert row["precision"] == "fp32" and row["compile"] is False  # "auto" on a CPU
    [rope] = [r for r in doc["table_rows"] if r["recipe"] == "copy/rope"]
    assert rope["seconds_per_step"] == doc["bench"]["transformer_rope"]["seconds_per_step"]
    assert rope["attention"] == "sdpa" and rope["card"] == "cpu"
    assert [r["name"] for r in doc["dry_run"]["rows"]] == ["copy/rope", "copy/mamba2"]
    assert doc["dry_run"]["failed"] == []
