"""The dry run's memory settings (issue 35 §1): it reports what it used, and on a GPU it finds
the largest micro-batch that fits the card (tested here with a stand-in for the GPU)."""

import pytest
import torch

from analyses.zoo import dryrun
from analyses.zoo.dryrun import measuring
from analyses.zoo.levels import make_run_config
from models.ssm.mamba import MambaConfig

TINY_MAMBA = dict(d_model=8, n_layers=2, d_state=4)


def _run_config(**train):
    return make_run_config("mamba", "copy", "quick", model=TINY_MAMBA, task_config=dict(max_len=4),
                     train=dict(steps=3, batch_size=8, precision="fp32", compile=False,
                                **train))


def test_micro_batches_halve_through_divisors():
    assert measuring.micro_batches(64) == [64, 32, 16, 8, 4, 2, 1]
    assert measuring.micro_batches(6) == [6, 3, 1]
    assert measuring.micro_batches(12) == [12, 6, 3, 1]
    assert measuring.micro_batches(1) == [1]


def test_a_gpu_dry_run_takes_the_largest_micro_batch_that_fits(monkeypatch):
    """Out of memory above 2 rows per pass: the whole batch, 4 and 2 are tried, in that order,
    and the row reports 2; another error is not retried."""
    tried = []

    def fake_once(run_config, dev):
        micro = run_config.train.micro_batch or run_config.train.batch_size
        tried.append(micro)
        if micro > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.56 GiB")
        return {"micro_batch": micro, "peak_memory_bytes": 1}

    monkeypatch.setattr(measuring, "resolve_device", lambda d: torch.device("cuda"))
    monkeypatch.setattr(measuring, "_measure_once", fake_once)
    assert measuring.measure(_run_config(), "cuda")["micro_batch"] == 2
    assert tried == [8, 4, 2]

    def broken(run_config, dev):
        raise RuntimeError("a bug, not memory")

    monkeypatch.setattr(measuring, "_measure_once", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        measuring.measure(_run_config(), "cuda")

    def never_fits(run_config, dev):
        raise RuntimeError("CUDA out of memory (wrapped by a compiler)")

    monkeypatch.setattr(measuring, "_measure_once", never_fits)
    with pytest.raises(dryrun.InputError, match="even at micro-batch 1"):
        measuring.measure(_run_config(), "cuda")


def test_the_dry_run_config_runs_the_whole_dry_batch_and_keeps_checkpointing():
    dry = dryrun.dry_run_config(_run_config(micro_batch=4, checkpoint_blocks=True),
                                torch.device("cpu"))
    assert dry.train.batch_size == 1 and dry.train.micro_batch == 0
    assert dry.train.checkpoint_blocks


def test_a_measured_row_reports_its_memory_settings(monkeypatch):
    run_config = dryrun.dry_run_config(_run_config(checkpoint_blocks=True), torch.device("cpu"))
    row = measuring.measure(run_config, "cpu")
    assert row["micro_batch"] == 1 and row["checkpoint_blocks"] is True
    assert row["scan_paths"] == ["plain"]  # a tiny model stays on the loop
    monkeypatch.setattr(MambaConfig, "CHUNKED_MIN_ELEMENTS", 1)
    row = measuring.measure(run_config, "cpu")
    assert row["scan_paths"] == ["chunked"]
    assert dryrun.memory_note({**row, "dry_batch_size": 1}) == "checkpointed blocks, chunked scan"
    assert dryrun.memory_note({"micro_batch": 16, "dry_batch_size": 64}) == "micro-batch 16"


def test_the_paper_copy_mamba_checkpoints_its_blocks():
    for name in ("copy/mamba",):
        run_config = dryrun.recipe_run_config(name, "paper")
        assert run_config.train.checkpoint_blocks, name
        assert run_config.model.d_model == 1024 and run_config.model.n_layers == 24
