"""Every paper's level rows, merged: one :class:`~models.levels.LevelTable` of the rows
each paper module of the zoo declares as its ``TABLE`` (a paper whose recipes spell out
every setting needs none) (found by
:func:`analyses.zoo.recipes.papers`: a new paper's rows are in its own file, never here).

A recipe takes its own paper's rows (:meth:`analyses.zoo.recipe.Recipe.run_config`); this table
is for a run named by task and arch rather than by recipe (a test's or a tool's ad hoc run
with the papers' settings): :func:`make_run_config`.
"""

from __future__ import annotations

from typing import Any

from analyses.zoo.recipes import papers
from models.levels import LevelTable, Row
from models.train import build
from models.train.runconfig import RunConfig

TABLE = LevelTable.merged(p.TABLE for p in papers() if hasattr(p, "TABLE"))


def level_rows(level: str, task: str, arch: str) -> Row:
    """The papers' merged rows of ``level`` for (task, arch) (:meth:`LevelTable.rows`)."""
    return TABLE.rows(level, task, arch)


def make_run_config(arch: str, task: str, level: str = "quick",
                    model: dict[str, Any] | None = None, task_config: dict[str, Any] | None = None,
                    train: dict[str, Any] | None = None) -> RunConfig:
    """:func:`models.train.build.make_run_config` on the papers' rows (:data:`TABLE`)."""
    return build.make_run_config(arch, task, level, model, task_config, train, table=TABLE)
