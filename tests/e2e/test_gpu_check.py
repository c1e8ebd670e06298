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
    monkeypatch.setattr(bench_cuda, "in_fresh_process", lambda fn, *args, timeout=None: fn(*args))
    monkeypatch.setattr(dryrun, "run_isolated", lambda run_config, dev, timeout: measuring.measure(
        run_config, dev))
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


def test_unknown_device_and_unwritable_out_are_one_line_before_any_run(tmp_path, monkeypatch,
                                                                       capsys):
    """Issue 48, failure 7: `--device tpu` was a traceback; an unwritable `--out` was found
    only after the whole run (its results lost)."""
    monkeypatch.setattr(gpu_check, "run_tests", lambda *a: pytest.fail("ran before the check"))
    for device in ("tpu", "meta"):
        assert gpu_check.main(["--device", device, "--tiny", "--out", str(tmp_path / "r.json")]) \
            == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and device in err[0] and "Traceback" not in err[0]
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out in (blocker / "r.json", tmp_path):
        assert gpu_check.main(["--device", "cpu", "--tiny", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--out" in err[0]


def test_failure_names_do_not_depend_on_where_the_clone_lives():
    """Issue 48, failure 9: the JUnit classname carries the test file's folders relative to
    pytest's rootdir (a clone under /tmp saw them)."""
    mods = {"test_fake_gpu"}
    for classname in ("test_fake_gpu", "pytest-of-root.pytest-0.test_x0.test_fake_gpu",
                      "...pytest-of-root.test_fake_gpu"):
        assert gpu_check._test_class(classname, mods) == "test_fake_gpu"
    assert gpu_check._test_class("a.test_fake_gpu.TestX", mods) == "test_fake_gpu.TestX"
