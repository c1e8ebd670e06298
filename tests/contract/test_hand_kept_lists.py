"""The lists a maintainer keeps by hand agree with the code they list (docs/adding-a-paper.md).

Each list is checked against what the code declares, and each failure names the file and the
row to add or remove:

* the tables of seqprobe/registry.toml, the suite's one registration mechanism: every row
  imports and is what it says (an ``[archs]`` row a SuiteModel whose ``arch`` is the row's
  name, a ``[tasks]`` row a Task whose ``name`` is, a ``[probes]`` row a module of probes/, a
  ``[papers]`` row a zoo module with ``recipes()``, an ``[analyses]`` row a module with a
  ``FIGURE``; ``[not_planned]`` rows analyses with a reason), and every such class or module
  in the packages has its row — found by importing every module of the package here, in the
  test, never at run time, and with no list of modules to leave out;
* no analysis imports another (the analyses being the modules with a ``FIGURE``; derived, so
  .importlinter lists no analysis);
* ``COLORS`` in figures/style.py needs no entry for a new model: an unlisted name gets a fixed
  colour of its own;
* analyses/zoo/catalog.json: a level at which some zoo recipe exists has its keys recorded
  there (which recipes at a recorded level is tests/contract/test_recipe_hashes.py's check, not
  repeated here).

Each check is a function of the lists, so the "can fail" tests hand it broken lists and see it
name the fix.
"""

from __future__ import annotations

from tests import ROOT_DIR

import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import grimp
import pytest

from analyses.claims import Figure
from analyses.zoo import recipes as zoo_recipes
from figures import style
from models.base import SuiteModel
from seqprobe import registry
from seqprobe.errors import ConfigError
from tasks.base import Task

ROOT = ROOT_DIR
RECIPE_HASHES = ROOT / "analyses" / "zoo" / "catalog.json"  # the zoo's recorded cache keys
WHERE = "seqprobe/registry.toml"
KINDS = ("archs", "tasks", "probes", "papers", "analyses")  # the tables of things


def _modules(package: str, recursive: bool = True) -> list[ModuleType]:
    """``package``'s modules and subpackages (not those starting with ``_``), imported."""
    pkg = importlib.import_module(package)
    walk = pkgutil.walk_packages if recursive else pkgutil.iter_modules
    infos = walk(pkg.__path__, package + ".") if recursive else [
        i._replace(name=f"{package}.{i.name}") for i in walk(pkg.__path__)]
    return [importlib.import_module(i.name) for i in infos
            if not i.name.rpartition(".")[2].startswith("_")]


def _classes(modules: list[ModuleType], base: type, attr: str) -> list[tuple[str, str]]:
    """``(name, "module:Class")`` of each ``base`` subclass defined in ``modules`` that sets
    ``attr`` in its own body."""
    return [(obj.__dict__[attr], f"{m.__name__}:{obj.__name__}") for m in modules
            for obj in vars(m).values()
            if isinstance(obj, type) and issubclass(obj, base) and obj.__module__ == m.__name__
            and isinstance(obj.__dict__.get(attr), str) and obj.__dict__[attr]]


def _has_recipes(mod: ModuleType) -> bool:
    f = getattr(mod, "recipes", None)
    return callable(f) and getattr(f, "__module__", None) == mod.__name__


def found_in_packages() -> dict[str, list[tuple[str, str]]]:
    """What the packages hold of each kind, ``(name, where)`` as its row would say it."""
    analyses_ = _modules("analyses", recursive=False)
    return {
        "archs": _classes(_modules("models"), SuiteModel, "arch"),
        "tasks": _classes(_modules("tasks"), Task, "name"),
        "probes": [(m.__name__.removeprefix("probes.").replace(".", "_"), m.__name__)
                   for m in _modules("probes")],
        "papers": [(m.__name__.rpartition(".")[2], m.__name__)
                   for m in _modules("analyses.zoo", recursive=False) if _has_recipes(m)],
        "analyses": [(m.__name__.rpartition(".")[2], m.__name__) for m in analyses_
                     if isinstance(getattr(m, "FIGURE", None), Figure)],
    }


