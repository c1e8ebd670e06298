"""The checkpoint cache from any folder (issue 47, item 2; issue 48, failures 1 and 2).

One default cache, resolved the same from every folder (``seqprobe.paths``), printed by
``zoo --list``; "not trained" names the folder it looked in; ``zoo path zoo:NAME`` works. A
fine-tuned entry means the same from any folder and after its cache is moved (its record's
``init_from`` is found in its own cache, never against the current folder), and a record naming
``/dev/zero`` or a FIFO is refused, never read forever.
"""

from __future__ import annotations

from tests import ROOT_DIR

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from analyses import zoo
from models.checkpoint.io import read_checkpoint
from models.checkpoint.write import save_checkpoint
from models.train.cache import cache_path, entry_state
from models.train.runconfig import RunConfig
from seqprobe import paths
from seqprobe.errors import InputError
from tests.tiny import zoo_stand_in

ROOT = ROOT_DIR
TINY = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"min_len": 1, "max_len": 6},
        "train": {"steps": 4, "batch_size": 4, "eval_every": 0, "eval_batches": 1,
                  "eval_batch_size": 4, "warmup_steps": 1}}
FT = {**TINY, "train": {**TINY["train"], "lr": 1e-4}}


@pytest.fixture
def tiny_pair(monkeypatch):
    """test/tiny and test/tiny_ft, the second fine-tuned from the first (as the lookup
    recipes start from a copy model)."""
    for r in (zoo.Recipe("test/tiny", "copy", "transformer", TINY, levels=("quick",)),
              zoo.Recipe("test/tiny_ft", "copy", "transformer", FT, levels=("quick",),
                         init_from={"quick": "test/tiny"})):
        monkeypatch.setitem(zoo.RECIPES, r.name, r)


@pytest.fixture
def bounded():
    """Fail (not hang) a test that reads a FIFO or /dev/zero forever."""
    def on_alarm(*_):
        raise TimeoutError("hung reading a record's init_from")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------- the default
def test_default_cache_dir_is_one_rule(monkeypatch, tmp_path):
    """$SEQPROBE_CACHE, else $XDG_CACHE_HOME/seqprobe, else ~/.cache/seqprobe: whether or
    not the folder exists, whatever folder is current, whatever a clone holds (issue 56, 9)."""
    monkeypatch.setenv("SEQPROBE_CACHE", str(tmp_path / "mine"))
    assert paths.default_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("SEQPROBE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.default_cache_dir() == tmp_path / "xdg" / "seqprobe"  # not made by asking
    assert not (tmp_path / "xdg").exists()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()  # a folder of the old default, here: no rule
    assert paths.default_cache_dir() == tmp_path / "xdg" / "seqprobe"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.default_cache_dir() == tmp_path / "home" / ".cache" / "seqprobe"
    (tmp_path / "home" / ".cache" / "seqprobe").mkdir(parents=True)  # existing changes nothing
    assert paths.default_cache_dir() == tmp_path / "home" / ".cache" / "seqprobe"


def test_a_relative_seqprobe_cache_is_resolved_once(monkeypatch, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    monkeypatch.setenv("SEQPROBE_CACHE", "cache")
    assert paths.default_cache_dir() == tmp_path / "a" / "cache"
    assert os.environ["SEQPROBE_CACHE"] == str(tmp_path / "a" / "cache")  # what children get
    monkeypatch.chdir(tmp_path / "b")
    assert paths.default_cache_dir() == tmp_path / "a" / "cache"


def test_a_refused_zoo_train_creates_no_cache(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SEQPROBE_CACHE", str(tmp_path / "cache"))
    for argv in (["train", "nosuch/recipe"], ["train", "markov/mamba2", "--ray", "x.pt"],
                 ["train"]):
        assert zoo.main(argv) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "cache").exists()


def test_zoo_path_from_another_folder_finds_the_default_cache(tmp_path):
    """From a folder that is not the clone: `python -m analyses.zoo path copy/rope` finds the
    entry in the per-user cache (no $SEQPROBE_CACHE), `zoo:copy/rope` too; a missing one names
    the folder it looked in."""
    cache = tmp_path / "xdg" / "seqprobe"
    zoo_stand_in("copy/rope", cache)
    env = {k: v for k, v in os.environ.items() if k != "SEQPROBE_CACHE"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT))
    (tmp_path / "elsewhere").mkdir()

    def zoo_cli(*argv):
        return subprocess.run([sys.executable, "-m", "analyses.zoo", *argv], env=env,
                              cwd=tmp_path / "elsewhere", capture_output=True, text=True,
                              timeout=300)

    done = zoo_cli("path", "copy/rope", "zoo:copy/rope", "zoo:copy/rope@quick")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(cache_path(zoo.run_config("copy/rope", "quick"),
                                                       cache))] * 3
    done = zoo_cli("path", "copy/hard_alibi")
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert f"not trained at quick in {cache}:" in done.stderr
    assert "--cache-dir" not in done.stderr  # the default cache: the command needs none


