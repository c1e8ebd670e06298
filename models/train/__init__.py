"""The training package: one config (:mod:`.config`), presets (:mod:`.presets`), run specs and
their hash (:mod:`.spec`), the one loop with callbacks (:mod:`.loop`), the checkpoint cache
(:mod:`.cache`) and the command line (:mod:`.cli`, ``python -m models.train``).

Import from the submodules (``from models.train.loop import train``); this package file stays
light so that :mod:`models.checkpoint` can read :class:`~models.train.config.TrainConfig`
without importing the loop that writes checkpoints.
"""

from models.train.config import TrainConfig, lr_at

__all__ = ["TrainConfig", "lr_at"]
