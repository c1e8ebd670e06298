"""The lists a maintainer keeps by hand agree with the code they list (docs/adding-a-paper.md).

Each list is checked against what the code declares, and each failure names the file and the
list to update:

* ``PLAN`` (and its commented exclusions ``NOT_PLANNED``) in analyses/reproduce/plan.py: every
  module or package under analyses/ with a module-level ``FIGURE`` is in exactly one of them,
  and every entry of either declares a ``FIGURE``;
* no analysis imports another (the analyses being the modules with a ``FIGURE``; derived, so
  .importlinter lists no analysis);
* ``COLORS`` in figures/style.py needs no entry for a new model: an unlisted name gets a fixed
  colour of its own;
* analyses/zoo/catalog.json: a level at which some zoo recipe exists has its keys recorded there
  (which recipes at a recorded level is tests/test_recipe_hashes.py's check, not repeated here).

Each check is a function of the live lists, so the "can fail" tests break one list in memory
(monkeypatch) and see the check name the fix.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import grimp
import pytest

import analyses
from analyses.claims import Figure
from analyses.reproduce import plan
from analyses.zoo import recipes as zoo_recipes
from figures import style

ROOT = Path(__file__).resolve().parent.parent
RECIPE_HASHES = ROOT / "analyses" / "zoo" / "catalog.json"  # the zoo's recorded cache keys
NOT_ANALYSES = {"common", "zoo", "reproduce"}  # packages under analyses/ that are not analyses


def analyses_with_figure() -> set[str]:
    """Every module or package directly under analyses/ (but :data:`NOT_ANALYSES`) that
    declares a module-level ``FIGURE``."""
    found = set()
    for info in pkgutil.iter_modules(analyses.__path__):
        if info.name in NOT_ANALYSES or info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"analyses.{info.name}")
        if isinstance(getattr(mod, "FIGURE", None), Figure):
            found.add(info.name)
    return found


def declares_figure(name: str) -> bool:
    try:
        mod = importlib.import_module(f"analyses.{name}")
    except ImportError:
        return False
    return isinstance(getattr(mod, "FIGURE", None), Figure)


# ---------------------------------------------------------------------------- the checks
def plan_problems(found: set[str]) -> list[str]:
    """What is wrong with ``plan.PLAN`` / ``plan.NOT_PLANNED`` given the analyses ``found``."""
    where = "analyses/reproduce/plan.py"
    out = []
    for name in sorted(found - set(plan.PLAN) - set(plan.NOT_PLANNED)):
        out.append(f"analyses.{name} declares a FIGURE but is not planned: add {name} to PLAN "
                   f"in {where} (or to NOT_PLANNED there, with the reason it is left out)")
    for name in plan.PLAN:
        if not declares_figure(name):
            out.append(f"PLAN entry {name!r} is no analysis with a FIGURE: remove {name} from "
                       f"PLAN in {where}, or give analyses/{name} a module-level FIGURE")
    for name, why in plan.NOT_PLANNED.items():
        if name in plan.PLAN:
            out.append(f"{name} is in both PLAN and NOT_PLANNED in {where}: remove it from one")
        if not declares_figure(name):
            out.append(f"NOT_PLANNED entry {name!r} is no analysis with a FIGURE: remove it "
                       f"from NOT_PLANNED in {where}")
        if not (isinstance(why, str) and why.strip()):
            out.append(f"NOT_PLANNED[{name!r}] in {where} needs the reason it is not planned")
    if len(set(plan.PLAN)) != len(plan.PLAN):
        out.append(f"PLAN in {where} lists a name twice")
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
def found() -> set[str]:
    return analyses_with_figure()


def _fmt(problems: list[str]) -> str:
    return "\n".join(problems)


# ---------------------------------------------------------------------------- PLAN
def test_every_analysis_with_a_figure_is_planned_or_excluded_with_a_reason(found):
    assert "mamba_decay" in found and "memorization" in found  # modules and packages both seen
    assert not NOT_ANALYSES & found
    problems = plan_problems(found)
    assert not problems, _fmt(problems)


def test_the_plan_check_can_fail(found, monkeypatch):
    monkeypatch.setattr(plan, "PLAN", tuple(n for n in plan.PLAN if n != "mamba_decay"))
    assert any("add mamba_decay to PLAN in analyses/reproduce/plan.py" in p
               for p in plan_problems(found))
    monkeypatch.setattr(plan, "PLAN", (*plan.PLAN, "no_such_analysis", "common"))
    problems = _fmt(plan_problems(found))
    assert "remove no_such_analysis from PLAN" in problems and "remove common from PLAN" in problems
    monkeypatch.setattr(plan, "NOT_PLANNED", {})
    assert any("add pretrained_copy to PLAN" in p for p in plan_problems(found))
    monkeypatch.setattr(plan, "NOT_PLANNED", {"pretrained_copy": " ", "ngram_heads": "x"})
    problems = _fmt(plan_problems(found))
    assert "needs the reason" in problems
    assert "ngram_heads is in both PLAN and NOT_PLANNED" in problems


# ---------------------------------------------------------------------------- independence
@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("seqprobe", "tasks", "models", "probes", "analyses", "figures")


def test_no_analysis_imports_another(found, graph):
    problems = dependence_problems(found, graph)
    assert not problems, _fmt(problems)


def test_the_independence_check_can_fail(found, graph):
    graph.add_import(importer="analyses.mamba_decay", imported="analyses.ngram_heads")
    try:
        problems = dependence_problems(found, graph)
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


# ---------------------------------------------------------------------------- recipe keys
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
