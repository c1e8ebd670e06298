"""Hooked sequence models (one architecture per file), checkpoints and training."""

from models.checkpoint import (
    CheckpointError,
    is_hf_source,
    read_checkpoint,
    save_checkpoint,
)
from models.loading import load
from models.registry import ARCHS, HF_ARCHS, ArchError, build_model, model_class

__all__ = [
    "ARCHS", "HF_ARCHS", "ArchError", "CheckpointError", "build_model", "is_hf_source", "load",
    "model_class", "read_checkpoint", "save_checkpoint",
]
