"""The checkpoint layout (DESIGN.md), the one place a payload is assembled, its digests, and
its validation.

A *payload* is the dict a checkpoint file holds: ``{"format": 1, "model": {"arch", "config"},
"task": {"name", "config"}, "train": {config, seed, step, samples_seen, rng}, "state_dict",
"optimizer" (optional), "history": [metrics], "digest", "resume_digest", "record_digest"}``
(the weights; the RNG and optimizer state; the rest of the record). Validation checks a
loaded payload without building its model; a layout that changes bumps :data:`FORMAT` and adds
a one-time translation of the old one to :data:`UPGRADES`, so files already written still load.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import torch

from models.checkpoint.untrusted import (
    check_task_bounds,
    check_tensor_storage,
    first_sentence,
    need,
    tensors,
)
from models.registry import ARCHS, model_class
from models.train_config import TrainConfig
from seqprobe.config import config_from_dict
from seqprobe.errors import CheckpointError, InputError
from tasks.registry import TASKS, task_class

FORMAT = 1
REQUIRED = ("format", "model", "task", "train", "state_dict", "history")
# tensors a checkpoint may hold (what torch.save writes for these models, and plain data)
TENSOR_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                 torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool}
# UPGRADES[n] turns a format-n payload into format n + 1. Empty: every file written so far is
# format 1.
UPGRADES: dict[int, Callable[[dict], dict]] = {}


def make_checkpoint(arch: str, model_config: dict[str, Any], task: str,
                    task_config: dict[str, Any], train: dict[str, Any],
                    state_dict: dict[str, torch.Tensor], history: list | None = None,
                    optimizer: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one place a payload is assembled (DESIGN's layout): a trained run's and a hand-set
    construction's alike. Tensors are detached and on the CPU (not cloned: a CPU model's
    weights are shared, so save the payload before the next optimiser step)."""
    payload = {
        "format": FORMAT,
        "model": {"arch": arch, "config": dict(model_config)},
        "task": {"name": task, "config": dict(task_config)},
        "train": dict(train),
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        "history": list(history or []),
    }
    if optimizer is not None:
        payload["optimizer"] = optimizer
    return payload


