"""What a hostile checkpoint file could do, refused before it costs anything.

Code: a file that is not a PyTorch zip archive is never handed to an unpickler at all (its
pickle opcodes are only *scanned*, to say whether it would have imported code); a zip archive
has its directory checked, then goes through ``torch.load(weights_only=True)``, which refuses
every global outside torch's tensor allow-list before anything runs.

Resources: bounds on what a file may ask this process to allocate beyond its own bytes (a 1 kB
file must not make the loader build a 10^9-wide model or a terabyte batch): tensors that claim
more bytes than they store, the ints of a task config, the ints of a model config that size
nothing stored, and buffers rebuilt from the config rather than stored.

Every refusal is one :class:`CheckpointError` line naming the file.
"""

from __future__ import annotations

import pickle
import pickletools
import re
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from seqprobe.errors import CheckpointError, ConfigError
from seqprobe.memory import human_bytes

ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes zip archives (the only kind this suite reads)
# opcodes that make an unpickler import or call something (the way pickles carry code)
CODE_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX",
                "BUILD", "EXT1", "EXT2", "EXT4"}
# Every int of a task config (a length, an alphabet, a count). A task that large would only
# allocate until the machine gives out (a max_len of 10^12 asks for terabytes per batch).
MAX_TASK_INT = 2**24
# Every int of a model config that is not a stored dimension: it sizes nothing stored but still
# costs work at build time (STU's filter_len sizes an eigen-solve whose cost grows as
# filter_len x 1024).
MAX_MODEL_INT = 4096
# Buffers that are not stored (rebuilt from the config, such as STU's filters), beyond the
# stored weights.
MAX_REBUILT_BYTES = 64 * 2**20


def need(cond: bool, path, message: str) -> None:
    """Raise ``CheckpointError("{path}: {message}")`` unless ``cond``."""
    if not cond:
        raise CheckpointError(f"{path}: {message}")


def first_sentence(text: str, limit: int = 120) -> str:
    """The first sentence of an error text, for the end of a one-line message."""
    text = " ".join(str(text).split())
    cut = text.find(". ")
    text = text[: cut + 1] if cut > 0 else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------- code
def _pickle_imports(data: bytes) -> list[str]:
    """Names a pickle would import when loaded, found by scanning opcodes (nothing is run)."""
    found, strings = [], []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name == "GLOBAL":
                found.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL":
                found.append(".".join(strings[-2:]) if len(strings) >= 2 else "<global>")
            elif op.name in CODE_OPCODES and not found:
                found.append(f"<{op.name.lower()}>")
            elif isinstance(arg, str):
                strings.append(arg)
    except Exception:  # noqa: BLE001 - garbage bytes: report what was seen before the error
        pass
    return found


def _zip_pickle_imports(ckpt_path: Path) -> list[str]:
    """Imports outside torch's own that the ``data.pkl`` of a torch zip archive would make."""
    try:
        with zipfile.ZipFile(ckpt_path) as z:
            name = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
            data = z.read(name) if name else b""
    except Exception:  # noqa: BLE001 - a hostile archive fails in many ways; nothing to report
        return []
    return [n for n in _pickle_imports(data)
            if not n.startswith(("torch.", "collections.OrderedDict", "<"))]


def _zip_has_pickle(ckpt_path: Path) -> bool:
    try:
        with zipfile.ZipFile(ckpt_path) as z:
            return any(n.endswith("data.pkl") for n in z.namelist())
    except Exception:  # noqa: BLE001 - see _check_archive
        return False


def _check_archive(ckpt_path: Path, size: int) -> None:
    """The zip directory, read before ``torch.load`` sees the file: ``torch.save`` stores every
    entry uncompressed, and an entry larger than the file would make the reader allocate what
    the file claims (a deflated entry can claim gigabytes in a kilobyte)."""
    try:
        with zipfile.ZipFile(ckpt_path) as z:
            infos = z.infolist()
    except Exception as e:  # noqa: BLE001 - a hostile directory can fail in many ways
        detail = first_sentence(e)
        raise CheckpointError(f"{ckpt_path}: truncated or corrupt checkpoint archive"
                              f"{f' ({detail})' if detail else ''}") from None
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"{ckpt_path}: not a probe-suite checkpoint (a zip archive "
                                  "with compressed entries, which torch.save never writes)")
        if info.file_size > size or info.compress_size > size or info.header_offset > size:
            raise CheckpointError(f"{ckpt_path}: truncated or corrupt checkpoint archive (entry "
                                  f"{info.filename[:60]!r} claims more bytes than the file has)")


