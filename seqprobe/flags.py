"""Numeric command-line flags, checked when they are parsed (issue 29 item 14, issue 39 item 2):
every number any command takes (``models.train``'s per-field flags, ``models.train.launch``,
``analyses.zoo``, ``analyses.reproduce``, every analysis and benchmark) has a row in one table,
:data:`BOUNDS` (flag name -> range and why), and its argparse ``type=`` is that row's parser,
:func:`flag`. A bad value is one line and exit 2 (:class:`seqprobe.cli.OneLineParser`) before
any model is loaded or any tensor allocated, never a silent default or a request the allocator
refuses. ``tests/test_flag_table.py`` builds every command's parser and fails on a numeric flag
whose type is not a row of :data:`BOUNDS`.

The upper bounds keep one command within a machine: they are far above the papers' settings
(the figure a bound guards is in its row's ``why``) and far below what would exhaust memory or
run for days. A product of in-range values can still be too large; that is the memory estimate's
job, not a bound's. Sequence lengths are also checked against the loaded model's context
(:func:`check_context`), once the model is known and before any prompt is built.

Lives in ``models`` (the lowest layer with a command line) so that ``analyses.zoo``,
``seqprobe.sweep`` and every analysis share it.
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from seqprobe.config import check
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
MAX_JOBS = 1024  # parallel workers / CPUs of a local Ray instance
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


# ---------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Bound:
    """One row of :data:`BOUNDS`. ``kind``: ``int`` or ``float`` (one value), ``ints`` or
    ``floats`` (comma-separated; ``floats`` also takes fractions such as ``1/4``); the range
    ``[lo, hi]`` (``(lo, hi]`` with ``open_lo``); ``why``: the reason, said with a refused
    value; ``allow_empty``: a list flag may be given empty."""

    kind: str
    lo: float
    hi: float
    why: str
    open_lo: bool = False
    allow_empty: bool = False

    def __post_init__(self):
        check(self.kind in ("int", "float", "ints", "floats"), f"bad Bound kind {self.kind!r}")
        check(self.lo <= self.hi, f"Bound [{self.lo}, {self.hi}] is empty")


def _int(lo: int, hi: int, why: str) -> Bound:
    return Bound("int", lo, hi, why)


def _float(lo: float, hi: float, why: str, open_lo: bool = False) -> Bound:
    return Bound("float", lo, hi, why, open_lo)


MAX_LR = 10.0  # Adam's step is about lr per weight: beyond 10 every run diverges at step 1
MAX_EVAL_BATCHES = 10_000  # batches of one evaluation (the suite's presets: 4 to 64)
MAX_WIDTH_MULT = 64  # Mamba's expand (the papers: 2)
MAX_CONV = 1024  # a causal convolution's width (the papers: 2 to 4)
MAX_ORDER = 20  # Markov order k: S^k contexts, which the task caps at 2^20 (papers: 1 to 3)
MAX_SCALE = 1e6  # a positive model constant (init scale, Dirichlet beta, rope base / 1e6 ...)
_STEPS = "training steps of one run; papers: up to 10^5"
_WIDTH = "a width the model allocates per layer; papers: up to 2,048"
_EPS = "a norm's epsilon: positive, at most 1"

# Every numeric flag of every command: the flag's name (a command's own meaning of a name that
# another command uses otherwise: "COMMAND --flag") -> its range and why. models.train's flags
# are its configs' fields, one row per field: --train.F, --model.F, --task.F (--F and --f-g are
# other spellings of the same flag).
BOUNDS: dict[str, Bound] = {
    # ------------------------------------------------ models.train: TrainConfig
    "--train.steps": _int(1, MAX_STEPS, _STEPS),
    "--train.batch_size": _int(1, MAX_BATCH, "rows per step; the suite's presets: 4 to 512"),
    "--train.lr": _float(0.0, MAX_LR, "Adam's learning rate; papers: 1e-5 to 1e-2", True),
    "--train.weight_decay": _float(0.0, 100.0, "AdamW's decay; papers: 0 to 0.1"),
    "--train.beta1": _float(0.0, 1.0, "Adam's beta1; must be < 1"),
    "--train.beta2": _float(0.0, 1.0, "Adam's beta2; must be < 1"),
    "--train.warmup_steps": _int(0, MAX_STEPS, _STEPS),
    "--train.grad_clip": _float(0.0, 1e6, "a gradient norm; 0: no clipping; papers: 1"),
    "--train.context": _int(0, MAX_HORIZON, "tokens of a packed context; paper: 420"),
    "--train.eval_every": _int(0, MAX_STEPS, _STEPS),
    "--train.stop_at": _float(0.0, 1.0, "a string accuracy"),
    "--train.eval_batches": _int(1, MAX_EVAL_BATCHES, "batches of one evaluation"),
    "--train.eval_batch_size": _int(1, MAX_BATCH, "rows per evaluation batch"),
    "--train.save_every": _int(0, MAX_STEPS, _STEPS),
    "--train.seed": _int(0, MAX_SEED, "torch and numpy take a non-negative 63-bit seed"),
    "--train.micro_batch": _int(0, MAX_BATCH, "rows per micro-batch; 0: the whole batch"),
    # ------------------------------------------------ models.train: the model configs
    "--model.vocab_size": _int(1, MAX_DIM, "tokens of the vocabulary; tasks: up to 60"),
    "--model.d_model": _int(1, MAX_DIM, _WIDTH),
    "--model.d_mlp": _int(0, 4 * MAX_DIM, _WIDTH + "; 0: the arch's default"),
    "--model.n_layers": _int(1, MAX_LAYERS, "layers; papers: up to 24"),
    "--model.n_heads": _int(1, MAX_HEADS, "heads per layer; papers: up to 16"),
    "--model.n_groups": _int(1, MAX_HEADS, "B/C groups; papers: 1"),
    "--model.n_classes": _int(0, MAX_DIM, "classes of a classification head; 0: none"),
    "--model.hard_alibi_heads": _int(-1, MAX_HEADS, "Hard-ALiBi heads; -1: the default"),
    "--model.hard_alibi_windows": Bound("ints", 1, MAX_LENGTH, "windows in tokens",
                                        allow_empty=True),
    "--model.alibi_slopes": Bound("floats", 0.0, MAX_SCALE, "ALiBi slopes", allow_empty=True),
    "--model.rope_base": _float(0.0, 1e12, "RoPE's base; papers: 10^4", True),
    "--model.rotary_frac": _float(0.0, 1.0, "the rotated fraction of a head"),
    "--model.init_std": _float(0.0, MAX_SCALE, "an init scale; papers: 0.02"),
    "--model.ln_eps": _float(0.0, 1.0, _EPS, True),
    "--model.norm_eps": _float(0.0, 1.0, _EPS, True),
    "--model.l1_eps": _float(0.0, 1.0, _EPS, True),
    "--model.d_state": _int(1, MAX_DIM, "the SSM state size N; papers: up to 128"),
    "--model.d_conv": _int(1, MAX_CONV, "the causal conv's width; papers: 2 to 4"),
    "--model.expand": _int(1, MAX_WIDTH_MULT, "Mamba's expansion; papers: 2"),
    "--model.chunk_size": _int(1, MAX_LENGTH, "tokens per scan chunk; the suite: 64"),
    "--model.dt_rank": _int(0, MAX_DIM, "dt projection rank; 0: d_model / 16"),
    "--model.dt_min": _float(0.0, MAX_SCALE, "an initial step size; papers: 1e-3"),
    "--model.dt_max": _float(0.0, MAX_SCALE, "an initial step size; papers: 0.1"),
    "--model.dt_init_floor": _float(0.0, MAX_SCALE, "an initial step size; papers: 1e-4"),
    "--model.dt_scale": _float(0.0, MAX_SCALE, "the dt init scale; papers: 1"),
    "--model.unembed_bias_init": _float(-MAX_SCALE, MAX_SCALE, "an initial bias"),
    "--model.forget_bias": _float(-MAX_SCALE, MAX_SCALE, "the LSTM forget gate's bias"),
    "--model.num_filters": _int(1, MAX_DIM, "spectral filters K; the STU paper: 24"),
    "--model.filter_len": _int(1, MAX_HORIZON, "a spectral filter's length; STU paper: 2^14"),
    "--model.zero_embed": Bound("ints", 0, MAX_DIM, "token ids", allow_empty=True),
    # ------------------------------------------------ models.train: the task configs
    "--task.D": _int(2, MAX_DIM, "the alphabet, a token each; papers: 4 to 30"),
    "--task.S": _int(2, MAX_DIM, "Markov states; papers: 2 to 10"),
    "--task.order": _int(1, MAX_ORDER, "S^order contexts, at most 2^20"),
    "--task.beta": _float(0.0, MAX_SCALE, "the Dirichlet prior's beta; papers: 1", True),
    "--task.seq_len": _int(1, MAX_HORIZON, "tokens per sequence; papers: up to 2,048"),
    "--task.length": _int(1, MAX_HORIZON, "tokens per sequence; the STU paper: 2^14"),
    "--task.min_len": _int(1, MAX_LENGTH, "tokens per string; papers: up to 1,000"),
    "--task.max_len": _int(1, MAX_LENGTH, "tokens per string; papers: up to 1,000"),
    "--task.n": _int(1, MAX_N, "n of an n-gram; papers: up to 10"),
    "--task.k": _int(1, MAX_LENGTH, "tokens looked up"),
    "--task.n_entries": _int(1, MAX_ENTRIES, "phone-book entries; paper: up to 140"),
    "--task.n_shots": _int(0, MAX_ENTRIES, "phone-book shots; paper: 2"),
    "--task.p_switch": _float(0.0, 1.0, "a probability; must be < 1"),
    "--task.p_lo": _float(0.0, 1.0, "a probability"),
    "--task.p_hi": _float(0.0, 1.0, "a probability"),
    "--task.fraction": _float(0.0, 1.0, "a fraction of the dataset", True),
    "--task.n_examples": _int(1, MAX_EXAMPLES, "examples to memorize; paper: up to 10^5"),
    "--task.vocab": _int(2, MAX_DIM, "tokens of the vocabulary"),
    "--task.n_classes": _int(0, MAX_DIM, "labels; 0: the default"),
    "--task.seed": _int(0, MAX_SEED, "torch and numpy take a non-negative 63-bit seed"),
    # ------------------------------------------------ the suite's other commands
    "--seed": _int(0, MAX_SEED, "torch and numpy take a non-negative 63-bit seed"),
    "--jobs": _int(1, MAX_JOBS, "parallel workers"),
    "--retries": _int(0, MAX_RETRIES, "attempts after the first"),
    "--timeout": _float(0.0, MAX_SECONDS, "seconds; at most 30 days", True),
    "--nproc_per_node": _int(1, MAX_JOBS, "worker processes; at most the machine's cores, "
                                          "or its GPUs on a GPU machine"),
    # the environment's SEQPROBE_SEED_OFFSET takes the same range (analyses.zoo.MAX_SEED_OFFSET)
    "--seed-offset": _int(0, 1000, "a shift of every recipe's training seed"),
    "--steps": _int(1, MAX_STEPS, _STEPS),
    "--patience": _int(1, MAX_STEPS, _STEPS),
    "--batch-size": _int(1, MAX_BATCH, "rows per forward pass; defaults: 4 to 512"),
    "--lengths": Bound("ints", 1, MAX_LENGTH, "tokens per string"),
    "ngram_heads --lengths": Bound("ints", 2, MAX_LENGTH, "tokens per string (an n-gram match "
                                                          "needs two)"),
    "--seq-len": _int(1, MAX_LENGTH, "tokens per sequence"),
    "--t-min": _int(0, MAX_LENGTH, "a position"),
    "--buckets": _int(1, MAX_LENGTH, "position buckets"),
    "--n-examples": _int(1, MAX_EXAMPLES, "examples per point; papers: up to 1,280"),
    "memorization --n-examples": _int(0, MAX_EXAMPLES, "N, the dataset; 0: the whole file"),
    "--n-seqs": _int(1, MAX_EXAMPLES, "sequences per point"),
    "--n-eval": _int(1, MAX_EXAMPLES, "sequences per point"),
    "--model-samples": _int(1, MAX_EXAMPLES, "samples per point"),
    "--count-samples": _int(1, MAX_EXAMPLES, "samples per point"),
    "--max-rows": _int(1, MAX_ROWS, "samples of a linear probe"),
    "--entries": Bound("ints", 3, MAX_ENTRIES, "phone books need >= 3 entries: two shots and "
                                               "the query"),
    "--n": Bound("ints", 1, MAX_N, "n of an n-gram; papers: up to 10"),
    "--reference-n": Bound("ints", 1, MAX_N, "n of an n-gram", allow_empty=True),
    "--n-max": _int(1, MAX_N, "n of an n-gram"),
    "--D": _int(2, MAX_DIM, "the alphabet"),
    "--T": _int(2, MAX_HORIZON, "a dynamical system's horizon; the STU paper: 2^14"),
    "--k": _int(1, MAX_DIM, "spectral filters"),
    "--d-hidden": _int(1, MAX_DIM, _WIDTH),
    "--d-in": _int(1, MAX_DIM, _WIDTH),
    "--d-out": _int(1, MAX_DIM, _WIDTH),
    "--widths": Bound("ints", 1, MAX_DIM, _WIDTH),
    "spectral_lds --lr": _float(0.0, MAX_SCALE, "a step size in units of 1/E|X_t|^2", True),
    "--radius": _float(0.0, MAX_SCALE, "a spectral radius", True),
    "--alpha": _float(0.0, math.inf, "a ridge penalty: finite and > 0", True),
    "--qs": Bound("floats", 0.0, 1.0, "fractions of the length", True),
    "--fractions": Bound("floats", 0.0, 1.0, "fractions of the dataset", True),
    "--threshold": _float(0.0, 1.0, "a probability"),
    "--seeds": _int(1, MAX_SEEDS, "independently trained systems per point"),
    "--trajectory": _int(0, MAX_SEEDS, "a seed's index"),
    "--layer": _int(0, MAX_LAYERS, "a layer's index"),
    "--top-k": _int(1, MAX_HEADS, "heads"),
    "--draws": _int(1, MAX_DRAWS, "random repetitions of a control (default 10)"),
    # ------------------------------------------------ bench
    "--repeats": _int(1, MAX_DRAWS, "timed repetitions"),
    "--threads": _int(0, MAX_JOBS, "CPU threads; 0: leave as is"),
    "--budget-s": _float(0.0, MAX_SECONDS, "seconds", True),
    "--warm-steps": _int(0, MAX_STEPS, "untimed steps"),
    "--timed-steps": _int(1, MAX_STEPS, "timed steps"),
}


@functools.cache
def flag(row: str) -> Callable[[str], Any]:
    """The argparse ``type=`` of the flag whose :data:`BOUNDS` row is ``row`` (one parser per
    row; it carries ``.row``, which ``tests/test_flag_table.py`` checks)."""
    if row not in BOUNDS:
        raise KeyError(f"no row {row!r} in seqprobe.flags.BOUNDS: add one (range and why)")
    b = BOUNDS[row]
    if b.kind == "int":
        parse = bounded_int(int(b.lo), int(b.hi), b.why)
    elif b.kind == "float":
        parse = bounded_float(b.lo, b.hi, open_lo=b.open_lo, why=b.why)
    elif b.kind == "ints":
        parse = int_list(int(b.lo), int(b.hi), allow_empty=b.allow_empty, why=b.why)
    else:
        parse = fraction_list(b.lo, b.hi, open_lo=b.open_lo, allow_empty=b.allow_empty,
                              why=b.why)
    parse.row = row
    return parse


def check_value(row: str, value: Any, what: str) -> None:
    """Raise :class:`ConfigError` (one line naming ``what``) unless ``value``, a number or a
    tuple of numbers given in code or a stored record rather than as text, is in ``row``'s
    range: the same bound as the flag's."""
    b = BOUNDS[row]
    values = value if isinstance(value, (tuple, list)) else (value,)
    for v in values:
        low_ok = v > b.lo if b.open_lo else v >= b.lo
        if not (isinstance(v, (int, float)) and math.isfinite(v) and low_ok and v <= b.hi):
            side = "(" if b.open_lo else "["
            where = (f"{int(b.lo)}..{int(b.hi)}" if b.kind in ("int", "ints")
                     else f"in {side}{b.lo:g}, {b.hi:g}]")
            raise ConfigError(f"{what} {v!r} is out of range: must be {where} ({b.why})")


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
