"""README's "The first hour" (issue 37; docs/first-hour.md includes it): find a checkpoint by
its zoo name, load it, cache and
patch it with TransformerLens, export it, open the export in nnsight — run as a doctest on a
stand-in cache entry of the quick RoPE copy recipe (its configs, untrained weights: no output
the README shows depends on training), in a temporary working directory whose ``checkpoints/``
is the zoo's cache. The commands it shows are run too: ``zoo path`` prints the entry,
``zoo --list`` shows it cached, and an analysis gives the export the numbers of its ``zoo:``
checkpoint."""

from __future__ import annotations

import json

from analyses import length_generalization, zoo
from tests.docs_blocks import HAS_NNSIGHT, README, python_blocks, run_doctests
from tests.tiny import zoo_stand_in

SECTION = "## The first hour"  # in README.md; docs/first-hour.md includes it


def section_blocks() -> list[str]:
    """The ```python blocks of README's first-hour section, in order."""
    blocks = python_blocks("README.md", SECTION)
    assert len(blocks) >= 2, f"README.md's {SECTION!r} section has fewer than two ```python blocks"
    return blocks


def test_the_first_hour_runs_with_no_file_name_typed(tmp_path, monkeypatch, capsys):
    entry = zoo_stand_in("copy/rope", tmp_path / "checkpoints")
    monkeypatch.chdir(tmp_path)  # the README's relative paths (checkpoints/, hf/) land here

    def no_file_name(test):
        typed = [ex.source for ex in test.examples if ".pt" in ex.source]
        assert not typed, f"the first hour types a checkpoint file name: {typed}"

    done = run_doctests(section_blocks(), "README.md: first hour", README, check=no_file_name)
    assert done.runner.failures == 0, "".join(done.report)
    assert done.ran >= (2 if HAS_NNSIGHT else 1) and done.runner.tries >= 10  # found and run
    assert (tmp_path / "hf" / "rope-copy" / "config.json").is_file()  # the export was written

    # the commands above the blocks: the path, and the list that shows it cached
    capsys.readouterr()
    assert zoo.main(["path", "copy/rope"]) == 0
    assert capsys.readouterr().out.strip() == str(entry)
    assert zoo.main(["--list", "copy/rope"]) == 0
    assert capsys.readouterr().out.split()[:3] == ["copy/rope", "cached",
                                                  str(entry)]

    # "python -m analyses.length_generalization hf/rope-copy: the numbers of zoo:copy/rope"
    curves = {}
    for label, source in (("zoo", "zoo:copy/rope"), ("export", "hf/rope-copy")):
        out = tmp_path / f"out_{label}"
        assert length_generalization.main([source, "--out", str(out), "--lengths", "2,4",
                                           "--n-examples", "8"]) == 0
        curves[label] = json.loads((out / "length_generalization.json").read_text())["curves"]
    assert list(curves["zoo"]) == list(curves["export"]) == ["rope"]
    for a, b in zip(curves["zoo"]["rope"], curves["export"]["rope"], strict=True):
        assert a["L"] == b["L"] and abs(a["char_acc"] - b["char_acc"]) < 1e-6
        assert abs(a["string_acc"] - b["string_acc"]) < 1e-6
