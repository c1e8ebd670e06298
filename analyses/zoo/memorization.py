"""The memorization paper's settings (Kim et al., §5, Figs. 1 and 2, App. F): its level rows
(:data:`TABLE`) and its grids (:data:`GRIDS`: which cells a memorization run trains, per level,
data set and ``labels_per``, what one label belongs to). Its models are the cells that
:mod:`analyses.memorization` trains itself, not recipes served by name: :func:`recipes` yields
none."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from analyses.zoo.recipe import Recipe
from models.levels import LevelTable
from seqprobe.config import check

# Encoder classifiers, d_mlp = 4m (q/m = 4), k = m/h; RoPE gives positions with no extra
# parameters (analyses/memorization/ says why). analyses.memorization varies d_model.
TABLE = LevelTable.of({
    # Quick: lr 1e-2 with linear decay, no weight decay (it works against memorising); a
    # smaller step size needed about twice the steps to memorise the quick grid.
    ("quick", "memorization", "*"): {
        "train": {"steps": 2000, "batch_size": 256, "lr": 1e-2, "warmup_steps": 100,
                  "schedule": "linear", "weight_decay": 0.0, "grad_clip": 1.0, "eval_every": 50},
    },
    ("quick", "memorization", "transformer"): {
        "model": {"d_model": 16, "n_layers": 2, "n_heads": 2, "pe": "rope"},
    },
    # Paper §5.1 / App. F: L = 6, h = 12, m/k = 12, q/m = 4; Adam lr 2e-5, batch 32, no weight
    # decay (dropout 10 % in the paper; the suite's transformer has none).
    ("paper", "memorization", "*"): {
        "train": {"steps": 7500, "batch_size": 32, "lr": 2e-5, "warmup_steps": 0,
                  "schedule": "linear", "weight_decay": 0.0, "eval_every": 250},
    },
    ("paper", "memorization", "transformer"): {
        "model": {"d_model": 120, "n_layers": 6, "n_heads": 12, "pe": "rope"},
    },
})
THRESHOLD = 0.005  # App. F: "the smallest model that reaches the training error 0.005"
FRACTIONS = tuple(round(0.1 * i, 1) for i in range(1, 11))  # App. F: p = 10, 20, …, 100 %


@dataclass(frozen=True)
class Long:
    """A search's longer step budget at its largest N: the ``largest`` largest N train
    ``factor`` times the row's steps (``largest`` 0: none)."""

    largest: int
    factor: int

    def __post_init__(self):
        check(self.largest >= 0 and self.factor >= 1,
              f"long needs largest >= 0 and factor >= 1, got {self}")


@dataclass(frozen=True)
class Search:
    """A row trained by search (:func:`~analyses.memorization.search.search_min_width`) instead
    of as a full grid: the dataset sizes N (nested prefixes of the row's set), how many seeds,
    and an optional longer budget at the largest N."""

    n_examples: tuple[int, ...]
    seeds: int = 1
    long: Long | None = None
    # "min_width": per N, the smallest memorising width (medium); "max_n": per width, the
    # largest memorised N of the ``n_examples`` ladder (large; analyses.memorization.inverse)
    method: str = "min_width"

    def __post_init__(self):
        check(self.method in ("min_width", "max_n"),
              f"search method must be min_width or max_n, got {self.method!r}")


@dataclass(frozen=True)
class GridRow:
    """One (level, data, labels_per) of :data:`GRIDS`: the task config (on top of the rows of
    :data:`TABLE`), the widths m, the stopping rule's patience, overrides of the model and
    training rows, and the search that replaces the full grid, if any."""

    task: Mapping[str, Any]
    widths: tuple[int, ...]
    patience: int
    model: Mapping[str, Any] = field(default_factory=dict)
    train: Mapping[str, Any] = field(default_factory=dict)
    search: Search | None = None


# The large row's dataset sizes: 8 a doubling from 8 to 4096 (what
# analyses.memorization.inverse.n_ladder(8, 4096, 8) gives; tests check it).
LARGE_SIZES = tuple(sorted({round(8 * 2 ** (i / 8)) for i in range(73)}))

