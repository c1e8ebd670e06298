"""Numeric command-line flags, checked when they are parsed (issue 29 item 14): every number a
command takes is an argparse ``type=`` from here, with the range it may take, so a bad value is
one line and exit 2 (:class:`models.cli.OneLineParser`) before any model is loaded or any
tensor allocated, never a silent default or a request the allocator refuses.

The upper bounds keep one command within a machine: they are far above the papers' settings
(the figure a bound guards is in its comment) and far below what would exhaust memory or run
for days. Sequence lengths are also checked against the loaded model's context
(:func:`check_context`), once the model is known and before any prompt is built.

Lives in ``models`` (the lowest layer with a command line) so that ``models.zoo``,
``models.sweep`` and every analysis share it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable

from models.base import N_CTX_UNBOUNDED
from tasks.base import check

# ---------------------------------------------------------------------------- bounds
MAX_SEED = 2**63 - 1  # torch and numpy generators take any non-negative 63-bit seed
# one string's tokens: the papers evaluate copies up to 1,000 tokens; a copy example of 4,096 is
# 8,194 tokens, whose attention matrix is 67M entries per head and row
MAX_LENGTH = 4096
MAX_ENTRIES = 10_000  # phone-book entries (the paper: up to 140)
MAX_N = 64  # n of an n-gram (the papers' go to 10; the match score is O(n) passes)
MAX_BATCH = 4096  # rows per forward pass (the suite's defaults are 4 to 512)
MAX_EXAMPLES = 1_000_000  # examples / sequences / samples per point (papers: up to 1,280)
MAX_DRAWS = 10_000  # random repetitions of a control (default 10)
MAX_SEEDS = 1000  # independently trained or sampled systems per point
MAX_STEPS = 10_000_000  # training steps of one run
MAX_JOBS = 1024  # parallel workers / CPUs of a local Ray instance
MAX_RETRIES = 100
MAX_HEADS = 1 << 16  # heads (or SSM channels) of all layers together
MAX_LAYERS = 1024
MAX_DIM = 1 << 16  # a width: hidden state, features, filters, alphabet
MAX_HORIZON = 1 << 20  # a dynamical system's horizon T (the STU paper: 2^14)
MAX_ROWS = 10_000_000  # samples of a linear probe
MAX_SECONDS = 30 * 86400.0  # a wall-clock limit


def _parse(text: str, kind: type, what: str):
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    return value


def bounded_int(lo: int, hi: int, why: str = "") -> Callable[[str], int]:
    """An integer in ``[lo, hi]`` (``1e9``, ``-1``, ``2.5``: one line, ending with ``why``)."""

    def parse(text: str) -> int:
        value = _parse(text.strip(), int, "an integer")
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range: must be {lo}..{hi}"
                                             + (f" ({why})" if why else ""))
        return value

    parse.__name__ = f"integer {lo}..{hi}"  # argparse names the type in its messages
    return parse


def bounded_float(lo: float, hi: float, *, open_lo: bool = False) -> Callable[[str], float]:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``open_lo``); NaN and inf refused."""

    def parse(text: str) -> float:
        value = _parse(text.strip(), float, "a number")
        low_ok = value > lo if open_lo else value >= lo
        if not (math.isfinite(value) and low_ok and value <= hi):
            side = "(" if open_lo else "["
            raise argparse.ArgumentTypeError(f"{text.strip()} is out of range: must be a "
                                             f"finite number in {side}{lo:g}, {hi:g}]")
        return value

    parse.__name__ = f"number {lo:g}..{hi:g}"
    return parse


def int_list(lo: int, hi: int, *, max_items: int = 256, allow_empty: bool = False,
             why: str = "") -> Callable[[str], tuple[int, ...]]:
    """Comma-separated integers, each in ``[lo, hi]`` (``"5,10,20"`` -> (5, 10, 20)); at most
    ``max_items`` of them, at least one unless ``allow_empty``."""
    one = bounded_int(lo, hi, why)

    def parse(text: str) -> tuple[int, ...]:
        parts = [v for v in text.split(",") if v.strip()]
        if not parts and not allow_empty:
            raise argparse.ArgumentTypeError("give at least one integer")
        if len(parts) > max_items:
            raise argparse.ArgumentTypeError(f"{len(parts)} values, more than {max_items}")
        return tuple(one(v) for v in parts)

    parse.__name__ = f"integers {lo}..{hi}"
    return parse


def fraction_list(lo: float, hi: float, *, open_lo: bool = False,
                  max_items: int = 256) -> Callable[[str], tuple[float, ...]]:
    """Comma-separated numbers or fractions in range (``"1/4,0.5"`` -> (0.25, 0.5))."""
    one = bounded_float(lo, hi, open_lo=open_lo)

    def parse(text: str) -> tuple[float, ...]:
        values = []
        for v in (v.strip() for v in text.split(",")):
            if not v:
                continue
            a, _, b = v.partition("/")
            if b:
                den = _parse(b, float, "a number")
                if den == 0:
                    raise argparse.ArgumentTypeError(f"{v!r}: division by zero")
                values.append(one(repr(_parse(a, float, "a number") / den)))
            else:
                values.append(one(v))
        if not values:
            raise argparse.ArgumentTypeError("give at least one number")
        if len(values) > max_items:
            raise argparse.ArgumentTypeError(f"{len(values)} values, more than {max_items}")
        return tuple(values)

    parse.__name__ = f"numbers {lo:g}..{hi:g}"
    return parse


# the flags most commands share
seed = bounded_int(0, MAX_SEED)
count = bounded_int(1, MAX_EXAMPLES)  # examples, sequences, samples
batch_size = bounded_int(1, MAX_BATCH)
lengths = int_list(1, MAX_LENGTH)
probability = bounded_float(0.0, 1.0)
positive = bounded_float(0.0, math.inf, open_lo=True)  # finite and > 0


# ---------------------------------------------------------------------------- model context
def context_of(model) -> int | None:
    """The longest sequence ``model`` takes: a position table's size (a pretrained
    transformer's ``n_ctx``); None where nothing bounds it (recurrences, state-space models,
    and the suite's positional encodings, none of which has a table: ``models.base``)."""
    if getattr(model.cfg, "is_stateful", False):
        return None
    n_ctx = int(getattr(model.cfg, "n_ctx", N_CTX_UNBOUNDED))
    return None if n_ctx >= N_CTX_UNBOUNDED else n_ctx


def check_context(model, tokens: Iterable[int], what: str, name: str = "the model",
                  flag: str = "--lengths") -> None:
    """One line unless every sequence of ``tokens`` (the token counts the lengths of ``flag``
    feed, prompt and answer) fits ``model``'s context; ``what`` says how they were counted."""
    limit = context_of(model)
    longest = max(tokens, default=0)
    check(limit is None or longest <= limit, f"{flag}: {what} is {longest} tokens, beyond "
          f"{name}'s context of {limit}; give shorter {flag}")
