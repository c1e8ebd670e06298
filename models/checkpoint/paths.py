"""Path checks for checkpoint files, before any work: a path the OS would refuse, a target that
must never be replaced (a device node, a FIFO, a symlink), and what names a HuggingFace model
rather than a suite checkpoint. Each refusal is one :class:`CheckpointError` line."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from seqprobe.errors import CheckpointError

NAME_MAX, PATH_MAX = 255, 4096  # POSIX defaults when the file system does not say
FILE_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
              (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
              (stat.S_ISSOCK, "a socket"))
# "gpt2", "EleutherAI/pythia-410m": what a HuggingFace hub name looks like
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def short_path(path: str | os.PathLike, limit: int = 120) -> str:
    """``path`` for a one-line message: a path of thousands of bytes is cut in the middle."""
    text = str(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}…{text[-(limit // 2 - 1):]}"


def _limit(path: Path, name: str, default: int) -> int:
    """``os.pathconf`` of the first existing ancestor of ``path`` (the file system's limit)."""
    for p in (path, *path.parents):
        try:
            return int(os.pathconf(p, name))
        except (OSError, ValueError, AttributeError):
            continue
    return default


def check_path(path: str | os.PathLike) -> Path:
    """Raise one :class:`CheckpointError` line for a path the OS would refuse as too long (a name
    over NAME_MAX bytes, the whole over PATH_MAX) instead of a traceback later."""
    path = Path(path)
    try:
        parts = [os.fsencode(part) for part in path.parts]
        full = os.fsencode(os.path.abspath(path))
    except (UnicodeError, ValueError) as e:  # a NUL byte, an unencodable name
        raise CheckpointError(f"{short_path(path)}: not a usable path ({e})") from None
    name_max = _limit(path.parent, "PC_NAME_MAX", NAME_MAX)
    longest = max(parts, key=len, default=b"")
    if len(longest) > name_max:
        raise CheckpointError(f"{short_path(path)}: a name in this path is {len(longest)} bytes "
                              f"long; the file system allows at most {name_max} per name")
    path_max = _limit(path.parent, "PC_PATH_MAX", PATH_MAX)
    if len(full) >= path_max:
        raise CheckpointError(f"{short_path(path)}: the path is {len(full)} bytes long; the "
                              f"file system allows at most {path_max - 1}")
    return path


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words (for a refusal)."""
    return next((k for test, k in FILE_KINDS if test(mode)), "not a regular file")


def check_writable(ckpt_path: str | os.PathLike) -> Path:
    """Fail early (before any training) if a checkpoint cannot be written to ``ckpt_path``: it
    must be a new path or a regular file (a device node, FIFO, socket or symlink is never
    replaced), in a writable directory, and not too long for the file system."""
    ckpt_path = check_path(ckpt_path)
    try:
        st = os.lstat(ckpt_path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise CheckpointError(f"{short_path(ckpt_path)}: cannot write a checkpoint here "
                              f"({e.strerror})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{ckpt_path}: is a directory; give a file path such as "
                              f"{ckpt_path / 'ckpt.pt'}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{ckpt_path}: is {file_kind(st.st_mode)}, not a regular file; "
                              "refusing to replace it with a checkpoint (give the path of a new "
                              "or regular file)")
    parent = ckpt_path.parent
    for p in (parent, *parent.parents):  # the first existing ancestor must be a directory
        if p.exists():
            if not p.is_dir():
                raise CheckpointError(f"{ckpt_path}: cannot create a checkpoint under {p}, "
                                      "which is a file")
            break
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(f"{ckpt_path}: cannot create directory {parent} "
                              f"({e.strerror})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CheckpointError(f"{ckpt_path}: directory {parent} is not writable")
    return ckpt_path


def is_hf_source(path: str | os.PathLike) -> bool:
    """Is ``path`` a HuggingFace model rather than a suite checkpoint: a directory holding
    ``config.json`` or, where no such file or directory exists, a hub name (not ``*.pt``)?"""
    p = check_path(Path(path).expanduser())  # a name too long to stat is one line, not OSError
    if p.is_dir():
        return (p / "config.json").is_file()
    if p.exists() or p.suffix in (".pt", ".pth"):
        return False
    return bool(HUB_NAME.match(str(path)))
