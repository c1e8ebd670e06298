"""One word per concept (issue 49): a run's size is a *level* and its description a
*RunConfig*. The old words, ``preset`` and ``spec``, are counted over the tracked source,
documentation and data files (recorded outputs excluded), and each file that still has them is
pinned here with its count and why it must keep them: reading files written before the rename,
command lines typed before it, or a name that is another library's."""

from __future__ import annotations

from tests import ROOT_DIR

import re
import subprocess
from pathlib import Path

import pytest

from analyses.claims import level_of

ROOT = ROOT_DIR
SUFFIXES = (".py", ".md", ".toml", ".cfg", ".json")
# recorded outputs, kept as they were written
EXCLUDED = ("tests/data/", "figures/reference/")
SELF = "tests/contract/test_one_word.py"  # names the words it counts
# a word of its own or an identifier part (``_`` splits words), any case: ``presets``,
# ``dry_run_specs``, ``PRESET``; ``spectral``, ``specific``, ``inspect``, ``respect`` are other
# words. A capitalised part of a CamelCase name (``RunSpec``) counts too.
OLD = re.compile(r"(?i:(?<![a-z0-9])(?:presets?|specs?)(?![a-z0-9]))|(?<=[a-z])Specs?(?![a-z])")

# file -> (occurrences, why they stay)
ALLOWED: dict[str, tuple[int, str]] = {
    "analyses/claims.py": (2, "level_of reads an old result or timings file's 'preset'"),
    "figures/style.py": (2, "a figure's caption reads that 'preset' field of memorization's "
                            "JSON for the run's level"),
    "tests/unit/analyses/test_figure_defects_55.py": (1, "a memorization result with that 'preset' field"),
    "bench/results.json": (1, "a recorded benchmark output, written before the rename"),
    "models/train/step_costs_cuda.json": (
        1, "quotes a recorded report's own words (the row's provenance)"),
    "models/train/cli.py": (
        3, "--preset, the level flag's name before --level, stays accepted (old command "
           "lines) and so reserved"),
    "tests/e2e/test_scale_flag.py": (3, "old command lines: --preset still gives the level, "
                                 "hidden from --help"),
    "seqprobe/cli.py": (1, "the level flag's docstring names models.train's --preset alias"),
    "tests/e2e/test_train_cli.py": (1, "old command lines: --preset's errors"),
    "seqprobe/sweep/__init__.py": (1, "__spec__, Python's own attribute of a module"),
    "tests/e2e/test_docs_site.py": (2, "importlib.util.find_spec, Python's own function"),
    "tests/docs_blocks.py": (1, "importlib.util.find_spec, Python's own function"),
}


def tracked_files() -> list[str]:
    """The repository's tracked files this test reads (git's list: what a checkout holds)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    return sorted(f for f in out.split("\0") if f.endswith(SUFFIXES)
                  and not f.startswith(EXCLUDED) and f != SELF
                  and (ROOT / f).is_file())


def occurrences(text: str) -> list[tuple[int, str]]:
    """``(line number, word)`` of each old word in ``text``."""
    return [(i, m.group(0)) for i, line in enumerate(text.splitlines(), 1)
            for m in OLD.finditer(line)]


def problems(found: dict[str, list[tuple[int, str]]]) -> list[str]:
    """Each file whose count differs from :data:`ALLOWED`'s, with the lines (file:line) where a
    new occurrence is to be looked for."""
    out = []
    for f in sorted(set(found) | set(ALLOWED)):
        have, (allowed, _) = found.get(f, []), ALLOWED.get(f, (0, ""))
        if len(have) > allowed:
            where = ", ".join(f"{f}:{i} ({w})" for i, w in have)
            out.append(f"{f}: {len(have)} of preset/spec, {allowed} allowed: {where}; say "
                       "'level' or 'RunConfig' (or allow it in ALLOWED with the reason)")
        elif len(have) < allowed:
            out.append(f"{f}: {len(have)} of preset/spec, {allowed} pinned: lower its count "
                       "in ALLOWED (or remove the row)")
    return out


def test_the_old_words_stay_only_where_old_files_or_other_libraries_need_them():
    found = {}
    for f in tracked_files():
        hits = occurrences((ROOT / f).read_text(encoding="utf-8", errors="replace"))
        if hits:
            found[f] = hits
    assert not problems(found), "\n".join(problems(found))


def test_the_count_sees_identifier_parts_and_not_other_words():
    text = ("preset = 1\nPRESETS = {}\nx.dry_run_specs\n--preset quick\nRunSpec\n"
            "spectral specific inspect respect spectrum aspect special\nlevel run_config\n")
    assert [w for _, w in occurrences(text)] == ["preset", "PRESETS", "specs", "preset",
                                                 "Spec"]
    assert [i for i, _ in occurrences(text)] == [1, 2, 3, 4, 5]


def test_a_new_occurrence_is_named_by_file_and_line():
    pinned = {f: [(1, "preset")] * n for f, (n, _) in ALLOWED.items()}
    assert problems(pinned) == []
    [msg] = problems({**pinned, "analyses/new.py": [(7, "spec")]})
    assert msg.startswith("analyses/new.py: 1 of preset/spec, 0 allowed: analyses/new.py:7 "
                          "(spec);")
    [fewer] = problems({**pinned, "models/train/cli.py": []})
    assert fewer.startswith("models/train/cli.py: 0 of preset/spec, 3 pinned")


def test_an_old_file_s_preset_is_read_as_its_level():
    assert level_of({"preset": "medium"}) == "medium"
    assert level_of({"level": "quick", "preset": "medium"}) == "quick"
    assert level_of({}) is None


# ---------------------------------------------------------------------------- reasons
PACKAGES = ("seqprobe", "tasks", "models", "probes", "analyses", "figures", "bench", "scripts")
ISSUE = re.compile(r"\b[Ii]ssues?[ -]\d+")


def issue_citations(text: str) -> list[int]:
    """The lines of ``text`` that cite an issue number where a reason should stand."""
    return [i for i, line in enumerate(text.splitlines(), 1) if ISSUE.search(line)]


def test_the_code_says_why_not_which_issue():
    """A comment or docstring of the packages gives the reason; "issue 36 §2" goes stale and
    sends the reader to a tracker the repository does not hold."""
    found = [f"{f}:{i}" for f in tracked_files()
             if f.endswith(".py") and f.split("/")[0] in PACKAGES
             for i in issue_citations((ROOT / f).read_text(encoding="utf-8"))]
    assert not found, "cites an issue number; say the reason instead: " + ", ".join(found)


def test_the_citation_check_sees_one():
    assert issue_citations("x = 1  # (issue 36 §2)\ny = 2\n# the issue-54 pilot\n") == [1, 3]
    assert issue_citations("an issue of the cache\nissues with it\n") == []
