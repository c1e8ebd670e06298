"""Checkpoint files: one ``.pt`` dict, loadable with ``torch.load(path, weights_only=True)``.

Layout (DESIGN.md): ``{"format": 1, "model": {"arch", "config"}, "task": {"name", "config"},
"train": {config, seed, step, samples_seen, rng}, "state_dict", "optimizer" (optional),
"history": [metrics]}``. Writes are atomic (temp file in the same directory, fsync, rename),
so a crash mid-save leaves the previous file intact. Loading never unpickles code and fails with
one clear :class:`CheckpointError` on a missing, truncated, foreign or mismatched file.

Untrusted files: a file that is not a PyTorch zip archive is never handed to an unpickler at
all (its pickle opcodes are only *scanned*, to say whether it would have imported code); a zip
archive goes through ``torch.load(weights_only=True)``, which refuses every global outside
torch's tensor allow-list before anything runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import pickletools
import re
import stat
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout

from models.device import check_fits, human_bytes
from models.registry import ARCHS, build_model, model_class
from models.train.config import TrainConfig
from tasks.atomic import fsync_dir, new_file_mode
from tasks.base import TaskError, config_from_dict
from tasks.registry import TASKS, task_class

try:
    import fcntl
except ImportError:  # not POSIX: no temp-file locks (and no stale-temp cleaning)
    fcntl = None

FORMAT = 1
REQUIRED = ("format", "model", "task", "train", "state_dict", "history")
ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes zip archives (the only kind this suite reads)
# opcodes that make an unpickler import or call something (the way pickles carry code)
CODE_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX",
                "BUILD", "EXT1", "EXT2", "EXT4"}
NAME_MAX, PATH_MAX = 255, 4096  # POSIX defaults when the file system does not say
STALE_EMPTY_S = 10.0  # an empty temp file younger than this may be a live writer's
# Bounds on what a file may ask this process to allocate beyond its own bytes (a 1 kB file must
# not make the loader build a 10^9-wide model): every int of a task config, every int of a model
# config that is not a stored dimension (STU's filter_len sizes an eigen-solve at build time whose
# cost grows as filter_len x 1024), and buffers that are not stored (rebuilt from the config,
# such as STU's filters) beyond the stored weights.
MAX_TASK_INT = 2**24
MAX_MODEL_INT = 4096
MAX_REBUILT_BYTES = 64 * 2**20
# tensors a checkpoint may hold (what torch.save writes for these models, and plain data)
TENSOR_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                 torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool}
_NOTICED: set[str] = set()
_HELD: dict[str, tuple[int, int]] = {}  # lock file -> (thread holding it, depth) in this process
_HELD_LOCK = threading.Lock()  # files whose "no digest" notice was printed (once per file)


class CheckpointError(TaskError):
    """A checkpoint that cannot be used: the message says which file and why."""


class SaveError(CheckpointError):
    """Writing a checkpoint failed (disk full, permissions); ``reason`` is the OS's words and
    any previous file at the target is unchanged."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason


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


def tensor_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """``sha256:…`` over every tensor of a state dict: name, dtype, shape and bytes, in name
    order. Stored in the checkpoint (``digest``) and checked on load: the zip archive's CRCs
    are not verified by ``torch.load``, so flipped bytes inside the weights would load."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach()
        t = t.cpu().contiguous() if t.device.type != "cpu" else t.contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    return f"sha256:{h.hexdigest()}"


def make_checkpoint(arch: str, model_config: dict[str, Any], task: str,
                    task_config: dict[str, Any], train: dict[str, Any],
                    state_dict: dict[str, torch.Tensor], history: list | None = None,
                    optimizer: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one place a checkpoint dict is assembled (DESIGN's layout): a trained run's and a
    hand-set construction's alike. Tensors are detached and on the CPU (not cloned: a CPU
    model's weights are shared, so save the dict before the next optimiser step)."""
    ck = {
        "format": FORMAT,
        "model": {"arch": arch, "config": dict(model_config)},
        "task": {"name": task, "config": dict(task_config)},
        "train": dict(train),
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        "history": list(history or []),
    }
    if optimizer is not None:
        ck["optimizer"] = optimizer
    return ck


