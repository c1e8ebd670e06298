"""Atomic file writes and locks: the one implementation every writer of the suite uses
(checkpoints, analysis JSON and PNG, the reproduce index and timings, dry-run tables).

Writes (:func:`atomic_file`, :func:`write_atomic`): a file is written under a temp name unique
to this writer (``.NAME.XXXX.tmp``) in the target's directory, flushed to disk, then renamed
over the target (atomic on POSIX): a reader sees the old file or the new one, never half of
either, and two writers never share a temp file. The writer holds an ``flock`` on its temp file
until after the rename, so a temp file nobody holds is one a killed writer left: the next write
of the same target removes it (:func:`remove_stale_temps`).

Locks (:func:`output_lock`, :func:`exclusive_lock`): the kernel's ``flock`` on a ``.NAME.lock``
file. It goes with the process, so a killed holder leaves nothing to clean up, and a second
writer is refused at once in one line instead of both reporting success with files from either.

POSIX only (``fcntl``). Lives at the bottom layer so that every package above can use it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from seqprobe.errors import OutputError

STALE_EMPTY_S = 10.0  # an empty temp file younger than this may be a live writer's
_UMASK_LOCK = threading.Lock()
_HELD: dict[str, tuple[int, int]] = {}  # lock file -> (thread holding it, depth) in this process
_HELD_LOCK = threading.Lock()  # guards _HELD


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
    (``mkstemp`` alone would give 0600, unreadable to the rest of a group sharing a cache)."""
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


