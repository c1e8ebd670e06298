"""Memorization capacity against parameter count (Kim et al., §5, Figs. 1 and 2, App. F).

``python -m analyses.memorization --data synthetic --task token --quick --out DIR``
``[--jobs N] [--ray [ADDRESS]] [--retries R]``: the cells run in N local worker processes, or
as Ray tasks (:mod:`models.sweep`) on a Ray instance started here or an existing cluster;
finished cells are saved and never run again, a cell that fails on every attempt is marked in
the JSON (``cells_failed``) and the exit code is 1 while the others land.

A grid over dataset size (fractions 10 %, 20 %, …, 100 % of N, App. F) × model width (the
embedding size m; L layers, h heads, head size k = m / h, feed-forward q = 4m, §5.1); every
cell trains an encoder transformer from scratch on the fixed training set until it memorises
it (training error < ``threshold``), its training error stops improving for ``patience``
evaluations (App. F: "the training error does not improve"), or the step budget runs out.

* Fig. 1 (``NAME_heatmap.png``): the training error of every cell.
* Fig. 2 (``NAME_params.png``): for each N, the parameter count of the smallest width with
  training error < 0.005 (App. F), with a least-squares linear trend and the theory's shape
  Õ(d + n + √(nN)) (Thm 3.1, token level) or Õ(d + n + √N) (Thm 4.1, sequence level), fitted
  as a + b·√(nN) (resp. a + b·√N): the constant a stands for d + n, the log factors are dropped
  (:mod:`probes.fits`).
* ``NAME.png`` (both panels), ``NAME.json`` (every number), ``NAME_cells.csv`` (one row per
  cell) and ``NAME_cells/*.json`` (one file per finished cell, so a stopped sweep resumes).
  NAME is ``memorization_{data}_{task}``, so token and sequence grids share an output folder.

Medium (``--medium``, issues 21, 27): Fig. 2 as a test of its shape. The quick grid has five
N over 5x, too few to tell √(nN) from a line; the medium grid (``GRIDS``' ``search`` row) takes
nine N over 32x and, instead of training every (N, width) cell, searches each N for the
smallest memorising width (:func:`search_min_width`: galloping from a guess, then bisection;
each cell stops as soon as it memorises), once per seed (``--seeds``, default the grid's:
data set and initialisation), the seeds as parallel tasks. Every N gets four times the quick step budget: the smallest
memorising width still falls with more steps, so the budget is long and the same at every N.
Then, over every (N, seed) point: the linear and a + b·√(nN) fits and their residuals, the
exponent k of a + b·N^k with a bootstrap interval (seeds resampled within each N; with one
seed, the N resampled), the same exponent over the smaller and the larger half of the N, the
log-log slope, and a verdict (:func:`shape_verdict`).

What the paper claims for Fig. 2 (§5.2) is a *linear* trend: "We observe a linear trend in the
number of parameters with a subtle concavity as our theory predicts, but only at the low data
regime", conjectured to come from "the fixed depth and bit complexity during the experiments"
(Thms B.1 / B.2: Õ(d + n + nN/L) parameters at depth Õ(L), Õ(d + n + nN/B) at bit complexity
Õ(B)). Thm 3.1's Õ(d + n + √(nN)) holds for its own construction (width 16, depth
Õ(n + √(nN)), bit complexity Õ(√(nN))), not for a fixed-depth model. The claims:
``claim_linear`` (the verdict is linear), ``claim_concave_small`` (k < 1 over the smaller N
only) and ``claim_sqrt`` (√(nN) fits better: context). Outputs: ``NAME_probes.png`` (every
cell the search trained) in place of the heatmap, ``NAME_params.png``, ``NAME_cells.csv``
(with the seed), ``NAME_cells/m*_n*_s*.json``.

Parameter counting: ``params_total`` is every trainable parameter (token embedding |V|·m,
the blocks, the final LayerNorm and the classifier head m·C + C); ``params_non_embedding``
leaves out the token embedding and the classifier head (``SuiteModel.n_params(embeddings=
False)``). Rotary position encoding has no parameters. Thm 3.1 counts the embedding as d
parameters; Fig. 2 of the paper does not say which count it plots, so both are reported.

Positions: the paper trains BERT, whose learned absolute position embeddings break
permutation equivariance — the setting of Thm 3.1.2 / 4.1.2 ("without permutation
equivariance", a positional encoding E added to the input). The suite's transformer has no
learned absolute positions, so the default is ``pe=rope``: positional information with no
extra parameters (the counts of Fig. 2 stay those of the blocks). ``--pe nope`` gives the
permutation-equivariant model of Thm 3.1.1 / 4.1.1; the synthetic data are generated with
distinct contexts and consistent labels (Def. 3.2) so that they satisfy its premises too.

Training: each cell is a run of the suite's one loop (``models.train.loop.train``, no
checkpoint file) with two changes that a memorization cell needs: the evaluation measures the
error on the *whole* training set (:func:`train_error_evaluator`, not sampled batches), and a
callback (:class:`StopRule`) ends the run at convergence, so most cells stop long before the
step budget. Minibatches are seeded epochs over the fixed set (the task's ``epoch``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.ticker import NullFormatter, ScalarFormatter
from scipy.stats import spearmanr

from analyses.common import (
    Checkpoint,
    Claim,
    Figure,
    fmt,
    get,
    ints,
    numbers,
    run_analysis,
    to_jsonable,
)
from figures.style import new_figure, save_figure
from models.device import resolve_device
from models.registry import build_model
from models.sweep import (
    Backend,
    Failed,
    backend_of,
    failures,
    map_tasks,
)
from models.train.config import TrainConfig
from models.train.loop import Callback, Run, TrainingDiverged, train
from models.train.spec import RunSpec, make_spec
from probes.fits import fit_trends, loglog_slope, power_fit
from tasks.base import check, config_to_dict
from tasks.memorization import REAL_LEVEL
from tasks.registry import make_task

NAME = "memorization"
ARCH = "transformer"
THRESHOLD = 0.005  # App. F: "the smallest model that reaches the training error 0.005"
FRACTIONS = tuple(round(0.1 * i, 1) for i in range(1, 11))  # App. F: p = 10, 20, …, 100 %

# The grid of each (preset, data, level): the task config (on top of the preset rows of
# models/train/presets.py), the widths m, and overrides of the training rows. Model shape
# (L, h, q = 4m) comes from the preset rows; only the width varies here. Quick sizes keep the
# synthetic grids CPU-sized, with widths chosen to straddle the memorization boundary (the
# narrowest models fail to memorise the full set at the quick step budget, the widest do not).
GRIDS: dict[tuple[str, str, str], dict[str, Any]] = {
    # 256 sequences of 8 tokens, 4 classes: 2048 labels of 2 bits at 100 %.
    ("quick", "synthetic", "token"): {
        "task": {"n_examples": 256, "seq_len": 8, "vocab": 16, "n_classes": 4},
        "widths": (4, 6, 8, 10, 12, 16), "patience": 10},
    # 512 sequences of 8 tokens, 8 classes: 512 labels of 3 bits at 100 %.
    ("quick", "synthetic", "sequence"): {
        "task": {"n_examples": 512, "seq_len": 8, "vocab": 16, "n_classes": 8},
        "widths": (4, 6, 8, 10, 12, 16), "patience": 10},
    ("quick", "conll", "token"): {
        "task": {"n_examples": 200, "max_len": 32}, "widths": (8, 16, 24, 32, 48),
        "patience": 10},
    ("quick", "mnli", "sequence"): {
        "task": {"n_examples": 400, "max_len": 48}, "widths": (8, 16, 24, 32, 48),
        "patience": 10},
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
    # budget is uniform). N stops at 512 and one seed: a failing probe runs the whole budget,
    # near the boundary a memorising one most of it, and a step's cost grows with N, so N up
    # to 1024 or several seeds would cost several times the run's allowance. One seed: the
    # exponent's interval resamples the N, not the seeds. (A row's optional ``long``,
    # {"largest": k, "factor": f}, trains only the k largest N f times longer.)
    ("medium", "synthetic", "token"): {
        "task": {"n_examples": 512, "seq_len": 8, "vocab": 16, "n_classes": 4},
        "model": {"n_heads": 1}, "train": {"batch_size": 1024, "steps": 8000},
        "widths": (*range(2, 17), *range(18, 33, 2), 36, 40, 44, 48),
        "search": {"n_examples": (16, 25, 38, 59, 91, 140, 215, 332, 512), "seeds": 1},
        "patience": 10},
    # Paper (§5.1, App. F): 14,000 CoNLL sentences, widths m = 12, 24, …; 50,000 MNLI pairs,
    # m = 96, 192, …; 1,500 / 7,500 steps. Sized for a GPU.
    ("paper", "conll", "token"): {
        "task": {"n_examples": 14000, "max_len": 128}, "widths": tuple(range(12, 121, 12)),
        "train": {"steps": 1500}, "patience": 6},
    ("paper", "mnli", "sequence"): {
        "task": {"n_examples": 50000, "max_len": 128}, "widths": tuple(range(96, 961, 96)),
        "train": {"steps": 7500}, "patience": 6},
    # Synthetic analogues of the paper's sizes (CoNLL sentences average ~14 tokens).
    ("paper", "synthetic", "token"): {
        "task": {"n_examples": 14000, "seq_len": 16, "vocab": 1000, "n_classes": 9},
        "widths": tuple(range(12, 121, 12)), "train": {"steps": 1500}, "patience": 6},
    ("paper", "synthetic", "sequence"): {
        "task": {"n_examples": 50000, "seq_len": 32, "vocab": 1000, "n_classes": 3},
        "widths": tuple(range(96, 961, 96)), "train": {"steps": 7500}, "patience": 6},
}

PARAM_COUNTING = (
    "params_total: every trainable parameter (token embedding |V|*m, blocks, final LayerNorm, "
    "classifier head m*C + C); params_non_embedding: the same without the token embedding "
    "and the classifier head (SuiteModel.n_params(embeddings=False)); RoPE has no parameters")


# ---------------------------------------------------------------------------- counting
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


# ---------------------------------------------------------------------------- one cell
def train_error_evaluator(model, task, cfg: TrainConfig, device) -> dict[str, float]:
    """The loop's evaluation for a cell: the training error on the whole fixed set."""
    return {"train_error": task.train_error(model)}


