"""The reproduce runner: plan names are real modules, the index is written, failures count."""

import importlib
import json
import sys
import time

from analyses import reproduce
from analyses.reproduce import Claim, Outcome, Step, write_index
from analyses.reproduce_plan import plan


def test_every_plan_step_is_an_analysis_with_main():
    names = [s.name for s in plan()]
    assert len(names) == len(set(names))
    for n in names:
        assert callable(importlib.import_module(f"analyses.{n}").main)


def test_index_shows_claims_and_failures(tmp_path):
    ok = Step("a", "Figure A", "Paper Fig. 1", lambda *a: [],
              (Claim("x is big", lambda d: ("x = 3", True)),))
    bad = Step("b", "Figure B", "Paper Fig. 2", lambda *a: [])
    write_index([Outcome(ok, True, 1.0, "", [("x is big", "x = 3", True)]),
                 Outcome(bad, False, 2.0, "Traceback: boom", [])], tmp_path, "quick")
    md = (tmp_path / "index.md").read_text()
    assert "| x is big | x = 3 | holds |" in md and "**FAILED**" in md and "boom" in md
    assert "Figure B" in (tmp_path / "index.html").read_text()


def test_unknown_only_name_is_a_clear_error(capsys):
    try:
        reproduce.main(["--only", "no_such_figure", "--list"])
    except SystemExit as e:
        assert e.code == 2
    assert "no_such_figure" in capsys.readouterr().err


def _script(code: str):
    """A step whose 'analysis' is a short Python program (run in its own process like the
    real ones; ``OUT`` is the output directory)."""
    return lambda step, preset, out, cache: [sys.executable, "-c", f"OUT = {str(out)!r}\n{code}"]


def _fake_plan(monkeypatch, tmp_path):
    """Two steps: 'bad' fails, 'good' writes a JSON whose claim holds."""
    good = Step("good", "Good figure", "Paper Fig. 1", lambda *a: [],
                (Claim("x >= 2", lambda d: (f"x = {d['x']}", d["x"] >= 2)),))
    bad = Step("bad", "Bad figure", "Paper Fig. 2", lambda *a: [])
    scripts = {"bad": "raise SystemExit('boom')",
               "good": "open(OUT + '/good.json', 'w').write('{\"x\": 3}')"}
    monkeypatch.setattr(reproduce, "load_plan", lambda: [bad, good])
    monkeypatch.setattr(reproduce, "step_argv", lambda step, *a: _script(scripts[step.name])(
        step, *a))
    return ["--out", str(tmp_path), "--cache-dir", str(tmp_path / "ckpt"), "--jobs", "2"]


def test_a_failed_step_does_not_stop_the_rest(monkeypatch, tmp_path, capsys):
    args = _fake_plan(monkeypatch, tmp_path)
    assert reproduce.main(args) == 1  # one failure -> non-zero exit
    timings = json.loads((tmp_path / "reproduce_timings.json").read_text())
    assert timings["bad"]["ok"] is False and timings["good"]["ok"] is True
    md = (tmp_path / "index.md").read_text()
    assert "**FAILED**" in md and "| x >= 2 | x = 3 | holds |" in md and "boom" in md
    assert "boom" in (tmp_path / "logs" / "bad.log").read_text()  # each step keeps its log
    assert "failed: bad" in capsys.readouterr().err


def test_only_merges_timings_and_index_only_rereads_claims(monkeypatch, tmp_path):
    args = _fake_plan(monkeypatch, tmp_path)
    reproduce.main(args)
    assert reproduce.main(args + ["--only", "good"]) == 0
    timings = json.loads((tmp_path / "reproduce_timings.json").read_text())
    assert {"bad", "good"} <= set(timings)  # --only keeps the other step's timing
    assert timings["last_run"]["steps"] == ["good"]
    (tmp_path / "good.json").write_text('{"x": 1}')  # the JSON changed: the verdict follows
    assert reproduce.main(args + ["--index-only"]) == 0
    md = (tmp_path / "index.md").read_text()
    assert "| x >= 2 | x = 1 | does not hold |" in md and "**FAILED**" in md


def _timed(name: str, after=()) -> Step:
    """A step whose command the test sets (step_argv patched)."""
    return Step(name, name, "", lambda *a: [], after=after)


