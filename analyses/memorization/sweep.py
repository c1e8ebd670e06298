"""Running a memorization grid or search: the cells (or one search per seed) as tasks on a
backend (:mod:`seqprobe.sweep`: local worker processes or Ray), each finished cell saved as it
lands and reused by the next run, then the statistics of :mod:`.stats`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import analyses.memorization.cells as cells  # the module: tests replace its run_cell
from analyses.memorization.cells import (
    CellSettings,
    CellStore,
    failed_cell,
    grid_cell_name,
)
from analyses.memorization.grid import (
    FRACTIONS,
    PARAM_COUNTING,
    THRESHOLD,
    CellSpace,
    grid_settings,
)
from analyses.memorization.inverse import METHOD, compute_max_n
from analyses.memorization.search import (
    SearchJob,
    run_search,
    search_run_configs,
    search_store_name,
    step_budgets,
)
from analyses.memorization.stats import summarise, summarise_search
from models.train.runconfig import RunConfig
from seqprobe.config import check, config_to_dict
from seqprobe.device import resolve_device
from seqprobe.sweep import Backend, Failed, failures, map_jobs

# What a landed result leaves: the (file name, cell) pairs to save, and the progress note.
Landed = Callable[[int, Any], tuple[list[tuple[str, dict]], dict | None]]


@dataclass(frozen=True)
class Ran:
    """The jobs' results in their order (a :class:`Failed` where a job failed on every
    attempt) and the wall time they took."""

    results: list[Any]
    wall: float

    def failed(self) -> list[int]:
        return failures(self.results)


def run_jobs(fn: Callable[..., Any], jobs: Sequence[tuple], backend: Backend, store: CellStore,
             landed: Landed, *, desc: str, progress: bool, done_before: int = 0) -> Ran:
    """The one scheduler of grids and searches: ``fn(*job)`` for every job on ``backend``;
    the cells of each result are saved in ``store`` as it lands (``landed(i, result)``), so a
    stopped run loses only the jobs in flight, and the caller's folder gets the cells of
    remote workers too."""

    def on_done(i: int, res: Any) -> dict | None:
        if isinstance(res, Failed):
            return None
        to_save, note = landed(i, res)
        for name, cell in to_save:
            store.save(name, cell)
        return note

    t0 = time.time()
    results = map_jobs(fn, jobs, backend, desc=desc, progress=progress,
                       done_before=done_before, on_done=on_done)
    return Ran(results, time.time() - t0)


def check_settings(fractions: tuple[float, ...], threshold: float, patience: int,
                   n_jobs: int) -> None:
    """The settings a grid and a search share, checked before any training."""
    check(all(0 < f <= 1 for f in fractions), f"fractions must be in (0, 1], got {fractions}")
    check(0 < threshold < 1, f"threshold must be in (0, 1), got {threshold}")
    check(patience >= 0, f"patience must be >= 0, got {patience}")
    check(n_jobs >= 1, f"n_jobs must be >= 1, got {n_jobs}")


def run_fields(space: CellSpace, settings: CellSettings, backend: Backend) -> dict[str, Any]:
    """The leading fields of a grid's or a search's JSON: what ran, how, where."""
    return {"data": space.data, "labels_per": space.labels_per, "level": space.level,
            "threshold": settings.threshold, "patience": settings.patience,
            "n_jobs": backend.workers, "backend": backend.describe(), "device": settings.device}


def run_record(run_config: RunConfig, wall: float, name: str, per_cell: tuple[str, ...]) -> dict:
    """The fields a grid's or a search's JSON shares: timing, the machine, how parameters are
    counted, and the config every cell shares (``run_config``'s, less the width and the
    ``per_cell`` fields that differ between cells)."""
    return {
        "wall_time_s": round(wall, 1), "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "param_counting": PARAM_COUNTING,
        "config": {"model": {k: v for k, v in run_config.model_dict.items() if k != "d_model"},
                   "task": {k: v for k, v in run_config.task_dict.items() if k not in per_cell},
                   "train": {k: v for k, v in config_to_dict(run_config.train).items()
                             if k not in per_cell}},
        "name": name,
    }


def compute(data: str = "synthetic", labels_per: str = "token", level: str = "quick",
            out_dir: str | Path = "figures/out", widths: tuple[int, ...] | None = None,
            fractions: tuple[float, ...] | None = None, task_config: dict | None = None,
            model: dict | None = None, train: dict | None = None, patience: int | None = None,
            threshold: float = THRESHOLD, n_jobs: int = 2, device: str = "cpu",
            fresh: bool = False, progress: bool = True,
            backend: Backend | None = None, seeds: int | None = None) -> dict[str, Any]:
    """Train the grid (resuming saved cells) and summarise it (Figs. 1 and 2); a grid with a
    ``search`` row (medium) runs :func:`compute_search` instead (``seeds``: how many).

    ``task_config`` / ``model`` / ``train`` override the level and grid rows. The cells run
    on ``backend`` (:mod:`seqprobe.sweep`; default: ``n_jobs`` local worker processes); each
    finished cell is saved under ``out_dir/memorization_{data}_{labels_per}_cells/`` as it lands
    and reused by the next call unless ``fresh``. A cell whose task fails on every attempt is
    listed in ``cells_failed`` (and marked ``failed`` in ``cells``); the others still run.
    """
    grid = grid_settings(level, data, labels_per)
    space = CellSpace.of(data, labels_per, level, task_config, model, train)
    patience = grid.patience if patience is None else patience
    store = CellStore(Path(out_dir) / f"{space.name}_cells", fresh)
    if grid.search and grid.search.method == METHOD:
        return compute_inverse(space, store, threshold=threshold, patience=patience,
                               n_jobs=n_jobs, device=device, progress=progress,
                               backend=backend, seeds=seeds, widths=widths)
    if grid.search:
        return compute_search(space, store, widths=widths, fractions=fractions,
                              threshold=threshold, patience=patience, n_jobs=n_jobs,
                              device=device, progress=progress, backend=backend, seeds=seeds)
    widths = tuple(sorted(widths or grid.widths))
    fractions = tuple(sorted(fractions or FRACTIONS))
    check(len(widths) >= 1 and len(fractions) >= 1, "need at least one width and one fraction")
    check_settings(fractions, threshold, patience, n_jobs)
    backend = backend or Backend(workers=n_jobs)
    settings = CellSettings(threshold, patience, str(resolve_device(device)))
    run_configs = {(f, m): space.run_config(m, f) for f in fractions for m in widths}
    store.open()
    done: dict[tuple[float, int], dict] = {}
    todo: list[tuple[float, int]] = []
    for (f, m), run_config in run_configs.items():
        cell = store.lookup(grid_cell_name(m, f), run_config, settings)
        if cell is not None:
            done[(f, m)] = cell
        else:
            todo.append((f, m))
    # Larger cells first: the slowest ones do not trail at the end.
    todo.sort(key=lambda fm: (-fm[0] * fm[1], fm))

    def landed(i: int, cell: dict) -> tuple[list[tuple[str, dict]], dict]:
        f, m = todo[i]
        return ([(grid_cell_name(m, f), cell)],
                {"m": m, "f": f, "err": f"{cell['train_error']:.3f}"})

    ran = run_jobs(cells.run_cell, [(run_configs[fm], settings) for fm in todo], backend, store,
                   landed, desc=space.name, progress=progress, done_before=len(done))
    for fm, res in zip(todo, ran.results, strict=True):
        done[fm] = failed_cell(run_configs[fm], res) if isinstance(res, Failed) else res
    result = summarise(done, list(fractions), list(widths), threshold, space.labels_per)
    result.update({
        **run_fields(space, settings, backend),
        "cells_trained": len(todo) - len(ran.failed()),
        "cells_reused": len(run_configs) - len(todo),
        "cells_failed": [{"fraction": todo[i][0], "d_model": todo[i][1],
                          "error": ran.results[i].error, "attempts": ran.results[i].attempts}
                         for i in ran.failed()],
        **run_record(next(iter(run_configs.values())), ran.wall, space.name, per_cell=("fraction",
                                                                                       )),
    })
    return result


def compute_inverse(space: CellSpace, store: CellStore, *, threshold: float, patience: int,
                    n_jobs: int, device: str, progress: bool, backend: Backend | None,
                    seeds: int | None, widths: tuple[int, ...] | None) -> dict[str, Any]:
    """Fig. 2 by the inverted search (:func:`~.inverse.compute_max_n`: per width the largest
    N memorised), with the fields every run's JSON has."""
    check_settings((), threshold, patience, n_jobs)
    backend = backend or Backend(workers=n_jobs)
    result = compute_max_n(space, store, run_jobs, threshold=threshold, patience=patience,
                           n_jobs=n_jobs, device=device, progress=progress, backend=backend,
                           seeds=seeds, widths=widths)
    settings = CellSettings(threshold, patience, str(resolve_device(device)))
    grid = grid_settings(space.level, space.data, space.labels_per)
    total = space.task_config["n_examples"]
    any_run_config = space.run_config(min(widths or grid.widths),
                                      min(grid.search.n_examples) / total,
                                      seed=space.task_config.get("seed", 0))
    result.update({**run_fields(space, settings, backend),
                   **run_record(any_run_config, result.pop("wall"), space.name,
                                per_cell=("fraction", "seed"))})
    return result