def test_list_prints_the_cache_and_path_takes_zoo_names(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SEQPROBE_CACHE", str(tmp_path / "c"))
    monkeypatch.chdir(tmp_path)
    assert zoo.main(["--list", "copy/rope"]) == 0
    out, err = capsys.readouterr()
    assert f"cache: {tmp_path / 'c'}" in err and out.split()[:2] == ["copy/rope", "missing"]
    assert zoo.main(["path", "zoo:copy/rope@medium"]) != 0
    err = capsys.readouterr().err
    assert "level medium, but this lookup is at quick" in err and "--level medium" in err
    assert zoo.main(["path", "zoo:copy/rope"]) != 0
    assert f"in {tmp_path / 'c'}:" in capsys.readouterr().err


def test_gitignore_ignores_exports_of_the_readme_but_not_models_hf():
    def ignored(p):
        return subprocess.run(["git", "check-ignore", "-q", p], cwd=ROOT).returncode == 0
    assert ignored("hf/rope-copy/config.json") and not ignored("models/hf/new_module.py")


# ---------------------------------------------------------------------------- moved caches
def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.glob("*.pt"))


def test_a_moved_fine_tune_cache_is_cached_from_a_third_folder(tiny_pair, tmp_path,
                                                               monkeypatch, capsys):
    """Trained with the relative default under folder A, moved to B, asked from C: both
    entries "cached", nothing retrained, the files untouched."""
    for d in "ABC":
        (tmp_path / d).mkdir()
    monkeypatch.chdir(tmp_path / "A")
    zoo.checkpoints(["test/tiny", "test/tiny_ft"], "quick", "checkpoints", "cpu",
                    progress=False)
    assert capsys.readouterr().err.count("about to train") == 2
    shutil.move(tmp_path / "A" / "checkpoints", tmp_path / "B" / "cache")
    monkeypatch.chdir(tmp_path / "C")
    moved = tmp_path / "B" / "cache"
    before = {p: p.stat().st_mtime_ns for p in moved.glob("*.pt")}
    for name in ("test/tiny", "test/tiny_ft"):
        assert zoo.status(name, "quick", moved, "cpu") == "cached"
    assert zoo.main(["--list", "test/", "--cache-dir", str(moved)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [r.split()[1] for r in rows] == ["cached", "cached"]
    zoo.checkpoint("test/tiny_ft", "quick", moved, "cpu", progress=False)
    assert "about to train" not in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in moved.glob("*.pt")} == before


def test_an_old_record_with_a_relative_init_from_is_read_against_its_cache(tiny_pair,
                                                                          tmp_path, monkeypatch):
    """Records written before: ``init_from`` relative to the folder the run started in."""
    (tmp_path / "A").mkdir()
    monkeypatch.chdir(tmp_path / "A")
    zoo_stand_in("test/tiny", "checkpoints")
    child = zoo_stand_in("test/tiny_ft", "checkpoints")
    recorded = read_checkpoint(child)["train"]["config"]["init_from"]
    assert recorded.startswith("checkpoints/")  # relative, as the quick runs wrote it
    for where in (tmp_path / "B", tmp_path / "C"):
        shutil.copytree(tmp_path / "A" / "checkpoints", where / "cache")
    monkeypatch.chdir(tmp_path / "C")
    assert zoo.status("test/tiny_ft", "quick", tmp_path / "B" / "cache", "cpu") == "cached"
    # the parent in C/checkpoints/ is another run's bytes: the entry in B is still B's
    (tmp_path / "C" / "checkpoints").mkdir()
    (tmp_path / "C" / Path(recorded)).write_bytes(b"another file")
    assert zoo.status("test/tiny_ft", "quick", tmp_path / "B" / "cache", "cpu") == "cached"
    # a retrained parent (other bytes) in the entry's own cache: the child is another run, its
    # key another (so not trained yet), and the old child file is another run's
    parent = tmp_path / "B" / "cache" / Path(recorded).name
    ck = read_checkpoint(parent)
    ck["train"]["samples_seen"] = 1
    save_checkpoint(ck, parent)
    assert zoo.status("test/tiny_ft", "quick", tmp_path / "B" / "cache", "cpu") == "missing"
    old_child = tmp_path / "B" / "cache" / Path(child).name
    assert entry_state(old_child, RunConfig.from_checkpoint(read_checkpoint(old_child))) == \
        "other"


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_a_record_naming_a_fifo_or_dev_zero_is_refused_not_read(tiny_pair, tmp_path, kind,
                                                                bounded, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    zoo_stand_in("test/tiny", "checkpoints")
    child = zoo_stand_in("test/tiny_ft", "checkpoints")
    target = {"fifo": tmp_path / "fifo", "dev_zero": Path("/dev/zero"),
              "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(target)
    ck = read_checkpoint(child)
    ck["train"]["config"]["init_from"] = str(target)
    save_checkpoint(ck, child)
    run = RunConfig.from_checkpoint(ck)
    with pytest.raises(InputError, match="not a checkpoint file"):
        run.hash()
    assert entry_state(child, zoo.run_config("test/tiny_ft", "quick", "checkpoints")) == "other"
    assert zoo.main(["--list", "test/"]) == 0
    assert "other run" in capsys.readouterr().out
