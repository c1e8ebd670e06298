"""Task name -> task class: every :class:`~tasks.base.Task` subclass in tasks/ that sets
``name``, found (imported) on first use. The interface itself is in :mod:`tasks.base`, below
this module, so the task modules never import the registry that finds them."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from seqprobe.config import config_from_dict
from seqprobe.discovery import Discovered
from seqprobe.errors import InputError
from tasks.base import LetterTask, Task, check_packable, packed_batch

# Every Task subclass in tasks/ that sets ``name``: a new task is one new file.
TASKS: Mapping[str, str] = Discovered(("tasks",), lambda: Task, "name",
                                      skip=("registry", "base", "prompts"))

# Task, LetterTask, check_packable and packed_batch are tasks.base's, re-exported where callers
# have imported them from (a re-export from below closes no circle)
__all__ = ["TASKS", "LetterTask", "Task", "check_packable", "make_task", "packed_batch",
           "task_class"]


def task_class(name: str):
    if name not in TASKS:
        raise InputError(f"unknown task {name!r}; allowed: {', '.join(sorted(TASKS))}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_task(name: str, config: dict[str, Any] | None = None, **overrides: Any) -> Task:
    """Build task ``name`` from a config dict and/or keyword overrides (unknown keys rejected)."""
    cls = task_class(name)
    data = dict(config or {})
    data.update(overrides)
    return cls(config_from_dict(cls.config_cls, data))
