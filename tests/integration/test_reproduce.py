"""The reproduce runner: plan names are real analyses, recipes become training jobs before the
analyses that read them, the index is written, failures count."""

import importlib
import json
import os
import signal
import sys
import time

import numpy as np
import pytest

from analyses import zoo
from analyses.claims import Claim, Figure, Undecided, verdict_text
from analyses.reproduce import cli as reproduce_cli
from analyses.reproduce import index as reproduce_index
from analyses.reproduce import plan as reproduce_plan
from analyses.reproduce.index import Outcome, run_plan, scale_text, write_index
from analyses.reproduce.plan import PLAN, TRAIN, Job, build_jobs
from seqprobe.errors import InputError
from seqprobe.sweep.fork import forkable


def test_every_plan_name_is_an_analysis_with_main_figure_and_known_recipes():
    assert len(PLAN) == len(set(PLAN))
    for n in PLAN:
        mod = importlib.import_module(f"analyses.{n}")
        # its command: the module's main, or its cli module's (a package keeps its command
        # line out of its __init__); the pool forks the same one
        assert forkable([sys.executable, "-m", f"analyses.{n}"]) is not None, n
        assert isinstance(mod.FIGURE, Figure) and mod.FIGURE.claims
        for level in mod.FIGURE.levels:
            for r in mod.FIGURE.recipes(level):
                zoo.recipe(r).parts(level)  # raises for an unknown recipe or level


def test_recipes_become_training_jobs_before_their_analyses(tmp_path):
    jobs = build_jobs(["ngram_lookup"], "quick", tmp_path, tmp_path / "ck")
    names = [t.name for t in jobs]
    lookup = TRAIN + "lookup_suffix/hard_alibi"
    assert lookup in names and TRAIN + "copy/hard_alibi" in names
    by = {t.name: t for t in jobs}
    assert TRAIN + "copy/hard_alibi" in by[lookup].after  # fine-tuned from the copy model
    assert lookup in by["ngram_lookup"].after
    assert names.index(TRAIN + "copy/hard_alibi") < names.index(lookup)


def test_a_claim_of_another_level_is_left_out_of_the_index(tmp_path):
    fig = Figure("F", "Paper Fig. 1", (Claim("x is big", lambda d: ("x = 3", d["x"] > 2)),
                                       Claim("medium only", lambda d: None)))
    (tmp_path / "f.json").write_text(json.dumps({"x": 3}))
    assert reproduce_index.read_claims(Job("f", (), figure=fig), tmp_path) == [
        ("x is big", "x = 3", True)]


def test_index_shows_claims_and_failures(tmp_path):
    fig_a = Figure("Figure A", "Paper Fig. 1", (Claim("x is big", lambda d: ("x = 3", True)),))
    fig_b = Figure("Figure B", "Paper Fig. 2")
    write_index([Outcome(Job("a", (), figure=fig_a), True, 1.0, "",
                         [("x is big", "x = 3", True)]),
                 Outcome(Job("b", (), figure=fig_b), False, 2.0, "Traceback: boom", [])],
                tmp_path, "quick")
    md = (tmp_path / "index.md").read_text()
    assert "| x is big | x = 3 | holds |" in md and "**FAILED**" in md and "boom" in md
    assert "Figure B" in (tmp_path / "index.html").read_text()
    assert "ok in 1 s" in md


def test_the_index_writes_not_decided_with_its_reason_apart_from_does_not_hold(tmp_path):
    fig = Figure("F", "Paper Fig. 1", (
        Claim("a", lambda d: ("short L", Undecided.regime("L ≤ 6, the paper's trend: 2x"))),
        Claim("b", lambda d: ("x = 1", np.bool_(False))),
        Claim("c", lambda d: ("vacuous", None))),
        scale={"quick": "toy models of ~0.4M parameters"}.get,
        paper_scale="models of ~160M parameters")
    (tmp_path / "f.json").write_text("{}")
    claims = reproduce_index.read_claims(Job("f", (), figure=fig), tmp_path)
    assert [type(h) for _, _, h in claims] == [Undecided, bool, type(None)]
    write_index([Outcome(Job("f", (), figure=fig), True, 1.0, "", claims)], tmp_path, "quick")
    md = (tmp_path / "index.md").read_text()
    assert ("| a | short L | not decided at this level — outside the paper's regime: L ≤ 6, "
            "the paper's trend: 2x |") in md
    assert "| b | x = 1 | does not hold |" in md and "| c | vacuous | n/a |" in md
    page = (tmp_path / "index.html").read_text()
    assert "class='und'>not decided at this level" in page and "class='bad'>does not hold" in page
    # the header gives the level's scale against the papers', from what the figure declares
    assert ("Scale of this level — quick: toy models of ~0.4M parameters. Against the papers: "
            "models of ~160M parameters.") in md and "Scale of this level" in page