def load_untrusted(ckpt_path: Path, map_location) -> Any:
    """``torch.load(weights_only=True)`` with every failure turned into one clear line."""
    with open(ckpt_path, "rb") as f:
        head = f.read(4)
    if head != ZIP_MAGIC:
        # Not a torch zip archive: never unpickle it. Scan it only to say what it is (a prefix:
        # the imports of a pickle come before what they build).
        with open(ckpt_path, "rb") as f:
            imports = _pickle_imports(f.read(16 * 2**20))
        if imports:
            raise CheckpointError(
                f"{ckpt_path}: refused: the file is a pickle that would import {imports[0]} "
                "(code) when loaded; it was not loaded or executed")
        raise CheckpointError(f"{ckpt_path}: not a probe-suite checkpoint (not a PyTorch .pt "
                              "archive)")
    _check_archive(ckpt_path, ckpt_path.stat().st_size)
    try:
        # torch warns about pickle protocols: keep stderr to the one line that matters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(ckpt_path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        # weights_only refused a global before running it
        imports = _zip_pickle_imports(ckpt_path)
        match = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = imports[0] if imports else (match.group(1) if match else "objects that are not "
                                           "tensors or plain data")
        raise CheckpointError(
            f"{ckpt_path}: refused: the file holds pickled code ({what}), which a checkpoint "
            "never needs; it was not executed") from None
    except Exception as e:  # noqa: BLE001 - any failure to parse untrusted bytes is "corrupt"
        if zipfile.is_zipfile(ckpt_path) and not _zip_has_pickle(ckpt_path):
            raise CheckpointError(f"{ckpt_path}: not a probe-suite checkpoint (a zip archive, "
                                  "but not one written by torch.save)") from None
        detail = first_sentence(e)
        detail = f" ({detail})" if detail and not detail.startswith("[") else ""
        raise CheckpointError(f"{ckpt_path}: truncated or corrupt checkpoint archive"
                              f"{detail}") from None


# ---------------------------------------------------------------------------- tensors
def tensors(obj, depth: int = 0) -> Iterator[torch.Tensor]:
    """Every tensor in nested dicts / lists / tuples (depth-limited: a file chooses the depth)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 32 and isinstance(obj, dict):
        for v in obj.values():
            yield from tensors(v, depth + 1)
    elif depth < 32 and isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors(v, depth + 1)


def view_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def check_tensor_storage(t: torch.Tensor, path, what: str) -> None:
    """A stored tensor may not claim more elements than its stored bytes hold: a stride-0 view
    of one float can claim 10^10 elements, and copying or checking it would allocate them."""
    need(t.layout == torch.strided, path, f"{what}: a {t.layout} tensor (checkpoints hold "
         "dense tensors only)")
    try:
        nbytes = t.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - not a plain CPU storage
        raise CheckpointError(f"{path}: {what}: a tensor without readable storage") from None
    need(view_bytes(t) <= nbytes, path, f"{what}: a tensor of shape {list(t.shape)[:8]} "
         f"claims {view_bytes(t):,} bytes over {nbytes:,} stored bytes (a broadcast view)")


def check_claimed_bytes(payload: dict, ckpt_path, file_size: int) -> None:
    """All tensors together may not claim far more than the file holds (views sharing one
    storage each pass :func:`check_tensor_storage` yet multiply what a copy allocates)."""
    claimed = sum(view_bytes(t) for t in tensors(payload))
    need(claimed <= 4 * file_size + 2**20, ckpt_path, f"its tensors claim "
         f"{human_bytes(claimed)}, far more than the file's {human_bytes(file_size)} (views "
         "sharing one storage)")


# ---------------------------------------------------------------------------- config sizes
def _ints(value) -> Iterator[int]:
    """The ints in a config value (itself, or the items of a tuple / list)."""
    if isinstance(value, int) and not isinstance(value, bool):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, int) and not isinstance(v, bool):
                yield v


def check_task_bounds(name: str, config: dict) -> None:
    """Raise :class:`ConfigError` when an int of a task config (a length, an alphabet, a count)
    is beyond :data:`MAX_TASK_INT`. Seeds are exempt."""
    for key, value in config.items():
        if "seed" in str(key):
            continue
        for v in _ints(value):
            if abs(v) > MAX_TASK_INT:
                raise ConfigError(f"{name} task: {key} = {v} is beyond this suite's bound "
                                  f"({MAX_TASK_INT:,}) for task sizes")


def check_config_fits_file(payload: dict, ckpt_path) -> None:
    """Before even a meta build: every int of the model config is a dimension of the stored
    weights or at most :data:`MAX_MODEL_INT`, and each layer has a stored tensor."""
    sd, config = payload["state_dict"], payload["model"]["config"]
    dims = {d for t in sd.values() for d in t.shape}
    for key, value in config.items():
        if "seed" in key or key == "n_layers":
            continue
        for v in _ints(value):
            need(abs(v) <= MAX_MODEL_INT or v in dims, ckpt_path,
                 f"model config {key} = {v} does not fit the stored weights (it is none of "
                 f"their dimensions, and sizes that are not stored are bounded by "
                 f"{MAX_MODEL_INT:,})")
    n_layers = config.get("n_layers")
    need(not isinstance(n_layers, int) or n_layers <= len(sd), ckpt_path,
         f"model config n_layers = {n_layers}, but the file stores only {len(sd)} tensors")


def check_rebuilt_bytes(meta, state_dict: dict, ckpt_path) -> int:
    """The bytes of the model ``meta`` (its meta-device build) once built: the stored weights
    plus the buffers rebuilt from the config, which may exceed the weights by at most
    :data:`MAX_REBUILT_BYTES`."""
    stored = sum(view_bytes(t) for t in state_dict.values())
    persistent = set(meta.state_dict())
    rebuilt = sum(view_bytes(b) for name, b in meta.named_buffers() if name not in persistent)
    need(rebuilt <= stored + MAX_REBUILT_BYTES, ckpt_path,
         f"its config asks for {human_bytes(rebuilt)} of buffers that are not stored (rebuilt "
         f"from the config), far more than its {human_bytes(stored)} of weights")
    return stored + rebuilt
