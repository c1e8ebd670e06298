"""Validation of a loaded payload against the checkpoint layout (:mod:`models.checkpoint.layout`)
and the registries of architectures and tasks, and the translation of older formats.

Validation checks a loaded payload without building its model; a layout that changes bumps
:data:`~models.checkpoint.layout.FORMAT` and adds a one-time translation of the old one to
:data:`UPGRADES`, so files already written still load. The layout and digests are re-exported
here, where callers have imported them from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from models.checkpoint.layout import (
    FORMAT,
    RECORD_EXCLUDED,
    REQUIRED,
    check_complete,
    make_checkpoint,
    record_digest,
    resume_digest,
    tensor_digest,
    with_digests,
)
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

__all__ = ["FORMAT", "RECORD_EXCLUDED", "REQUIRED", "TENSOR_DTYPES", "UPGRADES",
           "check_complete", "make_checkpoint", "record_digest", "resume_digest",
           "tensor_digest", "validate_checkpoint", "with_digests"]

# tensors a checkpoint may hold (what torch.save writes for these models, and plain data)
TENSOR_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                 torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool}
# UPGRADES[n] turns a format-n payload into format n + 1. Empty: every file written so far is
# format 1.
UPGRADES: dict[int, Callable[[dict], dict]] = {}


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
