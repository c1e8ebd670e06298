"""The lent GPU call: parts that fit one call or resume over several, stages capped from
outside and streamed into $OUT, pinned wheels, results packed and restored safely, and the
rehearsal's check of what the device tool would bring back."""

from __future__ import annotations

import json
import sys
import tarfile
import time

import pytest

from analyses.reproduce.parts import BUDGET, CallBudget, plan_calls, split
from bench import gpu_run
from bench.rehearse_gpu_call import check_out
from seqprobe.errors import InputError

COST = {"a": 300.0, "b": 200.0, "c": 150.0, "d": 100.0, "big": 1000.0}


def wall(part):
    return max(COST[n] for n in part) + 10.0 * (len(part) - 1)  # side by side on 16 slots


def test_split_gives_an_analysis_longer_than_a_call_a_part_of_its_own_that_resumes():
    parts = split(list(COST), wall, budget=400, first=190)
    assert parts[-1] == ["big"]  # alone, last
    assert all(wall(p) <= 400 for p in parts[:-1])
    assert wall(parts[0]) <= 190 or all(wall(p) > 190 for p in parts[:-1])
    # asking for the planned count gives the planned split: --part K/N runs what --list showed
    assert split(list(COST), wall, budget=400, first=190, parts=len(parts)) == parts


