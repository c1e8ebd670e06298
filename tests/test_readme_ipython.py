"""README's "In IPython" section runs as a doctest, so the example users copy keeps working.

It opens ``checkpoints/copy_hard_alibi.pt``; here that is a stand-in written in a temporary
directory with the quick recipe's model, task and training configs (``make_spec``, as ``python -m
models.train --preset quick`` builds them) and untrained weights: every output the README shows
depends on those configs, none on trained weights."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import models
from models.checkpoint import make_checkpoint, save_checkpoint
from models.train.spec import make_spec
from tasks.base import config_to_dict

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


def write_stand_in(path: Path) -> None:
    spec = make_spec("transformer", "copy", "quick", model={"pe": "hard_alibi"})
    model = models.build_model(spec.arch, spec.model)
    train = {"config": config_to_dict(spec.train), "seed": spec.train.seed, "step": 0,
             "samples_seen": 0}
    path.parent.mkdir(parents=True)
    save_checkpoint(make_checkpoint(spec.arch, spec.model_dict, spec.task_name, spec.task_dict,
                                    train, model.state_dict()), path)


def test_the_readme_ipython_section_runs(tmp_path, monkeypatch):
    write_stand_in(tmp_path / "checkpoints" / "copy_hard_alibi.pt")
    monkeypatch.chdir(tmp_path)  # the README's relative paths, and m.save's output, land here
    test = doctest.DocTestParser().get_doctest(ipython_examples(), {}, "README.md: In IPython",
                                               str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries >= 10  # the block was found and run, not skipped
