"""README's "In IPython" section runs as a doctest, so the example users copy keeps working.

It opens ``zoo:copy/hard_alibi``; here that is a stand-in cache entry written in a temporary
``checkpoints/`` with the quick recipe's model, task and training configs
(:func:`tests.tiny.zoo_stand_in`) and untrained weights: every output the README shows depends
on those configs, none on trained weights."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

from tests.tiny import zoo_stand_in

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## In IPython"


def ipython_examples() -> str:
    """The ```python blocks of the README's IPython section."""
    text = README.read_text()
    assert SECTION in text, f"README.md has no {SECTION!r} section"
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    blocks = re.findall(r"```python\n(.*?)```", text[start : end if end >= 0 else None], re.S)
    assert blocks, f"README.md's {SECTION!r} section has no ```python block"
    return "\n".join(blocks)


def test_the_readme_ipython_section_runs(tmp_path, monkeypatch):
    zoo_stand_in("copy/hard_alibi", tmp_path / "checkpoints")
    monkeypatch.chdir(tmp_path)  # the README's relative paths, and m.save's output, land here
    test = doctest.DocTestParser().get_doctest(ipython_examples(), {}, "README.md: In IPython",
                                               str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries >= 10  # the block was found and run, not skipped