def tensor_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """``sha256:…`` over every tensor of a state dict: name, dtype, shape and bytes, in name
    order. Stored in the payload (``digest``) and checked on load: the zip archive's CRCs
    are not verified by ``torch.load``, so flipped bytes inside the weights would load."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach()
        t = t.cpu().contiguous() if t.device.type != "cpu" else t.contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    return f"sha256:{h.hexdigest()}"


def _feed(h, where: str, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"{where}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            _feed(h, f"{where}/{k}", obj[k])
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _feed(h, f"{where}/{i}", v)
    else:
        h.update(f"{where}={obj!r}\0".encode())


def resume_digest(payload: dict[str, Any]) -> str:
    """``sha256:…`` over what a resumed run restores besides the weights: the RNG states
    (``train.rng``) and the optimizer state. Stored as ``resume_digest`` and checked before a
    resume, so a flipped bit there is refused instead of silently changing the run."""
    h = hashlib.sha256()
    _feed(h, "rng", payload["train"].get("rng"))
    _feed(h, "optimizer", payload.get("optimizer"))
    return f"sha256:{h.hexdigest()}"


# what record_digest leaves to the other two digests (weights; optimizer and, in "train", RNG)
RECORD_EXCLUDED = frozenset({"state_dict", "optimizer", "digest", "resume_digest",
                             "record_digest"})


def record_digest(payload: dict[str, Any]) -> str:
    """``sha256:…`` over the whole record besides the weights and the optimizer state: format,
    model (arch and config), task (name and config), train (config, seed, step, …; its RNG
    state is :func:`resume_digest`'s, checked when a run resumes),
    history and any other entry. Stored as ``record_digest`` and checked on load, so a config
    edited after training (a task's β 1 → 1000) is refused instead of run and recorded as if
    trained so. A file written before it has none: its ``digest`` covers the weights only."""
    h = hashlib.sha256()
    for key in sorted(payload, key=str):
        if key not in RECORD_EXCLUDED:
            value = payload[key]
            if key == "train" and isinstance(value, dict):  # its RNG: resume_digest's
                value = {k: v for k, v in value.items() if k != "rng"}
            _feed(h, key, value)
    return f"sha256:{h.hexdigest()}"


def check_complete(payload: dict[str, Any]) -> None:
    """Refuse to save a payload that lacks a :data:`REQUIRED` entry (it could not be read)."""
    missing = [k for k in REQUIRED if k not in payload]
    if missing:
        raise CheckpointError(f"refusing to save an incomplete checkpoint: missing {missing}")


def with_digests(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as it is saved: with the digests of its weights and of the rest of its record
    and, where it can be resumed, of its RNG and optimizer state."""
    payload = {**payload, "digest": tensor_digest(payload["state_dict"])}
    payload["record_digest"] = record_digest(payload)
    if "rng" in payload["train"] or "optimizer" in payload:
        payload["resume_digest"] = resume_digest(payload)
    return payload


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _upgrade(payload: dict, ckpt_path) -> dict:
    """Translate an older layout to :data:`FORMAT`, one format at a time (:data:`UPGRADES`)."""
    fmt = payload["format"]
    while type(fmt) is int and fmt in UPGRADES:  # type, not isinstance: True is no format
        payload = UPGRADES[fmt](payload)
        need(payload.get("format") == fmt + 1, ckpt_path,
             f"the translation of format {fmt} did not give format {fmt + 1}")
        fmt = payload["format"]
    return payload


def validate_checkpoint(payload: Any, ckpt_path: str | os.PathLike = "<checkpoint>") -> dict:
    """Check the layout of a loaded payload (translated from an older format first) and return
    it; unknown config keys are rejected.

    The model, task and train configs are checked against their dataclasses (no weights are
    allocated), task sizes against ``MAX_TASK_INT``, and every stored tensor against its
    storage; whether the weights fit the model is checked by ``model_from_checkpoint``.
    """
    need(isinstance(payload, dict) and "format" in payload, ckpt_path,
         "not a probe-suite checkpoint (no 'format' field)")
    payload = _upgrade(payload, ckpt_path)
    fmt = payload["format"]
    need(isinstance(fmt, int) and not isinstance(fmt, bool) and fmt == FORMAT, ckpt_path,
         f"checkpoint format {fmt!r} is not supported (this version reads format {FORMAT})")
    missing = [k for k in REQUIRED if k not in payload]
    need(not missing, ckpt_path, f"checkpoint lacks {missing}")
    model, task, train = payload["model"], payload["task"], payload["train"]
    need(isinstance(model, dict) and isinstance(model.get("arch"), str)
         and isinstance(model.get("config"), dict), ckpt_path,
         "the 'model' entry must be {'arch': str, 'config': dict}")
    need(isinstance(task, dict) and isinstance(task.get("name"), str)
         and isinstance(task.get("config"), dict), ckpt_path,
         "the 'task' entry must be {'name': str, 'config': dict}")
    need(isinstance(train, dict), ckpt_path, "the 'train' entry must be a dict")
    for key in ("step", "samples_seen"):
        need(key not in train or _is_count(train[key]), ckpt_path,
             f"train.{key} must be a count >= 0, got {train.get(key)!r}")
    sd = payload["state_dict"]
    need(isinstance(sd, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                      for k, v in sd.items()), ckpt_path,
         "'state_dict' must map parameter names to tensors")
    for k, v in sd.items():
        need(v.dtype in TENSOR_DTYPES, ckpt_path, f"state_dict[{k[:80]!r}] has dtype "
             f"{v.dtype}, which no suite model uses")
    for t in tensors(payload):
        check_tensor_storage(t, ckpt_path, "a stored tensor")
    need(isinstance(payload["history"], list)
         and all(isinstance(h, dict) for h in payload["history"]),
         ckpt_path, "'history' must be a list of dicts")
    need(isinstance(payload.get("optimizer", {}), dict), ckpt_path, "'optimizer' must be a dict")
    digest = payload.get("digest")
    need(digest is None or (isinstance(digest, str) and digest.startswith("sha256:")), ckpt_path,
         f"'digest' must be 'sha256:…', got {str(digest)[:40]!r}")
    need(model["arch"] in ARCHS, ckpt_path,
         f"unknown arch {model['arch'][:80]!r}; allowed: {', '.join(sorted(ARCHS))}")
    need(task["name"] in TASKS, ckpt_path,
         f"unknown task {task['name'][:80]!r}; allowed: {', '.join(sorted(TASKS))}")
    try:
        # configs are checked without allocating weights (a paper-sized model is large)
        config_from_dict(model_class(model["arch"]).config_cls, model["config"])
        config_from_dict(task_class(task["name"]).config_cls, task["config"])
        check_task_bounds(task["name"], task["config"])
        if "config" in train:
            need(isinstance(train["config"], dict), ckpt_path, "train.config must be a dict")
            config_from_dict(TrainConfig, train["config"])
    except CheckpointError:
        raise
    except InputError as e:
        raise CheckpointError(f"{ckpt_path}: {e}") from None
    except ImportError as e:
        raise CheckpointError(f"{ckpt_path}: this version cannot build it ({e})") from None
    except Exception as e:  # noqa: BLE001 - a config value no check anticipated
        raise CheckpointError(f"{ckpt_path}: invalid config ({type(e).__name__}: "
                              f"{first_sentence(e)})") from None
    return payload
