"""The code blocks of README.md and the docs site (docs/), for the tests that run them.

Every fenced block of a page is either a doctest that a test runs — a ```python block in one
of the sections :data:`RUN` lists, each with the test that runs it — or carries, on the line
before its fence, ``<!-- not run: REASON -->`` (invisible on the page and on GitHub) saying
why it is not run. ``tests/e2e/test_docs_site.py`` checks that rule for every page; the tests named
in :data:`RUN` find their blocks with :func:`python_blocks`.
"""

from __future__ import annotations

import doctest
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# (page relative to the repository, section heading as written) -> the test that runs its
# ```python blocks as doctests
RUN = {
    ("README.md", "## The first hour"): "tests/e2e/test_first_hour.py",
    ("docs/ipython.md", "# In IPython"): "tests/e2e/test_docs_ipython.py",
    ("docs/export.md", "# Export to HuggingFace"): "tests/integration/test_export_roundtrip.py",
    ("docs/hooks-vs-tl.md", "## TransformerLens' own tools on suite models"):
        "tests/e2e/test_docs_site.py",
    ("docs/tl_surface.md", "# TransformerLens surface"): "tests/unit/models/test_tl_surface.py",
}

FENCE = re.compile(r"^```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:(?P<reason>.*?)-->\s*$", re.S)
HEADING = re.compile(r"^(#{1,6}) ", re.M)


@dataclass(frozen=True)
class Block:
    page: str          # relative to the repository root
    line: int          # of the opening fence, 1-based
    lang: str
    body: str
    section: str       # the heading line of the innermost section it is in ("" before any)
    not_run: str | None  # the reason given on the line before the fence, if any


def pages() -> list[Path]:
    """README.md and every Markdown page of the site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def section_text(text: str, heading: str) -> str:
    """From ``heading`` (a whole line, e.g. ``## The first hour``) to the next heading of the
    same or a higher level."""
    m = re.search(rf"^{re.escape(heading)}[ \t]*$", text, re.M)
    assert m, f"no section {heading!r}"
    level = len(heading) - len(heading.lstrip("#"))
    for h in HEADING.finditer(text, m.end()):
        if len(h[1]) <= level:
            return text[m.start(): h.start()]
    return text[m.start():]


def blocks(page: Path | str, text: str | None = None) -> list[Block]:
    """Every fenced block of ``page`` (``text`` instead of the file's, for tests)."""
    page = Path(page)
    rel = page.relative_to(ROOT).as_posix() if page.is_absolute() else page.as_posix()
    text = page.read_text() if text is None else text
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()]
        heads = [h for h in re.finditer(r"^#{1,6} .*$", before, re.M)]
        prev = before.rstrip("\n").rsplit("\n", 1)[-1]
        nr = NOT_RUN.search(prev)
        out.append(Block(rel, before.count("\n") + 1, m["lang"], m["body"],
                         heads[-1][0].strip() if heads else "",
                         nr["reason"].strip() if nr else None))
    return out


def python_blocks(page: str, heading: str) -> list[str]:
    """The ```python blocks of one section, in order (``page`` relative to the repository)."""
    assert (page, heading) in RUN, f"{page}: {heading!r} is not in tests/docs_blocks.RUN"
    text = section_text((ROOT / page).read_text(), heading)
    found = [m["body"] for m in FENCE.finditer(text) if m["lang"] == "python"]
    assert found, f"{page}'s {heading!r} section has no ```python block"
    return found


def enclosing_run_section(block: Block, text: str) -> tuple[str, str] | None:
    """The :data:`RUN` key whose section holds ``block``, if any."""
    for page, heading in RUN:
        if page == block.page and heading in text.splitlines():
            if f"```{block.lang}\n{block.body}```" in section_text(text, heading):
                return page, heading
    return None


def unaccounted(page: Path | str, text: str | None = None) -> list[str]:
    """Blocks of ``page`` that no test runs and that say no reason: ``page:line`` each."""
    page = Path(page)
    text = page.read_text() if text is None else text
    bad = []
    for b in blocks(page, text):
        if b.not_run is not None:
            if not b.not_run:
                bad.append(f"{b.page}:{b.line} (an empty 'not run:' reason)")
            continue
        if b.lang == "python" and ">>>" in b.body and enclosing_run_section(b, text):
            continue
        bad.append(f"{b.page}:{b.line}")
    return bad


HAS_NNSIGHT = importlib.util.find_spec("nnsight") is not None


@dataclass
class DocRun:
    """What :func:`run_doctests` did: the runner (its ``failures``, ``tries``), its report and
    how many blocks ran."""

    runner: doctest.DocTestRunner
    report: list[str]
    ran: int


def run_doctests(code: list[str], name: str, path: Path,
                 check: Callable[[doctest.DocTest], None] | None = None) -> DocRun:
    """Run the blocks ``code`` of one page as one session (each block sees the names the
    blocks before it made), as a reader pastes them into IPython; a block that imports nnsight
    is skipped where nnsight is not installed. ``check``: called on each parsed block first."""
    globs: dict = {}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    ran = 0
    for i, block in enumerate(code):
        if "nnsight" in block and not HAS_NNSIGHT:
            continue
        test = doctest.DocTestParser().get_doctest(block, globs, f"{name} [{i}]", str(path), 0)
        if check is not None:
            check(test)
        runner.run(test, out=report.append, clear_globs=False)
        globs = test.globs
        ran += 1
    return DocRun(runner, report, ran)
