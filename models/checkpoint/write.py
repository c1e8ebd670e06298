"""Writing checkpoint files: save a payload atomically, and the run-long writer lock.

Saves go through :mod:`seqprobe.atomic` (temp file in the same directory, fsync, rename; stale
temps of killed writers removed), so a crash mid-save leaves the previous file intact, and the
new file keeps the mode of the one it replaces. Writing knows no architecture or task (the
layout is :mod:`models.checkpoint.layout`'s), so the model base class saves through it without
importing the registries that reading a file validates against (:mod:`models.checkpoint.io`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from models.checkpoint.layout import check_complete, with_digests
from models.checkpoint.paths import check_writable
from seqprobe.atomic import atomic_file, exclusive_lock
from seqprobe.errors import CheckpointError, SaveError


def save_checkpoint(payload: dict[str, Any], ckpt_path: str | os.PathLike) -> Path:
    """Write ``payload`` atomically to ``ckpt_path``, with the digest of its weights.

    A failure (disk full, permissions) is one :class:`SaveError` line and leaves any previous
    file at ``ckpt_path`` unchanged; Ctrl-C mid-save leaves it unchanged too.
    """
    ckpt_path = Path(ckpt_path)
    check_complete(payload)
    check_writable(ckpt_path)
    payload = with_digests(payload)
    opened = False
    try:
        with atomic_file(ckpt_path) as f:
            opened = True  # the temp file exists: a failure from here is the save's
            torch.save(payload, f)
    except OSError as e:
        if not opened:
            raise SaveError(f"{ckpt_path}: cannot write a checkpoint here ({e.strerror})",
                            str(e.strerror)) from None
        raise SaveError(f"{ckpt_path}: could not save the checkpoint ({e}); any previous "
                        "file there is unchanged", str(e)) from None
    except RuntimeError as e:  # torch's zip writer reports a full disk as RuntimeError
        if not opened:
            raise
        why = _write_failure(e, ckpt_path.parent)
        raise SaveError(f"{ckpt_path}: could not save the checkpoint ({why}); any previous "
                        "file there is unchanged", why) from None
    return ckpt_path


def _write_failure(e: RuntimeError, directory: Path) -> str:
    """Why torch.save's writer failed, in a few words: the OS's reason where the message
    carries one ("No space left on device"), else its first line, with the space left in
    ``directory`` (a short write, "unexpected pos", is how a full disk often shows)."""
    text = str(e)
    for reason in ("No space left on device", "Disk quota exceeded", "File too large",
                   "Input/output error"):
        if reason in text:
            return reason
    why = text.strip().splitlines()[0][:200] if text.strip() else type(e).__name__
    with contextlib.suppress(OSError):
        why += f"; {shutil.disk_usage(directory).free / 2**20:.1f} MiB free on that disk"
    return why


@contextlib.contextmanager
def exclusive_writer(ckpt_path: str | os.PathLike) -> Iterator[Path]:
    """Hold ``.NAME.lock`` beside ``ckpt_path`` for a whole run (:func:`seqprobe.atomic.
    exclusive_lock`): a second live writer of the same checkpoint is refused at once (one line
    naming the holder's pid) instead of both running and one result being lost. The kernel
    drops the lock when its holder dies, so a crashed run never blocks the next; the lock file
    is removed when the run ends. Reentrant within a thread (the CLI, then its ``train()``)."""
    ckpt_path = Path(ckpt_path)
    lock_path = ckpt_path.parent / f".{ckpt_path.name}.lock"

    def busy(who: str) -> CheckpointError:
        return CheckpointError(f"{ckpt_path}: {who} is writing this checkpoint now (it holds "
                               f"{lock_path.name}); wait for it to end or choose another --out")

    def unusable(reason: str) -> CheckpointError:
        return CheckpointError(f"{ckpt_path}: cannot lock it for writing ({reason})")

    with exclusive_lock(lock_path, busy, unusable):
        yield ckpt_path
