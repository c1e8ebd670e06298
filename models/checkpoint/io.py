"""Reading checkpoint files: load and validate one, and the overwrite guard.

Reads never unpickle code (:mod:`models.checkpoint.untrusted`) and fail with one
:class:`CheckpointError` line on a missing, truncated, foreign, corrupt or mismatched file.
Saving and the run-long writer lock are :mod:`models.checkpoint.write`'s, which knows no
registry; they are re-exported here, where callers have imported them from.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

from models.checkpoint.layout import record_digest, tensor_digest
from models.checkpoint.paths import check_path, file_kind, short_path
from models.checkpoint.schema import validate_checkpoint
from models.checkpoint.untrusted import check_claimed_bytes, load_untrusted
from models.checkpoint.write import exclusive_writer, save_checkpoint
from seqprobe.errors import CheckpointError

__all__ = ["check_overwrite", "exclusive_writer", "file_sha256", "read_checkpoint", "read_once",
           "save_checkpoint"]

_NOTICED: set[str] = set()  # files whose "no digest" notice was printed (once per file)


def _verify_weights(payload: dict, ckpt_path: Path) -> None:
    """The stored digest (corruption inside the tensors), and no NaN / inf weights."""
    sd = payload["state_dict"]
    digest = payload.get("digest")
    if digest is None:
        key = os.path.abspath(ckpt_path)
        if key not in _NOTICED:
            _NOTICED.add(key)
            print(f"notice: {ckpt_path}: no digest of its weights (written before checkpoints "
                  "carried one), so corruption inside them cannot be detected; saving it again "
                  "adds one", file=sys.stderr)
    elif tensor_digest(sd) != digest:
        raise CheckpointError(f"{ckpt_path}: corrupt: its weights do not match the digest "
                              "stored with them (bytes changed inside the file, or an edit "
                              "that did not update 'digest')")
    stored = payload.get("record_digest")  # absent in files written before it: weights only
    if stored is not None and record_digest(payload) != stored:
        raise CheckpointError(f"{ckpt_path}: corrupt: its record (model or task config, training "
                              "record, history) does not match the digest stored with it (an "
                              "edit after it was written, or bytes changed inside the file)")
    for name, t in sd.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise CheckpointError(f"{ckpt_path}: refused: its weights hold NaN or infinite "
                                  f"values ({bad:,} of {t.numel():,} in {name[:80]}); an "
                                  "analysis of them would be meaningless")


# Within read_once(): what each file gave, by the file's identity (device, inode, size, mtime:
# a file replaced or rewritten is another), so that a lookup that checks an entry, the load of
# it and the hash a result records of it read the file once. Outside, nothing is kept.
_READ: list[dict[tuple, object]] = []


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    """Within: :func:`read_checkpoint` and :func:`file_sha256` of one unchanged file read it
    once (an analysis' run: the zoo's check of a cache entry, its load, the hash of it in the
    result). The payload is shared between the reads: a caller does not change it."""
    _READ.append(_READ[-1] if _READ else {})
    try:
        yield
    finally:
        _READ.pop()


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (hex), computed once per unchanged file within
    :func:`read_once`."""
    st = os.stat(path)
    memo = _READ[-1] if _READ else None
    key = ("sha256", _identity(st))
    if memo is not None and key in memo:
        return memo[key]
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    if memo is not None:
        memo[key] = h.hexdigest()
    return h.hexdigest()


def read_checkpoint(ckpt_path: str | os.PathLike,
                    map_location: str | torch.device = "cpu") -> dict:
    """Load and validate a payload without building the model: its layout, configs and
    bounds, the digest of its weights and that they are finite (once per unchanged file within
    :func:`read_once`)."""
    ckpt_path = check_path(ckpt_path)
    try:
        st = os.stat(ckpt_path)
    except FileNotFoundError:
        raise CheckpointError(f"{ckpt_path}: no such file") from None
    except OSError as e:
        raise CheckpointError(f"{short_path(ckpt_path)}: cannot read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{ckpt_path}: is a directory, not a checkpoint file")
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever, a device never end
        raise CheckpointError(f"{ckpt_path}: is {file_kind(st.st_mode)}, not a checkpoint file")
    if st.st_size == 0:
        raise CheckpointError(f"{ckpt_path}: empty file, not a checkpoint")
    if not os.access(ckpt_path, os.R_OK):
        raise CheckpointError(f"{ckpt_path}: permission denied")
    memo = _READ[-1] if _READ else None
    key = ("payload", _identity(st), str(map_location))
    if memo is not None and key in memo:
        return memo[key]
    payload = validate_checkpoint(load_untrusted(ckpt_path, map_location), ckpt_path)
    check_claimed_bytes(payload, ckpt_path, st.st_size)
    _verify_weights(payload, ckpt_path)
    if memo is not None:
        memo[key] = payload
    return payload


def check_overwrite(ckpt_path: str | os.PathLike, resume: str | os.PathLike | None = None,
                    overwrite: bool = False) -> None:
    """Refuse to replace an existing file that is not this run's own (the checkpoint it resumes)
    unless ``overwrite``: another run's checkpoint is not lost to a mistyped ``--out``."""
    ckpt_path = Path(ckpt_path)
    if overwrite or not ckpt_path.exists():
        return
    if resume is not None and Path(resume).exists() and os.path.samefile(ckpt_path, resume):
        return
    try:
        payload = read_checkpoint(ckpt_path)
    except CheckpointError:
        raise CheckpointError(f"{ckpt_path}: already exists (not a readable checkpoint); "
                              "refusing to replace it: pass --overwrite to replace it or choose "
                              "another --out") from None
    raise CheckpointError(
        f"{ckpt_path}: already holds a checkpoint ({payload['model']['arch']} on "
        f"{payload['task']['name']}, step {payload['train'].get('step', '?')}) that this run did "
        f"not resume; pass --overwrite to replace it, --resume {ckpt_path} to continue it, or "
        "choose another --out")
