"""The suite's one registration mechanism: explicit tables, ``name -> "module:attr"`` (or
``"module"``), in one file, :file:`seqprobe/registry.toml` — architectures, tasks, probes,
papers and analyses, each a table of its own.

Why tables and not discovery: a name is found by reading one small file, never by importing
every module of a package (so listing names, a refusal of an unknown one and ``--help`` stay
cheap, and an optional dependency of one model is never imported to list the others); a
module that is not a registered thing needs no skip list; and what is registered is greppable
in one place. Each layer's registry reads its own table (:data:`models.registry.ARCHS` the
``archs`` one, and so on): the strings are not imports, so the file sits in this bottom layer
and no layer points up (tests/import_graph.py links each reader to the modules its table
names, so the layer and cycle checks see them). tests/contract/test_hand_kept_lists.py checks that
every row imports and is what it says, and that every class or module of a table's kind in
the packages has a row.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from seqprobe.errors import ConfigError

FILE = Path(__file__).with_name("registry.toml")
SECTIONS = ("archs", "tasks", "probes", "papers", "analyses", "not_planned")


@functools.cache
def _read(path: Path = FILE) -> dict[str, dict[str, str]]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    for section, rows in data.items():
        if section not in SECTIONS or not isinstance(rows, dict):
            raise ConfigError(f"{path}: unknown table [{section}]; the tables are "
                              f"{', '.join(SECTIONS)}")
        for name, where in rows.items():
            if not isinstance(where, str) or not where.strip():
                raise ConfigError(f"{path}: [{section}] {name} must be a non-empty string")
    return data


def table(section: str) -> dict[str, str]:
    """The rows of one table of :data:`FILE`, in the file's order."""
    if section not in SECTIONS:
        raise ConfigError(f"no table [{section}]; the tables are {', '.join(SECTIONS)}")
    return dict(_read().get(section, {}))


def resolve(where: str) -> Any:
    """The object a row names: ``"module:attr"`` -> that attribute, ``"module"`` -> it."""
    module, _, attr = where.partition(":")
    mod = importlib.import_module(module)
    return getattr(mod, attr) if attr else mod


class Registered(Mapping[str, str]):
    """One table as a read-only mapping ``name -> "module:attr"``, read on first use."""

    def __init__(self, section: str):
        if section not in SECTIONS:
            raise ConfigError(f"no table [{section}]; the tables are {', '.join(SECTIONS)}")
        self.section = section

    def _rows(self) -> dict[str, str]:
        return _read().get(self.section, {})

    def __getitem__(self, name: str) -> str:
        return self._rows()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    def __contains__(self, name: object) -> bool:
        return name in self._rows()

    def __repr__(self) -> str:
        return f"Registered({self.section!r}: {self._rows()!r})"