def test_every_planned_call_fits_its_budget_when_the_long_part_resumes():
    b = CallBudget()
    parts = split(list(COST), wall, budget=b.part_s(False), first=b.part_s(True))
    calls = plan_calls(parts, wall, resumes=lambda n: n == "big", budget=b)
    assert all(c.seconds <= b.call_s + 1e-9 for c in calls), calls
    assert calls[0].checks and sum(c.checks for c in calls) == 1
    big = [c for c in calls if c.analyses == ("big",)]
    assert len(big) == -(-1000 // b.part_s(False)) and [c.round for c in big] == [1, 2, 3]
    assert "--resume-from .resume/part" in big[1].command() and "--no-checks" in big[1].command()
    # the same part that cannot resume is one call over the budget, and says so
    over = plan_calls(parts, wall, resumes=lambda n: False, budget=b)
    assert any(c.seconds > b.call_s for c in over)


def test_the_checks_get_a_call_of_their_own_where_part_one_does_not_fit_beside_them():
    calls = plan_calls([["a"]], wall, budget=CallBudget())
    assert calls[0].part == 0 and calls[0].checks and calls[0].command() == \
        "bash scripts/gpu_call.sh"
    assert calls[1].part == 1 and not calls[1].checks


def test_the_wheels_must_be_the_pinned_set(tmp_path):
    pins = gpu_run.read_pins()
    assert pins["transformer_lens"] and all(v for v in pins.values())
    for n, v in pins.items():
        (tmp_path / f"{n}-{v}-py3-none-any.whl").write_bytes(b"")
    assert len(gpu_run.wheel_files(tmp_path, pins)) == len(pins)
    (tmp_path / "datasets-5.2.0-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(InputError, match="datasets: 2 versions"):
        gpu_run.wheel_files(tmp_path, pins)
    bad = tmp_path / "pins.txt"
    bad.write_text("torch>=2\n")
    with pytest.raises(InputError, match="not pinned"):
        gpu_run.read_pins(bad)


def test_a_stage_is_capped_from_outside_and_its_lines_streamed(tmp_path):
    call = gpu_run.Call(tmp_path, {"stages": {}})
    code = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    t = time.time()
    row = call.stage("sleepy", [sys.executable, "-c", code], cap=2.0, env={})
    assert time.time() - t < 15 and row["capped"] and row["stopped_by"] == "SIGKILL"
    assert "sleepy| started" in (tmp_path / "gpu_run.log").read_text()
    report = json.loads((tmp_path / "gpu_run.json").read_text())
    assert report["stages"]["sleepy"]["capped"]  # saved as soon as the stage ended
    # a stage that saves on SIGTERM gets it before the cap
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('saved', flush=True), "
            "sys.exit(3)))\nprint('go', flush=True)\ntime.sleep(60)")
    row = call.stage("saver", [sys.executable, "-c", code], cap=6.0, env={}, grace=3.0)
    assert row["rc"] == 3 and row["stopped_by"] == "SIGTERM"
    assert "saver| saved" in (tmp_path / "gpu_run.log").read_text()


def test_results_are_packed_with_resume_files_and_restored_without_links(tmp_path):
    res = tmp_path / "res"
    cells = res / "memorization_synthetic_token_cells"
    cells.mkdir(parents=True)
    (cells / "m00004_n00008_s0.json").write_text('{"key": "k"}')
    (res / "a.json").write_text("{}")
    (res / "secret.json").symlink_to("/etc/hostname")
    ball = tmp_path / "large_part3.tar.gz"
    gpu_run.pack(res, ball, ["memorization_*_cells/*.json"])
    with tarfile.open(ball) as tar:
        assert sorted(tar.getnames()) == ["a.json",
                                          "memorization_synthetic_token_cells/m00004_n00008_s0.json"]
    into = tmp_path / "next"
    got = gpu_run.restore(ball, into, ["memorization_*_cells/*.json"])
    assert got == ["memorization_synthetic_token_cells/m00004_n00008_s0.json"]
    assert (into / got[0]).read_text() == '{"key": "k"}'
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("x.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(InputError, match="not a plain file"):
        gpu_run.restore(evil, into, ["*.json"])


def test_the_part_s_checkpoints_come_back_only_when_small(tmp_path):
    (tmp_path / "a.pt").write_bytes(b"w" * 100)
    assert gpu_run.pack_cache(tmp_path, tmp_path / "c.tar.gz", limit=1000)["packed"]
    assert not gpu_run.pack_cache(tmp_path, tmp_path / "d.tar.gz", limit=10)["packed"]
    assert not (tmp_path / "d.tar.gz").exists()


def test_the_rehearsal_checks_what_the_device_tool_brings_back(tmp_path):
    out, clone = tmp_path / "OUT", tmp_path / "clone"
    out.mkdir()
    site = "/tmp/seqprobe-gpu-call-x/site/transformer_lens/__init__.py"
    (out / "preflight.json").write_text(json.dumps({
        "suite": str(clone / "seqprobe/__init__.py"), "failed": [],
        "imports": {"torch": {"version": "2.11", "file": "/x/torch/__init__.py"},
                    "transformer_lens": {"version": "4.3.0", "file": site}}}))
    (out / "gpu_run.json").write_text(json.dumps({"part": "1/2", "stages": {
        "preflight": {"rc": 0}, "gpu_check": {"rc": 0}}}))
    (out / "gpu_check.json").write_text("{}")
    ok = check_out(out, {"transformer_lens"}, clone)
    assert ok["problems"] == [] and ok["versions"]["transformer_lens"] == "4.3.0"
    (out / "gpu_check.json").unlink()
    for i in range(8):
        (out / f"x{i}.json").write_text("{}")
    (out / "bad name.json").write_text("{}")
    problems = " | ".join(check_out(out, {"transformer_lens", "datasets"}, clone)["problems"])
    assert "stage gpu_check ended but left no gpu_check.json" in problems
    assert "files (at most 8 come back)" in problems and "bad name.json" in problems
    assert "datasets imported from nowhere" in problems
    # a call that was not cut short must have run every stage its arguments ask for
    cut = check_out(out, {"transformer_lens"}, clone, ["preflight", "gpu_check", "large"])
    assert "the call ended without running large" in cut["problems"]


def test_the_default_call_budget_is_a_lent_machine_s_minutes():
    assert BUDGET.call_s <= 540 and BUDGET.command_s <= 600 - 60
    assert BUDGET.part_s(True) > 0 and BUDGET.part_s(False) > BUDGET.part_s(True)


@pytest.mark.slow
def test_the_rehearsal_killed_at_a_random_second_keeps_what_it_finished(tmp_path):
    """The whole call in a fresh clone, python3 only on PATH, killed at a random second."""
    import subprocess

    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "bench.rehearse_gpu_call", "--kill-at",
                           "random", "--budget-s", "120", "--report", str(report), "--",
                           "--part", "1/2"], capture_output=True, text=True, timeout=900)
    result = json.loads(report.read_text())
    assert result["problems"] == [], proc.stderr[-2000:]


def test_the_call_s_log_follows_no_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_run.log").symlink_to(victim)
    assert gpu_run.main(["--out", str(out)]) == 2  # one line, nothing written through it
    assert victim.read_text() == "keep"
