"""The reproduce runner: plan names are real modules, the index is written, failures count."""

import importlib

from analyses import reproduce
from analyses.reproduce import Claim, Step, write_index, Outcome
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
