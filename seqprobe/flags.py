"""Numeric settings and their flags, checked when they are parsed and when a config is built:
every number any command takes has a bound, declared once, where the value is declared.

* A config field's bound is the field's own metadata (``field(default=..., metadata=bound(lo,
  hi, why))``): a task's, a model's, :class:`models.train_config.TrainConfig`'s, and an
  analysis' settings (its options, and its per-level rows beside the paper's zoo table). A
  config class derives from :class:`Config`, which checks every bounded field when an instance
  is built, in code or from a stored record, as the flag does (``CopyConfig(D=10**7)`` is
  refused as ``--task.D 10000000`` is). ``python -m models.train``'s per-field flags
  (``--model.d_model``) and an analysis' flags (``seqprobe.cli.add_fields``: ``--n-seqs``) are
  made from the fields, their ``type=`` the field's parser (:func:`field_flag`).
* The few flags of commands that are not analyses (``models.train.launch``, ``analyses.zoo``,
  ``analyses.reproduce``, the benchmarks) and the flags every analysis shares (``--seed``,
  ``--jobs``, ``--steps``) have a row in :data:`BOUNDS` (flag name -> range and why), their
  ``type=`` that row's parser, :func:`flag`.

A bad value is one line and exit 2 (:class:`seqprobe.cli.OneLineParser`) before any model is
loaded or any tensor allocated, never a silent default or a request the allocator refuses.
``tests/contract/test_flag_table.py`` builds every command's parser and fails on a numeric flag that is
neither, and on a numeric config field without a bound (:func:`unbounded_fields`, naming the
class, the field and the metadata to add).

The upper bounds keep one command within a machine: they are far above the papers' settings
(the figure a bound guards is in its ``why``) and far below what would exhaust memory or run
for days. A product of in-range values can still be too large; that is the memory estimate's
job, not a bound's. Sequence lengths are also checked against the loaded model's context
(:func:`check_context`), once the model is known and before any prompt is built.

Lives in ``seqprobe`` (the bottom layer) so that the config classes of ``tasks`` and
``models``, ``analyses.zoo``, ``seqprobe.sweep`` and every analysis share it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from seqprobe.config import check, type_hints
from seqprobe.errors import ConfigError

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
MAX_WORKERS = 1024  # parallel workers / CPUs of a local Ray instance
MAX_RETRIES = 100
MAX_HEADS = 1 << 16  # heads (or SSM channels) of all layers together
MAX_LAYERS = 1024
MAX_DIM = 1 << 16  # a width: hidden state, features, filters, alphabet
MAX_HORIZON = 1 << 20  # a dynamical system's horizon T (the STU paper: 2^14)
MAX_ROWS = 10_000_000  # samples of a linear probe
MAX_SECONDS = 30 * 86400.0  # a wall-clock limit

N_CTX_UNBOUNDED = 2**31 - 1  # a model's n_ctx when no position table bounds its context


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


def bounded_float(lo: float, hi: float, *, open_lo: bool = False,
                  why: str = "") -> Callable[[str], float]:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``open_lo``); NaN and inf refused."""

    def parse(text: str) -> float:
        value = _parse(text.strip(), float, "a number")
        low_ok = value > lo if open_lo else value >= lo
        if not (math.isfinite(value) and low_ok and value <= hi):
            side = "(" if open_lo else "["
            raise argparse.ArgumentTypeError(f"{text.strip()} is out of range: must be a "
                                             f"finite number in {side}{lo:g}, {hi:g}]"
                                             + (f" ({why})" if why else ""))
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


def fraction_list(lo: float, hi: float, *, open_lo: bool = False, max_items: int = 256,
                  allow_empty: bool = False, why: str = "") -> Callable[[str], tuple[float, ...]]:
    """Comma-separated numbers or fractions in range (``"1/4,0.5"`` -> (0.25, 0.5)); at least
    one unless ``allow_empty``."""
    one = bounded_float(lo, hi, open_lo=open_lo, why=why)

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
        if not values and not allow_empty:
            raise argparse.ArgumentTypeError("give at least one number")
        if len(values) > max_items:
            raise argparse.ArgumentTypeError(f"{len(values)} values, more than {max_items}")
        return tuple(values)

    parse.__name__ = f"numbers {lo:g}..{hi:g}"
    return parse


