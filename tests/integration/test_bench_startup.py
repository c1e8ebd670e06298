"""bench/bench_startup.py times a command's start through the runner: one fresh run of a
trivial command gives its wall and CPU seconds, and an unexpected exit code is one line."""

from __future__ import annotations

import os

import pytest

from bench import bench_startup


def test_one_run_gives_wall_and_cpu_seconds(tmp_path):
    wall, cpu = bench_startup.run_once(["-c", "pass"], 0, tmp_path, dict(os.environ))
    assert 0 < wall < 60 and 0 <= cpu < 60


def test_an_unexpected_exit_code_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="exit 3, expected 0: boom"):
        bench_startup.run_once(["-c", "import sys; print('boom'); sys.exit(3)"], 0, tmp_path,
                               dict(os.environ))
