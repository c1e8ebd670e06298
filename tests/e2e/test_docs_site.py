"""The docs are a site (issue 47 item 3): README.md is short, ``mkdocs build --strict`` builds
docs/ (with the API reference from the docstrings) without a warning, and every code block of
README.md and docs/ is run as a doctest by a test or says why not (``<!-- not run: REASON -->``
on the line before its fence; :mod:`tests.docs_blocks`). The TransformerLens-tools block of
docs/hooks-vs-tl.md is run here.
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import subprocess
import sys

from tests.docs_blocks import DOCS, README, ROOT, RUN, blocks, pages, python_blocks, unaccounted
from tests.tiny import zoo_stand_in

README_MAX_LINES = 200
# `python -m MODULE` (and torchrun's `-m MODULE`) in a shell block
MODULE = re.compile(r"(?:python|torchrun)\b[^\n#|]*?\s-m\s+([\w.]+)")


def test_the_readme_is_short_and_points_at_the_site():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    for heading in ("## Two commands", "## The first hour", "## Where to go next"):
        assert heading in text.splitlines(), heading
    for link in re.findall(r"\]\((docs/[^)#]+)", text):  # every page it links to exists
        assert (ROOT / link).is_file(), link


def test_the_site_builds_strictly(tmp_path):
    """Any warning (a broken link or anchor, a page missing from the nav, a docstring the API
    reference cannot read, a snippet not found) fails the build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                          "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    site = tmp_path / "site"
    first_hour = (site / "first-hour" / "index.html").read_text()
    assert "run_with_cache" in first_hour and "--8&lt;--" not in first_hour  # README included
    api = (site / "api" / "models" / "index.html").read_text()
    assert "models.load" in api and "SuiteModel" in api  # the reference has the docstrings
    for page in ("results", "scaling", "hooks-vs-tl", "export", "adding-a-paper", "benchmarks",
                 "reliability"):
        assert (site / page / "index.html").is_file(), page


def test_every_code_block_runs_or_says_why_not():
    bad = [b for page in pages() for b in unaccounted(page)]
    assert not bad, ("code blocks no test runs and that do not say why (run them from a section "
                     "in tests/docs_blocks.RUN, or put `<!-- not run: REASON -->` on the line "
                     f"before the fence): {bad}")
    # each section a test runs still exists and names its test
    for (page, heading), test in RUN.items():
        assert python_blocks(page, heading)
        assert page in (ROOT / test).read_text(), f"{test} does not read {page}"


def orphan_table_rows(text: str) -> list[int]:
    """Lines that look like a table row but start a table without a header (a blank line
    inside a table splits it, and the rows after it show as a paragraph of pipes)."""
    lines = text.splitlines()
    return [i + 1 for i, line in enumerate(lines)
            if line.startswith("|") and (i == 0 or not lines[i - 1].strip())
            and not (i + 1 < len(lines) and re.match(r"^\|\s*:?-{3,}", lines[i + 1]))]


def test_every_table_row_is_in_a_table():
    bad = [f"{page.relative_to(ROOT)}:{n}" for page in pages()
           for n in orphan_table_rows(page.read_text())]
    assert not bad, f"table rows cut off from their table by a blank line: {bad}"
    assert orphan_table_rows("| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n") == [5]


def test_the_block_check_can_fail():
    text = ("# Page\n\n```python\n>>> 1\n1\n```\n\n<!-- not run: slow -->\n```bash\nls\n```\n\n"
            "<!-- not run: -->\n```bash\nls\n```\n\n```bash\nls\n```\n")
    assert unaccounted(DOCS / "nowhere.md", text) == [
        "docs/nowhere.md:3", "docs/nowhere.md:14 (an empty 'not run:' reason)",
        "docs/nowhere.md:18"]
    assert [b.not_run for b in blocks(DOCS / "nowhere.md", text)] == [None, "slow", "", None]


def module_exists(name: str) -> bool:
    """``python -m name`` finds something: a suite module by its file (importing the suite's
    packages would take seconds), anything else by ``find_spec``."""
    path = ROOT.joinpath(*name.split("."))
    if (ROOT / name.split(".")[0]).is_dir():
        return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()
    return importlib.util.find_spec(name) is not None


def test_the_commands_the_docs_show_name_real_modules():
    """A block not run still names modules that exist (``python -m analyses.NAME`` with NAME a
    placeholder excepted)."""
    missing = []
    for page in pages():
        for b in blocks(page):
            if b.lang in ("bash", "text"):
                for name in MODULE.findall(b.body):
                    if "NAME" not in name and not module_exists(name):
                        missing.append(f"{b.page}:{b.line}: {name}")
    assert not missing, missing
    assert MODULE.findall("torchrun --standalone --nproc_per_node N -m models.train --x") == [
        "models.train"]
    assert module_exists("analyses.reproduce.seeds") and module_exists("pytest")
    assert not module_exists("analyses.no_such_analysis")
    assert not module_exists("models")  # a package without __main__ cannot be run


def test_the_tl_tools_block_runs(tmp_path, monkeypatch):
    """docs/hooks-vs-tl.md's TransformerLens block, on a stand-in of the quick Hard-ALiBi copy
    checkpoint (its configs, untrained weights); the two outputs that are the trained model's
    are marked +SKIP on the page and say so."""
    page, heading = "docs/hooks-vs-tl.md", "## TransformerLens' own tools on suite models"
    zoo_stand_in("copy/hard_alibi", tmp_path / "checkpoints")
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    skipped = 0
    for i, block in enumerate(python_blocks(page, heading)):
        test = doctest.DocTestParser().get_doctest(block, {}, f"{page} [{i}]",
                                                   str(ROOT / page), 0)
        skipped += sum(bool(ex.options.get(doctest.SKIP)) for ex in test.examples)
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries >= 14 and skipped == 2  # found and run; only the two trained outputs
