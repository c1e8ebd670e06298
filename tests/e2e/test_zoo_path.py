"""Finding a checkpoint by name (issue 37, first item): ``python -m analyses.zoo path NAME`` and
``--list`` read the cache and never train or create anything; ``zoo:NAME[@LEVEL]`` opens the
cached checkpoint in every analysis (``models.load`` takes ``zoo.path(NAME)``: the zoo sits
above it); a command that is about to train says so first in one line."""

from __future__ import annotations

import os

import pytest

import models
from analyses import zoo
from analyses.common import given_checkpoint, load_model
from analyses.zoo.recipe import parse_zoo_ref
from models.registry import HF_ARCHS
from models.train import loop as L
from models.train.announce import training_line
from models.train.cache import cache_path
from models.train.loop import TrainingInterrupted
from seqprobe.errors import InputError
from tests.tiny import sigint_during_step

TINY = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"min_len": 1, "max_len": 6},
        "train": {"steps": 4, "batch_size": 4, "eval_every": 0, "eval_batches": 1,
                  "eval_batch_size": 4, "warmup_steps": 1}}


@pytest.fixture
def tiny_recipe(monkeypatch, tmp_path):
    """A tiny copy recipe at quick only, and the working directory a temp dir (so the default
    cache, ``checkpoints/``, is a fresh one there)."""
    r = zoo.Recipe("test/tiny", "copy", "transformer", TINY, levels=("quick",))
    monkeypatch.setitem(zoo.RECIPES, r.name, r)
    monkeypatch.chdir(tmp_path)
    return r


def run_zoo(capsys, *argv):
    code = zoo.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_path_of_a_missing_entry_says_not_trained_and_how_and_creates_nothing(tiny_recipe,
                                                                              tmp_path, capsys):
    code, out, err = run_zoo(capsys, "path", "test/tiny")
    assert code != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "not trained" in lines[0] and "(missing)" in lines[0]
    assert "`python -m analyses.zoo train test/tiny`" in lines[0]
    assert not (tmp_path / "checkpoints").exists()  # nothing trained, nothing created
    code, _, err = run_zoo(capsys, "path", "test/tiny", "--cache-dir", "elsewhere")
    assert code != 0 and "train test/tiny --cache-dir elsewhere`" in err
    assert not (tmp_path / "elsewhere").exists()


def test_path_load_and_analyses_find_the_cached_checkpoint(tiny_recipe, tmp_path, capsys):
    trained = zoo.checkpoint("test/tiny", "quick", "checkpoints", "cpu", progress=False)
    err = capsys.readouterr().err
    # the one line before training: what, where, steps, an ETA (or why there is none)
    said = [ln for ln in err.splitlines() if ln.startswith("about to train")]
    assert len(said) == 1 and "test/tiny (transformer on copy)" in said[0]
    assert "4 steps" in said[0] and str(trained) in said[0] and "ETA" in said[0]
    default = os.path.abspath(trained)  # the default cache is an absolute folder (seqprobe.paths)
    code, out, _ = run_zoo(capsys, "path", "test/tiny")
    assert code == 0 and out.strip() == default
    code, out, _ = run_zoo(capsys, "path", "test/tiny", "--level", "quick")
    assert code == 0 and out.strip() == default
    m = models.load(zoo.path("test/tiny"))
    assert m.provenance.source == default and m.task.name == "copy"
    assert load_model("zoo:test/tiny@quick").provenance.source == default
    # --list shows how well each cached checkpoint learnt (its last evaluation)
    code, out, _ = run_zoo(capsys, "--list", "test/")
    row = out.strip().splitlines()[0].split()
    assert code == 0 and row[:2] == ["test/tiny", "cached"] and row[3] == "acc"
    assert 0.0 <= float(row[4].rstrip(",")) <= 1.0 and "L=" in out
    # with the zoo imported (it registers its resolver), the loader takes zoo names too
    assert models.load("zoo:test/tiny@quick").provenance.source == default
    assert models.load("zoo:test/tiny").provenance.source == default
    assert given_checkpoint("zoo:test/tiny").path == \
        os.path.abspath(given_checkpoint("zoo:test/tiny", "checkpoints").path)
    assert given_checkpoint("zoo:test/tiny").label == "test/tiny"
    assert given_checkpoint("zoo:test/tiny").path == default
    # served from the cache: no second "about to train" line
    zoo.checkpoint("test/tiny", "quick", "checkpoints", "cpu", progress=False)
    assert "about to train" not in capsys.readouterr().err


def test_a_zoo_name_before_the_zoo_is_imported_is_one_line(monkeypatch):
    from models import loading

    monkeypatch.setattr(loading, "NAME_RESOLVERS", {})  # as in a session that imported models only
    with pytest.raises(InputError, match=r"`from analyses import zoo` once") as e:
        models.load("zoo:copy/hard_alibi@medium")
    assert "\n" not in str(e.value) and "zoo.path('copy/hard_alibi', 'medium')" in str(e.value)