# ---------------------------------------------------------------------------- bounds
KINDS = ("int", "float", "ints", "floats")


@dataclass(frozen=True)
class Bound:
    """A range and why: a row of :data:`BOUNDS`, or a config field's (:func:`bound`). ``kind``:
    ``int`` or ``float`` (one value), ``ints`` or ``floats`` (comma-separated; ``floats`` also
    takes fractions such as ``1/4``), or "" in a field's metadata (the field's annotation says:
    :func:`field_bound`); the range ``[lo, hi]`` (``(lo, hi]`` with ``open_lo``); ``why``: the
    reason, said with a refused value; ``allow_empty``: a list flag may be given empty."""

    kind: str
    lo: float
    hi: float
    why: str
    open_lo: bool = False
    allow_empty: bool = False

    def __post_init__(self):
        check(self.kind in ("", *KINDS), f"bad Bound kind {self.kind!r}")
        check(self.lo <= self.hi, f"Bound [{self.lo}, {self.hi}] is empty")


def _int(lo: int, hi: int, why: str) -> Bound:
    return Bound("int", lo, hi, why)


def _float(lo: float, hi: float, why: str, open_lo: bool = False) -> Bound:
    return Bound("float", lo, hi, why, open_lo)


MAX_LR = 10.0  # Adam's step is about lr per weight: beyond 10 every run diverges at step 1
MAX_EVAL_BATCHES = 10_000  # batches of one evaluation (the suite's levels: 4 to 64)
MAX_WIDTH_MULT = 64  # Mamba's expand (the papers: 2)
MAX_CONV = 1024  # a causal convolution's width (the papers: 2 to 4)
MAX_ORDER = 20  # Markov order k: S^k contexts, which the task caps at 2^20 (papers: 1 to 3)
MAX_SCALE = 1e6  # a positive model constant (init scale, Dirichlet beta, rope base / 1e6 ...)
STEPS_WHY = "training steps of one run; papers: up to 10^5"
WIDTH_WHY = "a width the model allocates per layer; papers: up to 2,048"
EPS_WHY = "a norm's epsilon: positive, at most 1"
SEED_WHY = "torch and numpy take a non-negative 63-bit seed"

# ---------------------------------------------------------------------------- config fields
BOUND = "bound"  # the field-metadata key of a config field's Bound


def bound(lo: float, hi: float, why: str, *, open_lo: bool = False, allow_empty: bool = False,
          **metadata: Any) -> dict[str, Any]:
    """A numeric config field's range and why, as dataclass field metadata (other metadata
    keys beside it: ``bound(0, 8, "rows", hash=False)``)::

        d_state: int = field(default=16, metadata=bound(1, MAX_DIM, "the SSM state size"))

    Its flag (``--model.d_state``), a run record and an export are checked against it; a
    subclass that only changes the default (``d_state: int = 2``) keeps its base's bound."""
    return {**metadata, BOUND: Bound("", lo, hi, why, open_lo, allow_empty)}


# bounds that several config classes share: a field of its own kind takes bound(...) directly
SEED_FIELD = bound(0, MAX_SEED, SEED_WHY)
VOCAB_FIELD = bound(1, MAX_DIM, "tokens of the vocabulary; tasks: up to 60")
WIDTH_FIELD = bound(1, MAX_DIM, WIDTH_WHY)
MLP_FIELD = bound(0, 4 * MAX_DIM, WIDTH_WHY + "; 0: the arch's default")
LAYERS_FIELD = bound(1, MAX_LAYERS, "layers; papers: up to 24")
EPS_FIELD = bound(0.0, 1.0, EPS_WHY, open_lo=True)
INIT_STD_FIELD = bound(0.0, MAX_SCALE, "an init scale; papers: 0.02")