class StopRule(Callback):
    """Ends a cell's run when the training error is below ``threshold`` ("memorized") or has
    not improved for ``patience`` evaluations ("plateau"; 0 disables). Keeps the run, so the
    cell can be read after the loop returns."""

    def __init__(self, threshold: float, patience: int):
        self.threshold, self.patience = threshold, patience
        self.best, self.since_best, self.error = math.inf, 0, math.nan
        self.run: Run | None = None

    def on_step(self, run: Run) -> None:
        self.run = run

    def on_eval(self, run: Run, record: dict[str, Any]) -> bool:
        self.error = record["train_error"]
        if self.error < self.best:
            self.best, self.since_best = self.error, 0
        else:
            self.since_best += 1
        if self.error < self.threshold:
            run.stop_reason = "memorized"
        elif self.patience and self.since_best >= self.patience:
            run.stop_reason = "plateau"
        return bool(run.stop_reason)


def train_cell(spec: RunSpec, threshold: float = THRESHOLD, patience: int = 10,
               device: str | torch.device = "cpu") -> dict[str, Any]:
    """Train one grid cell to convergence; return its numbers (JSON-able).

    Stops when the training error (whole set) is below ``threshold`` ("memorized"), when it
    has not improved for ``patience`` evaluations ("plateau", 0 disables), on a non-finite
    loss or gradient ("diverged"), or after ``spec.train.steps`` steps ("max_steps").
    """
    rule = StopRule(threshold, patience)
    t0 = time.time()
    try:
        train(spec, out=None, device=device, progress=False, callbacks=[rule],
              evaluator=train_error_evaluator)
        stop = rule.run.stop_reason or "max_steps"
    except TrainingDiverged:
        stop = "diverged"
    if rule.run is not None:
        model, task, step, loss = rule.run.model, rule.run.task, rule.run.step, rule.run.loss
    else:  # diverged on the first step: the weights are still the initial ones
        torch.manual_seed(spec.train.seed)
        model = build_model(spec.arch, spec.model).to(resolve_device(device))
        task, step, loss = make_task(spec.task, spec.task_config), 0, math.nan
    err, best = rule.error, rule.best
    if stop in ("diverged", "max_steps") or math.isnan(err):
        err = task.train_error(model)
        best = min(best, err)
    return {
        "fraction": task.cfg.fraction, "n_examples": task.n_used, "n_total": task.n_total,
        "n_labels": task.n_labels, "seq_len": task.seq_len, "vocab_size": task.vocab.size,
        "n_classes": task.cfg.C, "d_model": model.cfg.d_model, "n_layers": model.cfg.n_layers,
        "n_heads": model.cfg.n_heads, "d_mlp": model.cfg.d_mlp_, "pe": model.cfg.pe,
        "params_total": model.n_params(), "params_non_embedding": model.n_params(embeddings=False),
        "train_error": err, "best_error": best, "memorized": err < threshold,
        "loss": math.nan if stop == "diverged" else loss,
        "steps": step, "stop": stop, "time_s": round(time.time() - t0, 2),
    }


def cell_key(spec: RunSpec, threshold: float, patience: int) -> str:
    """What a saved cell must match to be reused (run spec and stopping rule)."""
    blob = f"{spec.hash()}|{threshold}|{patience}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _run_cell(spec: RunSpec, threshold: float, patience: int, device: str, key: str,
              threads: int) -> dict[str, Any]:
    """Task body (a worker process, a Ray worker or this process): train one cell. The caller
    saves it, so the cells of a cluster's workers land in the caller's output folder."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # one thread per task: the cells are the parallelism
    try:
        result = train_cell(spec, threshold, patience, device)
    finally:
        torch.set_num_threads(before)
    result["key"] = key
    return result


def _save_cell(cell: dict[str, Any], path: Path) -> None:
    """Write a finished cell atomically: the next run reuses it."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(to_jsonable(cell), indent=1))
    tmp.replace(path)


def _load_cell(path: Path, key: str) -> dict[str, Any] | None:
    try:
        cell = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # missing or half-written: train it again
    return cell if isinstance(cell, dict) and cell.get("key") == key else None


def failed_cell(spec: RunSpec, failure: Failed) -> dict[str, Any]:
    """The row of a cell whose task failed on every attempt: no numbers, the error (never
    saved, so the next run tries it again)."""
    return {"fraction": spec.task_config["fraction"], "d_model": spec.model["d_model"],
            "failed": True, "error": failure.error, "attempts": failure.attempts,
            "train_error": math.nan, "memorized": False, "stop": "failed"}


def check_settings(fractions: tuple[float, ...], threshold: float, patience: int,
                   n_jobs: int) -> None:
    """The settings a grid and a search share, checked before any training."""
    check(all(0 < f <= 1 for f in fractions), f"fractions must be in (0, 1], got {fractions}")
    check(0 < threshold < 1, f"threshold must be in (0, 1), got {threshold}")
    check(patience >= 0, f"patience must be >= 0, got {patience}")
    check(n_jobs >= 1, f"n_jobs must be >= 1, got {n_jobs}")


def run_record(spec: RunSpec, wall: float, name: str, per_cell: tuple[str, ...]) -> dict:
    """The fields a grid's or a search's JSON shares: timing, the machine, how parameters are
    counted, and the config every cell shares (``spec``'s, less the width and the
    ``per_cell`` fields that differ between cells)."""
    return {
        "wall_time_s": round(wall, 1), "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "param_counting": PARAM_COUNTING,
        "config": {"model": {k: v for k, v in spec.model.items() if k != "d_model"},
                   "task": {k: v for k, v in spec.task_config.items() if k not in per_cell},
                   "train": {k: v for k, v in config_to_dict(spec.train).items()
                             if k not in per_cell}},
        "name": name,
    }