def row_problem(kind: str, name: str, where: str) -> str | None:
    """What is wrong with one row (None: it imports and is what it says)."""
    try:
        obj = registry.resolve(where)
    except (ImportError, AttributeError) as e:
        return f"[{kind}] {name} = {where!r} in {WHERE} does not import ({e})"
    bad = f"[{kind}] {name} = {where!r} in {WHERE} is no "
    if kind in ("archs", "tasks"):
        base, attr = (SuiteModel, "arch") if kind == "archs" else (Task, "name")
        if not (inspect.isclass(obj) and issubclass(obj, base)):
            return bad + f"{base.__name__} subclass"
        if obj.__dict__.get(attr) != name:
            return bad + f"class whose {attr} is {name!r} (it says {obj.__dict__.get(attr)!r})"
    elif not isinstance(obj, ModuleType) or ":" in where:
        return bad + "module (the row names a module, \"package.module\")"
    elif kind == "probes" and not where.startswith("probes."):
        return bad + "module of probes/"
    elif kind == "papers" and not _has_recipes(obj):
        return bad + "zoo module with a recipes() function"
    elif kind == "analyses" and (where != f"analyses.{name}"
                                 or not isinstance(getattr(obj, "FIGURE", None), Figure)):
        return bad + f"analysis analyses.{name} with a module-level FIGURE"
    return None


def registry_problems(tables: dict[str, dict[str, str]],
                      found: dict[str, list[tuple[str, str]]]) -> list[str]:
    """What is wrong with the ``tables`` (seqprobe/registry.toml's) given what the packages
    hold (``found``, :func:`found_in_packages`)."""
    out = []
    for kind in KINDS:
        rows, claimed = tables.get(kind, {}), {}
        for name, where in found.get(kind, []):
            if claimed.setdefault(name, where) != where:
                out.append(f"{kind[:-1]} name {name!r} is claimed by both {claimed[name]} "
                           f"and {where}: rename one")
            elif name not in rows:
                out.append(f"{where} is registered nowhere: add the row {name} = \"{where}\" "
                           f"to [{kind}] in {WHERE}")
        for name, where in rows.items():
            problem = row_problem(kind, name, where)
            if problem:
                out.append(problem + ": fix or remove the row")
    analyses_ = tables.get("analyses", {})
    for name, why in tables.get("not_planned", {}).items():
        if name not in analyses_:
            out.append(f"[not_planned] {name} in {WHERE} is no row of [analyses]: remove it")
        if not (isinstance(why, str) and why.strip()):
            out.append(f"[not_planned] {name} in {WHERE} needs the reason it is not planned")
    return out


def dependence_problems(found: set[str], graph) -> list[str]:
    """Analyses that import another (directly or through any chain): shared code belongs in
    analyses.common, analyses.claims or probes. The analyses are the ones declaring a FIGURE,
    so a new analysis is checked without being listed anywhere."""
    return [f"analyses.{a} imports analyses.{b}: move what they share into analyses.common "
            "or probes" for a in sorted(found) for b in sorted(found)
            if a != b and graph.chain_exists(importer=f"analyses.{a}",
                                             imported=f"analyses.{b}", as_packages=True)]


def recipe_level_problems(recorded: dict) -> list[str]:
    """Levels at which zoo recipes exist but analyses/zoo/catalog.json records no key."""
    at = {}
    for r in zoo_recipes.RECIPES.values():
        for level in r.levels:
            at.setdefault(level, []).append(r.name)
    have = {k.rsplit("@", 1)[1] for k in recorded["keys"]}
    return [f"{len(names)} zoo recipes exist at {level} (e.g. {names[0]}) but "
            f"analyses/zoo/catalog.json records no key at {level}: regenerate it (python -m "
            "analyses.zoo catalog)" for level, names in sorted(at.items()) if level not in have]


@pytest.fixture(scope="module")
def found() -> dict[str, list[tuple[str, str]]]:
    return found_in_packages()


def _tables() -> dict[str, dict[str, str]]:
    return {s: registry.table(s) for s in registry.SECTIONS}


def _fmt(problems: list[str]) -> str:
    return "\n".join(problems)


# ---------------------------------------------------------------------------- the registry
def test_every_table_row_is_what_it_says_and_everything_has_a_row(found):
    assert "mamba_decay" in dict(found["analyses"]) and "memorization" in dict(found["analyses"])
    assert dict(found["archs"])["mamba"] == "models.ssm.mamba:MambaLM"  # subpackages seen
    assert {"copy", "markov"} <= set(dict(found["papers"]))
    problems = registry_problems(_tables(), found)
    assert not problems, _fmt(problems)


