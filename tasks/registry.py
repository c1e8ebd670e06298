"""Task name -> task class (found in tasks/, imported on first use) and the Task interface."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from seqprobe.config import check, config_from_dict
from seqprobe.discovery import Discovered
from seqprobe.errors import InputError
from tasks.base import IGNORE, Batch, Vocab, letters

# Every Task subclass in tasks/ that sets ``name``: a new task is one new file.
TASKS: Mapping[str, str] = Discovered(("tasks",), lambda: Task, "name",
                                      skip=("registry", "base", "prompts"))


class Task:
    """Interface of a language-modelling task (subclasses set ``name`` and ``config_cls``).

    * ``vocab``: the :class:`~tasks.base.Vocab`; ``pad_id``: token used to fill packed contexts.
    * ``example(g)``: one example as 1-D ``(tokens, targets)`` (targets use ``IGNORE`` where
      no loss is taken). Tasks of fixed-length sequences may instead override ``batch``.
    * ``batch(batch_size, g)``: a training :class:`~tasks.base.Batch` (examples padded right).
    * ``eval_batch(batch_size, g, length=None)``: a :class:`~tasks.base.PromptBatch` for greedy
      evaluation, or ``None`` for tasks scored by loss alone (Markov chains).
    """

    name: ClassVar[str] = ""
    config_cls: ClassVar[type] = object
    # whether examples can be packed into a context (``TrainConfig.context``); fixed-length
    # sequences (the Markov chains) are not
    packable: ClassVar[bool] = True
    vocab: Vocab

    def __init__(self, cfg):
        if not isinstance(cfg, self.config_cls):
            raise TypeError(f"{type(self).__name__} needs a {self.config_cls.__name__}")
        self.cfg = cfg

    @property
    def pad_id(self) -> int:
        return self.vocab.id("PAD")

    def example(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def batch(self, batch_size: int, g: torch.Generator) -> Batch:
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        examples = [self.example(g) for _ in range(batch_size)]
        width = max(len(t) for t, _ in examples)
        tokens = torch.full((batch_size, width), self.pad_id, dtype=torch.long)
        targets = torch.full((batch_size, width), IGNORE, dtype=torch.long)
        for row, (t, y) in enumerate(examples):
            tokens[row, : len(t)] = t
            targets[row, : len(y)] = y
        return Batch(tokens, targets)

    def eval_batch(self, batch_size: int, g: torch.Generator, length: int | None = None):
        return None

    def max_example_len(self) -> int:
        """The most positions one example of this config puts before a model: what packing
        checks against the context and the memory checks size a run and an evaluation by."""
        raise NotImplementedError


def check_packable(task: Task, context: int) -> None:
    """One line unless ``task``'s examples can be packed into ``context`` tokens."""
    check(task.packable, f"{task.name} sequences have a fixed length (seq_len) and are not "
          "packed; use --context 0")
    check(context >= task.max_example_len(),
          f"context {context} is shorter than the longest {task.name} example "
          f"({task.max_example_len()} tokens); use --context 0 (no packing) or >= "
          f"{task.max_example_len()}")


class LetterTask(Task):
    """A task over the first ``cfg.D`` letters (:func:`~tasks.base.letters`) and its
    ``specials`` after them (copy, n-gram lookup, induction heads)."""

    specials: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg):
        super().__init__(cfg)
        self.vocab = Vocab(letters(cfg.D), self.specials)


def packed_batch(task: Task, batch_size: int, context: int, g: torch.Generator) -> Batch:
    """Fill each of ``batch_size`` rows of ``context`` tokens with i.i.d. examples (paper A.2,
    "we fill the context with multiple independent samples"); the tail that no whole example
    fits in is padding with no loss."""
    check_packable(task, context)
    tokens = torch.full((batch_size, context), task.pad_id, dtype=torch.long)
    targets = torch.full((batch_size, context), IGNORE, dtype=torch.long)
    for row in range(batch_size):
        pos = 0
        while True:
            t, y = task.example(g)
            if pos + len(t) > context:
                break  # this example is dropped: the generator state still advanced, reproducibly
            tokens[row, pos : pos + len(t)] = t
            targets[row, pos : pos + len(y)] = y
            pos += len(t)
    return Batch(tokens, targets)


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
