"""Named levels of scale and the table type that gives each run its rows; no paper's numbers.

The levels: ``quick`` (CPU-sized, minutes), ``medium`` (CPU-sized, each headline comparison
learned by both sides), ``large`` (one GPU machine, about an hour) and ``paper`` (the papers'
settings, for a GPU). A :class:`LevelTable` holds rows keyed ``(level, task, arch)``, where
``"*"`` stands for every task or arch and more specific rows win. A level with a :data:`BASE`
is an overlay: its rows go on top of the base level's merged rows (``medium`` over ``quick``).
Each row may set ``model``, ``task`` and ``train`` fields.

Which settings a paper's runs take is the paper's own, in its zoo module
(``analyses/zoo/<paper>.py``, merged by :mod:`analyses.zoo.levels`): a run built here without
a table (``python -m models.train``) gets :data:`GENERIC` only, the defaults no paper chose.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from seqprobe.cli import LEVELS
from seqprobe.errors import InputError

Row = dict[str, dict[str, Any]]
Key = tuple[str, str, str]  # (level, task or "*", arch or "*")
# ``large``: the smallest settings that decide each headline claim; its runs are
# recipes of their own (analyses.zoo), like medium's, so its rows start from medium's.
BASE = {"medium": "quick", "large": "medium"}  # a level that is an overlay on another
# The levels whose analyses run several seeds per setting and read each claim with its spread
# (the quick and paper results are single runs): an analysis' JSON records its level, and a
# claim reader that needs the seeds checks ``level in SEEDED``.
SEEDED = ("medium", "large")
PARTS = ("model", "task", "train")


def _frozen_row(key: Key, row: Mapping[str, Mapping[str, Any]]) -> Mapping:
    level, task, arch = key
    if level not in LEVELS:
        raise InputError(f"level row {key}: unknown level {level!r}; allowed: "
                         f"{', '.join(LEVELS)}")
    unknown = sorted(set(row) - set(PARTS))
    if unknown:
        raise InputError(f"level row {key}: parts are {', '.join(PARTS)}, got {unknown}")
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in row.items()})


@dataclass(frozen=True)
class LevelTable:
    """Rows keyed ``(level, task, arch)`` (module docstring); :meth:`rows` merges the ones
    that apply to a run. Built with :meth:`of` (the generic rows under a paper's) or
    :meth:`merged` (several papers' tables into one)."""

    table: Mapping[Key, Mapping] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "table", MappingProxyType(
            {k: _frozen_row(k, v) for k, v in self.table.items()}))

    @classmethod
    def of(cls, rows: Mapping[Key, Row]) -> LevelTable:
        """:data:`GENERIC`'s rows with ``rows`` beside them (a paper's table). A paper sets
        task or arch rows, never ``(level, "*", "*")``: those are the generic defaults."""
        return cls.merged([GENERIC, cls(rows)])

    @classmethod
    def merged(cls, tables: Iterable[LevelTable]) -> LevelTable:
        """One table of every row of ``tables``; a key two of them set differently is an
        error (two papers that set one task's rows must agree)."""
        out: dict[Key, Mapping] = {}
        for t in tables:
            for key, row in t.table.items():
                if key in out and out[key] != row:
                    raise InputError(f"level row {key} is set twice, differently")
                out[key] = row
        return cls(out)

    def rows(self, level: str, task: str, arch: str) -> Row:
        """Merge the rows of ``level`` that apply to (task, arch), general first, specific
        last (a level with a :data:`BASE`: the base's merged rows first, then its own)."""
        if level not in LEVELS:
            raise InputError(f"unknown level {level!r}; allowed: {', '.join(LEVELS)}")
        merged: Row = (self.rows(BASE[level], task, arch) if level in BASE
                       else {part: {} for part in PARTS})
        for key in ((level, "*", "*"), (level, "*", arch), (level, task, "*"),
                    (level, task, arch)):
            for part, values in self.table.get(key, {}).items():
                merged[part].update(values)
        return merged


# The defaults of a run no paper's table sets: a short CPU run at quick, a longer one at paper.
GENERIC = LevelTable({
    ("quick", "*", "*"): {"train": {"steps": 1000, "batch_size": 32, "lr": 1e-3}},
    ("paper", "*", "*"): {"train": {"steps": 10000, "batch_size": 64}},
})
