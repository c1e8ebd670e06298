"""Where a model's weights came from (:class:`Provenance`): ``model.provenance`` of every model,
suite or HuggingFace. Its own module so that :mod:`models.hf` reads it without importing
:mod:`models.base` (whose model class builds its tokenizer with :mod:`models.hf`'s)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Provenance:
    """Where a model's weights came from: what its checkpoint holds besides the model config,
    the task (``model.task``) and the weights. A model built in code has the empty one.

    ``train`` is the checkpoint's training record as stored (``config``, ``seed``, ``step``,
    ``samples_seen``, ``stop`` …; a construction's ``construction`` and its parameters);
    ``model.train_config`` is its ``config`` as a dataclass. ``pretrained`` describes a
    HuggingFace model (``name``, ``local``, ``hf_architecture``, ``config``: its config.json).
    ``model_config`` is the model config as the file stored it: the fields its run set, which
    ``RunConfig``'s cache key reads (``model.config`` is the whole dataclass).
    """

    source: str | None = None  # the checkpoint file, HF directory or hub name it was loaded from
    train: dict[str, Any] = field(default_factory=dict)
    history: tuple[dict[str, Any], ...] = ()  # the metrics logged while it trained
    pretrained: dict[str, Any] | None = None
    model_config: dict[str, Any] | None = None

    @classmethod
    def of_checkpoint(cls, ckpt: dict[str, Any], source: str | os.PathLike | None = None
                      ) -> Provenance:
        return cls(source=None if source is None else str(source),
                   train=dict(ckpt.get("train") or {}),
                   history=tuple(dict(h) for h in ckpt.get("history") or ()),
                   model_config=dict(ckpt["model"]["config"]) if ckpt.get("model") else None)

    @property
    def step(self) -> int | None:
        return self.train.get("step")

    @property
    def samples_seen(self) -> int | None:
        return self.train.get("samples_seen")

    @property
    def stop(self) -> str:
        """Why training stopped before its step budget (``stop_at`` reached …), or ``""``."""
        return self.train.get("stop", "")
