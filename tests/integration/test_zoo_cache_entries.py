"""The zoo cache serves a recipe only its own finished run (issue 29 items 8, 9, 15): another
run's checkpoint copied to the path is retrained, a run stopped by a signal is resumed, and a
bad cache directory is one line before any work."""

import os
import shutil

import pytest
import torch

from analyses import zoo
from analyses.zoo.levels import make_run_config
from models.checkpoint.io import read_checkpoint
from models.train import loop as L
from models.train.cache import cache_path, check_cache_dir, entry_state
from models.train.loop import TrainingInterrupted, train
from seqprobe.errors import CheckpointError, InputError
from tests.tiny import TINY_RECIPE, sigint_during_step

TINY = {**TINY_RECIPE, "train": {**TINY_RECIPE["train"], "steps": 6}}


@pytest.fixture
def two_recipes(monkeypatch):
    narrow = zoo.Recipe("test/narrow", "copy", "transformer", TINY)
    wide = zoo.Recipe("test/wide", "copy", "transformer",
                      {**TINY, "model": {**TINY["model"], "d_model": 32}})
    for r in (narrow, wide):
        monkeypatch.setitem(zoo.RECIPES, r.name, r)
    return narrow, wide


def path_of(name, cache):
    return cache_path(zoo.run_config(name, "quick", cache), cache)


def test_another_runs_checkpoint_at_the_path_is_not_served(two_recipes, tmp_path, capsys):
    wide = zoo.checkpoint("test/wide", "quick", tmp_path, "cpu", progress=False)
    narrow = path_of("test/narrow", tmp_path)
    shutil.copy(wide, narrow)  # a valid checkpoint, of the wrong run
    assert entry_state(narrow, zoo.run_config("test/narrow", "quick", tmp_path)) == "other"
    assert zoo.status("test/narrow", "quick", tmp_path) == "other run"
    served = zoo.checkpoint("test/narrow", "quick", tmp_path, "cpu", progress=False)
    assert "another run's checkpoint" in capsys.readouterr().err
    assert read_checkpoint(served)["model"]["config"]["d_model"] == 16  # retrained, own run
    assert zoo.status("test/narrow", "quick", tmp_path) == "cached"


def test_a_run_stopped_by_a_signal_is_resumed_not_served(two_recipes, tmp_path, monkeypatch):
    orig = sigint_during_step(monkeypatch, 2)  # a real SIGINT while step 3 runs: saves and stops
    with pytest.raises(TrainingInterrupted):
        zoo.checkpoint("test/narrow", "quick", tmp_path, "cpu", progress=False)
    monkeypatch.setattr(L, "lr_at", orig)
    path = path_of("test/narrow", tmp_path)
    assert read_checkpoint(path)["train"]["step"] == 3
    assert zoo.status("test/narrow", "quick", tmp_path) == "interrupted"
    assert zoo._cached("test/narrow", "quick", tmp_path, None) is None  # not served as done
    zoo.checkpoint("test/narrow", "quick", tmp_path, "cpu", progress=False)
    done = read_checkpoint(path)
    assert done["train"]["step"] == 6  # continued from step 3 to the end
    assert zoo.status("test/narrow", "quick", tmp_path) == "cached"


def test_a_broken_entry_is_retrained(two_recipes, tmp_path):
    path = path_of("test/narrow", tmp_path)
    path.write_bytes(b"not a checkpoint")
    assert zoo.status("test/narrow", "quick", tmp_path) == "broken"
    zoo.checkpoint("test/narrow", "quick", tmp_path, "cpu", progress=False)
    assert zoo.status("test/narrow", "quick", tmp_path) == "cached"


def test_bad_cache_directories_are_one_line_before_work(two_recipes, tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(InputError, match="is a file, not a directory"):
        check_cache_dir(a_file)
    assert zoo.main(["train", "test/narrow", "--cache-dir", str(a_file), "--device", "cpu"]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    locked = tmp_path / "cache"
    (locked / (path_of("test/narrow", locked).name + ".lock")).mkdir(parents=True)
    with pytest.raises(InputError, match="is not a lock file"):
        zoo.checkpoint("test/narrow", "quick", locked, "cpu", progress=False)
    if os.geteuid() != 0:  # root writes through a mode-0 directory; chmod tests nothing then
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(InputError, match="cannot write in it"):
            check_cache_dir(ro)


def test_listing_an_unknown_prefix_is_an_error(capsys, tmp_path):
    assert zoo.main(["--list", "zzz/", "--cache-dir", str(tmp_path)]) == 2
    assert "no recipe starts with zzz/" in capsys.readouterr().err


def test_a_flipped_bit_in_the_rng_state_is_refused_on_resume(tmp_path):
    run_config = make_run_config("transformer", "copy", "quick", TINY["model"], TINY["task"],
                     {**TINY["train"], "steps": 2})
    out = tmp_path / "a.pt"
    train(run_config, out=out, device="cpu", progress=False)
    ck = torch.load(out, weights_only=False)
    ck["train"]["rng"]["data"][7] ^= 1  # one bit of the data generator's state
    torch.save(ck, out)
    with pytest.raises(CheckpointError, match="RNG or optimizer state does not match"):
        train(run_config, out=tmp_path / "b.pt", device="cpu", progress=False, resume=out)
