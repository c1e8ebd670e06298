"""What a recipe is: a task × arch with overrides on top of its paper's level rows (``table``,
a :class:`~models.levels.LevelTable` in the paper's zoo module; a recipe made outside a
paper has the generic rows only) — ``common`` at every level it has, ``by_level[L]`` on top at
level ``L``. It exists at exactly the levels it lists (``levels``; by default ``quick`` and
``paper``: the medium runs are recipes of their own). ``init_from[L]`` names the recipe whose
checkpoint starts it at level ``L`` (fine-tuning). :meth:`Recipe.run_config` is the one way
from a recipe to its :class:`~models.train.runconfig.RunConfig`. The zoo's recipes:
:mod:`analyses.zoo.recipes`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

# zoo:NAME[@LEVEL] is parsed by the catalog (imported where training is not); kept here too
from analyses.zoo.catalog import ZOO_PREFIX, is_zoo_ref, parse_zoo_ref  # noqa: F401
from models.levels import GENERIC, LevelTable
from seqprobe.cli import LEVELS
from seqprobe.config import check

if TYPE_CHECKING:
    from models.train.runconfig import RunConfig

# What builds a run (models.train) is imported in Recipe.run_config, where a run is built: the
# paper modules declare their recipes at import, and an analysis that reads its level settings
# from them (its --help, its refusals) reads no training code.

Parts = Mapping[str, Mapping[str, Any]]  # {"model": {...}, "task": {...}, "train": {...}}
DEFAULT_LEVELS = ("quick", "paper")  # where a recipe exists unless it lists its levels


def _frozen(parts: Mapping | None) -> Parts:
    parts = parts or {}
    check(set(parts) <= {"model", "task", "train"},
          f"recipe overrides take model / task / train, got {sorted(parts)}")
    return MappingProxyType({k: MappingProxyType(dict(parts.get(k, {})))
                             for k in ("model", "task", "train")})


@dataclass(frozen=True)
class Recipe:
    """One named checkpoint (module docstring); ``slots`` is how many cores its training keeps
    busy (the reproduce scheduler reads it)."""

    name: str
    task: str
    arch: str
    common: Parts = field(default_factory=dict)
    by_level: Mapping[str, Parts] = field(default_factory=dict)
    init_from: Mapping[str, str] = field(default_factory=dict)  # level -> recipe name
    slots: int = 1
    doc: str = ""
    levels: tuple[str, ...] = DEFAULT_LEVELS
    table: LevelTable = field(default=GENERIC, repr=False)  # its paper's level rows

    def __post_init__(self):
        object.__setattr__(self, "levels", tuple(self.levels))
        for what, keys in (("levels", self.levels), ("by_level", self.by_level),
                           ("init_from", self.init_from)):
            unknown = sorted(set(keys) - set(LEVELS))
            check(not unknown, f"recipe {self.name}: {what} names unknown levels {unknown}; "
                  f"levels: {', '.join(LEVELS)}")
        check(all(isinstance(v, Mapping) for v in self.by_level.values()),
              f"recipe {self.name}: by_level values are dicts of model / task / train (a level "
              "the recipe lacks is left out of levels, not set to None)")
        outside = sorted((set(self.by_level) | set(self.init_from)) - set(self.levels))
        check(not outside, f"recipe {self.name}: by_level / init_from name {outside}, which "
              f"are not among its levels {list(self.levels)}")
        object.__setattr__(self, "common", _frozen(self.common))
        object.__setattr__(self, "by_level", MappingProxyType(
            {lv: _frozen(v) for lv, v in self.by_level.items()}))
        object.__setattr__(self, "init_from", MappingProxyType(dict(self.init_from)))

    def available(self, level: str) -> bool:
        return level in self.levels

    def parts(self, level: str) -> dict[str, dict[str, Any]]:
        """The recipe's overrides at ``level``: ``common``, then ``by_level[level]``."""
        check(level in LEVELS, f"unknown level {level!r}; allowed: {', '.join(LEVELS)}")
        check(self.available(level), f"recipe {self.name} has no {level} version (it has "
              f"{', '.join(self.levels)})")
        extra = self.by_level.get(level) or _frozen({})
        return {k: {**self.common[k], **extra[k]} for k in ("model", "task", "train")}

    def run_config(self, level: str, train: Mapping[str, Any] | None = None,
                   init_from: str | Path | RunConfig | None = None,
                   seed_offset: int = 0) -> RunConfig:
        """The run of this recipe at ``level``: its paper's rows (``table``), then
        :meth:`parts`, then ``train`` on top; ``seed_offset`` shifts its training seed (another
        run, so another cache key). A recipe fine-tuned at ``level`` needs ``init_from``: the
        checkpoint that starts it (the run trained), or the run of the recipe it starts from
        (the run costed without that file: the model is that run's, with this recipe's model
        fields on top). Its precision, compile and device type are as written (usually
        "auto"); :meth:`RunConfig.resolved` gives the run a device trains."""
        from models.train.build import make_run_config
        from models.train.runconfig import RunConfig

        parts = self.parts(level)
        model, tr = dict(parts["model"]), {**parts["train"], **(train or {})}
        if seed_offset:
            seed = {**self.table.rows(level, self.task, self.arch)["train"], **tr}.get("seed", 0)
            tr["seed"] = int(seed) + seed_offset
        fine_tuned = level in self.init_from
        check(fine_tuned or init_from is None, f"recipe {self.name} starts from no checkpoint "
              f"at {level}; init_from is for a fine-tuned recipe")
        if fine_tuned:
            check(init_from is not None, f"recipe {self.name} starts from "
                  f"{self.init_from[level]} at {level}: give its checkpoint or its run")
            if isinstance(init_from, RunConfig):
                model = {**init_from.model_dict, **model}
            else:
                tr["init_from"] = str(init_from)
        return make_run_config(self.arch, self.task, level, model, parts["task"], tr,
                               table=self.table)


def checked_labels(labels: Iterable[str] | None, allowed: Iterable[str], level: str) -> list[str]:
    """``labels`` (default: every one ``allowed``), each checked to be a model of the level."""
    allowed = tuple(allowed)
    labels = list(labels or allowed)
    for label in labels:
        check(label in allowed,
              f"unknown model {label!r}; allowed at {level}: {', '.join(allowed)}")
    return labels
