"""Atomic file writes and per-output locks, for every writer of results (analysis JSON and PNG,
the reproduce index and timings).

A file is written under a temp name unique to this writer in the target's directory, flushed to
disk, then renamed over the target (atomic on POSIX): a reader sees the old file or the new
one, never half of either, and two writers never share a temp file. Lives at the bottom layer
so that every package above can use it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from tasks.base import TaskError

_UMASK_LOCK = threading.Lock()


def umask() -> int:
    """The process umask, read without changing it where the system says it (Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:  # elsewhere the only way to read it is to set it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def new_file_mode(path: Path) -> int:
    """The mode of the file being replaced (a shared file stays shared), else the umask's
    (``mkstemp`` alone would give 0600)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~umask()


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (where the file system can fsync a directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` atomically (unique temp file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fchmod(f.fileno(), new_file_mode(path))
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


@contextlib.contextmanager
def output_lock(directory: str | os.PathLike, name: str) -> Iterator[Path]:
    """Hold ``directory/.name.lock`` while ``name``'s outputs are made: a second process that
    writes the same outputs into the same directory at the same time is refused in one line
    (instead of both reporting success with files from either). The lock is the kernel's
    (``flock``): it goes with the process, so a killed writer leaves nothing to clean up."""
    directory = Path(directory)
    lock = directory / f".{name}.lock"
    new = [p for p in (directory, *directory.parents) if not p.exists()]  # made here
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise TaskError(f"{lock}: cannot create the output lock ({e.strerror})") from None
    ok = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise TaskError(f"{directory}: another process is writing {name}'s outputs there "
                            "now; wait for it, or give another --out") from None
        yield lock
        ok = True
    finally:
        if not ok and new:  # a refused run leaves no output directory behind it
            with contextlib.suppress(OSError):
                lock.unlink()
                for p in new:
                    p.rmdir()  # only while empty: another writer's files stay
        os.close(fd)
