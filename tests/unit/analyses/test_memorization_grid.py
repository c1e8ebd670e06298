"""The memorization grid table (rows of GridRow) and the keys of its cells: a cell's run is a
RunConfig, and the key a saved cell is found by never moves (saved cells stay reusable)."""

import dataclasses

import pytest

from analyses.memorization import cells as mem_cells
from analyses.memorization import grid as mem_grid
from models.train.runconfig import RunConfig

# cell_key of three cells, recorded at 2473091 (before a cell's run became a RunConfig):
# (level, data, labels_per), width, fraction, seed / steps of a search cell, threshold, patience
PINNED = [
    (("quick", "synthetic", "token"), 4, 0.1, {}, 0.005, 10, "e9d3d41256ca0e1a"),
    (("quick", "synthetic", "sequence"), 16, 1.0, {}, 0.005, 10, "1a2e91cc95313f91"),
    (("medium", "synthetic", "token"), 48, 1.0, {"seed": 3, "steps": 77}, 0.005, 6,
     "5c02f8d86527789b"),
]


@pytest.mark.parametrize(("row", "m", "f", "search", "threshold", "patience", "key"), PINNED)
def test_a_cells_key_never_moves(row, m, f, search, threshold, patience, key):
    level, data, labels_per = row
    run_config = mem_grid.CellSpace.of(data, labels_per, level).run_config(m, f, **search)
    assert isinstance(run_config, RunConfig)
    assert (run_config.model.d_model, run_config.task.fraction) == (m, f)
    assert mem_cells.cell_key(run_config, threshold, patience) == key
    assert mem_cells.cell_key(run_config, threshold, patience + 1) != key  # the key can fail


def test_the_table_is_rows_of_frozen_dataclasses():
    for (level, data, labels_per), row in mem_grid.GRIDS.items():
        assert isinstance(row, mem_grid.GridRow) and mem_grid.grid_settings(level, data,
                                                                            labels_per) is row
        assert row.widths == tuple(sorted(row.widths)) and row.patience >= 0
        if row.search is not None:
            assert max(row.search.n_examples) <= row.task["n_examples"]
    medium = mem_grid.GRIDS["medium", "synthetic", "token"]
    assert medium.search.seeds == 2 and medium.search.long is None  # side by side on 2 cores
    with pytest.raises(dataclasses.FrozenInstanceError):
        medium.patience = 3


def test_a_rows_overrides_reach_its_cells():
    space = mem_grid.CellSpace.of("synthetic", "token", "medium", model={"n_layers": 1})
    run_config = space.run_config(5, 0.5)
    model = run_config.model
    assert (model.n_heads, model.n_layers) == (1, 1)  # the row's, then the caller's
    assert (run_config.train.batch_size, run_config.train.steps) == (1024, 8000)
    assert run_config.task.n_examples == 512 and "d_model" in run_config.model_keys
