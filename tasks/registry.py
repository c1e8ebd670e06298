"""Task name -> task class: the ``[tasks]`` table of seqprobe/registry.toml (a new task is its
file and one row there), read as :data:`TASKS`; :func:`task_class` imports the one asked for.
The interface itself is in :mod:`tasks.base`, below this module, so the task modules never
import the registry that names them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seqprobe.config import config_from_dict
from seqprobe.errors import InputError
from seqprobe.registry import Registered, resolve
from tasks.base import LetterTask, Task, check_packable, packed_batch

# name: "module:Class". Each class is a Task with that ``name`` and a ``config_cls``.
TASKS: Mapping[str, str] = Registered("tasks")

# Task, LetterTask, check_packable and packed_batch are tasks.base's, re-exported where callers
# have imported them from (a re-export from below closes no circle)
__all__ = ["TASKS", "LetterTask", "Task", "check_packable", "make_task", "packed_batch",
           "task_class"]


def task_class(name: str):
    if name not in TASKS:
        raise InputError(f"unknown task {name!r}; allowed: {', '.join(sorted(TASKS))}")
    return resolve(TASKS[name])


def make_task(name: str, config: dict[str, Any] | None = None, **overrides: Any) -> Task:
    """Build task ``name`` from a config dict and/or keyword overrides (unknown keys rejected)."""
    cls = task_class(name)
    data = dict(config or {})
    data.update(overrides)
    return cls(config_from_dict(cls.config_cls, data))