def _feed(h, where: str, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"{where}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            _feed(h, f"{where}/{k}", obj[k])
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _feed(h, f"{where}/{i}", v)
    else:
        h.update(f"{where}={obj!r}\0".encode())


def resume_digest(ckpt: dict[str, Any]) -> str:
    """``sha256:…`` over what a resumed run restores besides the weights: the RNG states
    (``train.rng``) and the optimizer state. Stored as ``resume_digest`` and checked before a
    resume, so a flipped bit there is refused instead of silently changing the run."""
    h = hashlib.sha256()
    _feed(h, "rng", ckpt["train"].get("rng"))
    _feed(h, "optimizer", ckpt.get("optimizer"))
    return f"sha256:{h.hexdigest()}"


def save_checkpoint(ckpt: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``ckpt`` atomically to ``path`` (temp file + fsync + rename), with the digest of its
    weights.

    The temp file lives in the target's directory so the final ``os.replace`` is a rename on
    one file system (atomic on POSIX): readers see the old file or the new one, never half.
    The new file gets the mode of the file it replaces, or ``0666 & ~umask`` (``mkstemp`` alone
    would make it ``0600``, unreadable to the rest of a group sharing a cache). Temp files of
    this target that a killed writer left behind are removed first.
    """
    path = Path(path)
    missing = [k for k in REQUIRED if k not in ckpt]
    if missing:
        raise CheckpointError(f"refusing to save an incomplete checkpoint: missing {missing}")
    check_writable(path)
    ckpt = {**ckpt, "digest": tensor_digest(ckpt["state_dict"])}
    if "rng" in ckpt["train"] or "optimizer" in ckpt:
        ckpt["resume_digest"] = resume_digest(ckpt)
    remove_stale_temps(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise SaveError(f"{path}: cannot write a checkpoint here ({e.strerror})",
                        str(e.strerror)) from None
    f = None
    try:
        _lock_fd(fd)  # held until after the rename: a live temp file is never "stale"
        f = os.fdopen(fd, "wb")
        torch.save(ckpt, f)
        f.flush()
        os.fchmod(f.fileno(), new_file_mode(path))
        os.fsync(f.fileno())
        _before_rename_hook(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # disk full, permissions: one line, old file untouched
            raise SaveError(f"{path}: could not save the checkpoint ({e}); any previous "
                            "file there is unchanged", str(e)) from None
        raise
    finally:
        if f is not None:
            f.close()
        else:
            os.close(fd)
    fsync_dir(path.parent)  # make the rename itself durable
    return path


def _lock_fd(fd: int, blocking: bool = True) -> bool:
    """An exclusive ``flock`` on ``fd``; False when another process holds it (non-blocking)."""
    if fcntl is None:
        return True
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
    if fcntl is None:
        return removed
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
            if not _lock_fd(fd, blocking=False):
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


FILE_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
              (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
              (stat.S_ISSOCK, "a socket"))


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early (before any training) if a checkpoint cannot be written to ``path``: it must
    be a new path or a regular file (a device node, FIFO, socket or symlink is never replaced),
    in a writable directory, and not too long for the file system."""
    path = check_path(path)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise CheckpointError(f"{short_path(path)}: cannot write a checkpoint here "
                              f"({e.strerror})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{path}: is a directory; give a file path such as "
                              f"{path / 'ckpt.pt'}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in FILE_KINDS if test(st.st_mode)), "not a regular file")
        raise CheckpointError(f"{path}: is {kind}, not a regular file; refusing to replace it "
                              "with a checkpoint (give the path of a new or regular file)")
    parent = path.parent
    for p in (parent, *parent.parents):  # the first existing ancestor must be a directory
        if p.exists():
            if not p.is_dir():
                raise CheckpointError(f"{path}: cannot create a checkpoint under {p}, "
                                      "which is a file")
            break
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot create directory {parent} ({e.strerror})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CheckpointError(f"{path}: directory {parent} is not writable")
    return path


def check_overwrite(path: str | os.PathLike, resume: str | os.PathLike | None = None,
                    overwrite: bool = False) -> None:
    """Refuse to replace an existing file that is not this run's own (the checkpoint it resumes)
    unless ``overwrite``: another run's checkpoint is not lost to a mistyped ``--out``."""
    path = Path(path)
    if overwrite or not path.exists():
        return
    if resume is not None and Path(resume).exists() and os.path.samefile(path, resume):
        return
    try:
        ck = read_checkpoint(path)
    except CheckpointError:
        raise CheckpointError(f"{path}: already exists (not a readable checkpoint); refusing to "
                              "replace it: pass --overwrite to replace it or choose another "
                              "--out") from None
    raise CheckpointError(
        f"{path}: already holds a checkpoint ({ck['model']['arch']} on {ck['task']['name']}, "
        f"step {ck['train'].get('step', '?')}) that this run did not resume; pass --overwrite to "
        f"replace it, --resume {path} to continue it, or choose another --out")


@contextlib.contextmanager
def exclusive_writer(path: str | os.PathLike) -> Iterator[Path]:
    """Hold ``.NAME.lock`` beside ``path`` for a whole run: a second live writer of the same
    checkpoint is refused at once (one line naming the holder's pid) instead of both running
    and one result being lost. The kernel drops the lock when its holder dies, so a crashed run
    never blocks the next; the lock file is removed when the run ends."""
    path = Path(path)
    lock_path = path.parent / f".{path.name}.lock"
    key, me = os.path.abspath(lock_path), threading.get_ident()
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held and held[0] == me:  # the same thread again (the CLI, then its train()): reentrant
            _HELD[key] = (me, held[1] + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield path
        finally:
            with _HELD_LOCK:
                _HELD[key] = (me, _HELD[key][1] - 1)
        return
    if held:
        raise CheckpointError(_busy(path, lock_path, "", "another run in this process"))
    with _HELD_LOCK:
        _HELD[key] = (me, 1)
    try:
        with _exclusive_writer(path, lock_path):
            yield path
    finally:
        with _HELD_LOCK:
            del _HELD[key]


@contextlib.contextmanager
def _exclusive_writer(path: Path, lock_path: Path) -> Iterator[None]:
    if fcntl is None:  # not POSIX: filelock's own mechanism (its lock file stays)
        lock = FileLock(str(lock_path), blocking=False)
        try:
            lock.acquire()
        except Timeout:
            raise CheckpointError(_busy(path, lock_path, "")) from None
        try:
            yield
        finally:
            lock.release()
        return
    fd = _acquire_lock_file(path, lock_path)
    try:
        yield
    finally:
        try:
            if _same_inode(fd, lock_path):  # removed while held: no one can be waiting on it
                os.unlink(lock_path)
        except OSError:
            pass
        os.close(fd)


def _busy(path: Path, lock_path: Path, pid: str, who: str = "") -> str:
    who = who or (f"another process (pid {pid})" if pid else "another process")
    return (f"{path}: {who} is writing this checkpoint now (it holds {lock_path.name}); wait "
            "for it to end or choose another --out")


def _same_inode(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _acquire_lock_file(path: Path, lock_path: Path) -> int:
    for _ in range(5):  # the holder may remove the file between our open and our lock: retry
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise CheckpointError(f"{path}: cannot lock it for writing ({e.strerror})") from None
        if not _lock_fd(fd, blocking=False):
            try:
                pid = os.read(fd, 32).decode(errors="replace").strip()
            except OSError:
                pid = ""
            os.close(fd)
            raise CheckpointError(_busy(path, lock_path, pid if pid.isdigit() else ""))
        if _same_inode(fd, lock_path):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)  # we locked a file its holder had just removed
    raise CheckpointError(f"{path}: cannot lock it for writing (the lock file keeps changing)")


# ---------------------------------------------------------------------------- reading
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


def _zip_pickle_imports(path: Path) -> list[str]:
    """Imports outside torch's own that the ``data.pkl`` of a torch zip archive would make."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
            data = z.read(name) if name else b""
    except Exception:  # noqa: BLE001 - a hostile archive fails in many ways; nothing to report
        return []
    return [n for n in _pickle_imports(data)
            if not n.startswith(("torch.", "collections.OrderedDict", "<"))]


def _first_sentence(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    cut = text.find(". ")
    text = text[: cut + 1] if cut > 0 else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _check_archive(path: Path, size: int) -> None:
    """The zip directory, read before ``torch.load`` sees the file: ``torch.save`` stores every
    entry uncompressed, and an entry larger than the file would make the reader allocate what
    the file claims (a deflated entry can claim gigabytes in a kilobyte)."""
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except Exception as e:  # noqa: BLE001 - a hostile directory can fail in many ways
        detail = _first_sentence(e)
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint archive"
                              f"{f' ({detail})' if detail else ''}") from None
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"{path}: not a probe-suite checkpoint (a zip archive with "
                                  "compressed entries, which torch.save never writes)")
        if info.file_size > size or info.compress_size > size or info.header_offset > size:
            raise CheckpointError(f"{path}: truncated or corrupt checkpoint archive (entry "
                                  f"{info.filename[:60]!r} claims more bytes than the file has)")


def _torch_load(path: Path, map_location) -> Any:
    """``torch.load(weights_only=True)`` with every failure turned into one clear line."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head != ZIP_MAGIC:
        # Not a torch zip archive: never unpickle it. Scan it only to say what it is (a prefix:
        # the imports of a pickle come before what they build).
        with open(path, "rb") as f:
            imports = _pickle_imports(f.read(16 * 2**20))
        if imports:
            raise CheckpointError(
                f"{path}: refused: the file is a pickle that would import {imports[0]} (code) "
                "when loaded; it was not loaded or executed")
        raise CheckpointError(f"{path}: not a probe-suite checkpoint (not a PyTorch .pt archive)")
    _check_archive(path, path.stat().st_size)
    try:
        # torch warns about pickle protocols: keep stderr to the one line that matters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        # weights_only refused a global before running it
        imports = _zip_pickle_imports(path)
        match = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = imports[0] if imports else (match.group(1) if match else "objects that are not "
                                           "tensors or plain data")
        raise CheckpointError(
            f"{path}: refused: the file holds pickled code ({what}), which a checkpoint never "
            "needs; it was not executed") from None
    except Exception as e:  # noqa: BLE001 - any failure to parse untrusted bytes is "corrupt"
        if zipfile.is_zipfile(path) and not _zip_has_pickle(path):
            raise CheckpointError(f"{path}: not a probe-suite checkpoint (a zip archive, but not "
                                  "one written by torch.save)") from None
        detail = _first_sentence(e)
        detail = f" ({detail})" if detail and not detail.startswith("[") else ""
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint archive{detail}") from None


def _zip_has_pickle(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("data.pkl") for n in z.namelist())
    except Exception:  # noqa: BLE001 - see _check_archive
        return False


def _need(cond: bool, path, message: str) -> None:
    if not cond:
        raise CheckpointError(f"{path}: {message}")


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _ints(value) -> Iterator[int]:
    """The ints in a config value (itself, or the items of a tuple / list)."""
    if isinstance(value, int) and not isinstance(value, bool):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, int) and not isinstance(v, bool):
                yield v


def check_task_bounds(name: str, config: dict) -> None:
    """Raise :class:`TaskError` when an int of a task config (a length, an alphabet, a count) is
    beyond :data:`MAX_TASK_INT`: a task that large would only allocate until the machine gives
    out (a ``max_len`` of 10^12 asks for terabytes per batch). Seeds are exempt."""
    for key, value in config.items():
        if "seed" in str(key):
            continue
        for v in _ints(value):
            if abs(v) > MAX_TASK_INT:
                raise TaskError(f"{name} task: {key} = {v} is beyond this suite's bound "
                                f"({MAX_TASK_INT:,}) for task sizes")


def _tensors(obj, depth: int = 0) -> Iterator[torch.Tensor]:
    """Every tensor in nested dicts / lists / tuples (depth-limited: a file chooses the depth)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 32 and isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v, depth + 1)
    elif depth < 32 and isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v, depth + 1)


def _view_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _check_tensor_storage(t: torch.Tensor, path, what: str) -> None:
    """A stored tensor may not claim more elements than its stored bytes hold: a stride-0 view
    of one float can claim 10^10 elements, and copying or checking it would allocate them."""
    _need(t.layout == torch.strided, path, f"{what}: a {t.layout} tensor (checkpoints hold "
          "dense tensors only)")
    try:
        nbytes = t.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - not a plain CPU storage
        raise CheckpointError(f"{path}: {what}: a tensor without readable storage") from None
    _need(_view_bytes(t) <= nbytes, path, f"{what}: a tensor of shape {list(t.shape)[:8]} "
          f"claims {_view_bytes(t):,} bytes over {nbytes:,} stored bytes (a broadcast view)")


def validate_checkpoint(ckpt: Any, path: str | os.PathLike = "<checkpoint>") -> dict:
    """Check the layout of a loaded checkpoint dict; unknown config keys are rejected.

    The model, task and train configs are checked against their dataclasses (no weights are
    allocated), task sizes against :data:`MAX_TASK_INT`, and every stored tensor against its
    storage; whether the weights fit the model is checked by :func:`model_from_checkpoint`.
    """
    _need(isinstance(ckpt, dict) and "format" in ckpt, path,
          "not a probe-suite checkpoint (no 'format' field)")
    fmt = ckpt["format"]
    _need(isinstance(fmt, int) and not isinstance(fmt, bool) and fmt == FORMAT, path,
          f"checkpoint format {fmt!r} is not supported (this version reads format {FORMAT})")
    missing = [k for k in REQUIRED if k not in ckpt]
    _need(not missing, path, f"checkpoint lacks {missing}")
    model, task, train = ckpt["model"], ckpt["task"], ckpt["train"]
    _need(isinstance(model, dict) and isinstance(model.get("arch"), str)
          and isinstance(model.get("config"), dict), path,
          "the 'model' entry must be {'arch': str, 'config': dict}")
    _need(isinstance(task, dict) and isinstance(task.get("name"), str)
          and isinstance(task.get("config"), dict), path,
          "the 'task' entry must be {'name': str, 'config': dict}")
    _need(isinstance(train, dict), path, "the 'train' entry must be a dict")
    for key in ("step", "samples_seen"):
        _need(key not in train or _is_count(train[key]), path,
              f"train.{key} must be a count >= 0, got {train.get(key)!r}")
    sd = ckpt["state_dict"]
    _need(isinstance(sd, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                       for k, v in sd.items()), path,
          "'state_dict' must map parameter names to tensors")
    for k, v in sd.items():
        _need(v.dtype in TENSOR_DTYPES, path, f"state_dict[{k[:80]!r}] has dtype {v.dtype}, "
              "which no suite model uses")
    for t in _tensors(ckpt):
        _check_tensor_storage(t, path, "a stored tensor")
    _need(isinstance(ckpt["history"], list) and all(isinstance(h, dict) for h in ckpt["history"]),
          path, "'history' must be a list of dicts")
    _need(isinstance(ckpt.get("optimizer", {}), dict), path, "'optimizer' must be a dict")
    digest = ckpt.get("digest")
    _need(digest is None or (isinstance(digest, str) and digest.startswith("sha256:")), path,
          f"'digest' must be 'sha256:…', got {str(digest)[:40]!r}")
    _need(model["arch"] in ARCHS, path,
          f"unknown arch {model['arch'][:80]!r}; allowed: {', '.join(sorted(ARCHS))}")
    _need(task["name"] in TASKS, path,
          f"unknown task {task['name'][:80]!r}; allowed: {', '.join(sorted(TASKS))}")
    try:
        # configs are checked without allocating weights (a paper-sized model is large)
        config_from_dict(model_class(model["arch"]).config_cls, model["config"])
        config_from_dict(task_class(task["name"]).config_cls, task["config"])
        check_task_bounds(task["name"], task["config"])
        if "config" in train:
            _need(isinstance(train["config"], dict), path, "train.config must be a dict")
            config_from_dict(TrainConfig, train["config"])
    except CheckpointError:
        raise
    except TaskError as e:
        raise CheckpointError(f"{path}: {e}") from None
    except ImportError as e:
        raise CheckpointError(f"{path}: this version cannot build it ({e})") from None
    except Exception as e:  # noqa: BLE001 - a config value no check anticipated
        raise CheckpointError(f"{path}: invalid config ({type(e).__name__}: "
                              f"{_first_sentence(e)})") from None
    return ckpt


def _verify_weights(ckpt: dict, path: Path) -> None:
    """The stored digest (corruption inside the tensors), and no NaN / inf weights."""
    sd = ckpt["state_dict"]
    digest = ckpt.get("digest")
    if digest is None:
        key = os.path.abspath(path)
        if key not in _NOTICED:
            _NOTICED.add(key)
            print(f"notice: {path}: no digest of its weights (written before checkpoints "
                  "carried one), so corruption inside them cannot be detected; saving it again "
                  "adds one", file=sys.stderr)
    elif tensor_digest(sd) != digest:
        raise CheckpointError(f"{path}: corrupt: its weights do not match the digest stored with "
                              "them (bytes changed inside the file, or an edit that did not "
                              "update 'digest')")
    for name, t in sd.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise CheckpointError(f"{path}: refused: its weights hold NaN or infinite values "
                                  f"({bad:,} of {t.numel():,} in {name[:80]}); an analysis of "
                                  "them would be meaningless")


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load and validate a checkpoint dict without building the model: its layout, configs and
    bounds, the digest of its weights and that they are finite."""
    path = check_path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except OSError as e:
        raise CheckpointError(f"{short_path(path)}: cannot read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file")
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever, a device never end
        kind = next((k for test, k in FILE_KINDS if test(st.st_mode)), "not a regular file")
        raise CheckpointError(f"{path}: is {kind}, not a checkpoint file")
    if st.st_size == 0:
        raise CheckpointError(f"{path}: empty file, not a checkpoint")
    if not os.access(path, os.R_OK):
        raise CheckpointError(f"{path}: permission denied")
    ckpt = validate_checkpoint(_torch_load(path, map_location), path)
    claimed = sum(_view_bytes(t) for t in _tensors(ckpt))
    _need(claimed <= 4 * st.st_size + 2**20, path, f"its tensors claim {human_bytes(claimed)}, "
          f"far more than the file's {human_bytes(st.st_size)} (views sharing one storage)")
    _verify_weights(ckpt, path)
    return ckpt


def _kind(t: torch.Tensor) -> str:
    return "float" if t.is_floating_point() else "bool" if t.dtype == torch.bool else "int"


def state_dict_mismatch(model, sd: dict) -> str:
    """One line naming the first differences between a model's weights and a state dict."""
    own = model.state_dict()
    missing = [k for k in own if k not in sd]
    extra = [k for k in sd if k not in own]
    shapes = [f"{k} is {list(sd[k].shape)} in the file but {list(own[k].shape)} for the config"
              for k in own if k in sd and sd[k].shape != own[k].shape]
    # a float weight stored as ints (or bools) would load truncated, silently
    shapes += [f"{k} is {sd[k].dtype} in the file but {own[k].dtype} for the config"
               for k in own if k in sd and _kind(sd[k]) != _kind(own[k])]
    parts = []
    if missing:
        parts.append(f"missing {missing[:3]}{'…' if len(missing) > 3 else ''}")
    if extra:
        parts.append(f"unexpected {[k[:80] for k in extra[:3]]}{'…' if len(extra) > 3 else ''}")
    if shapes:
        parts.append(shapes[0] + (f" (+{len(shapes) - 1} more)" if len(shapes) > 1 else ""))
    return "; ".join(parts)


# ---------------------------------------------------------------------------- sizes
def meta_model(arch: str, config: dict | object):
    """The model a config describes, built on the meta device: every shape, no memory."""
    with torch.device("meta"):
        return build_model(arch, config)


DEEP = 64  # deeper stacks are counted from one- and two-layer builds (a meta build of 10^6 layers
#            would itself take minutes)


def _sizes(model) -> tuple[int, int, int]:
    params = list(model.parameters())
    return (sum(p.numel() for p in params), sum(_view_bytes(p) for p in params),
            sum(_view_bytes(b) for b in model.buffers()))


def model_footprint(arch: str, config: dict) -> tuple[int, int, int]:
    """``(parameters, parameter bytes, buffer bytes)`` of the model ``config`` describes,
    without allocating it (meta-device builds; a stack deeper than :data:`DEEP` is
    extrapolated from one and two layers, as every suite model is a stack of equal blocks).
    Raises :class:`TaskError` for an invalid config, or one whose tensors cannot even be
    described (a size that overflows 64 bits)."""
    try:
        return _footprint(arch, config)
    except TaskError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. "Storage size calculation overflowed"
        raise TaskError(f"the {arch} model of this config cannot be built: "
                        f"{_first_sentence(e)}") from None


def _footprint(arch: str, config: dict) -> tuple[int, int, int]:
    n_layers = config.get("n_layers")
    if isinstance(n_layers, int) and not isinstance(n_layers, bool) and n_layers > DEEP:
        try:
            one = _sizes(meta_model(arch, {**config, "n_layers": 1}))
            two = _sizes(meta_model(arch, {**config, "n_layers": 2}))
        except TaskError:  # a config tied to its depth: build the whole stack
            pass
        else:
            return tuple(a + (n_layers - 1) * (b - a) for a, b in zip(one, two, strict=True))
    return _sizes(meta_model(arch, config))


def _check_config_fits_file(ckpt: dict, path) -> None:
    """Before even a meta build: every int of the model config is a dimension of the stored
    weights or at most :data:`MAX_MODEL_INT` (an int that sizes nothing stored, such as STU's
    ``filter_len``, still costs work at build time), and each layer has a stored tensor."""
    sd, config = ckpt["state_dict"], ckpt["model"]["config"]
    dims = {d for t in sd.values() for d in t.shape}
    for key, value in config.items():
        if "seed" in key or key == "n_layers":
            continue
        for v in _ints(value):
            _need(abs(v) <= MAX_MODEL_INT or v in dims, path,
                  f"model config {key} = {v} does not fit the stored weights (it is none of "
                  f"their dimensions, and sizes that are not stored are bounded by "
                  f"{MAX_MODEL_INT:,})")
    n_layers = config.get("n_layers")
    _need(not isinstance(n_layers, int) or n_layers <= len(sd), path,
          f"model config n_layers = {n_layers}, but the file stores only {len(sd)} tensors")


def model_from_checkpoint(ckpt: dict, path: str | os.PathLike = "<checkpoint>"):
    """Rebuild the model described by a checkpoint dict and load its weights (strict).

    Nothing is allocated before the config is known to fit the file: the shapes the config
    implies (a meta-device build) must equal the stored ones, and what is rebuilt rather than
    stored (buffers such as STU's filters) must stay within :data:`MAX_REBUILT_BYTES` beyond
    the stored weights and within the machine's memory.
    """
    arch, config, sd = ckpt["model"]["arch"], ckpt["model"]["config"], ckpt["state_dict"]
    _need(isinstance(sd, dict), path, "'state_dict' must be a dict")
    _check_config_fits_file(ckpt, path)
    try:
        meta = meta_model(arch, config)
    except TaskError as e:
        raise CheckpointError(f"{path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a config value no check anticipated
        raise CheckpointError(f"{path}: invalid model config ({type(e).__name__}: "
                              f"{_first_sentence(e)})") from None
    mismatch = state_dict_mismatch(meta, sd)
    if mismatch:
        raise CheckpointError(f"{path}: weights do not match the config: {mismatch}")
    stored = sum(_view_bytes(t) for t in sd.values())
    persistent = set(meta.state_dict())
    rebuilt = sum(_view_bytes(b) for name, b in meta.named_buffers() if name not in persistent)
    _need(rebuilt <= stored + MAX_REBUILT_BYTES, path,
          f"its config asks for {human_bytes(rebuilt)} of buffers that are not stored (rebuilt "
          f"from the config), far more than its {human_bytes(stored)} of weights")
    try:
        check_fits(stored + rebuilt, f"the {arch} model of this checkpoint")
    except TaskError as e:
        raise CheckpointError(f"{path}: {e}") from None
    del meta
    try:
        model = build_model(arch, config)
        model.load_state_dict(sd, strict=True)
    except TaskError as e:
        raise CheckpointError(f"{path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - see above
        raise CheckpointError(f"{path}: weights do not match the config: "
                              f"{_first_sentence(e)}") from None
    return model


# "gpt2", "EleutherAI/pythia-410m": what a HuggingFace hub name looks like
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def is_hf_source(path: str | os.PathLike) -> bool:
    """Is ``path`` a HuggingFace model rather than a suite checkpoint: a directory holding
    ``config.json`` or, where no such file or directory exists, a hub name (not ``*.pt``)?"""
    p = check_path(Path(path).expanduser())  # a name too long to stat is one line, not OSError
    if p.is_dir():
        return (p / "config.json").is_file()
    if p.exists() or p.suffix in (".pt", ".pth"):
        return False
    return bool(HUB_NAME.match(str(path)))