def kind_of(tp: Any) -> str | None:
    """The :class:`Bound` kind of a field annotated ``tp`` (``int``, ``float | None``,
    ``tuple[int, ...]``); None where ``tp`` takes no number (bool is not one here)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = {kind_of(a) for a in typing.get_args(tp)} - {None}
        return kinds.pop() if len(kinds) == 1 else None
    if origin is tuple:
        inner = {kind_of(a) for a in typing.get_args(tp) if a is not Ellipsis}
        return {frozenset({"int"}): "ints", frozenset({"float"}): "floats"}.get(
            frozenset(inner))
    return {int: "int", float: "float"}.get(tp)


def field_bound(cls: type, name: str) -> Bound | None:
    """The bound of config field ``name`` of the dataclass ``cls``, its kind from the field's
    annotation: the field's metadata, or where a subclass redeclares the field without one (a
    new default), the nearest base class's; None where it has none."""
    kind = kind_of(type_hints(cls).get(name))
    for klass in cls.__mro__:
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        if f is not None and BOUND in f.metadata:
            return dataclasses.replace(f.metadata[BOUND], kind=kind or "float")
    return None


def unbounded_fields(cls: type) -> list[str]:
    """One line for each numeric field of the config dataclass ``cls`` that has no bound, or
    whose default is outside it, naming the class, the field and the metadata to add."""
    bad = []
    where = f"{cls.__module__}.{cls.__qualname__}"
    for f in dataclasses.fields(cls):
        tp = type_hints(cls).get(f.name)
        if not f.init or kind_of(tp) is None:
            continue
        b = field_bound(cls, f.name)
        name = getattr(tp, "__name__", str(tp))
        if b is None:
            default = "..." if f.default is dataclasses.MISSING else repr(f.default)
            bad.append(f"{where}.{f.name} ({name}) has no bound: declare it where the field "
                       f"is defined, `{f.name}: {name} = field(default={default}, "
                       "metadata=bound(LO, HI, \"why\"))` (seqprobe.flags.bound)")
        elif f.default is not dataclasses.MISSING and f.default is not None:
            try:
                check_in(b, f.default, f"{where}.{f.name}'s default")
            except ConfigError as e:
                bad.append(str(e))
    return bad


# The numeric flags that are no config or settings field (those take the field's own bound):
# the flag's name (a command's own meaning of a name another command uses otherwise:
# "COMMAND --flag") -> its range and why.
BOUNDS: dict[str, Bound] = {
    # ------------------------------------------------ the suite's other commands
    "--seed": _int(0, MAX_SEED, SEED_WHY),
    "--jobs": _int(1, MAX_WORKERS, "parallel workers"),
    "--retries": _int(0, MAX_RETRIES, "attempts after the first"),
    "--timeout": _float(0.0, MAX_SECONDS, "seconds; at most 30 days", True),
    "--nproc_per_node": _int(1, MAX_WORKERS, "worker processes; at most the machine's cores, "
                                          "or its GPUs on a GPU machine"),
    # the environment's SEQPROBE_SEED_OFFSET takes the same range (analyses.zoo.MAX_SEED_OFFSET)
    "--seed-offset": _int(0, 1000, "a shift of every recipe's training seed"),
    "--steps": _int(1, MAX_STEPS, STEPS_WHY),
    # ------------------------------------------------ bench
    "--repeats": _int(1, MAX_DRAWS, "timed repetitions"),
    "--threads": _int(0, MAX_WORKERS, "CPU threads; 0: leave as is"),
    "--budget-s": _float(0.0, MAX_SECONDS, "seconds", True),
    "--model-timeout-s": _float(0.0, MAX_SECONDS, "seconds each model may take", True),
    "--warm-steps": _int(0, MAX_STEPS, "untimed steps"),
    "--timed-steps": _int(1, MAX_STEPS, "timed steps"),
}


