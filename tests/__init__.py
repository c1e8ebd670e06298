"""The suite's tests, organised as the package is: ``unit/<package>/`` (one module or function
at a time, in this process), ``integration/`` (several layers together: training, checkpoints,
analyses, HuggingFace, torchrun, Ray), ``e2e/`` (commands as a user types them, the docs site,
a toy fifth paper) and ``contract/`` (the suite's shape: layers, registries, glossary, hand-kept
lists, flag bounds, the model contract). Shared helpers and fixtures stay here."""

from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[1]  # the repository