# ---------------------------------------------------------------------------- the grid
def grid_settings(preset: str, data: str, level: str) -> dict[str, Any]:
    """The GRIDS row of (preset, data, level), with a clear error for a missing one."""
    check(data in ("synthetic", *REAL_LEVEL), f"data must be synthetic, conll or mnli, got "
          f"{data!r}")
    if data in REAL_LEVEL:
        check(level == REAL_LEVEL[data], f"--data {data} is {REAL_LEVEL[data]}-level; "
              f"use --task {REAL_LEVEL[data]}")
    key = (preset, data, level)
    check(key in GRIDS, f"no grid for preset={preset}, data={data}, task={level}")
    return GRIDS[key]


def compute(data: str = "synthetic", level: str = "token", preset: str = "quick",
            out_dir: str | Path = "figures/out", widths: tuple[int, ...] | None = None,
            fractions: tuple[float, ...] | None = None, task_config: dict | None = None,
            model: dict | None = None, train: dict | None = None, patience: int | None = None,
            threshold: float = THRESHOLD, n_jobs: int = 2, device: str = "cpu",
            fresh: bool = False, progress: bool = True,
            backend: Backend | None = None, seeds: int | None = None) -> dict[str, Any]:
    """Train the grid (resuming saved cells) and summarise it (Figs. 1 and 2); a grid with a
    ``search`` row (medium) runs :func:`compute_search` instead (``seeds``: how many).

    ``task_config`` / ``model`` / ``train`` override the preset and grid rows. The cells run
    on ``backend`` (:mod:`models.sweep`; default: ``n_jobs`` local worker processes); each
    finished cell is saved under ``out_dir/memorization_{data}_{level}_cells/`` as it lands
    and reused by the next call unless ``fresh``. A cell whose task fails on every attempt is
    listed in ``cells_failed`` (and marked ``failed`` in ``cells``); the others still run.
    """
    grid = grid_settings(preset, data, level)
    if "search" in grid:
        return compute_search(data, level, preset, out_dir, widths=widths, fractions=fractions,
                              task_config=task_config, model=model, train=train,
                              patience=patience, threshold=threshold, n_jobs=n_jobs,
                              device=device, fresh=fresh, progress=progress, backend=backend,
                              seeds=seeds)
    widths = tuple(widths or grid["widths"])
    fractions = tuple(fractions or FRACTIONS)
    patience = grid["patience"] if patience is None else patience
    check(len(widths) >= 1 and len(fractions) >= 1, "need at least one width and one fraction")
    check_settings(fractions, threshold, patience, n_jobs)
    backend = backend or Backend(jobs=n_jobs)
    dev = str(resolve_device(device))
    task_cfg = {**grid["task"], **(task_config or {}), "data": data, "level": level}
    train_cfg = {**grid.get("train", {}), **(train or {})}
    specs: dict[tuple[float, int], RunSpec] = {}
    for f in sorted(fractions):
        for m in sorted(widths):
            spec = make_spec(ARCH, "memorization", preset, model={**(model or {}), "d_model": m},
                             task_config={**task_cfg, "fraction": f}, train=train_cfg)
            specs[(f, m)] = spec  # make_spec checked m against n_heads (m = h·k)
    name = f"{NAME}_{data}_{level}"
    out = Path(out_dir)
    cells_dir = out / f"{name}_cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    done: dict[tuple[float, int], dict] = {}
    todo = []
    for (f, m), spec in specs.items():
        key = cell_key(spec, threshold, patience)
        path = cells_dir / f"m{m:05d}_f{round(100 * f):03d}.json"
        cell = None if fresh else _load_cell(path, key)
        if cell is not None:
            done[(f, m)] = cell
        else:
            todo.append(((f, m), spec, path, key))
    t0 = time.time()
    # cells finish in any order; each is saved as it lands, so Ctrl-C loses only the cells in
    # flight. Larger cells first: the slowest ones do not trail at the end.
    todo.sort(key=lambda t: (-t[0][0] * t[0][1], t[0]))

    def landed(i: int, cell: dict | Failed) -> dict | None:
        (f, m), spec, path, _ = todo[i]
        if isinstance(cell, Failed):
            done[(f, m)] = failed_cell(spec, cell)
            return None
        _save_cell(cell, path)
        done[(f, m)] = cell
        return {"m": m, "f": f, "err": f"{cell['train_error']:.3f}"}

    results = map_tasks(_run_cell, [(spec, threshold, patience, dev, key, 1)
                                    for _, spec, _, key in todo],
                        backend, desc=name, progress=progress, done_before=len(done),
                        on_done=landed)
    wall = time.time() - t0
    any_spec = next(iter(specs.values()))
    result = summarise(done, sorted(fractions), sorted(widths), threshold, level)
    result.update({
        "data": data, "level": level, "preset": preset, "threshold": threshold,
        "patience": patience, "n_jobs": backend.jobs, "backend": backend.describe(),
        "device": dev, "cells_trained": len(todo) - len(failures(results)),
        "cells_reused": len(specs) - len(todo),
        "cells_failed": [{"fraction": todo[i][0][0], "d_model": todo[i][0][1],
                          "error": results[i].error, "attempts": results[i].attempts}
                         for i in failures(results)],
        **run_record(any_spec, wall, name, per_cell=("fraction",)),
    })
    return result


def dry_run_cells(preset: str, data: str = "synthetic", level: str = "token",
                  task_config: dict | None = None):
    """The grid's largest and smallest cells as ``(label, spec builder)`` for ``--dry-run``
    (the widest model on all N examples, the narrowest on the fewest; every other cell's step
    lies between theirs; the largest with a search row's longer budget, if any).
    ``task_config`` overrides the grid's (a data file, N)."""
    grid = grid_settings(preset, data, level)
    long = (grid.get("search") or {}).get("long")

    def cell(m: int, f: float, factor: int = 1):
        def build() -> RunSpec:
            spec = make_spec(ARCH, "memorization", preset,
                             model={**grid.get("model", {}), "d_model": m},
                             task_config={**grid["task"], **(task_config or {}),
                                          "data": data, "level": level, "fraction": f},
                             train=grid.get("train", {}))
            return spec if factor == 1 else make_spec(
                ARCH, "memorization", preset, model=spec.model, task_config=spec.task_config,
                train={**grid.get("train", {}), "steps": spec.train.steps * factor})
        return build

    smallest = (min(grid["search"]["n_examples"]) / grid["task"]["n_examples"]
                if "search" in grid else min(FRACTIONS))
    largest = long["factor"] if long and long["largest"] else 1
    return [(f"{NAME}_{data}_{level}/m{m}_f{f:g}", cell(m, f, factor))
            for m, f, factor in ((max(grid["widths"]), max(FRACTIONS), largest),
                                 (min(grid["widths"]), smallest, 1))]


