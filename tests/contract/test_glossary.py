"""One meaning per word: ``level``, ``task``, ``job`` and ``arch`` each mean one thing, stated
once in docs/glossary.md, and every name the packages give with the word is declared there.

What is read (the source, by :mod:`ast`; nothing is imported but the registries, for the
words' names): each module-level name, each field of a dataclass and each ``--flag`` of an
``add_argument`` in the packages that contains a word as an identifier part (``_``, ``-`` and
CamelCase split words; plurals count; names starting with ``_`` are private and left out).
What fails, each with what to do:

* a word with no or more than one ``Meaning:`` on the page;
* a name or field with the word that the page does not list under it (a new name: check it
  means the word's meaning and list it, or call it something else);
* a listed name defined in more than one place, or not where the page says (``ARCHS`` once
  had nine definitions with two meanings);
* a name ending in the word whose value is not that word's names: ``..._LEVEL`` a level name,
  ``..._LEVELS`` a collection of them (or a dict keyed by them) — ``LEVELS = (0.5, 0.9)``
  (thresholds) or ``("token", "sequence")`` (label types) fail here;
* a flag with the word that the page does not list, or whose ``choices`` are not the word's
  names (memorization's ``--task token|sequence``).
"""

from __future__ import annotations

from tests import ROOT_DIR

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = ROOT_DIR
GLOSSARY = ROOT / "docs" / "glossary.md"
PACKAGES = ("seqprobe", "tasks", "models", "probes", "analyses", "figures", "bench")
WORDS = ("level", "task", "job", "arch")
FORMS = {**{w: w for w in WORDS}, **{w + "s": w for w in WORDS}}
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`?([^`|]+?)`?\s*\|\s*$")


def vocabulary() -> dict[str, frozenset[str] | None]:
    """Each word's names (None: a job has none to check values against)."""
    from models.registry import ARCHS, HF_ARCHS
    from seqprobe.cli import LEVELS
    from tasks.registry import TASKS
    return {"level": frozenset(LEVELS), "task": frozenset(TASKS),
            "arch": frozenset(ARCHS) | frozenset(HF_ARCHS), "job": None}


def words_of(name: str) -> set[str]:
    parts = [p.lower() for chunk in re.split(r"[_\-.]+", name)
             for p in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", chunk)]
    return {FORMS[p] for p in parts if p in FORMS}


@dataclass(frozen=True)
class Found:
    kind: str  # "name", "field" or "flag"
    name: str  # NAME, Class.field or --flag
    where: str  # file:line
    value: object = None  # a name's literal value (None: not a literal); a flag's choices

    @property
    def file(self) -> str:
        return self.where.rpartition(":")[0]


def _literal(node: ast.AST | None):
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def scan(text: str, rel: str) -> list[Found]:
    """The names, fields and flags with one of the words in one module's source."""
    tree, out = ast.parse(text), []
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = [t.id for t in node.targets if isinstance(t, ast.Name)], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets, value = [node.target.id], node.value
        out += [Found("name", t, f"{rel}:{node.lineno}", _literal(value)) for t in targets
                if words_of(t) and not t.startswith("_")]
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list):
            out += [Found("field", f"{node.name}.{b.target.id}", f"{rel}:{b.lineno}")
                    for b in node.body if isinstance(b, ast.AnnAssign)
                    and isinstance(b.target, ast.Name) and words_of(b.target.id)
                    and "ClassVar" not in ast.unparse(b.annotation)]
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "add_argument":
            choices = next((_literal(k.value) for k in call.keywords if k.arg == "choices"), None)
            out += [Found("flag", a.value, f"{rel}:{call.lineno}", choices) for a in call.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                    and a.value.startswith("--") and words_of(a.value[2:])]
    return out


def scan_packages(root: Path = ROOT, packages=PACKAGES) -> list[Found]:
    out = []
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            out += scan(f.read_text(encoding="utf-8"), f.relative_to(root).as_posix())
    return out


def read_glossary(text: str) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
    """``(word -> its Meaning: lines, word -> {name: defining file or "flag"})``."""
    meanings: dict[str, list[str]] = {}
    names: dict[str, dict[str, str]] = {}
    word = None
    for line in text.splitlines():
        head = re.match(r"^## `(\w+)`\s*$", line)
        if head:
            word = head[1]
            if word in meanings:
                meanings[word].append("(a second section)")
            meanings.setdefault(word, [])
            names.setdefault(word, {})
        elif word and line.startswith("Meaning:"):
            meanings[word].append(line)
        elif word and (row := ROW.match(line)) and row[1] != "name":
            names[word][row[1]] = row[2].strip()
    return meanings, names


def _not_names(value, vocab: frozenset[str], plural: bool) -> list[str] | None:
    """The members of ``value`` that are not names of the word (None: nothing to read)."""
    if plural:
        if isinstance(value, dict):
            members = list(value)
        elif isinstance(value, (tuple, list, set, frozenset)):
            members = list(value)
        else:
            return None if value is None else [repr(value)]
    else:
        if not isinstance(value, str):
            return None  # a section or a number: read by the name's declaration alone
        members = [value]
    return [repr(m) for m in members if not (isinstance(m, str) and m in vocab)]


def problems(text: str, found: list[Found], vocab: dict[str, frozenset[str] | None]) -> list[str]:
    meanings, declared = read_glossary(text)
    out = []
    for word in WORDS:
        if len(meanings.get(word, [])) != 1:
            out.append(f"docs/glossary.md: the word `{word}` needs exactly one section with one "
                       f"'Meaning:' line, has {len(meanings.get(word, []))}")
    sites: dict[tuple[str, str], list[Found]] = {}
    for f in found:
        for word in sorted(words_of(f.name)):
            sites.setdefault((word, f.name), []).append(f)
    for (word, name), fs in sorted(sites.items()):
        listed = declared.get(word, {}).get(name)
        where = ", ".join(f.where for f in fs)
        if fs[0].kind != "flag" and len(fs) > 1:
            out.append(f"{name} is defined {len(fs)} times ({where}): one name (of `{word}`), "
                       "one definition — rename all but one (or import that one)")
        if listed is None:
            out.append(f"{name} ({where}) has the word `{word}` but docs/glossary.md does not "
                       f"list it: if it means what `{word}` means there, add the row; else "
                       "rename it")
            continue
        if fs[0].kind != "flag":
            files = sorted({f.file for f in fs})
            if len(fs) == 1 and files != [listed]:
                out.append(f"{name} is defined in {files[0]}, docs/glossary.md says {listed} "
                           f"(under `{word}`): fix the row")
        names_of = vocab.get(word)
        for f in fs if names_of is not None else []:
            parts = words_of(f.name.split(".")[-1].split("_")[-1].lstrip("-"))
            if f.kind == "flag":
                bad = _not_names(f.value, names_of, True) if f.value is not None else []
            elif f.kind == "name" and word in parts:
                plural = f.name.lower().endswith(word + "s")
                bad = _not_names(f.value, names_of, plural) or []
            else:
                bad = []
            if bad:
                out.append(f"{f.name} ({f.where}) holds {', '.join(bad)}, which are not "
                           f"`{word}` names: it means something else — rename it")
    for word, rows in declared.items():
        for name in rows:
            if (word, name) not in sites:
                out.append(f"docs/glossary.md lists {name} under `{word}`, but the packages "
                           "define no such name: remove the row")
    return out


@pytest.fixture(scope="module")
def found() -> list[Found]:
    return scan_packages()


@pytest.mark.parametrize("word", WORDS)
def test_one_meaning_per_word(word, found):
    bad = [p for p in problems(GLOSSARY.read_text(), found, vocabulary())
           if f"`{word}`" in p]
    assert not bad, "\n".join(bad)


def test_the_page_is_in_the_site():
    assert "glossary.md" in (ROOT / "mkdocs.yml").read_text()


def _synthetic(tmp_path, files: dict[str, str]) -> list[Found]:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return scan_packages(tmp_path, ("low",))


GLOSSARY_SAMPLE = """## `level`

Meaning: a run's size.

| name | defined in |
|---|---|
| `LEVELS` | `low/cli.py` |
| `Result.level` | `low/cli.py` |
| `--level` | flag |
"""
VOCAB = {"level": frozenset({"quick", "paper"}), "task": frozenset({"copy"}),
         "arch": frozenset({"mamba"}), "job": None}


def _level_problems(text, found):
    return [p for p in problems(text, found, VOCAB) if "`level`" in p]


def test_a_second_meaning_fails(tmp_path):
    """The glossary sample alone is clean; then each kind of second meaning is named."""
    clean = {"low/cli.py": 'from dataclasses import dataclass\nLEVELS = ("quick", "paper")\n'
                           "@dataclass\nclass Result:\n    level: str = 'quick'\n"
                           "def f(p):\n    p.add_argument('--level', choices=LEVELS)\n"}
    assert _level_problems(GLOSSARY_SAMPLE, _synthetic(tmp_path / "a", clean)) == []
    second = {**clean,
              # the same name with another meaning in another module
              "low/probe.py": "LEVELS = (0.5, 0.9)\n",
              # a new name with the word, not declared, holding label types
              "low/labels.py": 'LABEL_LEVEL = "token"\n'
                               "def g(p):\n    p.add_argument('--level', "
                               "choices=['token', 'sequence'])\n",
              # a field with the word in another class
              "low/stats.py": "from dataclasses import dataclass\n@dataclass\nclass Interval:\n"
                              "    level: float = 0.95\n"}
    bad = "\n".join(_level_problems(GLOSSARY_SAMPLE, _synthetic(tmp_path / "b", second)))
    assert "LEVELS is defined 2 times (low/cli.py:2, low/probe.py:1)" in bad
    assert "LEVELS (low/probe.py:1) holds 0.5, 0.9, which are not `level` names" in bad
    assert "LABEL_LEVEL (low/labels.py:1) has the word `level` but docs/glossary.md does not" in bad
    assert "--level (low/labels.py:3) holds 'token', 'sequence', which are not `level`" in bad
    assert "Interval.level (low/stats.py:4) has the word `level`" in bad
    two_meanings = GLOSSARY_SAMPLE.replace("Meaning: a run's size.",
                                           "Meaning: a run's size.\nMeaning: a threshold.")
    assert any("needs exactly one section with one 'Meaning:' line, has 2" in p
               for p in _level_problems(two_meanings, _synthetic(tmp_path / "c", clean)))
    stale = GLOSSARY_SAMPLE + "| `GONE_LEVELS` | `low/x.py` |\n"
    assert any("lists GONE_LEVELS under `level`, but the packages define no such name" in p
               for p in _level_problems(stale, _synthetic(tmp_path / "d", clean)))


def test_words_are_identifier_parts():
    assert words_of("MARKOV_ARCHS") == {"arch"} and words_of("Recipe.by_level") == {"level"}
    assert words_of("--archs") == {"arch"} and words_of("JobBytes") == {"job"}
    assert words_of("hierarchy") == set() and words_of("multitask") == set()
    assert words_of("LEVEL_TASKS") == {"level", "task"}
