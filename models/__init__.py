"""Hooked sequence models (one architecture per file), checkpoints and training."""

from models.checkpoint import CheckpointError, load, read_checkpoint, save_checkpoint
from models.registry import ARCHS, ArchError, build_model, model_class

__all__ = [
    "ARCHS", "ArchError", "CheckpointError", "build_model", "load", "model_class",
    "read_checkpoint", "save_checkpoint",
]