def test_jobs_run_side_by_side_and_after_waits(monkeypatch, tmp_path):
    code = ("import json, time; t0 = time.time(); time.sleep(0.6); "
            "json.dump({{'t0': t0, 't1': time.time()}}, open(OUT + '/{}.json', 'w'))")
    monkeypatch.setattr(reproduce, "step_argv",
                        lambda step, *a: _script(code.format(step.name))(step, *a))
    steps = [_timed("a"), _timed("b"), _timed("c", after=("a",))]
    outs = reproduce.run_plan(steps, "quick", tmp_path, tmp_path, jobs=2, poll=0.05)
    assert [o.step.name for o in outs] == ["a", "b", "c"] and all(o.ok for o in outs)
    t = {s: json.loads((tmp_path / f"{s}.json").read_text()) for s in "abc"}
    assert t["b"]["t0"] < t["a"]["t1"] and t["a"]["t0"] < t["b"]["t1"]  # a and b overlapped
    assert t["c"]["t0"] >= t["a"]["t1"]  # c reuses a's checkpoints: it waited


def test_a_step_over_its_timeout_is_stopped(monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "step_argv", _script("import time; time.sleep(30)"))
    t0 = time.time()
    (o,) = reproduce.run_plan([_timed("slow")], "quick", tmp_path, tmp_path, timeout=0.5,
                              poll=0.05)
    assert not o.ok and "timed out" in o.log_tail and time.time() - t0 < 10


def test_a_two_slot_step_runs_alone(monkeypatch, tmp_path):
    code = ("import json, time; t0 = time.time(); time.sleep(0.4); "
            "json.dump({{'t0': t0, 't1': time.time()}}, open(OUT + '/{}.json', 'w'))")
    monkeypatch.setattr(reproduce, "step_argv",
                        lambda step, *a: _script(code.format(step.name))(step, *a))
    steps = [Step("big", "big", "", lambda *a: [], slots=2), _timed("x"), _timed("y")]
    reproduce.run_plan(steps, "quick", tmp_path, tmp_path, jobs=2, poll=0.05)
    t = {s: json.loads((tmp_path / f"{s}.json").read_text()) for s in ("big", "x", "y")}
    assert t["x"]["t0"] >= t["big"]["t1"] and t["y"]["t0"] >= t["big"]["t1"]  # both cores
    assert t["y"]["t0"] < t["x"]["t1"]  # the two one-core steps then share the machine


def test_the_longest_expected_step_starts_first(monkeypatch, tmp_path):
    code = ("import json, time; json.dump({{'t0': time.time()}}, open(OUT + '/{}.json', 'w')); "
            "time.sleep(0.3)")
    monkeypatch.setattr(reproduce, "step_argv",
                        lambda step, *a: _script(code.format(step.name))(step, *a))
    steps = [_timed("short"), _timed("long")]
    reproduce.run_plan(steps, "quick", tmp_path, tmp_path, jobs=1, poll=0.05,
                       expected={"short": 10.0, "long": 500.0})
    t = {s: json.loads((tmp_path / f"{s}.json").read_text())["t0"] for s in ("short", "long")}
    assert t["long"] < t["short"]


def test_bc_claim_is_decided_by_the_mambazero_pinned_ratio():
    from analyses.reproduce_plan import _bc

    def row(arch, pairs, pinned, step=100):
        return {"label": f"{arch}-x", "series": f"{arch} d=16", "step": step,
                "ratio_pairs": pairs, "ratio_pinned": pinned, "ratio_free": 1.0,
                "beta_fit": 1.1}

    # a MambaZero that reads the transitions into the current symbol: all-pairs 1.0
    text, ok = _bc({"models": [row("mamba2", 0.8, 0.5), row("mambazero", 1.0, 0.01)]})
    assert ok and "0.010" in text and "mamba2" in text
    assert not _bc({"models": [row("mambazero", 0.05, 0.2)]})[1]
    assert not _bc({"models": [row("mamba2", 0.01, 0.01)]})[1]  # no MambaZero: no verdict
    later = [row("mambazero", 1.0, 0.01, step=100), row("mambazero", 1.0, 0.3, step=200)]
    assert not _bc({"models": later})[1]  # the last checkpoint of a trajectory decides