# ---------------------------------------------------------------------------- writes
def lock_fd(fd: int, blocking: bool = True) -> bool:
    """An exclusive ``flock`` on ``fd``; False when another process holds it (non-blocking)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:  # a file system without flock: write unlocked, and never clean its temps
        return blocking
    return True


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the ``.NAME.*.tmp`` files of target ``path`` that no live writer holds.

    Every writer locks its temp file from creation to rename, and the kernel drops the lock when
    a process dies (kill -9 included), so an unlocked temp file is one a dead writer left. An
    empty one may be a live writer's between ``mkstemp`` and its lock: only an empty file
    older than :data:`STALE_EMPTY_S` counts as stale.
    """
    path = Path(path)
    removed: list[Path] = []
    prefix = f".{path.name}."
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(".tmp")) or \
                not entry.is_file(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            if not lock_fd(fd, blocking=False):
                continue  # a live writer
            st = os.fstat(fd)
            if st.st_size == 0 and time.time() - st.st_mtime < STALE_EMPTY_S:
                continue
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def _before_rename_hook(tmp: str) -> None:
    """Test seam: tests monkeypatch this to simulate a crash between write and rename."""


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file whose bytes replace ``path`` atomically when the block ends without an
    exception (temp file, fsync, rename); on any exception, Ctrl-C included, the temp file is
    removed and ``path`` is untouched. The directory must exist: a directory that vanished is
    the caller's error to report, not one to paper over. ``OSError`` is raised as it comes."""
    path = Path(path)
    remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    f = None
    try:
        lock_fd(fd)  # held until after the rename: a live temp file is never "stale"
        f = os.fdopen(fd, "wb")
        yield f
        f.flush()
        os.fchmod(f.fileno(), new_file_mode(path))
        os.fsync(f.fileno())
        _before_rename_hook(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        if f is not None:
            f.close()
        else:
            os.close(fd)
    fsync_dir(path.parent)  # make the rename itself durable


def check_output_file(path: str | os.PathLike, flag: str = "--out") -> Path:
    """Fail before any work when :func:`write_atomic` could not write ``path``: one
    :class:`OutputError` line for a directory or a non-regular file there, a file where a folder
    goes, or a folder this process cannot create or write in (tried with a temp file: root
    passes ``os.access`` even in a read-only directory). Creates the missing folders."""
    path = Path(path)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise OutputError(f"{flag} {path}: cannot write it ({e.strerror})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise OutputError(f"{flag} {path}: is {what}; give the path of a file to write")
    for p in path.parents:  # the first existing ancestor must be a directory
        if p.exists():
            if not p.is_dir():
                raise OutputError(f"{flag} {path}: cannot write under {p}, which is a file")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name[:40]}.",
                                         suffix=".write-test"):
            pass
    except OSError as e:
        raise OutputError(f"{flag} {path}: cannot write in {path.parent} "
                          f"({e.strerror or type(e).__name__})") from None
    return path


def read_table(path: str | os.PathLike, form: int) -> dict:
    """The JSON object a writer left at ``path`` when its ``"format"`` is ``form``; else an
    empty one (missing, unreadable, or of another format): for the tables the suite only
    estimates from, which are never a reason to refuse a run."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("format") == form else {}


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_file`), creating its directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


# ---------------------------------------------------------------------------- own files
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_own(path: str | os.PathLike, flags: int = os.O_RDWR, mode: int = 0o666) -> int:
    """Open (create) a lock or log file this suite writes in place (not by rename), without
    following what someone else may have put at ``path``: a symbolic link is never followed
    (``O_NOFOLLOW``: opening it would truncate or lock the file it points to, anywhere), and a
    FIFO, a device, a directory or a file with other names (a hard link to another file) is
    refused. ``OSError`` whose ``strerror`` says so in words; the caller truncates the file
    itself (``O_TRUNC`` would act before these checks could)."""
    path = Path(path)
    try:
        fd = os.open(path, (flags & ~os.O_TRUNC) | os.O_CREAT | NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError:
        if os.path.islink(path):
            raise OSError(errno.ELOOP, f"{path.name} is a symbolic link; this suite never "
                          "makes one there and does not follow it: remove it", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{path.name} is not a regular file; remove it", str(path))
        if st.st_nlink > 1:
            raise OSError(errno.EMLINK, f"{path.name} has other names (a hard link to another "
                          "file); this suite does not write through it: remove it", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


# ---------------------------------------------------------------------------- locks
def _same_inode(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _take(lock_path: Path) -> tuple[int | None, str]:
    """Open (create) ``lock_path``, take its ``flock`` without waiting and write this pid in it
    (so a refused writer can name the holder): ``(fd, "")``, or ``(None, pid)`` when a live
    process holds it (``pid`` as the holder wrote it, or ""). ``OSError`` when the file cannot
    be made or the file system has no ``flock``."""
    for _ in range(5):  # the holder may remove the file between our open and our lock: retry
        fd = open_own(lock_path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            held = isinstance(e, BlockingIOError) or e.errno == errno.EACCES
            pid = ""
            if held:
                with contextlib.suppress(OSError):
                    pid = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            if held:
                return None, pid if pid.isdigit() else ""
            raise
        if _same_inode(fd, lock_path):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd, ""
        os.close(fd)  # we locked a file its holder had just removed
    raise OSError(errno.EAGAIN, "the lock file keeps changing")


@contextlib.contextmanager
def output_lock(directory: str | os.PathLike, name: str) -> Iterator[Path]:
    """Hold ``directory/.name.lock`` while ``name``'s outputs are made: a second process that
    writes the same outputs into the same directory at the same time is refused in one line.
    Directories made here are removed again when the block fails (only while empty)."""
    directory = Path(directory)
    lock = directory / f".{name}.lock"
    new = [p for p in (directory, *directory.parents) if not p.exists()]  # made here
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, _ = _take(lock)
    except OSError as e:
        raise OutputError(f"{lock}: cannot create the output lock ({e.strerror})") from None
    if fd is None:  # the directory and its lock are the holder's: nothing of ours to remove
        raise OutputError(f"{directory}: another process is writing {name}'s outputs there "
                          "now; wait for it, or give another --out")
    ok = False
    try:
        yield lock
        ok = True
    finally:
        if not ok and new:  # a failed run leaves no output directory behind it
            with contextlib.suppress(OSError):
                lock.unlink()
                for p in new:
                    p.rmdir()  # only while empty: another writer's files stay
        os.close(fd)


@contextlib.contextmanager
def exclusive_lock(lock_path: str | os.PathLike, busy: Callable[[str], Exception],
                   unusable: Callable[[str], Exception]) -> Iterator[Path]:
    """Hold ``lock_path`` for a whole run of one writer; the lock file is removed at the end.

    Reentrant within a thread (a CLI takes it, then the ``train()`` it calls takes it again).
    A second holder is refused at once: ``busy(who)`` is raised, ``who`` naming the holder
    (``another process (pid N)``, ``another run in this process``); ``unusable(reason)`` when
    the lock file cannot be made or locked. The callers word the line (what is being written,
    which flag to change)."""
    lock_path = Path(lock_path)
    key, me = os.path.abspath(lock_path), threading.get_ident()
    with _HELD_LOCK:  # check and claim in one step: two threads never both see it free
        held = _HELD.get(key)
        if held is None:
            _HELD[key] = (me, 1)
        elif held[0] == me:
            _HELD[key] = (me, held[1] + 1)
    if held is not None and held[0] != me:
        raise busy("another run in this process")
    if held is not None:  # reentered: the outer block holds the file lock
        try:
            yield lock_path
        finally:
            with _HELD_LOCK:
                _HELD[key] = (me, _HELD[key][1] - 1)
        return
    try:
        try:
            fd, pid = _take(lock_path)
        except OSError as e:
            raise unusable(e.strerror or str(e)) from None
        if fd is None:
            raise busy(f"another process (pid {pid})" if pid else "another process")
        try:
            yield lock_path
        finally:
            with contextlib.suppress(OSError):
                if _same_inode(fd, lock_path):  # removed while held: no one can be waiting on it
                    os.unlink(lock_path)
            os.close(fd)
    finally:
        with _HELD_LOCK:
            del _HELD[key]
