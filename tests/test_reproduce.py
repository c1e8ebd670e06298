"""The reproduce runner: plan names are real modules, the index is written, failures count."""

import importlib
import json

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


def _fake_plan(monkeypatch, tmp_path):
    """Two steps: 'bad' fails, 'good' writes a JSON whose claim holds."""
    good = Step("good", "Good figure", "Paper Fig. 1", lambda *a: [],
                (Claim("x >= 2", lambda d: (f"x = {d['x']}", d["x"] >= 2)),))
    bad = Step("bad", "Bad figure", "Paper Fig. 2", lambda *a: [])

    def fake_run(step, preset, out, cache, timeout):
        if step.name == "bad":
            return Outcome(step, False, 0.5, "Traceback: boom\n(exit code 1)", [])
        (out / "good.json").write_text('{"x": 3}')
        return Outcome(step, True, 1.5, "", reproduce.read_claims(step, out))

    monkeypatch.setattr(reproduce, "load_plan", lambda: [bad, good])
    monkeypatch.setattr(reproduce, "run_step", fake_run)
    return ["--out", str(tmp_path), "--cache-dir", str(tmp_path / "ckpt")]


def test_a_failed_step_does_not_stop_the_rest(monkeypatch, tmp_path, capsys):
    args = _fake_plan(monkeypatch, tmp_path)
    assert reproduce.main(args) == 1  # one failure -> non-zero exit
    timings = json.loads((tmp_path / "reproduce_timings.json").read_text())
    assert timings["bad"]["ok"] is False and timings["good"] == {"ok": True, "seconds": 1.5}
    md = (tmp_path / "index.md").read_text()
    assert "**FAILED**" in md and "| x >= 2 | x = 3 | holds |" in md
    assert "failed: bad" in capsys.readouterr().err


def test_only_merges_timings_and_index_only_rereads_claims(monkeypatch, tmp_path):
    args = _fake_plan(monkeypatch, tmp_path)
    reproduce.main(args)
    assert reproduce.main(args + ["--only", "good"]) == 0
    timings = json.loads((tmp_path / "reproduce_timings.json").read_text())
    assert set(timings) == {"preset", "bad", "good"}  # --only keeps the other step's timing
    (tmp_path / "good.json").write_text('{"x": 1}')  # the JSON changed: the verdict follows
    assert reproduce.main(args + ["--index-only"]) == 0
    md = (tmp_path / "index.md").read_text()
    assert "| x >= 2 | x = 1 | does not hold |" in md and "**FAILED**" in md
