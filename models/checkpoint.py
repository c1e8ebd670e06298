"""Checkpoint files: one ``.pt`` dict, loadable with ``torch.load(path, weights_only=True)``.

Layout (DESIGN.md): ``{"format": 1, "model": {"arch", "config"}, "task": {"name", "config"},
"train": {config, seed, step, samples_seen, rng}, "state_dict", "optimizer" (optional),
"history": [metrics]}``. Writes are atomic (temp file in the same directory, fsync, rename),
so a crash mid-save leaves the previous file intact. Loading never unpickles code and fails with
one clear :class:`CheckpointError` on a missing, truncated, foreign or mismatched file.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from tasks.base import TaskError

FORMAT = 1
REQUIRED = ("format", "model", "task", "train", "state_dict", "history")


class CheckpointError(TaskError):
    """A checkpoint that cannot be used: the message says which file and why."""


def save_checkpoint(ckpt: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``ckpt`` atomically to ``path`` (temp file + fsync + rename)."""
    path = Path(path)
    missing = [k for k in REQUIRED if k not in ckpt]
    if missing:
        raise CheckpointError(f"refusing to save an incomplete checkpoint: missing {missing}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(ckpt, f)
            f.flush()
            os.fsync(f.fileno())
        _before_rename_hook(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _before_rename_hook(tmp: str) -> None:
    """Test seam: tests monkeypatch this to simulate a crash between write and rename."""


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load and validate a checkpoint dict without building the model."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file")
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty file, not a checkpoint")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        # weights_only refuses anything that would run code; say so in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{path}: refused: the file holds objects other than tensors and plain data "
            f"(possibly code); it was not executed ({first[:160]})"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or foreign file: {msg[:160]})") from None
    if not isinstance(ckpt, dict) or "format" not in ckpt:
        raise CheckpointError(f"{path}: not a probe-suite checkpoint (no 'format' field)")
    if ckpt["format"] != FORMAT:
        raise CheckpointError(
            f"{path}: checkpoint format {ckpt['format']!r} is not supported (this version reads {FORMAT})"
        )
    missing = [k for k in REQUIRED if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {missing}")
    model = ckpt["model"]
    if not isinstance(model, dict) or "arch" not in model or "config" not in model:
        raise CheckpointError(f"{path}: checkpoint 'model' entry must hold 'arch' and 'config'")
    return ckpt


def model_from_checkpoint(ckpt: dict, path: str | os.PathLike = "<checkpoint>"):
    """Rebuild the model described by a checkpoint dict and load its weights (strict)."""
    from models.registry import build_model

    try:
        model = build_model(ckpt["model"]["arch"], ckpt["model"]["config"])
    except TaskError as e:
        raise CheckpointError(f"{path}: {e}") from None
    try:
        model.load_state_dict(ckpt["state_dict"], strict=True)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise CheckpointError(f"{path}: weights do not match the config: {first[:200]}") from None
    return model


def load(path: str | os.PathLike, device: str | torch.device = "cpu", eval_mode: bool = True):
    """``models.load(path)``: rebuild a suite model from a checkpoint file alone.

    The model comes back on ``device`` in eval mode; ``model.checkpoint`` keeps the rest of the
    file (task, train config, history) for analyses.
    """
    ckpt = read_checkpoint(path)
    model = model_from_checkpoint(ckpt, path).to(device)
    if eval_mode:
        model.eval()
    model.checkpoint = {k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer")}
    return model