def test_every_level_has_a_scale_line_from_the_planned_figures():
    """The scale line is built from the figures run (each says its clause at a level), so a
    new paper's analysis brings its own and edits nothing here."""
    figures = [reproduce_plan.figure_of(name) for name in PLAN]
    for level in ("quick", "medium", "large", "paper"):
        line = scale_text(level, figures)
        assert line.startswith(f"Scale of this level — {level}") and "Against the papers" in line
        for fig in figures:
            assert not fig.scale(level) or fig.scale(level) in line
            assert fig.paper_scale in line
    assert "160M" in scale_text("quick", figures)
    copy = next(f for f in figures if f.paper_scale)  # each clause said once
    assert scale_text("quick", [copy, copy]).count(copy.paper_scale) == 1
    assert scale_text("quick", [Figure("F", "P")]) == ""


def test_an_undecided_verdict_needs_a_reason():
    with pytest.raises(InputError, match="reason"):
        Undecided(" ")
    assert verdict_text(Undecided.not_learnt("0.3 < 0.9")) == (
        "not decided at this level — no model learnt the task: 0.3 < 0.9")
    assert verdict_text(True) == "holds" and verdict_text(False) == "does not hold"


def test_index_only_does_not_invent_a_time(tmp_path):
    fig = Figure("F", "Paper Fig. 1", (Claim("x is big", lambda d: ("x = 3", d["x"] > 2)),))
    (tmp_path / "f.json").write_text(json.dumps({"x": 3}))
    o = reproduce_index.index_outcome(Job("f", (), figure=fig), tmp_path, {})
    assert o.ok and o.seconds is None
    write_index([o], tmp_path, "medium")
    md = (tmp_path / "index.md").read_text()
    assert "— ok\n" in md and " in 0 s" not in md


@pytest.mark.parametrize("argv", [["--only", "no_such_figure", "--list"], ["--bogus"],
                                  ["--medium", "--only", "spectral_lds", "--list"]])
def test_bad_flags_are_one_line(capsys, argv):
    assert reproduce_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage" not in err


@pytest.mark.parametrize("flag", ["--out", "--cache-dir"])
def test_a_file_as_output_or_cache_dir_is_refused_before_any_job(tmp_path, capsys, flag):
    f = tmp_path / "file"
    f.write_text("x")
    other = "--cache-dir" if flag == "--out" else "--out"
    assert reproduce_cli.main([flag, str(f), other, str(tmp_path / "d"), "--only",
                           "spectral_lds"]) == 2
    assert "is a file" in capsys.readouterr().err
    assert not (tmp_path / "d" / "logs").exists()


def _job(name: str, code: str, out, after=(), slots=1, figure=None) -> Job:
    """A job whose process is a short Python program (``OUT`` is the output directory)."""
    return Job(name, (sys.executable, "-c", f"OUT = {str(out)!r}\n{code}"), slots, after,
               figure=figure)


def _stamp(name: str, sleep: float) -> str:
    return (f"import json, time; t0 = time.time(); time.sleep({sleep}); "
            f"json.dump({{'t0': t0, 't1': time.time()}}, open(OUT + '/{name}.json', 'w'))")


def test_jobs_run_side_by_side_and_after_waits(tmp_path):
    jobs = [_job(n, _stamp(n, 0.6), tmp_path, after) for n, after in
             (("a", ()), ("b", ()), ("c", ("a",)))]
    outs = run_plan(jobs, tmp_path, workers=2, poll=0.05)
    assert [o.job.name for o in outs] == ["a", "b", "c"] and all(o.ok for o in outs)
    t = {s: json.loads((tmp_path / f"{s}.json").read_text()) for s in "abc"}
    assert t["b"]["t0"] < t["a"]["t1"] and t["a"]["t0"] < t["b"]["t1"]  # a and b overlapped
    assert t["c"]["t0"] >= t["a"]["t1"]  # c reads a's checkpoint: it waited


def test_a_failed_job_skips_what_needs_it_and_not_the_rest(tmp_path):
    fig = Figure("F", "P", (Claim("x >= 2", lambda d: (f"x = {d['x']}", d["x"] >= 2)),))
    jobs = [_job(TRAIN + "r", "raise SystemExit('boom')", tmp_path),
             _job("needs_r", "pass", tmp_path, (TRAIN + "r",), figure=fig),
             _job("good", "open(OUT + '/good.json', 'w').write('{\"x\": 3}')", tmp_path,
                   figure=fig)]
    bad, skipped, good = run_plan(jobs, tmp_path, workers=2, poll=0.05)
    assert not bad.ok and not skipped.ok and "not run" in skipped.log_tail
    assert good.ok and good.claims == [("x >= 2", "x = 3", True)]


