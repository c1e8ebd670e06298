"""A memorization run's cells: the grid row of a (level, data, labels_per) (the rows and grids
themselves are the paper's settings, in their one home :mod:`analyses.zoo.memorization`), the
parameter count of a cell's model, and the run (:class:`~models.train.runconfig.RunConfig`) of
each cell."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyses.zoo.memorization import (  # noqa: F401 - the grid's settings, read from here too
    FRACTIONS,
    GRIDS,
    LARGE_SIZES,
    TABLE,
    THRESHOLD,
    GridRow,
    Long,
    Search,
)
from seqprobe.config import check
from tasks.memorization import REAL_LABELS_PER

if TYPE_CHECKING:
    from models.train.runconfig import Builder, RunConfig

# What builds a run (models.train.build) is imported where a cell's run is built: the claims
# (FIGURE) and the command line read this module, and --help reads no training code.
NAME = "memorization"
ARCH = "transformer"
METHOD = "max_n"  # the Search.method of a row searched per width (analyses.memorization.inverse)

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


def grid_settings(level: str, data: str, labels_per: str) -> GridRow:
    """The GRIDS row of (level, data, labels_per), with a clear error for a missing one."""
    check(data in ("synthetic", *REAL_LABELS_PER), f"data must be synthetic, conll or mnli, got "
          f"{data!r}")
    if data in REAL_LABELS_PER:
        check(labels_per == REAL_LABELS_PER[data], f"--data {data} has labels per "
              f"{REAL_LABELS_PER[data]}; use --labels-per {REAL_LABELS_PER[data]}")
    key = (level, data, labels_per)
    check(key in GRIDS, f"no grid for level={level}, data={data}, labels_per={labels_per}")
    return GRIDS[key]


@dataclass(frozen=True)
class CellSpace:
    """What every cell of one run shares (its grid row under the caller's overrides); a cell
    adds its width, its dataset fraction and, in a search, its seed and step budget."""

    data: str
    labels_per: str
    level: str
    task_config: dict[str, Any]  # carries ``data`` and ``level`` (the label level)
    model: dict[str, Any]
    train: dict[str, Any]

    @classmethod
    def of(cls, data: str, labels_per: str, level: str, task_config: dict | None = None,
           model: dict | None = None, train: dict | None = None) -> CellSpace:
        """The grid row of (level, data, labels_per) with ``task_config`` / ``model`` /
        ``train`` on top."""
        grid = grid_settings(level, data, labels_per)
        return cls(data, labels_per, level,
                   {**grid.task, **(task_config or {}), "data": data, "labels_per": labels_per},
                   {**grid.model, **(model or {})}, {**grid.train, **(train or {})})

    @property
    def name(self) -> str:
        """The output stem: token and sequence grids share an output folder."""
        return f"{NAME}_{self.data}_{self.labels_per}"

    def run_config(self, width: int, fraction: float, seed: int | None = None,
                   steps: int | None = None) -> RunConfig:
        """The run of one cell: ``seed`` (a search's) seeds the data set and the
        initialisation; ``steps`` replaces the step budget. make_run_config checks the width
        against n_heads (m = h·k) and every config before any training."""
        from models.train.build import make_run_config

        per_seed = {} if seed is None else {"seed": seed}
        return make_run_config(ARCH, "memorization", self.level,
                               model={**self.model, "d_model": width},
                               task_config={**self.task_config, **per_seed,
                                            "fraction": fraction},
                               train={**self.train, **per_seed,
                                      **({} if steps is None else {"steps": steps})},
                               table=TABLE)


def expected_cells(level: str, data: str = "synthetic",
                   labels_per: str = "token") -> list[tuple[float, Builder]]:
    """The cells an inverted search (``max_n``) of ``level`` is expected to train, as
    ``(count, RunConfig builder)`` per width: every seed's bisection over the ladder probes
    about log2 of its length plus one N, costed at the ladder's middle N with the full step
    budget (a probe that fails runs all of it). Empty for the other levels: their grids are
    timed by real runs (the step-cost table's analysis rows)."""
    grid = grid_settings(level, data, labels_per)
    if grid.search is None or grid.search.method != "max_n":
        return []
    space = CellSpace.of(data, labels_per, level)
    sizes = grid.search.n_examples
    probes = math.ceil(math.log2(len(sizes) + 1))
    middle = sizes[len(sizes) // 2] / grid.task["n_examples"]
    return [(float(grid.search.seeds * probes),
             (lambda m=m: space.run_config(m, middle, seed=0)))
            for m in grid.widths]


def dry_run_cells(level: str, data: str = "synthetic", labels_per: str = "token",
                  task_config: dict | None = None) -> list[tuple[str, Builder]]:
    """The grid's largest and smallest cells as ``(label, RunConfig builder)`` for ``--dry-run``
    (the widest model on all N examples, the narrowest on the fewest; every other cell's step
    lies between theirs; the largest with a search row's longer budget, if any).
    ``task_config`` overrides the grid's (a data file, N)."""
    grid = grid_settings(level, data, labels_per)
    long = grid.search.long if grid.search else None
    space = CellSpace.of(data, labels_per, level, task_config)

    def cell(m: int, f: float, factor: int = 1) -> Builder:
        def build() -> RunConfig:
            run_config = space.run_config(m, f)
            if factor == 1:
                return run_config
            return space.run_config(m, f, steps=run_config.train.steps * factor)
        return build

    smallest = (min(grid.search.n_examples) / grid.task["n_examples"]
                if grid.search else min(FRACTIONS))
    largest = long.factor if long and long.largest else 1
    return [(f"{space.name}/m{m}_f{f:g}", cell(m, f, factor))
            for m, f, factor in ((max(grid.widths), max(FRACTIONS), largest),
                                 (min(grid.widths), smallest, 1))]
