"""Shared pieces of every synthetic task: vocabularies, batches, generators.

Every generator in ``tasks/`` is a pure function of its frozen config and a seeded
``torch.Generator``; no model code lives here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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