def compute_search(space: CellSpace, store: CellStore, *,
                   widths: tuple[int, ...] | None = None,
                   fractions: tuple[float, ...] | None = None, threshold: float = THRESHOLD,
                   patience: int = 10, n_jobs: int = 2, device: str = "cpu",
                   progress: bool = True, backend: Backend | None = None,
                   seeds: int | None = None) -> dict[str, Any]:
    """Fig. 2 by search (a grid with a ``search`` row): for each seed (data set and
    initialisation: ``space.task_config["seed"]`` + 0, 1, …) and each N, the smallest
    memorising width of the ladder (:func:`~.search.search_min_width`); then the fits of the
    parameter count against N (:func:`~.stats.summarise_search`). The seeds run as parallel
    tasks on ``backend``."""
    grid = grid_settings(space.level, space.data, space.labels_per)
    widths = tuple(sorted(widths or grid.widths))
    total = space.task_config["n_examples"]
    n_examples = (tuple(sorted({max(1, round(f * total)) for f in fractions})) if fractions
                  else tuple(n for n in grid.search.n_examples if n <= total))
    n_seeds = seeds or grid.search.seeds
    check(len(widths) >= 1 and len(n_examples) >= 1, "need at least one width and one N")
    check_settings(fractions or (), threshold, patience, n_jobs)
    check(n_seeds >= 1, f"seeds must be >= 1, got {n_seeds}")
    base_seed = space.task_config.get("seed", 0)
    # the search's seeds set the data's and the training's
    space = replace(space, task_config={k: v for k, v in space.task_config.items()
                                        if k != "seed"},
                    train={k: v for k, v in space.train.items() if k != "seed"})
    for n in n_examples:  # every RunConfig checked (widths against n_heads, N) before any training
        first = search_run_configs(space, widths, (n,), base_seed)
    budgets = step_budgets(n_examples, first[(n, widths[0])].train.steps,
                           grid.search.long)
    store.open()
    backend = backend or Backend(workers=n_jobs)
    settings = CellSettings(threshold, patience, str(resolve_device(device)))
    seed_list = [base_seed + i for i in range(n_seeds)]
    jobs = [(SearchJob(space, widths, n_examples, s, settings, store, budgets),)
            for s in seed_list]

    def landed(i: int, res: dict) -> tuple[list[tuple[str, dict]], dict]:
        return ([(search_store_name(c), {k: v for k, v in c.items() if k != "reused"})
                 for c in res["cells"]], {"seed": res["seed"], "min m": res["min_width"]})

    ran = run_jobs(run_search, jobs, backend, store, landed, desc=space.name,
                   progress=progress)
    ok = [r for r in ran.results if not isinstance(r, Failed)]
    result = summarise_search(ok, n_examples, widths, threshold, space.labels_per)
    result["search"]["steps"] = [budgets[n] for n in n_examples]
    found = [c for r in ok for c in r["cells"]]
    any_run_config = next(iter(search_run_configs(space, widths[:1], n_examples[:1],
                                                  base_seed).values()))
    result.update({
        **run_fields(space, settings, backend),
        "cells_trained": sum(not c["reused"] for c in found),
        "cells_reused": sum(c["reused"] for c in found),
        "cells_failed": [{"seed": seed_list[i], "error": ran.results[i].error,
                          "attempts": ran.results[i].attempts} for i in ran.failed()],
        # CPU time of the cells trained by this call (time_s is wall time: inflated on
        # shared cores); the cells' own cpu_s fields add up a resumed run's.
        "train_cpu_s": round(sum(c.get("cpu_s", 0.0) for c in found if not c["reused"]), 1),
        "cells_cpu_s": round(sum(c.get("cpu_s", 0.0) for c in found), 1),
        "search_cpu_s": {str(r["seed"]): r["cpu_s"] for r in ok},
        **run_record(any_run_config, ran.wall, space.name, per_cell=("fraction", "seed")),
    })
    return result