# Model shape (L, h, q = 4m) comes from TABLE's rows; only the width varies here. Quick sizes
# keep the synthetic grids CPU-sized, with widths chosen to straddle the memorization boundary
# (the narrowest models fail to memorise the full set at the quick step budget, the widest do
# not).
GRIDS: dict[tuple[str, str, str], GridRow] = {
    # 256 sequences of 8 tokens, 4 classes: 2048 labels of 2 bits at 100 %.
    ("quick", "synthetic", "token"): GridRow(
        task={"n_examples": 256, "seq_len": 8, "vocab": 16, "n_classes": 4},
        widths=(4, 6, 8, 10, 12, 16), patience=10),
    # 512 sequences of 8 tokens, 8 classes: 512 labels of 3 bits at 100 %.
    ("quick", "synthetic", "sequence"): GridRow(
        task={"n_examples": 512, "seq_len": 8, "vocab": 16, "n_classes": 8},
        widths=(4, 6, 8, 10, 12, 16), patience=10),
    ("quick", "conll", "token"): GridRow(
        task={"n_examples": 200, "max_len": 32}, widths=(8, 16, 24, 32, 48), patience=10),
    ("quick", "mnli", "sequence"): GridRow(
        task={"n_examples": 400, "max_len": 48}, widths=(8, 16, 24, 32, 48), patience=10),
    # Medium: Fig. 2 as a test of shape. Nine dataset sizes, geometric over
    # 32x in N (nested prefixes of one set of 512), and at each the smallest memorising width
    # found by a search per seed (:func:`search_min_width`), not a full grid: a grid fine
    # enough to resolve the boundary at every N would cost several times more. One head
    # (k = m) so that every integer width is allowed: the ladder's steps are a few per cent of
    # the parameter count, not the 25-50 % of even widths at the small end. Full batch at
    # every N (batch 1024 >= N): each N gets the same number of passes over its whole set, so
    # a larger set is not also a less-trained one (the step budget is the quick row's).
    # The step budget is four times the quick row's at every N (the smallest
    # memorising width still falls with more steps, so the budget, not only the capacity, sets
    # it; a longer budget at only the largest N bent the curve where the budget changed, so the
    # budget is uniform). N stops at 512: a failing probe runs the whole budget, near the
    # boundary a memorising one most of it, and a step's cost grows with N, so N up to 1024
    # would cost several times the run's allowance. Two seeds (a verdict with its
    # spread): each seed's search is one process, so the plan's two cores run them side by
    # side, where one seed left a core idle; the exponent's interval resamples the N and the
    # seeds within each. (A search's optional ``long`` trains only the largest N longer:
    # :class:`Long`.)
    ("medium", "synthetic", "token"): GridRow(
        task={"n_examples": 512, "seq_len": 8, "vocab": 16, "n_classes": 4},
        model={"n_heads": 1}, train={"batch_size": 1024, "steps": 8000},
        widths=(*range(2, 17), *range(18, 33, 2), 36, 40, 44, 48),
        search=Search(n_examples=(16, 25, 38, 59, 91, 140, 215, 332, 512), seeds=2),
        patience=10),
    # Large: the search inverted — for each of 8 widths spanning ~30x in
    # parameters (geometric in the parameter count, widths 4..26), the largest N memorised,
    # bisected over a ladder of 8 sizes a doubling (~9 % apart) up to 4096 nested prefixes of
    # one set per seed: the parameter count of each point is exact, where medium's width
    # ladder quantised it. Medium's task, one head, full batch (4096 >= N) and its uniform
    # 8,000-step budget (the budget sets the boundary, so it is the same at every
    # cell). Two seeds; every (width, seed) search is one process on one CPU core.
    ("large", "synthetic", "token"): GridRow(
        task={"n_examples": 4096, "seq_len": 8, "vocab": 16, "n_classes": 4},
        model={"n_heads": 1}, train={"batch_size": 4096, "steps": 8000},
        widths=(4, 5, 7, 9, 12, 15, 20, 26),
        search=Search(n_examples=LARGE_SIZES, seeds=2, method="max_n"), patience=10),
    # Paper (§5.1, App. F): 14,000 CoNLL sentences, widths m = 12, 24, …; 50,000 MNLI pairs,
    # m = 96, 192, …; 1,500 / 7,500 steps. Sized for a GPU.
    ("paper", "conll", "token"): GridRow(
        task={"n_examples": 14000, "max_len": 128}, widths=tuple(range(12, 121, 12)),
        train={"steps": 1500}, patience=6),
    ("paper", "mnli", "sequence"): GridRow(
        task={"n_examples": 50000, "max_len": 128}, widths=tuple(range(96, 961, 96)),
        train={"steps": 7500}, patience=6),
    # Synthetic analogues of the paper's sizes (CoNLL sentences average ~14 tokens).
    ("paper", "synthetic", "token"): GridRow(
        task={"n_examples": 14000, "seq_len": 16, "vocab": 1000, "n_classes": 9},
        widths=tuple(range(12, 121, 12)), train={"steps": 1500}, patience=6),
    ("paper", "synthetic", "sequence"): GridRow(
        task={"n_examples": 50000, "seq_len": 32, "vocab": 1000, "n_classes": 3},
        widths=tuple(range(96, 961, 96)), train={"steps": 7500}, patience=6),
}


def recipes() -> Iterator[Recipe]:
    """None: the memorization cells are trained by :mod:`analyses.memorization` (a grid or a
    search over widths and dataset sizes), not served by name."""
    yield from ()