def test_an_interrupted_or_broken_entry_is_not_served_by_name(tiny_recipe, tmp_path,
                                                              monkeypatch, capsys):
    orig = sigint_during_step(monkeypatch, 2)  # a real SIGINT while step 3 runs: saves and stops
    with pytest.raises(TrainingInterrupted):
        zoo.checkpoint("test/tiny", "quick", "checkpoints", "cpu", progress=False)
    monkeypatch.setattr(L, "lr_at", orig)
    capsys.readouterr()
    code, _, err = run_zoo(capsys, "path", "test/tiny")
    assert code != 0 and "(interrupted)" in err and "train test/tiny" in err
    with pytest.raises(InputError, match=r"not trained .*interrupted.*zoo train test/tiny"):
        load_model("zoo:test/tiny")
    with pytest.raises(InputError, match="interrupted"):
        given_checkpoint("zoo:test/tiny")
    cache_path(zoo.run_config("test/tiny", "quick"), "checkpoints").write_bytes(b"junk")
    code, _, err = run_zoo(capsys, "path", "test/tiny")
    assert code != 0 and "(broken)" in err


def test_list_shows_only_the_level_asked_with_states_and_paths(tiny_recipe, tmp_path,
                                                              capsys):
    code, out, _ = run_zoo(capsys, "--list", "test/")
    rows = out.strip().splitlines()
    assert code == 0 and len(rows) == 1
    expected = os.path.abspath(cache_path(zoo.run_config("test/tiny", "quick"), "checkpoints"))
    assert rows[0].split()[:3] == ["test/tiny", "missing", expected]
    assert not (tmp_path / "checkpoints").exists()  # listing creates nothing
    code, out, err = run_zoo(capsys, "--list", "test/", "--level", "medium")
    assert code != 0 and out == "" and "no" in err and "medium version" in err
    code, out, _ = run_zoo(capsys, "--list", "--medium")
    assert code == 0 and "no medium version" not in out
    assert all(zoo.RECIPES[r.split()[0]].available("medium") for r in out.splitlines())
    assert not (tmp_path / "checkpoints").exists()


def test_unknown_names_and_levels_are_one_line_with_near_matches(tiny_recipe, capsys):
    code, _, err = run_zoo(capsys, "path", "copy/hard_albi")
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "did you mean copy/hard_alibi" in err
    with pytest.raises(InputError, match="did you mean copy/rope"):
        load_model("zoo:copy/rop")
    with pytest.raises(InputError, match="no medium version .it has quick"):
        load_model("zoo:test/tiny@medium")
    with pytest.raises(InputError, match="unknown level 'huge'"):
        parse_zoo_ref("zoo:copy/rope@huge")
    assert parse_zoo_ref("zoo:copy/rope@paper") == ("copy/rope", "paper")
    assert parse_zoo_ref("zoo:copy/rope") == ("copy/rope", "quick")


def test_the_training_line_says_what_where_steps_and_eta():
    run_config = zoo.run_config("copy/hard_alibi", "quick")
    line = training_line(run_config, "c/x.pt", what="copy/hard_alibi", device="cpu")
    assert line.startswith("about to train copy/hard_alibi (transformer on copy): ")
    assert f"{run_config.train.steps:,} steps" in line and "-> c/x.pt" in line
    assert "ETA" in line and "ETA unknown" not in line  # the shipped table has this row
    resumed = training_line(run_config, "c/x.pt", device="cpu", resume_step=1000)
    assert f"steps 1,000 to {run_config.train.steps:,} (resumed)" in resumed


def test_a_recipe_name_without_zoo_prefix_says_how_to_open_it(tmp_path, monkeypatch):
    """An analysis given ``copy/hard_alibi`` reads it as a hub name; its error says ``zoo:``."""
    monkeypatch.chdir(tmp_path)
    import huggingface_hub.file_download as hub

    asked_hub = []

    def asked(*args, **kwargs):
        asked_hub.append(args)
        raise OSError("no network")

    # set after huggingface_hub read its environment at import: the loader still obeys it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "get_hf_file_metadata", asked)
    with pytest.raises(InputError, match="opened as zoo:copy/hard_alibi"):
        load_model("copy/hard_alibi", archs=HF_ARCHS)
    assert asked_hub == []


def test_python_m_models_train_says_it_will_train_before_it_does(tmp_path, capsys):
    from models.train.cli import main as train_main

    out = tmp_path / "c.pt"
    assert train_main(["--task", "copy", "--arch", "transformer", "--d-model", "16",
                       "--n-layers", "1", "--n-heads", "2", "--steps", "2", "--out", str(out),
                       "--no-progress", "--device", "cpu"]) == 0
    err = capsys.readouterr().err.splitlines()
    said = [i for i, ln in enumerate(err) if ln.startswith("about to train (transformer on copy")]
    assert len(said) == 1 and f"2 steps -> {out}" in err[said[0]] and "ETA" in err[said[0]]
    assert "parameters" in err[said[0]]