def parser(b: Bound, row: str) -> Callable[[str], Any]:
    """The argparse ``type=`` that reads one flag within ``b``; it carries ``.row`` (the
    flag's name in messages and in ``tests/contract/test_flag_table.py``) and ``.bound``."""
    check(b.kind in KINDS, f"{row}: a Bound of kind {b.kind!r} parses nothing")
    if b.kind == "int":
        parse = bounded_int(int(b.lo), int(b.hi), b.why)
    elif b.kind == "float":
        parse = bounded_float(b.lo, b.hi, open_lo=b.open_lo, why=b.why)
    elif b.kind == "ints":
        parse = int_list(int(b.lo), int(b.hi), allow_empty=b.allow_empty, why=b.why)
    else:
        parse = fraction_list(b.lo, b.hi, open_lo=b.open_lo, allow_empty=b.allow_empty,
                              why=b.why)
    parse.row, parse.bound = row, b
    return parse


@functools.cache
def flag(row: str) -> Callable[[str], Any]:
    """The argparse ``type=`` of the flag whose :data:`BOUNDS` row is ``row`` (one parser per
    row; it carries ``.row``, which ``tests/contract/test_flag_table.py`` checks)."""
    if row not in BOUNDS:
        raise KeyError(f"no row {row!r} in seqprobe.flags.BOUNDS: add one (range and why)")
    return parser(BOUNDS[row], row)


@functools.cache
def field_flag(cls: type, name: str, row: str) -> Callable[[str], Any] | None:
    """The argparse ``type=`` of config field ``name`` of ``cls`` given as the flag ``row``
    (``--model.d_model``): its :func:`field_bound`'s parser; None for a field without one."""
    b = field_bound(cls, name)
    if b is None:
        return None
    parse = parser(b, row)
    parse.settings_field = (cls, name)  # the field it was made from (tests/contract/test_flag_table.py)
    return parse


def check_in(b: Bound, value: Any, what: str) -> None:
    """Raise :class:`ConfigError` (one line naming ``what``) unless ``value``, a number or a
    tuple of numbers given in code or a stored record rather than as text, is in ``b``."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    for v in values:
        low_ok = isinstance(v, (int, float)) and (v > b.lo if b.open_lo else v >= b.lo)
        if not (low_ok and math.isfinite(v) and v <= b.hi):
            side = "(" if b.open_lo else "["
            where = (f"{int(b.lo)}..{int(b.hi)}" if b.kind in ("int", "ints")
                     else f"a finite number in {side}{b.lo:g}, {b.hi:g}]")  # as the flag says
            raise ConfigError(f"{what} {v!r} is out of range: must be {where} ({b.why})")


@functools.cache
def _bounded(cls: type) -> tuple[tuple[str, Bound], ...]:
    """The bounded init fields of the dataclass ``cls``: (name, bound) pairs, once per class."""
    return tuple((f.name, b) for f in dataclasses.fields(cls)
                 if f.init and (b := field_bound(cls, f.name)) is not None)


def check_bounds(cfg: Any) -> None:
    """:func:`check_in` of every bounded field of the config dataclass instance ``cfg``, each
    named ``Class.field`` in a refusal: the range its flag takes, for a config built in code."""
    where = type(cfg).__name__
    for name, b in _bounded(type(cfg)):
        value = getattr(cfg, name)
        if value is not None and not isinstance(value, (bool, str)):
            check_in(b, value, f"{where}.{name}")


class Config:
    """The base of every config dataclass with bounded fields (tasks', models', training's, an
    analysis' settings): building one checks each field against its :func:`bound`, in code as
    on the command line (``CopyConfig(D=10**7)`` is refused as ``--task.D 10000000`` is),
    before the class's own ``__post_init__`` checks (which then see in-range numbers only).

    A subclass's own ``__post_init__`` is wrapped when the class is made, so the check cannot
    be forgotten; it runs once per build, however deep the ``super().__post_init__()`` chain.
    No fields of its own: a config's fields, dicts and hashes are as they were."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is None or getattr(own, "_checks_bounds", False):
            return

        @functools.wraps(own)
        def __post_init__(self, *args):
            if type(self).__post_init__ is __post_init__:  # the outermost: check once
                check_bounds(self)
            own(self, *args)

        __post_init__._checks_bounds = True
        cls.__post_init__ = __post_init__

    def __post_init__(self):
        check_bounds(self)


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
