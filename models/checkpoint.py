"""Checkpoint files: one ``.pt`` dict, loadable with ``torch.load(path, weights_only=True)``.

Layout (DESIGN.md): ``{"format": 1, "model": {"arch", "config"}, "task": {"name", "config"},
"train": {config, seed, step, samples_seen, rng}, "state_dict", "optimizer" (optional),
"history": [metrics]}``. Writes are atomic (temp file in the same directory, fsync, rename),
so a crash mid-save leaves the previous file intact. Loading never unpickles code and fails with
one clear :class:`CheckpointError` on a missing, truncated, foreign or mismatched file.

Untrusted files: a file that is not a PyTorch zip archive is never handed to an unpickler at
all (its pickle opcodes are only *scanned*, to say whether it would have imported code); a zip
archive goes through ``torch.load(weights_only=True)``, which refuses every global outside
torch's tensor allow-list before anything runs.
"""

from __future__ import annotations

import os
import pickle
import pickletools
import re
import tempfile
import warnings
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from models.registry import ARCHS, build_model, model_class
from models.train.config import TrainConfig
from tasks.base import TaskError, config_from_dict
from tasks.registry import TASKS, task_class

FORMAT = 1
REQUIRED = ("format", "model", "task", "train", "state_dict", "history")
ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes zip archives (the only kind this suite reads)
# opcodes that make an unpickler import or call something (the way pickles carry code)
CODE_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX",
                "BUILD", "EXT1", "EXT2", "EXT4"}


class CheckpointError(TaskError):
    """A checkpoint that cannot be used: the message says which file and why."""