def summarise(cells: dict[tuple[float, int], dict], fractions: list[float], widths: list[int],
              threshold: float, level: str) -> dict[str, Any]:
    """Heatmap matrix, smallest memorising model per N, fits and trend statistics. A failed
    cell (``failed_cell``) has no error (NaN) and takes part in no trend pair; the sizes of a
    row or column come from any cell of it that ran."""
    err = np.array([[cells[(f, m)]["train_error"] for m in widths] for f in fractions],
                   dtype=float)

    def ran(of: list[dict], field: str):
        return next((c[field] for c in of if not c.get("failed")), None)

    rows = [[cells[(f, m)] for m in widths] for f in fractions]
    cols = [[cells[(f, m)] for f in fractions] for m in widths]
    n_ex = [ran(r, "n_examples") for r in rows]
    n_lab = [ran(r, "n_labels") for r in rows]
    seq_len = ran([c for r in rows for c in r], "seq_len")
    p_tot = [ran(c, "params_total") for c in cols]
    p_non = [ran(c, "params_non_embedding") for c in cols]
    min_width, min_tot, min_non = [], [], []
    for i in range(len(fractions)):
        ok = [j for j in range(len(widths)) if err[i, j] < threshold]
        j = ok[0] if ok else None
        min_width.append(widths[j] if ok else None)
        min_tot.append(p_tot[j] if ok else None)
        min_non.append(p_non[j] if ok else None)
    fits = {which: fit_trends(n_ex, mins, seq_len, level)
            for which, mins in (("total", min_tot), ("non_embedding", min_non))}
    # Trend checks (the claims of Fig. 1): error falls with width, rises with N.
    tol = 0.01
    finite = np.isfinite(err)
    w_pairs = [err[i, j + 1] <= err[i, j] + tol for i in range(len(fractions))
               for j in range(len(widths) - 1) if finite[i, j] and finite[i, j + 1]]
    n_pairs = [err[i + 1, j] >= err[i, j] - tol for i in range(len(fractions) - 1)
               for j in range(len(widths)) if finite[i, j] and finite[i + 1, j]]
    W, F = np.meshgrid(widths, [np.nan if n is None else n for n in n_ex])

    def rho(x: np.ndarray) -> float | None:  # over the cells that ran; None if x is constant
        x, y = x[finite], err[finite]
        return spearmanr(x, y).statistic if len(set(x.tolist())) > 1 else None

    rho_w, rho_n = rho(W), rho(F)
    found = [(n, p) for n, p in zip(n_ex, min_non, strict=True)
             if p is not None and n is not None]
    rho_p = (spearmanr([n for n, _ in found], [p for _, p in found]).statistic
             if len(found) > 1 and len({p for _, p in found}) > 1 else None)
    return {
        "fractions": fractions, "widths": widths, "n_examples": n_ex, "n_labels": n_lab,
        "seq_len": seq_len, "error": err.tolist(),
        "params_total": p_tot, "params_non_embedding": p_non,
        "min_width": min_width, "min_params_total": min_tot, "min_params_non_embedding": min_non,
        "fits": fits,
        "trends": {
            "tolerance": tol,
            "width_pairs_error_not_rising": float(np.mean(w_pairs)) if w_pairs else None,
            "n_pairs_error_not_falling": float(np.mean(n_pairs)) if n_pairs else None,
            "spearman_error_vs_width": _finite(rho_w),
            "spearman_error_vs_n": _finite(rho_n),
            "spearman_min_params_vs_n": _finite(rho_p),
            "min_params_nondecreasing": (all(b >= a for (_, a), (_, b)
                                             in zip(found, found[1:], strict=False))
                                         if found else None),
            "n_memorized": len(found),
        },
        "cells": [cells[(f, m)] for f in fractions for m in widths],
    }


