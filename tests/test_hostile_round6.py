"""Reliability, sixth round (issue 56): each failure a hostile user found, reproduced, now one
clear line and a non-zero exit (or the right answer), with nothing lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from analyses.reproduce import runner
from models.checkpoint.write import exclusive_writer
from models.hf.export import export_lock
from models.train.cache import cache_path
from models.train.ensemble import train_ensemble
from seqprobe.atomic import open_own, output_lock
from seqprobe.errors import InputError
from tests.reliability_helpers import QUICK, one_line, run_main
from tests.test_ensemble import _run_configs

SECRET = b"the victim's bytes\n"


def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_bytes(SECRET)
    return v


def _planted(tmp_path: Path, at: Path) -> Path:
    """A symbolic link at ``at`` to a victim file; returns the victim."""
    v = _victim(tmp_path)
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(v)
    return v


# ---------------------------------------------------------------------------- failure 1
def test_train_refuses_a_planted_checkpoint_lock(tmp_path, capsys):
    out = tmp_path / "x.pt"
    v = _planted(tmp_path, tmp_path / ".x.pt.lock")
    code, _, err = run_main([*QUICK, "--out", str(out)], capsys)
    assert code != 0 and v.read_bytes() == SECRET and not out.exists()
    assert "symbolic link" in one_line(err)


def test_an_analysis_output_lock_follows_no_link(tmp_path):
    v = _planted(tmp_path, tmp_path / "O" / ".ngram_heads.lock")
    with pytest.raises(InputError, match="symbolic link"), \
            output_lock(tmp_path / "O", "ngram_heads"):
        pass
    assert v.read_bytes() == SECRET


def test_an_ensemble_member_lock_follows_no_link(tmp_path):
    run_configs = _run_configs("lstm")[:2]
    paths = [cache_path(s.resolved(torch.device("cpu")), tmp_path / "c") for s in run_configs]
    v = _planted(tmp_path, paths[1].parent / f".{paths[1].name}.lock")
    with pytest.raises(InputError, match="symbolic link"):
        train_ensemble(run_configs, paths, device="cpu", progress=False)
    assert v.read_bytes() == SECRET and not any(p.exists() for p in paths)


def test_a_job_log_follows_no_link(tmp_path):
    log = tmp_path / "O" / "logs" / "ngram_heads.log"
    v = _planted(tmp_path, log)
    with pytest.raises(InputError, match="symbolic link"):
        runner._own_log(log)
    assert v.read_bytes() == SECRET


def test_a_job_log_that_is_a_hard_link_is_not_written(tmp_path):
    log = tmp_path / "logs" / "x.log"
    log.parent.mkdir()
    v = _victim(tmp_path)
    os.link(v, log)
    with pytest.raises(InputError, match="hard link"):
        runner._own_log(log)
    assert v.read_bytes() == SECRET


def test_the_export_lock_follows_no_link(tmp_path):
    v = _planted(tmp_path, tmp_path / ".exp.export.lock")
    with pytest.raises(InputError, match="symbolic link"), export_lock(tmp_path / "exp"):
        pass
    assert v.read_bytes() == SECRET


def test_a_fifo_in_place_of_a_lock_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / ".x.pt.lock")
    with pytest.raises(InputError, match="not a regular file"), \
            exclusive_writer(tmp_path / "x.pt"):
        pass


def test_open_own_keeps_an_existing_own_file(tmp_path):
    p = tmp_path / "own.lock"
    p.write_bytes(b"12\n")
    fd = open_own(p)
    try:
        assert os.read(fd, 8) == b"12\n"  # not truncated by the open
    finally:
        os.close(fd)


def test_a_planted_log_stops_the_run_before_any_job(tmp_path):
    from analyses.reproduce.plan import Job
    out = tmp_path / "O"
    v = _planted(tmp_path, out / "logs" / "b.log")
    jobs = [Job(n, ("python", "-c", f"open({str(out / n)!r}, 'w')")) for n in ("a", "b")]
    with pytest.raises(InputError, match="b.log.*symbolic link"):
        runner.run_jobs(jobs, out, poll=0.05)
    assert v.read_bytes() == SECRET and not (out / "a").exists()
