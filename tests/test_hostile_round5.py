"""Reliability, fifth round (issue 48): each failure a hostile user found, reproduced, now one
clear line and a non-zero exit (or the right answer). The cache's folder-independence and the
FIFO / /dev/zero records are in tests/test_cache_anywhere.py, bench.gpu_check's in
tests/test_gpu_check.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyses import zoo
from analyses.reproduce import seeds
from seqprobe.errors import InputError


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# ---------------------------------------------------------------------------- failure 7
@pytest.mark.parametrize("text", ["²", "٣", "1²", "abc", "-1", "1001"])
def test_a_bad_seed_offset_is_one_line_not_a_traceback(monkeypatch, capsys, text):
    monkeypatch.setenv(zoo.SEED_OFFSET_ENV, text)
    with pytest.raises(InputError, match="SEQPROBE_SEED_OFFSET"):
        zoo.seed_offset()
    for argv in (["--list", "copy/"], ["path", "copy/rope"]):
        assert zoo.main(argv) == 2
        line = _one_line(capsys)  # not every recipe "invalid" / "not trained"
        assert "SEQPROBE_SEED_OFFSET" in line and "not trained" not in line


# ---------------------------------------------------------------------------- failure 8
def _run_folder(tmp_path: Path, name: str, mean: float, level="quick", offset=None) -> Path:
    out = tmp_path / name
    out.mkdir()
    (out / "mamba_decay.json").write_text(json.dumps({"models": [
        {"label": "markov/mamba2", "mean": mean}]}))
    timings = {"preset": level, **({} if offset is None else {"seed_offset": offset})}
    (out / "reproduce_timings.json").write_text(json.dumps(timings))
    return out


def test_seeds_refuses_one_run_counted_twice(tmp_path, capsys, monkeypatch):
    a = _run_folder(tmp_path, "s0", 0.99)
    monkeypatch.chdir(tmp_path)
    for argv in ([str(a), str(a)], [str(a), "s0/"], [str(a), "./s0"]):
        assert seeds.main(argv) == 2
        assert "same folder" in _one_line(capsys)
    (tmp_path / "link").symlink_to(a)
    assert seeds.main([str(a), "link"]) == 2
    assert "same folder" in _one_line(capsys)


def test_seeds_reads_each_folders_level_and_seed_offset(tmp_path, capsys):
    a = _run_folder(tmp_path, "a", 0.99, offset=0)
    b = _run_folder(tmp_path, "b", 0.97, offset=0)  # a copy of the same seeds' run
    assert seeds.main([str(a), str(b)]) == 2
    assert "both runs of seed offset 0" in _one_line(capsys)
    c = _run_folder(tmp_path, "c", 0.97, level="medium", offset=1)
    assert seeds.main([str(a), str(c)]) == 2
    assert "different levels" in _one_line(capsys)
    d = _run_folder(tmp_path, "d", 0.97, offset=3)
    assert seeds.main([str(a), str(d)]) == 0
    out = capsys.readouterr().out
    assert "seed offset 0 | seed offset 3" in out and "| yes |" in out


def test_seeds_refuses_a_folder_without_results(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert seeds.main([str(tmp_path / "empty")]) == 2
    assert "no analysis results" in _one_line(capsys)


def test_seeds_md_that_cannot_be_written_is_one_line_before_reading(tmp_path, capsys):
    a = _run_folder(tmp_path, "a", 0.99, offset=0)
    blocker = tmp_path / "file"
    blocker.write_text("")
    for md in (a, blocker / "t.md"):  # `seeds D --md D`; a folder that is a file
        assert seeds.main([str(a), "--md", str(md)]) == 2
        assert "--md" in _one_line(capsys)
    assert sorted(p.name for p in a.iterdir()) == ["mamba_decay.json", "reproduce_timings.json"]


def test_training_under_an_address_space_limit_is_refused_in_one_line(tmp_path):
    """`ulimit -v` bounds the process whatever the RAM: the training size check reads it (as
    the evaluation's does), not the machine's total, so in-range length x batch is one line,
    not an allocator traceback."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "models.train", "--task", "copy", "--arch", "transformer",
         "--steps", "2", "--batch_size", "4096", "--max_len", "512", "--no-progress",
         "--out", str(tmp_path / "x.pt")], cwd=root, preexec_fn=limit, capture_output=True,
        text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "needs at least" in err[0] and "ulimit -v" in err[0]
    assert not (tmp_path / "x.pt").exists()


def test_reproduce_out_that_cannot_be_created_or_indexed_is_one_line(tmp_path, monkeypatch,
                                                                     capsys):
    """`--out` under /proc or /sys passed the writability check and was a mkdir traceback;
    `--index-only --out /nonexistent` created it and indexed 15 FAILED with exit 0."""
    from analyses.reproduce import cli as reproduce_cli

    monkeypatch.chdir(tmp_path)
    for out in ("/proc/nope/x", "/sys/x"):
        for extra in ([], ["--index-only"]):
            assert reproduce_cli.main(["--only", "spectral_lds", "--out", out, *extra]) == 2
            assert "--out" in _one_line(capsys)
    for out in (tmp_path / "nowhere", tmp_path):  # missing; a folder with no results
        assert reproduce_cli.main(["--index-only", "--out", str(out)]) == 2
        assert "no analysis results" in _one_line(capsys)
    assert not (tmp_path / "nowhere").exists()


# ---------------------------------------------------------------------------- failure 6
def test_two_distributions_claiming_zoo_are_refused_naming_both(monkeypatch, tmp_path):
    import importlib.metadata
    import types

    import models
    from models import loading
    from seqprobe.errors import CheckpointError

    def ep(value: str, dist: str) -> importlib.metadata.EntryPoint:
        e = importlib.metadata.EntryPoint("zoo", value, loading.SOURCES_GROUP)
        vars(e).update(dist=types.SimpleNamespace(name=dist))
        return e

    ours = ep("analyses.zoo", "seqprobe")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [ours, ep("evil.zoo", "evil-plugin")])
    with pytest.raises(CheckpointError, match=r"seqprobe \(analyses.zoo\) and evil-plugin "
                       r"\(evil.zoo\)") as e:
        models.load("zoo:copy/rope")
    assert "\n" not in str(e.value)
    # the suite found twice (an editable install beside its egg-info) is one claim
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [ours, ours])
    monkeypatch.setenv("SEQPROBE_CACHE", str(tmp_path))
    with pytest.raises(InputError, match="not trained"):
        models.load("zoo:copy/rope")
