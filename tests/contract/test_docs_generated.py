"""The generated pages of the docs site — docs/layout.md and docs/api/*.md — are what
``python scripts/gen_docs.py`` writes from seqprobe/registry.toml and the module docstrings: a
page edited by hand, or a row or docstring changed without running the command, fails here
with the command to run. So a new probe, task, architecture or paper cannot miss the site."""

from __future__ import annotations

from tests import ROOT_DIR

import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from seqprobe.registry import table

ROOT = ROOT_DIR
SCRIPT = ROOT / "scripts" / "gen_docs.py"


def _gen() -> SimpleNamespace:
    """The generator's functions (scripts/ is not a package: run from its file)."""
    return SimpleNamespace(**runpy.run_path(str(SCRIPT)))


def test_the_committed_pages_are_what_the_command_writes():
    gen = _gen()
    stale = gen.stale(gen.pages())
    assert not stale, (f"generated pages differ from what the command writes: {stale}; run "
                       f"`{gen.COMMAND}` and commit the pages")


def test_the_check_can_fail_and_names_the_command(tmp_path):
    gen = _gen()
    pages = gen.pages()
    page = ROOT / "docs" / "api" / "probes.md"
    assert gen.stale({**pages, page: pages[page] + "\nedited by hand\n"}) == ["docs/api/probes.md"]
    out = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr  # the committed pages are current, from anywhere


def test_every_registered_thing_is_on_its_page():
    gen = _gen()
    pages = {p.name: text for p, text in gen.pages().items()}
    for section, page in (("probes", "probes.md"), ("tasks", "tasks.md"), ("archs", "models.md"),
                          ("papers", "zoo.md")):
        for where in table(section).values():
            assert f"::: {where.partition(':')[0]}\n" in pages[page], (section, where)
    layout = pages["layout.md"]
    assert "One mechanism: **explicit tables**" in layout and gen.COMMAND in layout
    for section in ("archs", "tasks", "probes", "papers", "analyses"):
        for name in table(section):
            assert f"| `{name}` |" in layout, (section, name)