def test_a_job_over_its_timeout_is_stopped(tmp_path):
    code = ("import os, time; open(OUT + '/pid', 'w').write(str(os.getpid())); time.sleep(30); "
            "open(OUT + '/finished', 'w')")
    (o,) = run_plan([_job("slow", code, tmp_path)], tmp_path, timeout=1.0, poll=0.05)
    assert not o.ok and "timed out" in o.log_tail
    assert not (tmp_path / "finished").exists()  # stopped, not waited for
    with pytest.raises(ProcessLookupError):  # and gone, not left running
        os.kill(int((tmp_path / "pid").read_text()), 0)


def test_a_two_slot_job_runs_alone(tmp_path):
    jobs = [_job("big", _stamp("big", 0.4), tmp_path, slots=2),
             _job("x", _stamp("x", 0.4), tmp_path), _job("y", _stamp("y", 0.4), tmp_path)]
    run_plan(jobs, tmp_path, workers=2, poll=0.05)
    t = {s: json.loads((tmp_path / f"{s}.json").read_text()) for s in ("big", "x", "y")}
    assert t["x"]["t0"] >= t["big"]["t1"] and t["y"]["t0"] >= t["big"]["t1"]  # both cores
    assert t["y"]["t0"] < t["x"]["t1"]  # the two one-core jobs then share the machine


def test_the_longest_expected_chain_starts_first(tmp_path):
    jobs = [_job("short", _stamp("short", 0.2), tmp_path),
             _job("feeds", _stamp("feeds", 0.2), tmp_path),
             _job("long", _stamp("long", 0.2), tmp_path, ("feeds",))]
    run_plan(jobs, tmp_path, workers=1, poll=0.05,
              expected={"short": 10.0, "feeds": 1.0, "long": 500.0})
    t = {s: json.loads((tmp_path / f"{s}.json").read_text())["t0"] for s in job_names(jobs)}
    assert t["feeds"] < t["short"]  # a short job that a long one waits on goes first


def job_names(jobs):
    return [t.name for t in jobs]


def test_medium_runs_only_the_analyses_that_have_it(capsys):
    assert reproduce_cli.main(["--medium", "--list"]) in (0, 2)
    plan = capsys.readouterr().out.split("\n\n")[0]  # the ETA line follows a blank line
    listed = [line.split()[0] for line in plan.splitlines() if line]
    assert listed == [n for n in PLAN if "medium" in reproduce_plan.figure_of(n).levels]


def test_an_analysis_without_the_level_refuses_it(capsys):
    from analyses import ngram_heads
    assert ngram_heads.main(["--medium", "--train", "medium"]) == 2
    assert "has no medium level" in capsys.readouterr().err


@pytest.mark.parametrize("names, folded", [
    (["a_s0", "a_s1", "a_s2", "b"], ["a_s0-2", "b"]),
    (["a_s0", "a_s2"], ["a_s0", "a_s2"]),          # not a run: both kept
    (["x/a_s3", "y", "x/a_s4"], ["x/a_s3-4", "y"]),
    (["a_s1"], ["a_s1"]),
    (["copy/mamba", "copy/lstm"], ["copy/mamba", "copy/lstm"]),
])
def test_the_plan_folds_runs_of_seeds(names, folded):
    assert reproduce_plan.seed_ranges(names) == folded


def test_a_stopped_run_lets_its_jobs_save_and_leaves_no_orphan(tmp_path):
    # SIGTERM / Ctrl-C on reproduce: each running job gets SIGTERM (a training job saves its
    # checkpoint there) before it is killed; reproduce itself was killed alone before, exit 0
    saved = tmp_path / "saved"
    trap = (f"import signal, sys, time, pathlib\n"
            f"def save(*a):\n    pathlib.Path({str(saved)!r}).write_text('ok'); sys.exit(143)\n"
            f"signal.signal(signal.SIGTERM, save)\n"
            f"pathlib.Path(OUT, 'started').write_text('')\ntime.sleep(60)")
    job = _job("train:slow", trap, tmp_path)

    def stop_when_started(names):
        while not (tmp_path / "started").exists():
            time.sleep(0.05)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_plan([job], tmp_path, on_start=stop_when_started)
    assert saved.read_text() == "ok"


def test_sigterm_interrupts_reproduce_as_ctrl_c():
    with pytest.raises(KeyboardInterrupt), reproduce_cli.interrupt_on_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)


def test_after_a_timeout_the_index_and_stdout_count_the_same(tmp_path, capsys):
    """Issue 39: after --timeout 0.001 the index said '1 of 1 analyses finished' while stdout
    said 0/1 ok; both count the analyses that ran to success."""
    code = reproduce_cli.main(["--quick", "--only", "copy_bounds", "--timeout", "0.001",
                               "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")])
    assert code == 1
    assert "0/1 analyses ok" in capsys.readouterr().out
    md = (tmp_path / "o" / "index.md").read_text()
    assert "This run: 0 of 1 analyses ok, 1 failed in" in md and "finished" not in md
