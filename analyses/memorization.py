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
from probes.fits import fit_trends
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
            backend: Backend | None = None) -> dict[str, Any]:
    """Train the grid (resuming saved cells) and summarise it (Figs. 1 and 2).

    ``task_config`` / ``model`` / ``train`` override the preset and grid rows. The cells run
    on ``backend`` (:mod:`models.sweep`; default: ``n_jobs`` local worker processes); each
    finished cell is saved under ``out_dir/memorization_{data}_{level}_cells/`` as it lands
    and reused by the next call unless ``fresh``. A cell whose task fails on every attempt is
    listed in ``cells_failed`` (and marked ``failed`` in ``cells``); the others still run.
    """
    grid = grid_settings(preset, data, level)
    widths = tuple(widths or grid["widths"])
    fractions = tuple(fractions or FRACTIONS)
    patience = grid["patience"] if patience is None else patience
    check(len(widths) >= 1 and len(fractions) >= 1, "need at least one width and one fraction")
    check(all(0 < f <= 1 for f in fractions), f"fractions must be in (0, 1], got {fractions}")
    check(0 < threshold < 1, f"threshold must be in (0, 1), got {threshold}")
    check(patience >= 0, f"patience must be >= 0, got {patience}")
    check(n_jobs >= 1, f"n_jobs must be >= 1, got {n_jobs}")
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
        "wall_time_s": round(wall, 1), "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "param_counting": PARAM_COUNTING,
        "config": {"model": {k: v for k, v in any_spec.model.items() if k != "d_model"},
                   "task": {k: v for k, v in any_spec.task_config.items() if k != "fraction"},
                   "train": config_to_dict(any_spec.train)},
        "name": name,
    })
    return result


def dry_run_cells(preset: str, data: str = "synthetic", level: str = "token",
                  task_config: dict | None = None):
    """The grid's largest and smallest cells as ``(label, spec builder)`` for ``--dry-run``
    (the widest model on all N examples, the narrowest on the fewest; every other cell's step
    lies between theirs). ``task_config`` overrides the grid's (a data file, N)."""
    grid = grid_settings(preset, data, level)

    def cell(m: int, f: float):
        return lambda: make_spec(ARCH, "memorization", preset, model={"d_model": m},
                                 task_config={**grid["task"], **(task_config or {}),
                                              "data": data, "level": level, "fraction": f},
                                 train=grid.get("train", {}))

    return [(f"{NAME}_{data}_{level}/m{m}_f{f:g}", cell(m, f))
            for m, f in ((max(grid["widths"]), max(FRACTIONS)),
                         (min(grid["widths"]), min(FRACTIONS)))]


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
    """Both panels side by side (Fig. 1 and Fig. 2)."""
    fig, (a, b) = new_figure(2, 5.0, 4.0)
    plot_heatmap(result, a)
    plot_params(result, b)
    return fig


# ---------------------------------------------------------------------------- outputs
CSV_FIELDS = ("fraction", "n_examples", "n_labels", "seq_len", "vocab_size", "n_classes",
              "d_model", "n_layers", "n_heads", "d_mlp", "pe", "params_total",
              "params_non_embedding", "train_error", "best_error", "memorized", "loss", "steps",
              "stop", "time_s")


def write_csv(result: dict, path: str | Path) -> Path:
    """One row per cell."""
    path = Path(path)
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for cell in result["cells"]:
            w.writerow(cell)
    tmp.replace(path)
    return path


def table(result: dict) -> list[list[Any]]:
    """Training error per N (rows) and width (columns), then the smallest memorising model."""
    rows = [["N \\ m", *result["widths"], "min m", "params", "non-emb"]]
    for i, n in enumerate(result["n_examples"]):
        rows.append([n, *[float(e) for e in result["error"][i]],
                     result["min_width"][i] or "-", result["min_params_total"][i] or "-",
                     result["min_params_non_embedding"][i] or "-"])
    rows.append(["params", *result["params_total"], "", "", ""])
    rows.append(["non-emb", *result["params_non_embedding"], "", "", ""])
    return rows


# ---------------------------------------------------------------------------- the paper's claims
def claim_trends(d: dict) -> tuple[str, bool]:
    """Fig. 1: the error does not rise with width nor fall with N in >= 80 % of neighbour
    pairs (within the trend tolerance)."""
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
     Claim("the smallest memorising model grows with N (Fig. 2)", claim_params)),
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
                     backend=backend_of(args, args.jobs, args.device))
    name, out = result["name"], Path(args.out)
    save_figure(plot_heatmap(result), out / f"{name}_heatmap.png")
    save_figure(plot_params(result), out / f"{name}_params.png")
    csv_path = write_csv(result, out / f"{name}_cells.csv")
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
