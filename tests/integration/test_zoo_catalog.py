"""The zoo's catalog (analyses/zoo/catalog.py) names a recipe's cache file without building its
run, and only where it cannot be wrong: the file it names is the one the exact way (the run
built and resolved, analyses.zoo.runs) names; what it cannot know (another device type, a
seed offset, a fine-tuned recipe, an edited source, a recipe a session replaced) goes the
exact way; a file at its path that is another run's is not served. The seed offset is an
argument (a command's entry point reads $SEQPROBE_SEED_OFFSET once), and a zoo name's
checkpoint is read once per load."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from analyses import zoo
from analyses.common import given_checkpoint, load_model, models_used
from analyses.zoo import catalog
from models.checkpoint import io
from models.constructions import save_mambazero
from models.train import build
from tests.tiny import TINY_RECIPE

SAMPLE = [("copy/hard_alibi", "quick"), ("copy/rope", "paper"), ("markov/mamba2", "quick"),
          ("copy_medium/hard_alibi_L4_lr1e-3_s0", "medium")]
TINY = TINY_RECIPE


@pytest.fixture
def exact_calls(monkeypatch):
    """Every lookup that goes the exact way, recorded (and answered with a marker path)."""
    calls = []

    def exact_path(name, level, cache_dir, device="auto", seed_offset=0):
        calls.append((name, level, str(device), seed_offset))
        return "exact"

    monkeypatch.setattr(zoo.runs, "exact_path", exact_path)
    return calls


@pytest.mark.parametrize("name,level", SAMPLE)
def test_the_catalog_names_the_file_the_exact_way_names(name, level, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "check_run_size", lambda *a, **k: 0)  # no meta builds here
    assert catalog.cached_file(name, level, "cpu") is not None
    assert (zoo._catalog_file(name, level, tmp_path, "cpu", 0)
            == zoo.runs.exact_file(name, level, tmp_path, "cpu"))


def test_what_the_catalog_cannot_know_goes_the_exact_way(exact_calls, tmp_path, monkeypatch):
    with pytest.raises(zoo.NotTrained, match="missing"):  # served from the catalog: no file
        zoo.path("copy/rope", "quick", tmp_path, "cpu")
    assert exact_calls == []
    assert zoo.path("copy/rope", "quick", tmp_path, "cpu", seed_offset=3) == "exact"
    monkeypatch.setattr(catalog, "cpu_device", lambda device: device == "cpu")  # a GPU machine
    assert zoo.path("copy/rope", "quick", tmp_path, "cuda") == "exact"
    assert zoo.path("copy/rope", "quick", tmp_path, "auto") == "exact"
    tuned = next(n for n, e in catalog.load()["recipes"].items() if "quick" in
                 e.get("init_from", {}))
    assert zoo.path(tuned, "quick", tmp_path, "cpu") == "exact"
    assert [c[2:] for c in exact_calls] == [("cpu", 3), ("cuda", 0), ("auto", 0), ("cpu", 0)]


def test_an_edited_source_or_a_replaced_recipe_goes_the_exact_way(exact_calls, tmp_path,
                                                                  monkeypatch):
    edited = {**catalog.sources(), "analyses/zoo/copy.py": "0" * 16}
    monkeypatch.setattr(catalog, "sources", lambda: edited)
    assert zoo.path("copy/rope", "quick", tmp_path, "cpu") == "exact"
    assert zoo._catalog_file("markov/mamba2", "quick", tmp_path, "cpu", 0)  # another paper's
    monkeypatch.undo()
    monkeypatch.setattr(zoo.runs, "exact_path", lambda *a, **k: "exact")
    replaced = dataclasses.replace(zoo.RECIPES["copy/rope"], doc="another")
    monkeypatch.setitem(zoo.RECIPES, "copy/rope", replaced)
    assert zoo.path("copy/rope", "quick", tmp_path, "cpu") == "exact"


def test_another_runs_file_at_the_catalog_path_is_not_served(tmp_path):
    path = zoo._catalog_file("copy/hard_alibi", "quick", tmp_path, "cpu", 0)
    shutil.copy(save_mambazero(tmp_path / "mz.pt", S=2, beta=1.0, seq_len=40), path)
    assert zoo.status("copy/hard_alibi", "quick", tmp_path, "cpu") == "other run"
    with pytest.raises(zoo.NotTrained, match="other run"):
        zoo.path("copy/hard_alibi", "quick", tmp_path, "cpu")


def test_the_seed_offset_is_an_argument_read_once_by_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(zoo.SEED_OFFSET_ENV, "2")
    plain = zoo._catalog_file("copy/rope", "quick", tmp_path, "cpu", 0)
    assert zoo.status("copy/rope", "quick", tmp_path, "cpu") == "missing"  # no env read here
    assert zoo.main(["--list", "copy/rope", "--cache-dir", str(tmp_path), "--device", "cpu"]) == 0
    listed = capsys.readouterr().out.split()[2]
    shifted = zoo.runs.exact_file("copy/rope", "quick", tmp_path, "cpu", seed_offset=2)
    assert listed == str(shifted) != str(plain)


def test_a_zoo_checkpoint_is_read_once_per_load(tmp_path, monkeypatch):
    r = zoo.Recipe("test/tiny", "copy", "transformer", TINY, levels=("quick",))
    monkeypatch.setitem(zoo.RECIPES, r.name, r)
    zoo.checkpoint("test/tiny", "quick", tmp_path, "cpu", progress=False)
    reads, opened = [], []
    real_load = io.load_untrusted
    monkeypatch.setattr(io, "load_untrusted", lambda *a: reads.append(a) or real_load(*a))
    monkeypatch.setattr(io, "open", lambda *a, **k: opened.append(a) or open(*a, **k),
                        raising=False)  # the hash's reads (the loader's are load_untrusted's)
    with io.read_once():  # an analysis' run: the name looked up, the model loaded, hashed
        given = given_checkpoint("zoo:test/tiny", tmp_path)
        load_model(given.path)
        used = models_used([given]) + models_used([given])
    assert len(reads) == 1 and len(opened) == 1
    assert used[0]["sha256"] == used[1]["sha256"] == io.file_sha256(given.path)[:12]
    load_model(given.path)  # outside: each load reads the file
    assert len(reads) == 2