def save_checkpoint(ckpt: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``ckpt`` atomically to ``path`` (temp file + fsync + rename).

    The temp file lives in the target's directory so the final ``os.replace`` is a rename on
    one file system (atomic on POSIX): readers see the old file or the new one, never half.
    """
    path = Path(path)
    missing = [k for k in REQUIRED if k not in ckpt]
    if missing:
        raise CheckpointError(f"refusing to save an incomplete checkpoint: missing {missing}")
    check_writable(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot write a checkpoint here ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(ckpt, f)
            f.flush()
            os.fsync(f.fileno())
        _before_rename_hook(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # disk full, permissions: one line, old file untouched
            raise CheckpointError(f"{path}: could not save the checkpoint ({e}); any previous "
                                  "file there is unchanged") from None
        raise
    _fsync_dir(path.parent)  # make the rename itself durable
    return path


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def _before_rename_hook(tmp: str) -> None:
    """Test seam: tests monkeypatch this to simulate a crash between write and rename."""


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early (before any training) if a checkpoint cannot be written to ``path``."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory; give a file path such as "
                              f"{path / 'ckpt.pt'}")
    parent = path.parent
    for p in (parent, *parent.parents):  # the first existing ancestor must be a directory
        if p.exists():
            if not p.is_dir():
                raise CheckpointError(f"{path}: cannot create a checkpoint under {p}, "
                                      "which is a file")
            break
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot create directory {parent} ({e.strerror})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CheckpointError(f"{path}: directory {parent} is not writable")
    return path


# ---------------------------------------------------------------------------- reading
def _pickle_imports(data: bytes) -> list[str]:
    """Names a pickle would import when loaded, found by scanning opcodes (nothing is run)."""
    found, strings = [], []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name == "GLOBAL":
                found.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL":
                found.append(".".join(strings[-2:]) if len(strings) >= 2 else "<global>")
            elif op.name in CODE_OPCODES and not found:
                found.append(f"<{op.name.lower()}>")
            elif isinstance(arg, str):
                strings.append(arg)
    except Exception:  # noqa: BLE001 - garbage bytes: report what was seen before the error
        pass
    return found


def _zip_pickle_imports(path: Path) -> list[str]:
    """Imports outside torch's own that the ``data.pkl`` of a torch zip archive would make."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
            data = z.read(name) if name else b""
    except (zipfile.BadZipFile, OSError, KeyError):
        return []
    return [n for n in _pickle_imports(data)
            if not n.startswith(("torch.", "collections.OrderedDict", "<"))]


def _first_sentence(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    cut = text.find(". ")
    text = text[: cut + 1] if cut > 0 else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _torch_load(path: Path, map_location) -> Any:
    """``torch.load(weights_only=True)`` with every failure turned into one clear line."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head != ZIP_MAGIC:
        # Not a torch zip archive: never unpickle it. Scan it only to say what it is.
        imports = _pickle_imports(path.read_bytes())
        if imports:
            raise CheckpointError(
                f"{path}: refused: the file is a pickle that would import {imports[0]} (code) "
                "when loaded; it was not loaded or executed")
        raise CheckpointError(f"{path}: not a probe-suite checkpoint (not a PyTorch .pt archive)")
    try:
        # torch warns about pickle protocols: keep stderr to the one line that matters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        # weights_only refused a global before running it
        imports = _zip_pickle_imports(path)
        match = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = imports[0] if imports else (match.group(1) if match else "objects that are not "
                                           "tensors or plain data")
        raise CheckpointError(
            f"{path}: refused: the file holds pickled code ({what}), which a checkpoint never "
            "needs; it was not executed") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError, KeyError) as e:
        if zipfile.is_zipfile(path) and not _zip_has_pickle(path):
            raise CheckpointError(f"{path}: not a probe-suite checkpoint (a zip archive, but not "
                                  "one written by torch.save)") from None
        detail = _first_sentence(e)
        detail = f" ({detail})" if detail and not detail.startswith("[") else ""
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint archive{detail}") from None


def _zip_has_pickle(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("data.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _need(cond: bool, path, message: str) -> None:
    if not cond:
        raise CheckpointError(f"{path}: {message}")


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def validate_checkpoint(ckpt: Any, path: str | os.PathLike = "<checkpoint>") -> dict:
    """Check the layout of a loaded checkpoint dict; unknown config keys are rejected.

    The model, task and train configs are checked against their dataclasses (no weights are
    allocated); whether the weights fit the model is checked by :func:`model_from_checkpoint`.
    """
    _need(isinstance(ckpt, dict) and "format" in ckpt, path,
          "not a probe-suite checkpoint (no 'format' field)")
    fmt = ckpt["format"]
    _need(isinstance(fmt, int) and not isinstance(fmt, bool) and fmt == FORMAT, path,
          f"checkpoint format {fmt!r} is not supported (this version reads format {FORMAT})")
    missing = [k for k in REQUIRED if k not in ckpt]
    _need(not missing, path, f"checkpoint lacks {missing}")
    model, task, train = ckpt["model"], ckpt["task"], ckpt["train"]
    _need(isinstance(model, dict) and isinstance(model.get("arch"), str)
          and isinstance(model.get("config"), dict), path,
          "the 'model' entry must be {'arch': str, 'config': dict}")
    _need(isinstance(task, dict) and isinstance(task.get("name"), str)
          and isinstance(task.get("config"), dict), path,
          "the 'task' entry must be {'name': str, 'config': dict}")
    _need(isinstance(train, dict), path, "the 'train' entry must be a dict")
    for key in ("step", "samples_seen"):
        _need(key not in train or _is_count(train[key]), path,
              f"train.{key} must be a count >= 0, got {train.get(key)!r}")
    sd = ckpt["state_dict"]
    _need(isinstance(sd, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                       for k, v in sd.items()), path,
          "'state_dict' must map parameter names to tensors")
    _need(isinstance(ckpt["history"], list) and all(isinstance(h, dict) for h in ckpt["history"]),
          path, "'history' must be a list of dicts")
    _need(isinstance(ckpt.get("optimizer", {}), dict), path, "'optimizer' must be a dict")
    _need(model["arch"] in ARCHS, path,
          f"unknown arch {model['arch']!r}; allowed: {', '.join(sorted(ARCHS))}")
    _need(task["name"] in TASKS, path,
          f"unknown task {task['name']!r}; allowed: {', '.join(sorted(TASKS))}")
    try:
        # configs are checked without allocating weights (a paper-sized model is large)
        config_from_dict(model_class(model["arch"]).config_cls, model["config"])
        config_from_dict(task_class(task["name"]).config_cls, task["config"])
        if "config" in train:
            _need(isinstance(train["config"], dict), path, "train.config must be a dict")
            config_from_dict(TrainConfig, train["config"])
    except TaskError as e:
        raise CheckpointError(f"{path}: {e}") from None
    except ImportError as e:
        raise CheckpointError(f"{path}: this version cannot build it ({e})") from None
    except (TypeError, ValueError) as e:  # a config value no check anticipated
        raise CheckpointError(f"{path}: invalid config ({type(e).__name__}: "
                              f"{_first_sentence(e)})") from None
    return ckpt


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load and validate a checkpoint dict without building the model."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file")
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file")
    try:
        size = path.stat().st_size
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror})") from None
    if size == 0:
        raise CheckpointError(f"{path}: empty file, not a checkpoint")
    if not os.access(path, os.R_OK):
        raise CheckpointError(f"{path}: permission denied")
    return validate_checkpoint(_torch_load(path, map_location), path)


def state_dict_mismatch(model, sd: dict) -> str:
    """One line naming the first differences between a model's weights and a state dict."""
    own = model.state_dict()
    missing = [k for k in own if k not in sd]
    extra = [k for k in sd if k not in own]
    shapes = [f"{k} is {list(sd[k].shape)} in the file but {list(own[k].shape)} for the config"
              for k in own if k in sd and sd[k].shape != own[k].shape]
    parts = []
    if missing:
        parts.append(f"missing {missing[:3]}{'…' if len(missing) > 3 else ''}")
    if extra:
        parts.append(f"unexpected {extra[:3]}{'…' if len(extra) > 3 else ''}")
    if shapes:
        parts.append(shapes[0] + (f" (+{len(shapes) - 1} more)" if len(shapes) > 1 else ""))
    return "; ".join(parts)


def model_from_checkpoint(ckpt: dict, path: str | os.PathLike = "<checkpoint>"):
    """Rebuild the model described by a checkpoint dict and load its weights (strict)."""
    try:
        model = build_model(ckpt["model"]["arch"], ckpt["model"]["config"])
    except TaskError as e:
        raise CheckpointError(f"{path}: {e}") from None
    except (TypeError, ValueError, KeyError) as e:  # a config value no check anticipated
        raise CheckpointError(f"{path}: invalid model config ({type(e).__name__}: "
                              f"{_first_sentence(e)})") from None
    sd = ckpt["state_dict"]
    mismatch = state_dict_mismatch(model, sd) if isinstance(sd, dict) else "not a dict"
    if mismatch:
        raise CheckpointError(f"{path}: weights do not match the config: {mismatch}")
    try:
        model.load_state_dict(sd, strict=True)
    except (RuntimeError, TypeError) as e:
        raise CheckpointError(f"{path}: weights do not match the config: "
                              f"{_first_sentence(e)}") from None
    return model


def load(path: str | os.PathLike, device: str | torch.device = "cpu", eval_mode: bool = True,
         archs: Iterable[str] | None = None):
    """``models.load(path)``: rebuild a suite model from a checkpoint file alone.

    The model comes back on ``device`` in eval mode; ``model.checkpoint`` keeps the rest of the
    file (task, train config, history) for analyses. ``archs``: the architectures the caller
    can use; any other is refused before the model is built.
    """
    ckpt = read_checkpoint(path)
    if archs is not None:
        allowed = sorted(set(archs))
        _need(ckpt["model"]["arch"] in allowed, path,
              f"this analysis needs a {' or '.join(allowed)} checkpoint, but the file holds "
              f"a {ckpt['model']['arch']!r} model")
    model = model_from_checkpoint(ckpt, path).to(device)
    if eval_mode:
        model.eval()
    model.checkpoint = {k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer")}
    return model
