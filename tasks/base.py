"""Shared pieces of every synthetic task: argument checks, vocabularies, batches, config rules.

Every generator in ``tasks/`` is a pure function of its frozen config and a seeded
``torch.Generator``; no model code lives here.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import numbers
import types
import typing
from dataclasses import dataclass
from typing import Any

import torch

from tasks.errors import ConfigError, TaskError

IGNORE = -100  # target value that the loss skips (torch.nn.functional.cross_entropy default)


def check(condition: bool, message: str) -> None:
    """Raise :class:`TaskError` with ``message`` unless ``condition`` holds (that class, not
    :class:`ConfigError`: a sweep reports the class name, and its users read ``TaskError``)."""
    if not condition:
        raise TaskError(message)


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, once per class ({} when an annotation cannot be
    resolved): evaluating string annotations dominates building a config from a dict."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: no type check
        return {}


def near(key: Any, allowed) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``allowed`` to a mistyped ``key``, or ""."""
    match = difflib.get_close_matches(str(key), sorted(map(str, allowed)), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def config_from_dict(cls: type, data: dict[str, Any]):
    """Build a frozen config dataclass from a dict, rejecting unknown keys (never ignoring them)."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown key(s) {unknown}{near(unknown[0], names)}; "
                          f"allowed: {sorted(names)}")
    hints = type_hints(cls)
    data = dict(data)
    for key, value in data.items():
        ok = _fits(value, hints.get(key))
        if ok is False:  # a wrong type would surface later as a TypeError deep inside a check
            tp = hints[key]
            raise ConfigError(f"{cls.__name__}.{key} must be {getattr(tp, '__name__', tp)}, got "
                            f"{value!r} ({type(value).__name__})")
        if isinstance(value, list) and typing.get_origin(hints.get(key)) is tuple:
            data[key] = tuple(value)  # JSON has no tuples; frozen configs stay hashable
    return cls(**data)


def _fits(value: Any, tp: Any) -> bool | None:
    """Whether ``value`` suits the annotation ``tp``; None when ``tp`` is not a simple type."""
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    origin = typing.get_origin(tp)
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0]) is not False for v in value)
        return None
    if origin in (typing.Union, types.UnionType):
        results = [(value is None) if a is type(None) else _fits(value, a)
                   for a in typing.get_args(tp)]
        return True if True in results else (None if None in results else False)
    return None


def config_to_dict(cfg) -> dict[str, Any]:
    """The init fields of a config dataclass as a plain dict (JSON- and torch.load-safe)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.init}


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
            raise TaskError(f"vocabulary has no special token {special!r}") from None

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
