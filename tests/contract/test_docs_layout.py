"""The docs' Layout page (docs/layout.md) and its "Adding a paper" page name only paths that
exist.

The Layout page is generated (``python scripts/gen_docs.py``; tests/contract/test_docs_generated.py
checks it is current): of its table rows, the first cell is checked — the path of a package,
module or registered thing — and not the docstring prose quoted beside it, which names files
in the words of the module it describes (an export's ``config.json``, a paper's code).

Every backticked name on the page that looks like a path (ends in ``/``, has a file suffix,
or is a dotfile such as ``.importlinter``) is checked. In the table a name is relative to its
row's package (``| `models/` | ... `registry.py` ...``), and a folder followed by parentheses
(``ssm/` (`mamba.py`, ...)``) holds the names inside them; a name with a ``/`` that is not
found there is tried from the repository root. Placeholders (``NAME``, ``{png,json}``) are
skipped, and so are paths the repository's .gitignore lists (``figures/out/``: generated).
"""

from __future__ import annotations

from tests import ROOT_DIR

import re
from pathlib import Path

ROOT = ROOT_DIR
LAYOUT = ROOT / "docs" / "layout.md"
ADDING_A_PAPER = ROOT / "docs" / "adding-a-paper.md"
SUFFIXES = {".py", ".json", ".md", ".sh", ".txt", ".toml", ".cfg", ".ini", ".yaml", ".yml"}
ROW = re.compile(r"^\|\s*`([^`]+/)`\s*\|(.*)$")
TOKEN = re.compile(r"`([^`]+)`|\(|\)")
DOTFILE = re.compile(r"\.[A-Za-z][\w-]{3,}")


def looks_like_path(name: str) -> bool:
    if any(c.isspace() for c in name) or "NAME" in name or "{" in name or "*" in name:
        return False
    return (name.endswith("/") or Path(name).suffix in SUFFIXES
            or bool(DOTFILE.fullmatch(name)))


def named_paths(line: str) -> list[tuple[str, str]]:
    """``(base folder, name)`` of each path-like name on one line of the section."""
    m = ROW.match(line)
    base, text = (m[1], m[2]) if m else ("", line)
    out = [(base, "")] if m else []  # the row's package itself
    depth, stack, folder, folder_end = 0, [], None, -1
    for t in TOKEN.finditer(text):
        if t[0] == "(":
            depth += 1
            if folder is not None and not text[folder_end:t.start()].strip():
                stack.append((depth, folder))  # names inside these parentheses are in it
            folder = None
        elif t[0] == ")":
            if stack and stack[-1][0] == depth:
                stack.pop()
            depth = max(depth - 1, 0)
            folder = None
        else:
            name = t[1]
            folder = None
            if looks_like_path(name):
                out.append((base + "".join(f for _, f in stack), name))
                if name.endswith("/"):
                    folder, folder_end = name, t.end()
    return out


def ignored(path: str) -> bool:
    patterns = [p.strip() for p in (ROOT / ".gitignore").read_text().splitlines()]
    return path.rstrip("/") + "/" in patterns or path in patterns


def exists(base: str, name: str) -> bool:
    if (ROOT / base / name).exists():
        return True
    return ("/" in name.rstrip("/") or not base) and (ROOT / name).exists()


def missing_paths(section: str) -> list[str]:
    return [base + name for line in section.splitlines() for base, name in named_paths(line)
            if not exists(base, name) and not (ignored(name) or ignored(base + name))]


def first_cells(text: str) -> str:
    """``text`` with each table row cut after its first cell."""
    return "\n".join("|".join(line.split("|")[:2]) + "|" if line.startswith("|") else line
                     for line in text.splitlines())


def test_every_path_the_layout_names_exists():
    section = first_cells(LAYOUT.read_text())
    named = [n for line in section.splitlines() for n in named_paths(line)]
    assert len(named) > 60  # the parser found the table, not nothing
    packages = {b for b, n in named if not n}
    assert {"seqprobe/", "tasks/", "models/", "probes/", "analyses/", "figures/", "bench/",
            "tests/", "scripts/"} <= packages
    missing = missing_paths(section)
    assert not missing, ("docs/layout.md names paths that do not exist (fix the "
                         f"section or the tree): {missing}")


def test_every_path_adding_a_paper_names_exists():
    """The "Adding a paper" walk-through names real files (``NAME`` ones are placeholders)."""
    text = ADDING_A_PAPER.read_text()
    named = [n for line in text.splitlines() for _, n in named_paths(line)]
    assert {"seqprobe/registry.toml", "tasks/registry.py"} <= set(named)
    missing = missing_paths(text)
    assert not missing, f"docs/adding-a-paper.md names missing paths: {missing}"


def test_the_layout_check_can_fail():
    section = ("\n## Layout\n| `models/` | `registry.py`, `ssm/` (`mamba.py`, `transformer.py`), "
               "`nope/`, `train/` (`loop.py` (the `x.py` loop), `ssd.py`) |\n"
               "Checked by `tests/no_such_test.py` and `.importlinter`; outputs in "
               "`figures/out/`, `analyses/NAME.py`.\n")
    # transformer.py is not in models/ssm/, ssd.py not in models/train/ (nesting holds), x.py
    # is inside train/ too; figures/out/ is git-ignored and NAME a placeholder
    assert missing_paths(section) == ["models/ssm/transformer.py", "models/nope/",
                                      "models/train/x.py", "models/train/ssd.py",
                                      "tests/no_such_test.py"]
