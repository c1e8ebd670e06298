"""The checkpoint layout (DESIGN.md): the one place a payload is assembled, and its digests.

A *payload* is the dict a checkpoint file holds: ``{"format": 1, "model": {"arch", "config"},
"task": {"name", "config"}, "train": {config, seed, step, samples_seen, rng}, "state_dict",
"optimizer" (optional), "history": [metrics], "digest", "resume_digest", "record_digest"}``
(the weights; the RNG and optimizer state; the rest of the record).

This is the writing side: it knows no architecture or task. Checking a payload against the
registries is :mod:`models.checkpoint.schema`'s, above the registries, so the model base class
(which writes checkpoints) never imports the registry that finds the models.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from seqprobe.errors import CheckpointError

FORMAT = 1
REQUIRED = ("format", "model", "task", "train", "state_dict", "history")


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
