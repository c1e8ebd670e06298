"""The docs' "In IPython" page (docs/ipython.md) runs as a doctest, so the example users copy
keeps working.

It opens ``zoo:copy/hard_alibi``; here that is a stand-in cache entry written in a temporary
``checkpoints/`` with the quick recipe's model, task and training configs
(:func:`tests.tiny.zoo_stand_in`) and untrained weights: every output the page shows depends
on those configs, none on trained weights."""

from __future__ import annotations

import doctest

from tests.docs_blocks import ROOT, python_blocks
from tests.tiny import zoo_stand_in

PAGE, SECTION = "docs/ipython.md", "# In IPython"


def ipython_examples() -> str:
    """The ```python blocks of the IPython page."""
    return "\n".join(python_blocks(PAGE, SECTION))


def test_the_ipython_page_runs(tmp_path, monkeypatch):
    zoo_stand_in("copy/hard_alibi", tmp_path / "checkpoints")
    monkeypatch.chdir(tmp_path)  # the page's relative paths, and m.save's output, land here
    test = doctest.DocTestParser().get_doctest(ipython_examples(), {}, f"{PAGE}: In IPython",
                                               str(ROOT / PAGE), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries >= 10  # the block was found and run, not skipped
