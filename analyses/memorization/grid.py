"""The grids: which cells a memorization run trains (a table of :class:`GridRow` per preset,
data set and label level), the parameter count of a cell's model, and the run
(:class:`~models.train.runconfig.RunConfig`) of each cell."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from models.train.build import make_run_config
from models.train.runconfig import Builder, RunConfig
from seqprobe.config import check
from tasks.memorization import REAL_LEVEL

NAME = "memorization"
ARCH = "transformer"
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
    """One (preset, data, level) of :data:`GRIDS`: the task config (on top of the preset rows of
    models/train/levels.py), the widths m, the stopping rule's patience, overrides of the
    model and training rows, and the search that replaces the full grid, if any."""

    task: Mapping[str, Any]
    widths: tuple[int, ...]
    patience: int
    model: Mapping[str, Any] = field(default_factory=dict)
    train: Mapping[str, Any] = field(default_factory=dict)
    search: Search | None = None


# The large row's dataset sizes: 8 a doubling from 8 to 4096 (what
# analyses.memorization.inverse.n_ladder(8, 4096, 8) gives; tests check it).
LARGE_SIZES = tuple(sorted({round(8 * 2 ** (i / 8)) for i in range(73)}))

# Model shape (L, h, q = 4m) comes from the preset rows; only the width varies here. Quick sizes
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
    # Medium (issues 21, 27): Fig. 2 as a test of shape. Nine dataset sizes, geometric over
    # 32x in N (nested prefixes of one set of 512), and at each the smallest memorising width
    # found by a search per seed (:func:`search_min_width`), not a full grid: a grid fine
    # enough to resolve the boundary at every N would cost several times more. One head
    # (k = m) so that every integer width is allowed: the ladder's steps are a few per cent of
    # the parameter count, not the 25-50 % of even widths at the small end. Full batch at
    # every N (batch 1024 >= N): each N gets the same number of passes over its whole set, so
    # a larger set is not also a less-trained one (the step budget is the quick row's).
    # The step budget is four times the quick row's at every N (issue 27: the smallest
    # memorising width still falls with more steps, so the budget, not only the capacity, sets
    # it; a longer budget at only the largest N bent the curve where the budget changed, so the
    # budget is uniform). N stops at 512: a failing probe runs the whole budget, near the
    # boundary a memorising one most of it, and a step's cost grows with N, so N up to 1024
    # would cost several times the run's allowance. Two seeds (issue 27: a verdict with its
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
    # Large (issue 36 §2): the search inverted — for each of 8 widths spanning ~30x in
    # parameters (geometric in the parameter count, widths 4..26), the largest N memorised,
    # bisected over a ladder of 8 sizes a doubling (~9 % apart) up to 4096 nested prefixes of
    # one set per seed: the parameter count of each point is exact, where medium's width
    # ladder quantised it. Medium's task, one head, full batch (4096 >= N) and its uniform
    # 8,000-step budget (issue 27: the budget sets the boundary, so it is the same at every
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

PARAM_COUNTING = (
    "params_total: every trainable parameter (token embedding |V|*m, blocks, final LayerNorm, "
    "classifier head m*C + C); params_non_embedding: the same without the token embedding "
    "and the classifier head (SuiteModel.n_params(embeddings=False)); RoPE has no parameters")


def param_count(d_model: int, n_layers: int, vocab_size: int, n_classes: int, d_mlp: int = 0,
                embeddings: bool = True) -> int:
    """Closed-form parameter count of the suite's transformer classifier (LayerNorm, biases).

    Per block (m = d_model = h·k, q = d_mlp): two LayerNorms 2·2m; W_Q, W_K, W_V, W_O 4m²;
    their biases 3m + m; the MLP 2mq + q + m. Plus the final LayerNorm 2m and, with
    ``embeddings``, the token embedding |V|·m and the head m·C + C.
    """
    m, q = d_model, d_mlp or 4 * d_model
    block = 4 * m + 4 * m * m + 4 * m + 2 * m * q + q + m
    total = n_layers * block + 2 * m
    if embeddings:
        total += vocab_size * m + m * n_classes + n_classes
    return total


def grid_settings(preset: str, data: str, level: str) -> GridRow:
    """The GRIDS row of (preset, data, level), with a clear error for a missing one."""
    check(data in ("synthetic", *REAL_LEVEL), f"data must be synthetic, conll or mnli, got "
          f"{data!r}")
    if data in REAL_LEVEL:
        check(level == REAL_LEVEL[data], f"--data {data} is {REAL_LEVEL[data]}-level; "
              f"use --task {REAL_LEVEL[data]}")
    key = (preset, data, level)
    check(key in GRIDS, f"no grid for preset={preset}, data={data}, task={level}")
    return GRIDS[key]


@dataclass(frozen=True)
class CellSpace:
    """What every cell of one run shares (its grid row under the caller's overrides); a cell
    adds its width, its dataset fraction and, in a search, its seed and step budget."""

    data: str
    level: str
    preset: str
    task_config: dict[str, Any]  # carries ``data`` and ``level``
    model: dict[str, Any]
    train: dict[str, Any]

    @classmethod
    def of(cls, data: str, level: str, preset: str, task_config: dict | None = None,
           model: dict | None = None, train: dict | None = None) -> CellSpace:
        """The grid row of (preset, data, level) with ``task_config`` / ``model`` /
        ``train`` on top."""
        grid = grid_settings(preset, data, level)
        return cls(data, level, preset,
                   {**grid.task, **(task_config or {}), "data": data, "level": level},
                   {**grid.model, **(model or {})}, {**grid.train, **(train or {})})

    @property
    def name(self) -> str:
        """The output stem: token and sequence grids share an output folder."""
        return f"{NAME}_{self.data}_{self.level}"

    def spec(self, width: int, fraction: float, seed: int | None = None,
             steps: int | None = None) -> RunConfig:
        """The run of one cell: ``seed`` (a search's) seeds the data set and the
        initialisation; ``steps`` replaces the step budget. make_run_config checks the width
        against n_heads (m = h·k) and every config before any training."""
        per_seed = {} if seed is None else {"seed": seed}
        return make_run_config(ARCH, "memorization", self.preset,
                         model={**self.model, "d_model": width},
                         task_config={**self.task_config, **per_seed, "fraction": fraction},
                         train={**self.train, **per_seed,
                                **({} if steps is None else {"steps": steps})})


def dry_run_cells(preset: str, data: str = "synthetic", level: str = "token",
                  task_config: dict | None = None) -> list[tuple[str, Builder]]:
    """The grid's largest and smallest cells as ``(label, spec builder)`` for ``--dry-run``
    (the widest model on all N examples, the narrowest on the fewest; every other cell's step
    lies between theirs; the largest with a search row's longer budget, if any).
    ``task_config`` overrides the grid's (a data file, N)."""
    grid = grid_settings(preset, data, level)
    long = grid.search.long if grid.search else None
    space = CellSpace.of(data, level, preset, task_config)

    def cell(m: int, f: float, factor: int = 1) -> Builder:
        def build() -> RunConfig:
            spec = space.spec(m, f)
            return spec if factor == 1 else space.spec(m, f, steps=spec.train.steps * factor)
        return build

    smallest = (min(grid.search.n_examples) / grid.task["n_examples"]
                if grid.search else min(FRACTIONS))
    largest = long.factor if long and long.largest else 1
    return [(f"{space.name}/m{m}_f{f:g}", cell(m, f, factor))
            for m, f, factor in ((max(grid.widths), max(FRACTIONS), largest),
                                 (min(grid.widths), smallest, 1))]