def test_the_registry_check_can_fail(found):
    tables = _tables()
    tables["archs"] = {k: v for k, v in tables["archs"].items() if k != "mamba"}
    tables["probes"] = {**tables["probes"], "nope": "probes.nope"}
    tables["tasks"] = {**tables["tasks"], "copy": "tasks.copy:DuplicatedNgramCopyTask"}
    tables["analyses"] = {**tables["analyses"], "common": "analyses.common"}
    tables["papers"] = {**tables["papers"], "recipe": "analyses.zoo.recipe"}
    tables["not_planned"] = {"pretrained_copy": " ", "no_such": "x"}
    problems = _fmt(registry_problems(tables, found))
    assert ('add the row mamba = "models.ssm.mamba:MambaLM" to [archs] in '
            'seqprobe/registry.toml') in problems
    assert "[probes] nope = 'probes.nope' in seqprobe/registry.toml does not import" in problems
    assert "is no class whose name is 'copy'" in problems
    assert "is no analysis analyses.common with a module-level FIGURE" in problems
    assert "is no zoo module with a recipes() function" in problems
    assert "[not_planned] pretrained_copy in seqprobe/registry.toml needs the reason" in problems
    assert "[not_planned] no_such in seqprobe/registry.toml is no row of [analyses]" in problems
    twice = {**found, "archs": [*found["archs"], ("mamba", "models.echo:EchoLM")]}
    assert "arch name 'mamba' is claimed by both models.ssm.mamba:MambaLM and models.echo:EchoLM" \
        in _fmt(registry_problems(_tables(), twice))


def test_the_plan_is_the_analyses_table_but_the_not_planned():
    from analyses.reproduce import plan
    tables = _tables()
    assert plan.PLAN == tuple(n for n in tables["analyses"] if n not in tables["not_planned"])
    assert plan.NOT_PLANNED == tables["not_planned"] and "pretrained_copy" not in plan.PLAN


# ---------------------------------------------------------------------------- independence
@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("seqprobe", "tasks", "models", "probes", "analyses", "figures")


def test_no_analysis_imports_another(found, graph):
    problems = dependence_problems({n for n, _ in found["analyses"]}, graph)
    assert not problems, _fmt(problems)


def test_the_independence_check_can_fail(found, graph):
    graph.add_import(importer="analyses.mamba_decay", imported="analyses.ngram_heads")
    try:
        problems = dependence_problems({n for n, _ in found["analyses"]}, graph)
    finally:
        graph.remove_import(importer="analyses.mamba_decay", imported="analyses.ngram_heads")
    assert problems == ["analyses.mamba_decay imports analyses.ngram_heads: move what they "
                        "share into analyses.common or probes"]


# ---------------------------------------------------------------------------- COLORS
def test_a_name_without_a_colour_gets_a_fixed_one_of_its_own():
    assert style.COLORS["hard_alibi"] == "#2ca02c"  # listed
    new = style.COLORS["toy_arch"]
    assert new == style.COLORS["toy_arch"] == style.COLORS.get("toy_arch")
    assert new.startswith("#") and "toy_arch" not in style.COLORS
    assert style.COLORS.get("toy_arch", "k") == "k"


# ---------------------------------------------------------------------------- recipe hashes
def test_every_level_with_recipes_is_recorded_in_the_catalog():
    problems = recipe_level_problems(json.loads(RECIPE_HASHES.read_text()))
    assert not problems, _fmt(problems)


def test_the_recipe_level_check_can_fail():
    recorded = json.loads(RECIPE_HASHES.read_text())
    # whatever the file records, a file without the quick rows must fail, naming the fix
    quick_less = {"keys": {k: v for k, v in recorded["keys"].items()
                           if not k.endswith("@quick")}}
    problems = recipe_level_problems(quick_less)
    assert any("records no key at quick" in p and "python -m analyses.zoo catalog" in p
               for p in problems)
    everything = {"keys": {f"{n}@{lv}": "h" for n, r in zoo_recipes.RECIPES.items()
                           for lv in r.levels}}
    assert recipe_level_problems(everything) == []


def test_listing_the_names_imports_none_of_the_things_named():
    """The registries read their tables: listing or checking a name imports no model or task
    module (finding them used to import every one); naming one imports that one."""
    code = ("import sys\nfrom models.registry import ARCHS, model_class\n"
            "from tasks.registry import TASKS\n"
            "assert 'mamba' in ARCHS and 'copy' in TASKS and len(ARCHS) and len(TASKS)\n"
            "named = {m.partition(':')[0] for m in [*ARCHS.values(), *TASKS.values()]}\n"
            "print(sorted(named & set(sys.modules)))\n"
            "model_class('lstm')\nprint(sorted(named & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "['models.lstm']"]


def test_the_registry_file_refuses_an_unknown_table_or_a_row_that_is_no_string(tmp_path):
    bad = tmp_path / "registry.toml"
    bad.write_text('[arch]\nx = "models.x:X"\n')
    with pytest.raises(ConfigError, match=r"unknown table \[arch\]; the tables are archs"):
        registry._read(bad)
    bad.write_text('[archs]\nx = 1\n')
    with pytest.raises(ConfigError, match=r"\[archs\] x must be a non-empty string"):
        registry._read(bad)