def _finite(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


# ---------------------------------------------------------------------------- medium: search
def search_min_width(n_widths: int, memorises, guess: int | None = None) -> int | None:
    """Index of the smallest width of a ladder (``n_widths`` sorted widths) that memorises,
    or None when not even the widest does; ``memorises(i)`` trains the cell of width i.

    Assumes that a wider model memorises whatever a narrower one does (it can, with the
    extra units unused; training noise can break this near the boundary, and the search then
    returns one crossing). With a ``guess``: a galloping search from it (probe the guess,
    then 1, 2, 4, … rungs down while it memorises or up while it does not), then bisection
    of the bracket; without: bisection of the whole ladder. Each index is probed at most once.
    """
    check(n_widths >= 1, "the width ladder is empty")
    seen: dict[int, bool] = {}

    def probe(i: int) -> bool:
        if i not in seen:
            seen[i] = bool(memorises(i))
        return seen[i]

    lo, hi = -1, n_widths  # lo: widest known to fail (-1: none); hi: narrowest known to pass
    if guess is not None:
        g, step = min(max(guess, 0), n_widths - 1), 1
        if probe(g):
            hi = g
            while hi > 0:
                i = max(hi - step, 0)
                if not probe(i):
                    lo = i
                    break
                hi, step = i, 2 * step
        else:
            lo = g
            while lo < n_widths - 1:
                i = min(lo + step, n_widths - 1)
                if probe(i):
                    hi = i
                    break
                lo, step = i, 2 * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            hi = mid
        else:
            lo = mid
    return hi if hi < n_widths else None


# The next N's first probe: the previous answer's width times (N'/N)^(3/8). Halfway (in log)
# between the two shapes under test (P ∝ m² ∝ N^k: m ∝ N^(1/4) for k = 1/2, N^(1/2) for k = 1),
# so the guess favours neither; the galloping search corrects it either way.
GUESS_EXPONENT = 3 / 8
# Where the next N has a longer step budget (the grid's ``long``), its guess is also scaled by
# (budget ratio)^-BUDGET_EXPONENT: more steps memorise with a narrower model. A rough guess
# that saves failing probes (the costliest cells at a long budget); the search corrects it.
BUDGET_EXPONENT = 0.2


def search_specs(data: str, level: str, preset: str, widths: tuple[int, ...],
                 n_examples: tuple[int, ...], seed: int, task_config: dict, model: dict,
                 train: dict, steps: dict[int, int] | None = None
                 ) -> dict[tuple[int, int], RunSpec]:
    """The RunSpec of every (N, width) cell one seed's search may train: the data set and
    the initialisation are seeded by ``seed``; N is a nested prefix (fraction N / total);
    ``steps``: the step budget of the N it names (the others: ``train``'s)."""
    total = task_config["n_examples"]
    steps = steps or {}
    out = {}
    for n in n_examples:
        budget = {"steps": steps[n]} if n in steps else {}
        for m in widths:
            out[(n, m)] = make_spec(ARCH, "memorization", preset, model={**model, "d_model": m},
                                    task_config={**task_config, "seed": seed,
                                                 "fraction": n / total},
                                    train={**train, "seed": seed, **budget})
    return out


def step_budgets(n_examples: tuple[int, ...], base: int, long: dict | None) -> dict[int, int]:
    """The step budget of each N: ``base``, times ``long["factor"]`` for the
    ``long["largest"]`` largest N (none without ``long``)."""
    if not long:
        return {n: base for n in n_examples}
    check(long["largest"] >= 0 and long["factor"] >= 1,
          f"long needs largest >= 0 and factor >= 1, got {long}")
    top = set(sorted(n_examples)[max(0, len(n_examples) - long["largest"]):]
              if long["largest"] else ())
    return {n: base * long["factor"] if n in top else base for n in n_examples}


def _run_search(data: str, level: str, preset: str, widths: tuple[int, ...],
                n_examples: tuple[int, ...], seed: int, task_config: dict, model: dict,
                train: dict, threshold: float, patience: int, device: str, cells_dir: str,
                fresh: bool, steps: dict[int, int] | None = None) -> dict[str, Any]:
    """Task body: one seed's search over every N, smallest N first (each N's answer guesses
    the next one's first probe). Cells already saved under ``cells_dir`` with the same key
    are reused; each new one is saved as it lands where the folder is reachable (the caller
    saves them all again, so the cells of remote Ray workers land too)."""
    torch.set_num_threads(1)  # one thread per task: the seeds are the parallelism
    t0 = time.process_time()
    specs = search_specs(data, level, preset, widths, n_examples, seed, task_config, model,
                         train, steps)
    folder = Path(cells_dir)
    cells: list[dict[str, Any]] = []
    answers: list[int | None] = []
    guess = None
    for n in n_examples:
        def memorises(i: int, n=n) -> bool:
            spec = specs[(n, widths[i])]
            key = cell_key(spec, threshold, patience)
            path = folder / search_cell_name(n, widths[i], seed)
            cell = None if fresh else _load_cell(path, key)
            if cell is None:
                t = time.process_time()
                cell = train_cell(spec, threshold, patience, device)
                cell.update(key=key, seed=seed, cpu_s=round(time.process_time() - t, 2))
                if folder.is_dir():
                    _save_cell(cell, path)
                cell["reused"] = False
            else:
                cell["reused"] = True
            cells.append(cell)
            return bool(cell["memorized"])

        i = search_min_width(len(widths), memorises, guess)
        answers.append(None if i is None else widths[i])
        if i is None:  # not even the widest model memorises N: no larger N will either
            answers.extend([None] * (len(n_examples) - len(answers)))
            break
        nxt = n_examples[min(len(answers), len(n_examples) - 1)]
        budget = (steps or {}).get(nxt, 1) / (steps or {}).get(n, 1)
        target = widths[i] * (nxt / n) ** GUESS_EXPONENT * budget ** -BUDGET_EXPONENT
        guess = next((j for j, m in enumerate(widths) if m >= target), len(widths) - 1)
    return {"seed": seed, "min_width": answers, "cells": cells,
            "cpu_s": round(time.process_time() - t0, 1)}


def search_cell_name(n: int, m: int, seed: int) -> str:
    return f"m{m:05d}_n{n:05d}_s{seed}.json"


def compute_search(data: str, level: str, preset: str, out_dir: str | Path,
                   widths: tuple[int, ...] | None = None,
                   fractions: tuple[float, ...] | None = None, task_config: dict | None = None,
                   model: dict | None = None, train: dict | None = None,
                   patience: int | None = None, threshold: float = THRESHOLD,
                   n_jobs: int = 2, device: str = "cpu", fresh: bool = False,
                   progress: bool = True, backend: Backend | None = None,
                   seeds: int | None = None) -> dict[str, Any]:
    """Fig. 2 by search (a grid with a ``search`` row): for each seed (data set and
    initialisation: ``task_config["seed"]`` + 0, 1, …) and each N, the smallest memorising
    width of the ladder (:func:`search_min_width`); then the fits of the parameter count
    against N (:func:`summarise_search`). The seeds run as parallel tasks on ``backend``."""
    grid = grid_settings(preset, data, level)
    widths = tuple(sorted(widths or grid["widths"]))
    patience = grid["patience"] if patience is None else patience
    task_cfg = {**grid["task"], **(task_config or {}), "data": data, "level": level}
    total = task_cfg["n_examples"]
    n_examples = (tuple(sorted({max(1, round(f * total)) for f in fractions})) if fractions
                  else tuple(n for n in grid["search"]["n_examples"] if n <= total))
    n_seeds = seeds or grid["search"]["seeds"]
    check(len(widths) >= 1 and len(n_examples) >= 1, "need at least one width and one N")
    check_settings(fractions or (), threshold, patience, n_jobs)
    check(n_seeds >= 1, f"seeds must be >= 1, got {n_seeds}")
    base_seed = task_cfg.pop("seed", 0)
    model_cfg = {**grid.get("model", {}), **(model or {})}
    train_cfg = {**grid.get("train", {}), **(train or {})}
    train_cfg.pop("seed", None)  # the search's seeds set it
    for n in n_examples:  # every spec checked (widths against n_heads, N) before any training
        first = search_specs(data, level, preset, widths, (n,), base_seed, task_cfg, model_cfg,
                             train_cfg)
    budgets = step_budgets(n_examples, first[(n, widths[0])].train.steps,
                           grid["search"].get("long"))
    name = f"{NAME}_{data}_{level}"
    cells_dir = Path(out_dir) / f"{name}_cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    backend = backend or Backend(jobs=n_jobs)
    dev = str(resolve_device(device))
    seed_list = [base_seed + i for i in range(n_seeds)]

    def landed(i: int, res: dict | Failed) -> dict | None:
        if isinstance(res, Failed):
            return None
        for c in res["cells"]:
            _save_cell({k: v for k, v in c.items() if k != "reused"},
                       cells_dir / search_cell_name(c["n_examples"], c["d_model"], c["seed"]))
        return {"seed": res["seed"], "min m": res["min_width"]}

    t0 = time.time()
    results = map_tasks(_run_search, [(data, level, preset, widths, n_examples, s, task_cfg,
                                       model_cfg, train_cfg, threshold, patience, dev,
                                       str(cells_dir), fresh, budgets) for s in seed_list],
                        backend, desc=name, progress=progress, on_done=landed)
    wall = time.time() - t0
    ok = [r for r in results if not isinstance(r, Failed)]
    result = summarise_search(ok, n_examples, widths, threshold, level)
    result["search"]["steps"] = [budgets[n] for n in n_examples]
    cells = [c for r in ok for c in r["cells"]]
    any_spec = next(iter(search_specs(data, level, preset, widths[:1], n_examples[:1],
                                      base_seed, task_cfg, model_cfg, train_cfg).values()))
    result.update({
        "data": data, "level": level, "preset": preset, "threshold": threshold,
        "patience": patience, "n_jobs": backend.jobs, "backend": backend.describe(),
        "device": dev, "cells_trained": sum(not c["reused"] for c in cells),
        "cells_reused": sum(c["reused"] for c in cells),
        "cells_failed": [{"seed": seed_list[i], "error": results[i].error,
                          "attempts": results[i].attempts} for i in failures(results)],
        # CPU time of the cells trained by this call (time_s is wall time: inflated on
        # shared cores); the cells' own cpu_s fields add up a resumed run's.
        "train_cpu_s": round(sum(c.get("cpu_s", 0.0) for c in cells if not c["reused"]), 1),
        "cells_cpu_s": round(sum(c.get("cpu_s", 0.0) for c in cells), 1),
        "search_cpu_s": {str(r["seed"]): r["cpu_s"] for r in ok},
        **run_record(any_spec, wall, name, per_cell=("fraction", "seed")),
    })
    return result


def shape_verdict(fit: dict) -> str:
    """Which shape the minimal parameter counts follow: ``"linear"`` when the line leaves
    the smaller residuals and the exponent's interval excludes 1/2, ``"sqrt"`` when
    a + b·√(nN) does and the interval excludes 1, else ``"undecided"``."""
    lin, th, pw = fit.get("linear"), fit.get("theory"), fit.get("power") or {}
    if not lin or not th or pw.get("ci") is None:
        return "undecided"
    lo, hi = pw["ci"]
    if lin["rss"] < th["rss"] and lo > 0.5:
        return "linear"
    if th["rss"] < lin["rss"] and hi < 1.0:
        return "sqrt"
    return "undecided"


def summarise_search(searches: list[dict], n_examples: tuple[int, ...],
                     widths: tuple[int, ...], threshold: float, level: str) -> dict[str, Any]:
    """Per N: the smallest memorising width and parameter counts of each seed, their mean
    and spread; fits over every (N, seed) point: linear and a + b·√(nN) (their residuals),
    the exponent k of a + b·N^k with a bootstrap interval (resampling seeds within each N),
    the log-log slope, and the verdict (:func:`shape_verdict`)."""
    searches = sorted(searches, key=lambda r: r["seed"])
    by_width: dict[int, dict] = {}
    for r in searches:
        for c in r["cells"]:
            by_width.setdefault(c["d_model"], c)
    seq_len = next((c["seq_len"] for r in searches for c in r["cells"]), None)
    n_labels = {c["n_examples"]: c["n_labels"] for r in searches for c in r["cells"]}
    per_seed: dict[str, dict[str, list]] = {}
    for which in ("total", "non_embedding"):
        per_seed[which] = [[None if m is None else by_width[m][f"params_{which}"]
                            for m in r["min_width"]] for r in searches]

    def stats(rows: list[list]) -> dict[str, list]:
        cols = [[v for v in col if v is not None] for col in zip(*rows, strict=True)]
        return {"mean": [float(np.mean(c)) if c else None for c in cols],
                "std": [float(np.std(c, ddof=1)) if len(c) > 1 else None for c in cols],
                "min": [min(c) if c else None for c in cols],
                "max": [max(c) if c else None for c in cols],
                "found": [len(c) for c in cols]}

    fits, summary = {}, {}
    for which, rows in per_seed.items():
        summary[which] = stats(rows) if rows else None
        pts = [(n, p) for row in rows for n, p in zip(n_examples, row, strict=True)
               if p is not None]
        ns, ps = [n for n, _ in pts], [p for _, p in pts]
        fit = fit_trends(ns, ps, seq_len or 1, level)
        fit["power"] = power_fit(ns, ps, groups=ns)
        # the exponent over the smaller and the larger half of the N (the middle one in
        # both): Fig. 2's concavity "only at the low data regime" is k < 1 in the first only
        half = (len(n_examples) + 1) // 2
        for part, keep in (("power_small", set(n_examples[:half])),
                           ("power_large", set(n_examples[-half:]))):
            sub = [(n, p) for n, p in pts if n in keep]
            fit[part] = power_fit([n for n, _ in sub], [p for _, p in sub],
                                  groups=[n for n, _ in sub])
        fit["loglog"] = loglog_slope(ns, ps)
        fit["verdict"] = shape_verdict(fit)
        fits[which] = fit
    mean_non = summary["non_embedding"]["mean"] if searches else [None] * len(n_examples)
    found = [(n, p) for n, p in zip(n_examples, mean_non, strict=True) if p is not None]
    min_w = [[r["min_width"][i] for r in searches] for i in range(len(n_examples))]
    return {
        "search": {"seeds": [r["seed"] for r in searches], "widths": list(widths),
                   "min_width": [r["min_width"] for r in searches],
                   "params": per_seed, "summary": summary,
                   "probes": [len(r["cells"]) for r in searches],
                   "guess_exponent": GUESS_EXPONENT, "budget_exponent": BUDGET_EXPONENT},
        "n_examples": list(n_examples), "n_labels": [n_labels.get(n) for n in n_examples],
        "seq_len": seq_len, "widths": list(widths),
        "min_width": [None if any(m is None for m in ms) or not ms else float(np.median(ms))
                      for ms in min_w],
        "min_params_total": summary["total"]["mean"] if searches else None,
        "min_params_non_embedding": mean_non,
        "fits": fits,
        "trends": {
            "min_params_nondecreasing": (all(b >= a for (_, a), (_, b)
                                             in zip(found, found[1:], strict=False))
                                         if found else None),
            "n_memorized": len(found),
            "spearman_min_params_vs_n": (_finite(spearmanr([n for n, _ in found],
                                                           [p for _, p in found]).statistic)
                                         if len(found) > 2 else None),
        },
        "n_ratio": max(n_examples) / min(n_examples),
        "cells": [c for r in searches for c in r["cells"]],
    }


# ---------------------------------------------------------------------------- figures
def plot_heatmap(result: dict, ax=None):
    """Fig. 1: training error per (N, width); darker is smaller, as in the paper."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, 4.8, 3.8)
    err = np.array(result["error"], dtype=float)
    im = ax.imshow(err, origin="lower", aspect="auto", cmap="magma", vmin=0,
                   vmax=max(float(np.nanmax(err)), result["threshold"]))
    ax.set_xticks(range(len(result["widths"])), [str(w) for w in result["widths"]])
    ax.set_yticks(range(len(result["n_examples"])), [str(n) for n in result["n_examples"]])
    ax.set_xlabel("embedding size m")
    ax.set_ylabel("dataset size N (sequences)")
    ax.grid(False)
    for i in range(err.shape[0]):
        for j in range(err.shape[1]):
            text = ("failed" if not np.isfinite(err[i, j]) else
                    f"{err[i, j]:.3f}".lstrip("0") if err[i, j] < 1 else "1")
            ax.text(j, i, text,
                    ha="center", va="center", fontsize=6,
                    color="white" if err[i, j] < 0.6 * im.get_clim()[1] else "black")
    ax.figure.colorbar(im, ax=ax, label="training error")
    ax.set_title(f"{result['data']} / {result['level']} classification: training error")
    return fig if fig is not None else ax.figure


def plot_params(result: dict, ax=None):
    """Fig. 2: parameters of the smallest memorising model vs N, with the fitted trends."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, 4.8, 3.8)
    n_ex = np.array(result["n_examples"], dtype=float)
    grid_n = np.linspace(n_ex.min(), n_ex.max(), 100)
    scale = result["seq_len"] if result["level"] == "token" else 1
    theory_label = "√(nN)" if result["level"] == "token" else "√N"
    for which, color, label in (("total", "#1f77b4", "all parameters"),
                                ("non_embedding", "#d62728", "without embeddings")):
        mins = result[f"min_params_{which}"]
        pts = [(n, p) for n, p in zip(n_ex, mins, strict=True) if p is not None]
        if pts:
            ax.plot([n for n, _ in pts], [p for _, p in pts], "o", color=color, label=label)
        missing = [n for n, p in zip(n_ex, mins, strict=True) if p is None]
        if missing:  # not memorised by the widest model: the count is above the largest one
            top = max((p for p in result[f"params_{which}"] if p is not None), default=0)
            ax.plot(missing, [top] * len(missing), "^", mfc="none", color=color,
                    label=f"not memorised (> {top:,})")
        fit = result["fits"][which]
        if fit.get("linear"):
            lin = fit["linear"]
            ax.plot(grid_n, lin["a"] + lin["b"] * grid_n, "--", color=color, lw=1,
                    label=f"linear fit, R²={_r2(lin)}")
            th = fit["theory"]
            ax.plot(grid_n, th["a"] + th["b"] * np.sqrt(scale * grid_n), ":", color=color,
                    lw=1.3, label=f"a + b·{theory_label}, R²={_r2(th)}")
    ax.set_xlabel("dataset size N (sequences)")
    ax.set_ylabel(f"parameters of the smallest model, error < {result['threshold']}")
    ax.set_title(f"{result['data']} / {result['level']}: parameters to memorise")
    ax.legend(fontsize=6)
    return fig if fig is not None else ax.figure


def _r2(fit: dict) -> str:
    return "n/a" if fit.get("r2") is None else f"{fit['r2']:.2f}"


def plot(result: dict):
    """Both panels side by side (Fig. 1 and Fig. 2; a search: its probes and Fig. 2)."""
    fig, (a, b) = new_figure(2, 5.0, 4.0)
    if "search" in result:
        plot_probes(result, a)
        plot_search_params(result, b)
        return fig
    plot_heatmap(result, a)
    plot_params(result, b)
    return fig


def plot_probes(result: dict, ax=None):
    """The search's cells: width against N, filled where the cell memorised, open where
    not; the line is the median smallest memorising width over the seeds."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, 4.8, 3.8)
    cells = result["cells"]
    for ok, style in ((True, dict(marker="o", color="#2ca02c", label="memorised")),
                      (False, dict(marker="x", color="#d62728", label="not memorised"))):
        pts = [(c["n_examples"], c["d_model"]) for c in cells if bool(c["memorized"]) == ok]
        if pts:
            ax.plot([n for n, _ in pts], [m for _, m in pts], ls="none", alpha=0.6, **style)
    med = [(n, m) for n, m in zip(result["n_examples"], result["min_width"], strict=True)
           if m is not None]
    if med:
        ax.plot([n for n, _ in med], [m for _, m in med], "-", color="black", lw=1,
                label=f"median smallest width ({len(result['search']['seeds'])} seeds)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not powers of ten, on log axes
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    ax.set_yticks(sorted({c["d_model"] for c in cells}))
    ax.set_xticks(result["n_examples"])
    ax.set_xlabel("dataset size N (sequences)")
    ax.set_ylabel("embedding size m")
    ax.set_title(f"{result['data']} / {result['level']}: search probes")
    ax.legend(fontsize=6)
    return fig if fig is not None else ax.figure


def plot_search_params(result: dict, ax=None, which: str = "non_embedding"):
    """Fig. 2 from the search: each seed's smallest memorising model, the mean over seeds,
    the linear and a + b·√(nN) fits and the fitted a + b·N^k."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, 4.8, 3.8)
    n_ex = np.array(result["n_examples"], dtype=float)
    rows = result["search"]["params"][which]
    for j, row in enumerate(rows):
        pts = [(n, p) for n, p in zip(n_ex, row, strict=True) if p is not None]
        ax.plot([n for n, _ in pts], [p for _, p in pts], "o", ms=3, color="#7f7f7f",
                alpha=0.6, label="each seed" if j == 0 else None)
    summ = result["search"]["summary"][which]
    mean = [(n, m, s or 0.0) for n, m, s in zip(n_ex, summ["mean"], summ["std"], strict=True)
            if m is not None]
    if mean:
        ax.errorbar([n for n, _, _ in mean], [m for _, m, _ in mean],
                    yerr=[s for _, _, s in mean], fmt="s", color="black", ms=4, capsize=2,
                    label="mean ± sd over seeds")
    grid_n = np.linspace(n_ex.min(), n_ex.max(), 200)
    fit = result["fits"][which]
    scale = result["seq_len"] if result["level"] == "token" else 1
    if fit.get("linear"):
        lin, th = fit["linear"], fit["theory"]
        ax.plot(grid_n, lin["a"] + lin["b"] * grid_n, "--", color="#1f77b4",
                label=f"a + b·N, RMSE {lin['rmse']:,.0f}")
        ax.plot(grid_n, th["a"] + th["b"] * np.sqrt(scale * grid_n), ":", color="#d62728",
                lw=1.5, label=f"a + b·√(nN), RMSE {th['rmse']:,.0f}")
    pw = fit.get("power") or {}
    if pw.get("k") is not None:
        ax.plot(grid_n, pw["a"] + pw["b"] * grid_n ** pw["k"], "-", color="#2ca02c", lw=1,
                label=f"a + b·N^k, k = {pw['k']:.2f} [{pw['ci'][0]:.2f}, {pw['ci'][1]:.2f}]")
    ax.set_xlabel("dataset size N (sequences)")
    ax.set_ylabel(f"parameters ({which.replace('_', '-')}), error < {result['threshold']}")
    ax.set_title(f"smallest memorising model: {fit.get('verdict', 'undecided')}")
    ax.legend(fontsize=6)
    return fig if fig is not None else ax.figure


# ---------------------------------------------------------------------------- outputs
CSV_FIELDS = ("fraction", "n_examples", "n_labels", "seq_len", "vocab_size", "n_classes",
              "d_model", "n_layers", "n_heads", "d_mlp", "pe", "params_total",
              "params_non_embedding", "train_error", "best_error", "memorized", "loss", "steps",
              "stop", "time_s")


def write_csv(result: dict, path: str | Path) -> Path:
    """One row per cell (a search's: with its seed)."""
    path = Path(path)
    tmp = path.with_suffix(".csv.tmp")
    fields = ("seed", *CSV_FIELDS) if "search" in result else CSV_FIELDS
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for cell in result["cells"]:
            w.writerow(cell)
    tmp.replace(path)
    return path


def table(result: dict) -> list[list[Any]]:
    """Training error per N (rows) and width (columns), then the smallest memorising model;
    a search: per N, each seed's smallest memorising width and the parameter counts."""
    if "search" in result:
        sr = result["search"]
        summ = sr["summary"]["non_embedding"]
        rows = [["N", "labels", *[f"m (seed {s})" for s in sr["seeds"]], "non-emb mean",
                 "sd", "total mean"]]
        for i, n in enumerate(result["n_examples"]):
            rows.append([n, result["n_labels"][i],
                         *[ms[i] if ms[i] is not None else "-" for ms in sr["min_width"]],
                         summ["mean"][i] if summ["mean"][i] is not None else "-",
                         summ["std"][i] if summ["std"][i] is not None else "-",
                         result["min_params_total"][i] or "-"])
        return rows
    rows = [["N \\ m", *result["widths"], "min m", "params", "non-emb"]]
    for i, n in enumerate(result["n_examples"]):
        rows.append([n, *[float(e) for e in result["error"][i]],
                     result["min_width"][i] or "-", result["min_params_total"][i] or "-",
                     result["min_params_non_embedding"][i] or "-"])
    rows.append(["params", *result["params_total"], "", "", ""])
    rows.append(["non-emb", *result["params_non_embedding"], "", "", ""])
    return rows


# ---------------------------------------------------------------------------- the paper's claims
def claim_trends(d: dict) -> tuple[str, bool] | None:
    """Fig. 1: the error does not rise with width nor fall with N in >= 80 % of neighbour
    pairs (within the trend tolerance). Not read from a search (no full grid)."""
    if "search" in d:
        return None
    t = d["trends"]
    w, n = t["width_pairs_error_not_rising"], t["n_pairs_error_not_falling"]
    return (f"error not rising with width in {100 * w:.0f} % of neighbour pairs; not falling "
            f"with N in {100 * n:.0f} % (Spearman vs width "
            f"{fmt(t['spearman_error_vs_width'], '.2f')}, "
            f"vs N {fmt(t['spearman_error_vs_n'], '.2f')})"), w >= 0.8 and n >= 0.8


def claim_params(d: dict) -> tuple[str, bool]:
    """Fig. 2: the smallest memorising model never shrinks as N grows (two N at least)."""
    t = d["trends"]
    fit = get(d, "fits", "non_embedding", "linear")
    text = (f"{t['n_memorized']}/{len(d['n_examples'])} dataset sizes memorised; smallest "
            f"memorising model (non-embedding params): {d['min_params_non_embedding']}")
    if fit:
        text += f"; linear fit R² {fmt(fit['r2'], '.2f')}"
    return text, bool(t["min_params_nondecreasing"]) and t["n_memorized"] >= 2


def budget_text(d: dict) -> str:
    """The step budgets of a search: ``2,000 steps`` or ``2,000 steps (8,000 at N = …)``."""
    steps = get(d, "search", "steps")
    if not steps:
        return "steps n/a"
    base = min(steps)
    longer = [(n, s) for n, s in zip(d["n_examples"], steps, strict=True) if s != base]
    text = f"{base:,} steps"
    if longer:
        text += (f" ({', '.join(sorted({f'{s:,}' for _, s in longer}))} at N = "
                 f"{', '.join(str(n) for n, _ in longer)})")
    return text


def fit_summary(d: dict, which: str = "non_embedding") -> str:
    """The numbers behind a shape verdict: exponent, residuals of both fits, log-log slope."""
    fit = d["fits"][which]
    lin, th, pw, ll = fit["linear"], fit["theory"], fit["power"], fit["loglog"]
    sr = d["search"]
    text = (f"{len(d['n_examples'])} N = {min(d['n_examples'])}…{max(d['n_examples'])} "
            f"({d['n_ratio']:.0f}x), {len(sr['seeds'])} seed{'s' * (len(sr['seeds']) != 1)}, "
            f"{budget_text(d)} "
            f"({which.replace('_', '-')} params)")
    if pw.get("k") is not None:
        text += (f"; P = a + b*N^k: k = {pw['k']:.2f} [95 % CI {pw['ci'][0]:.2f}, "
                 f"{pw['ci'][1]:.2f}]")
    if lin and th:
        text += (f"; RMSE linear {lin['rmse']:,.0f} vs a + b*sqrt(nN) {th['rmse']:,.0f} "
                 f"(R² {fmt(lin['r2'], '.3f')} vs {fmt(th['r2'], '.3f')})")
    if ll.get("slope") is not None:
        text += f"; log-log slope {ll['slope']:.2f} [{ll['ci'][0]:.2f}, {ll['ci'][1]:.2f}]"
    return f"{text}; verdict: {fit['verdict']}"


def setting_text(d: dict) -> str:
    """Our setting beside the paper's (§5.1, App. F), from the run's config: what differs."""
    task, model, train = (get(d, "config", k, default={}) for k in ("task", "model", "train"))
    return (f"ours: synthetic token labels (n = {d.get('seq_len')}, |V| = "
            f"{task.get('vocab', 'n/a')}, C = {task.get('n_classes', 'n/a')}), "
            f"L = {model.get('n_layers', 'n/a')}, h = {model.get('n_heads', 'n/a')}, "
            f"{model.get('pe', 'n/a')}, AdamW (weight decay {train.get('weight_decay', 'n/a')}) lr "
            f"{train.get('lr', 'n/a')} "
            f"({train.get('schedule', 'n/a')} decay), full batch, widths in steps of 1-4; "
            f"paper: BERT on CoNLL-2003 (14,000 sentences), L = 6, h = 12, m in steps of 12, "
            f"Adam lr 2e-5, batch 32, dropout 0.1, 1,500 steps (GPU-sized; the suite's "
            f"transformer has no dropout and no learned positions)")


def power_text(name: str, pw: dict | None) -> str:
    if not pw or pw.get("k") is None:
        return f"{name} k n/a"
    return f"{name} k = {pw['k']:.2f} [{pw['ci'][0]:.2f}, {pw['ci'][1]:.2f}]"


def claim_sqrt(d: dict) -> tuple[str, bool] | None:
    """Thm 3.1 as context: its Õ(d + n + √(nN)) is what a construction of depth Õ(n + √(nN))
    and bit complexity Õ(√(nN)) needs, not the paper's reading of Fig. 2 (fixed depth and
    precision: linear, Thms B.1 / B.2). Holds when a + b·√(nN) leaves smaller residuals than
    the line and the exponent's interval excludes 1. Only from a search (the quick grid has
    too few N to tell)."""
    if "search" not in d:
        return None
    return fit_summary(d), d["fits"]["non_embedding"]["verdict"] == "sqrt"


def claim_linear(d: dict) -> tuple[str, bool] | None:
    """§5.2's reading of Fig. 2: the smallest memorising model grows linearly in N — the line
    leaves smaller residuals than a + b·√(nN) and the exponent's interval excludes 1/2."""
    if "search" not in d:
        return None
    return (f"{fit_summary(d)}; {setting_text(d)}",
            d["fits"]["non_embedding"]["verdict"] == "linear")


def claim_concave_small(d: dict) -> tuple[str, bool] | None:
    """§5.2: the concavity is "only at the low dataset size" — the exponent over the smaller
    half of the N has its interval below 1 and the one over the larger half holds 1."""
    if "search" not in d:
        return None
    fit = d["fits"]["non_embedding"]
    small, large = fit.get("power_small") or {}, fit.get("power_large") or {}
    ns = d["n_examples"]
    half = (len(ns) + 1) // 2
    text = (f"{power_text(f'N = {ns[0]}…{ns[half - 1]}:', small)}; "
            f"{power_text(f'N = {ns[-half]}…{ns[-1]}:', large)} (a + b*N^k per half, "
            f"95 % CI; {budget_text(d)})")
    ok = (small.get("ci") is not None and large.get("ci") is not None
          and small["ci"][1] < 1 and large["ci"][0] <= 1 <= large["ci"][1])
    return text, ok


def plan_args(preset: str) -> list[str]:
    """The flags the reproduce plan passes: the synthetic token-level grid. Quick runs half of
    the ten dataset sizes, which keeps the figure within one analysis' time budget; the
    trends are read the same way from five sizes."""
    quick = ["--fractions", "0.2,0.4,0.6,0.8,1.0"] if preset == "quick" else []
    return ["--data", "synthetic", "--task", "token", "--no-progress", *quick]


FIGURE = Figure(
    "Memorization vs parameter count (token level)", "Memorization paper Figs. 1, 2",
    (Claim("training error falls with width and rises with dataset size (Fig. 1)",
           claim_trends),
     Claim("the smallest memorising model grows with N (Fig. 2)", claim_params),
     Claim("§5.2, Fig. 2: \"a linear trend in the number of parameters\" of the smallest "
           "memorising model (error < 0.005) as N grows; the paper conjectures fixed depth and "
           "bit complexity as the cause: Õ(d + n + nN/L) parameters at depth Õ(L) (Thm B.1), "
           "Õ(d + n + nN/B) at bit complexity Õ(B) (Thm B.2) (medium; 4x the quick "
           "step budget at every N)", claim_linear),
     Claim("§5.2, Fig. 2: \"a slight downward curvature (concavity) as our theory predicts, "
           "but only at the low dataset size\" (medium)", claim_concave_small),
     Claim("context, not the paper's reading of Fig. 2: Thm 3.1's Õ(d + n + √(nN)) "
           "parameters (a construction of width 16, depth Õ(n + √(nN)), bit complexity "
           "Õ(√(nN))) — a + b·√(nN) fits better than a line (medium)", claim_sqrt)),
    presets=("quick", "medium", "paper"),
    recipes=lambda preset: (),  # no zoo checkpoints: every cell is trained here
    extra_args=plan_args, outputs=("memorization_synthetic_token",), slots=2,
    dry_run_specs=dry_run_cells)  # the plan's grid: synthetic, token level


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", choices=["synthetic", "conll", "mnli"], default="synthetic")
    p.add_argument("--task", choices=["token", "sequence"], default=None,
                   help="label level (default: token for synthetic and conll, sequence for mnli)")
    p.add_argument("--data-path", default="", help="CoNLL-2003 file / MNLI train.tsv (or folder)")
    p.add_argument("--jobs", type=int, default=2, help="parallel worker processes, or the CPUs "
                   "of the Ray instance --ray starts here (default 2)")
    p.add_argument("--widths", default=None, help="embedding sizes m, e.g. 8,16,32")
    p.add_argument("--fractions", default=None, help="dataset fractions (default 0.1,…,1.0)")
    p.add_argument("--n-examples", type=int, default=None, help="N, the full dataset size")
    p.add_argument("--steps", type=int, default=None, help="step budget per cell")
    p.add_argument("--pe", choices=["rope", "nope", "alibi", "hard_alibi"], default=None,
                   help="positional encoding (default rope: see the module docstring)")
    p.add_argument("--threshold", type=float, default=THRESHOLD)
    p.add_argument("--patience", type=int, default=None,
                   help="evaluations without improvement before a cell stops")
    p.add_argument("--seeds", type=int, default=None,
                   help="medium: searches, one per seed --seed, --seed + 1, … (default: the "
                   "grid's)")
    p.add_argument("--fresh", action="store_true", help="retrain cells saved by an earlier run")
    p.add_argument("--no-progress", action="store_true")


def _compute(args, _checkpoints: list[Checkpoint]) -> dict:
    """The grid of the flags (``--seed`` seeds the data and the training), and the outputs
    beyond NAME.png / NAME.json: each panel alone and the per-cell CSV. No checkpoints: the
    grid trains its own cells."""
    level = args.task or REAL_LEVEL.get(args.data, "token")
    task_cfg: dict[str, Any] = {"seed": args.seed}
    if args.data_path:
        task_cfg["data_path"] = args.data_path
    if args.n_examples is not None:
        task_cfg["n_examples"] = args.n_examples
    train_cfg = {"seed": args.seed, **({"steps": args.steps} if args.steps else {})}
    result = compute(args.data, level, args.preset, args.out,
                     widths=tuple(ints(args.widths)) if args.widths else None,
                     fractions=tuple(numbers(args.fractions)) if args.fractions else None,
                     task_config=task_cfg, model={"pe": args.pe} if args.pe else None,
                     train=train_cfg, patience=args.patience, threshold=args.threshold,
                     n_jobs=args.jobs, device=args.device, fresh=args.fresh,
                     progress=not args.no_progress,
                     backend=backend_of(args, args.jobs, args.device), seeds=args.seeds)
    name, out = result["name"], Path(args.out)
    csv_path = write_csv(result, out / f"{name}_cells.csv")
    if "search" in result:
        save_figure(plot_probes(result), out / f"{name}_probes.png")
        save_figure(plot_search_params(result), out / f"{name}_params.png")
        print(f"wrote {out / (name + '_probes.png')}, {out / (name + '_params.png')}, "
              f"{csv_path}")
        print(f"{result['cells_trained']} cells trained ({result['train_cpu_s']} CPU-s), "
              f"{result['cells_reused']} reused, {result['wall_time_s']} s wall "
              f"({result['backend']}); {fit_summary(result)}")
        for c in result["cells_failed"]:
            print(f"search of seed {c['seed']} failed after {c['attempts']} attempt(s): "
                  f"{c['error']}")
        return result
    save_figure(plot_heatmap(result), out / f"{name}_heatmap.png")
    save_figure(plot_params(result), out / f"{name}_params.png")
    t = result["trends"]
    print(f"wrote {out / (name + '_heatmap.png')}, {out / (name + '_params.png')}, {csv_path}")
    print(f"{result['cells_trained']} cells trained, {result['cells_reused']} reused, "
          f"{result['wall_time_s']} s wall ({result['backend']}); Spearman(error, width) "
          f"{t['spearman_error_vs_width']}, Spearman(error, N) {t['spearman_error_vs_n']}, "
          f"Spearman(min params, N) {t['spearman_min_params_vs_n']}")
    for c in result["cells_failed"]:
        print(f"cell m={c['d_model']} f={c['fraction']} failed after {c['attempts']} "
              f"attempt(s): {c['error']}")
    return result


def main(argv=None) -> int:
    """Exit 0, or 1 when the outputs were written but some cells failed on every attempt
    (rerun to retry just those)."""
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, checkpoints=False,
                        dry_run_specs=lambda a: dry_run_cells(
                            a.train, a.data, a.task or REAL_LEVEL.get(a.data, "token"),
                            {**({"data_path": a.data_path} if a.data_path else {}),
                             **({"n_examples": a.n_examples} if a.n_examples else {})}),
                        output_name=lambda args, result: result["name"],
                        failed_key="cells_failed")

if __name__ == "__main__":
    raise SystemExit(main())
