"""The zoo's recipes as data: every trained model an analysis uses, by name — one module per
paper (:mod:`analyses.zoo.copy`, :mod:`analyses.zoo.markov`, :mod:`analyses.zoo.spectral`,
:mod:`analyses.zoo.memorization`, named in the ``[papers]`` table of seqprobe/registry.toml
and read by :func:`papers`; each holds its paper's level rows,
``TABLE``, beside its recipes; the memorization paper's models are built by its analysis),
collected here once.

What a recipe is (a task × arch with the differences from its paper's level rows, at the levels
it lists): :class:`analyses.zoo.recipe.Recipe`. :mod:`analyses.zoo` serves them. Why a setting was
chosen is said beside it; what a run of it measured is in the reproduce index.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

from analyses.zoo.recipe import Recipe
from seqprobe.config import check
from seqprobe.registry import Registered, resolve

# paper name -> its zoo module (with ``TABLE`` and ``recipes()``): a new paper's recipes are
# its module and one row in the table
PAPERS: Mapping[str, str] = Registered("papers")


def papers() -> list[ModuleType]:
    """Every paper module of the zoo, in the table's order."""
    return [resolve(where) for where in PAPERS.values()]


def build_recipes() -> dict[str, Recipe]:
    """Every recipe by name, in the order ``python -m analyses.zoo --list`` shows them."""
    recipes: dict[str, Recipe] = {}
    for r in (r for paper in papers() for r in paper.recipes()):
        check(r.name not in recipes, f"recipe {r.name} defined twice")
        recipes[r.name] = r
    return recipes


RECIPES: dict[str, Recipe] = build_recipes()

