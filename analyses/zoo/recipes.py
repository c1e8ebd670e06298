"""The zoo's recipes as data: every trained model an analysis uses, by name — one module per
paper (:mod:`analyses.zoo.copy`, :mod:`analyses.zoo.markov`, :mod:`analyses.zoo.spectral`,
:mod:`analyses.zoo.memorization`, found by :func:`papers`; each holds its paper's level rows,
``TABLE``, beside its recipes; the memorization paper's models are built by its analysis),
collected here once.

What a recipe is (a task × arch with the differences from its paper's level rows, at the levels
it lists): :class:`analyses.zoo.recipe.Recipe`. :mod:`analyses.zoo` serves them. Why a setting was
chosen is said beside it; what a run of it measured is in the reproduce index.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from types import ModuleType

from analyses.zoo.recipe import Recipe
from seqprobe.config import check

NOT_PAPERS = ("recipe", "recipes", "levels", "dryrun", "catalog", "runs")  # the zoo's own


def papers() -> list[ModuleType]:
    """Every paper module of the zoo (a module of analyses/zoo/ with a ``recipes()``
    function): a new paper's recipes are one new file, found here. (The package is read from
    sys.modules: this module is imported while analyses.zoo's own file runs.)"""
    mods = [importlib.import_module(f"analyses.zoo.{i.name}")
            for i in pkgutil.iter_modules(sys.modules["analyses.zoo"].__path__)
            if not i.ispkg and not i.name.startswith("_") and i.name not in NOT_PAPERS]
    return [m for m in mods if callable(getattr(m, "recipes", None))]


def build_recipes() -> dict[str, Recipe]:
    """Every recipe by name, in the order ``python -m analyses.zoo --list`` shows them."""
    recipes: dict[str, Recipe] = {}
    for r in (r for paper in papers() for r in paper.recipes()):
        check(r.name not in recipes, f"recipe {r.name} defined twice")
        recipes[r.name] = r
    return recipes


RECIPES: dict[str, Recipe] = build_recipes()

