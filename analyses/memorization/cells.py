"""One cell: train an encoder transformer on a fixed set until it memorises it, and keep the
result where the next run finds it.

Training is the suite's one loop (``models.train.loop.train``, no checkpoint file) with two
changes that a memorization cell needs: the evaluation measures the error on the *whole*
training set (:func:`train_error_evaluator`, not sampled batches), and a callback
(:class:`StopRule`) ends the run at convergence, so most cells stop long before the step
budget.

Finished cells are the run's own artifacts: one JSON file each in ``NAME_cells/`` beside the
other outputs (:class:`CellStore`), looked up by the hash of the cell's run
(:meth:`RunConfig.hash`) and the stopping rule (:func:`cell_key`), not by file name. They
stay there rather than in the zoo's checkpoint cache because a stopped sweep resumes from its
own ``--out`` folder, and a new ``--out`` starts a new sweep (the zoo's cache is shared by
every run of the machine).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from analyses.common import to_jsonable
from analyses.memorization.grid import THRESHOLD
from models.registry import build_model
from models.train.cache import check_cache_dir
from models.train.callbacks import Callback, Run
from models.train.loop import TrainingDiverged, train
from models.train.runconfig import RunConfig
from models.train_config import TrainConfig
from seqprobe.atomic import write_atomic
from seqprobe.device import resolve_device
from seqprobe.sweep import Failed
from tasks.registry import make_task


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


def train_cell(run_config: RunConfig, threshold: float = THRESHOLD, patience: int = 10,
               device: str | torch.device = "cpu") -> dict[str, Any]:
    """Train one grid cell to convergence; return its numbers (JSON-able).

    Stops when the training error (whole set) is below ``threshold`` ("memorized"), when it
    has not improved for ``patience`` evaluations ("plateau", 0 disables), on a non-finite
    loss or gradient ("diverged"), or after ``run_config.train.steps`` steps ("max_steps").
    """
    rule = StopRule(threshold, patience)
    t0 = time.time()
    try:
        train(run_config, out=None, device=device, progress=False, callbacks=[rule],
              evaluator=train_error_evaluator)
        stop = rule.run.stop_reason or "max_steps"
    except TrainingDiverged:
        stop = "diverged"
    if rule.run is not None:
        model, task, step, loss = rule.run.model, rule.run.task, rule.run.step, rule.run.loss
    else:  # diverged on the first step: the weights are still the initial ones
        torch.manual_seed(run_config.train.seed)
        model = build_model(run_config.arch, run_config.model).to(resolve_device(device))
        task, step, loss = make_task(run_config.task_name, run_config.task_dict), 0, math.nan
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


@dataclass(frozen=True)
class CellSettings:
    """How every cell of a run is trained, beside its RunConfig: the stopping rule and where."""

    threshold: float = THRESHOLD
    patience: int = 10
    device: str = "cpu"
    threads: int = 1  # torch threads per task: the cells (or seeds) are the parallelism


def cell_key(run_config: RunConfig, threshold: float, patience: int) -> str:
    """What a saved cell must match to be reused: the run's hash (the zoo cache's key) and
    the stopping rule, since the same run stopped by another rule is another result. The
    formula is that of the files earlier runs saved, so they stay reusable."""
    blob = f"{run_config.hash()}|{threshold}|{patience}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch threads, then give the caller its own back (a task runs
    in the calling process when the backend has one job)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_cell(run_config: RunConfig, settings: CellSettings) -> dict[str, Any]:
    """Task body (a worker process, a Ray worker or this process): train one cell and tag it
    with its key. The caller saves it, so the cells of a cluster's workers land in the
    caller's output folder."""
    with torch_threads(settings.threads):
        result = train_cell(run_config, settings.threshold, settings.patience, settings.device)
    result["key"] = cell_key(run_config, settings.threshold, settings.patience)
    return result


def grid_cell_name(width: int, fraction: float) -> str:
    return f"m{width:05d}_f{round(100 * fraction):03d}.json"


def search_cell_name(n: int, m: int, seed: int) -> str:
    return f"m{m:05d}_n{n:05d}_s{seed}.json"


@dataclass(frozen=True)
class CellStore:
    """``NAME_cells/``: one JSON file per finished cell, written atomically as it lands, so a
    stopped run loses only the cells in flight. A file is served only when its key is the
    cell's (:func:`cell_key`); ``fresh`` serves none (every cell is trained again)."""

    folder: Path
    fresh: bool = False

    def open(self) -> CellStore:
        """Create the folder, or fail in one line before any training if it cannot be
        written (the zoo cache's check)."""
        check_cache_dir(self.folder)
        return self

    def lookup(self, name: str, run_config: RunConfig, settings: CellSettings) -> dict | None:
        """The saved cell of ``run_config`` under ``settings``' stopping rule, or None."""
        if self.fresh:
            return None
        try:
            cell = json.loads((self.folder / name).read_text())
        except (OSError, ValueError):
            return None  # missing or unreadable: train it again
        key = cell_key(run_config, settings.threshold, settings.patience)
        return cell if isinstance(cell, dict) and cell.get("key") == key else None

    def save(self, name: str, cell: dict[str, Any]) -> None:
        write_atomic(self.folder / name, json.dumps(to_jsonable(cell), indent=1))

    def reachable(self) -> bool:
        """Whether this process sees the folder (a remote Ray worker may not)."""
        return self.folder.is_dir()

    def cell(self, name: str, run_config: RunConfig, settings: CellSettings, seed: int,
             train=None) -> dict[str, Any]:
        """The cell of ``run_config``: the saved one (``reused`` True), else trained now by
        ``train(run_config, settings)`` (default :func:`run_cell`; tests pass an oracle) and saved
        as it lands where the folder is reachable."""
        cell = self.lookup(name, run_config, settings)
        if cell is not None:
            return {**cell, "reused": True}
        t = time.process_time()
        cell = (train or run_cell)(run_config, settings)
        cell.update(seed=seed, cpu_s=round(time.process_time() - t, 2))
        if self.reachable():
            self.save(name, cell)
        return {**cell, "reused": False}


def failed_cell(run_config: RunConfig, failure: Failed) -> dict[str, Any]:
    """The row of a cell whose task failed on every attempt: no numbers, the error (never
    saved, so the next run tries it again)."""
    return {"fraction": run_config.task.fraction, "d_model": run_config.model.d_model,
            "failed": True, "error": failure.error, "attempts": failure.attempts,
            "train_error": math.nan, "memorized": False, "stop": "failed"}
