"""Hooked sequence models (one architecture per file), checkpoints and training.

The package's face is two functions: :func:`models.load` (a checkpoint, an export, a
HuggingFace model; a zoo recipe by ``zoo.path(NAME)``) and :func:`models.build_model` (an architecture from its
config); everything else is imported from the module that defines it.
"""

from models.loading import load
from models.registry import build_model

__all__ = ["build_model", "load"]
