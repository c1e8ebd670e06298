"""Registries that find their entries instead of listing them: ``name -> "module:Class"`` of
every class in a package's modules that subclasses a base and names itself in a class
attribute (a task's ``name``, a model's ``arch``). A new task or architecture is one new file;
nothing else lists it. The modules are imported on first use of the table, not when it is
created, so a registry can sit in the package whose modules it finds (they import it for the
base class) and importing it stays cheap."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping

from seqprobe.errors import ConfigError


class Discovered(Mapping[str, str]):
    """``name -> "module:Class"`` over ``packages`` (their direct modules; a subpackage only
    where it is listed itself): each class defined there that subclasses ``base()`` and sets
    ``attr`` in its own body (not only inherited). Modules named in ``skip`` or starting with
    ``_`` are not imported. Two classes claiming one name are refused in one line."""

    def __init__(self, packages: tuple[str, ...], base: Callable[[], type], attr: str,
                 skip: tuple[str, ...] = ()):
        self._packages, self._base, self._attr, self._skip = packages, base, attr, skip
        self._table: dict[str, str] | None = None

    def _load(self) -> dict[str, str]:
        if self._table is None:
            base, table = self._base(), {}
            for package in self._packages:
                path = importlib.import_module(package).__path__
                for info in pkgutil.iter_modules(path):
                    if info.ispkg or info.name.startswith("_") or info.name in self._skip:
                        continue
                    module = importlib.import_module(f"{package}.{info.name}")
                    for obj in vars(module).values():
                        name = getattr(obj, "__dict__", {}).get(self._attr)
                        if (isinstance(obj, type) and issubclass(obj, base) and name
                                and obj.__module__ == module.__name__):
                            where = f"{module.__name__}:{obj.__name__}"
                            if table.get(name, where) != where:
                                raise ConfigError(f"{self._attr} {name!r} is claimed by both "
                                                  f"{table[name]} and {where}")
                            table[name] = where
            self._table = table
        return self._table

    def __getitem__(self, name: str) -> str:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, name: object) -> bool:
        return name in self._load()

    def __repr__(self) -> str:
        return f"Discovered({self._load()!r})"
