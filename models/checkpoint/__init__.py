"""Checkpoint files: one ``.pt`` payload, loadable with ``torch.load(path, weights_only=True)``.

Split by job, each module importing only those listed before it:

- :mod:`~models.checkpoint.paths`: path checks (too long, not a regular file, not writable;
  a HuggingFace source rather than a checkpoint).
- :mod:`~models.checkpoint.untrusted`: what a hostile file could do (pickled code, lying zip
  directories, tensors that claim more than they store) and the bounds on what a file may
  make this process allocate.
- :mod:`~models.checkpoint.schema`: the payload layout (DESIGN.md), its digests, validation
  and the translation of older formats.
- :mod:`~models.checkpoint.io`: saving (atomic, through :mod:`seqprobe.atomic`) and reading files,
  the overwrite guard and the run-long writer lock.
- :mod:`~models.checkpoint.rebuild`: the model of a payload, sized before it is allocated.

Words used apart: the *checkpoint file* at ``ckpt_path``, the *payload* dict it holds; a zoo
entry and a cache path are :mod:`analyses.zoo`'s and :mod:`models.train.cache`'s. Every name
that was importable from ``models.checkpoint`` before the split still is.
"""

from models.checkpoint.io import (
    check_overwrite,
    exclusive_writer,
    read_checkpoint,
    save_checkpoint,
)
from models.checkpoint.paths import (
    FILE_KINDS,
    HUB_NAME,
    check_path,
    check_writable,
    is_hf_source,
    short_path,
)
from models.checkpoint.rebuild import (
    DEEP,
    meta_model,
    model_footprint,
    model_from_checkpoint,
    state_dict_mismatch,
)
from models.checkpoint.schema import (
    FORMAT,
    REQUIRED,
    TENSOR_DTYPES,
    UPGRADES,
    make_checkpoint,
    resume_digest,
    tensor_digest,
    validate_checkpoint,
)
from models.checkpoint.untrusted import (
    MAX_MODEL_INT,
    MAX_REBUILT_BYTES,
    MAX_TASK_INT,
    ZIP_MAGIC,
    check_task_bounds,
)
from models.checkpoint.untrusted import check_tensor_storage as _check_tensor_storage
from models.checkpoint.untrusted import need as _need
from seqprobe.errors import CheckpointError, SaveError

# _need and _check_tensor_storage: the private names models.hf and models.loading import
__all__ = [
    "DEEP", "FILE_KINDS", "FORMAT", "HUB_NAME", "MAX_MODEL_INT", "MAX_REBUILT_BYTES",
    "MAX_TASK_INT", "REQUIRED", "TENSOR_DTYPES", "UPGRADES", "ZIP_MAGIC", "CheckpointError",
    "SaveError", "_check_tensor_storage", "_need", "check_overwrite", "check_path",
    "check_task_bounds", "check_writable", "exclusive_writer", "is_hf_source",
    "make_checkpoint", "meta_model", "model_footprint", "model_from_checkpoint",
    "read_checkpoint", "resume_digest", "save_checkpoint", "short_path", "state_dict_mismatch",
    "tensor_digest", "validate_checkpoint",
]
