"""Shared pieces of every synthetic task: the :class:`Task` interface, vocabularies, batches,
generators. Below :mod:`tasks.registry`, which finds the tasks: a task module imports its base
class from here.

Every generator in ``tasks/`` is a pure function of its frozen config and a seeded
``torch.Generator``; no model code lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from seqprobe.config import check
from seqprobe.errors import InputError

IGNORE = -100  # target value that the loss skips (torch.nn.functional.cross_entropy default)


@dataclass(frozen=True)
class Vocab:
    """A token vocabulary: ``alphabet`` symbols first (ids 0..D-1), then named special tokens."""

    alphabet: tuple[str, ...]
    specials: tuple[str, ...] = ()

    @property
    def D(self) -> int:  # noqa: N802 - the paper's name for the alphabet size
        return len(self.alphabet)

    @property
    def size(self) -> int:
        return len(self.alphabet) + len(self.specials)

    def id(self, special: str) -> int:
        """Token id of a special token such as ``"BOS"``."""
        try:
            return self.D + self.specials.index(special)
        except ValueError:
            raise InputError(f"vocabulary has no special token {special!r}") from None

    @property
    def symbols(self) -> tuple[str, ...]:
        return self.alphabet + tuple(f"<{s}>" for s in self.specials)

    def decode(self, ids) -> str:
        """Human-readable string of a 1-D id sequence (special tokens shown as ``<BOS>``)."""
        syms = self.symbols
        sep = "" if all(len(a) == 1 for a in self.alphabet) else " "
        return sep.join(syms[int(i)] if 0 <= int(i) < len(syms) else "?" for i in ids)


def letters(D: int) -> tuple[str, ...]:
    """The first D symbols of a-z, then A-Z, then ``t52``, ``t53``… for large alphabets."""
    base = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return tuple(base[i] if i < len(base) else f"t{i}" for i in range(D))


@dataclass
class Batch:
    """One batch of a language-modelling task.

    tokens:  [batch, pos] int64 inputs.
    targets: [batch, pos] int64, the token that position ``pos`` must predict next, or
             ``IGNORE`` where no loss is taken (prompt, padding): the paper's loss mask (A.2).
    """

    tokens: torch.Tensor
    targets: torch.Tensor

    def to(self, device) -> Batch:
        return Batch(self.tokens.to(device), self.targets.to(device))


@dataclass
class PromptBatch:
    """Prompts with the answer a model must generate after them (for greedy evaluation).

    prompts: [batch, prompt_len] int64; answers: [batch, answer_len] int64. All rows share
    lengths so one forward pass serves the whole batch.
    """

    prompts: torch.Tensor
    answers: torch.Tensor

    def to(self, device) -> PromptBatch:
        return PromptBatch(self.prompts.to(device), self.answers.to(device))


def make_generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


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
