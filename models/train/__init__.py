"""The training package: one config (:mod:`.config`), presets (:mod:`.presets`), the one
description of a run and its hash (:mod:`.runconfig`), building and checking one
(:mod:`.spec`), the one loop with callbacks (:mod:`.loop`; its parts: the loss
:mod:`.loss`, evaluation and data :mod:`.evaluation`, checkpoints :mod:`.writer`, RNG state
:mod:`.rng`, :mod:`.callbacks`), what a run costs before it runs (:mod:`.costs`), the checkpoint
cache (:mod:`.cache`) and the command line (:mod:`.cli`, ``python -m models.train``).

Import from the submodules (``from models.train.loop import train``); this package file stays
light so that :mod:`models.checkpoint` can read :class:`~models.train.config.TrainConfig`
without importing the loop that writes checkpoints.
"""

from models.train.config import TrainConfig, lr_at

__all__ = ["TrainConfig", "lr_at"]
