"""Where the suite keeps what it trains: one default checkpoint cache, found the same way from
any folder (as HuggingFace and torch find theirs).

The rule, in one sentence: ``$SEQPROBE_CACHE`` when it is set, else
``$XDG_CACHE_HOME/seqprobe`` when ``XDG_CACHE_HOME`` is set, else ``~/.cache/seqprobe`` —
whether or not that folder exists yet (:func:`default_cache_dir`). A relative
``$SEQPROBE_CACHE`` is resolved once, against the folder the first command that reads it runs
in, and written back as that absolute path, so the commands it starts (reproduce's jobs,
torchrun's workers) and a later ``cd`` do not move it. Nothing else moves it: no other folder
(a clone's ``checkpoints/``) is looked for, and the folder is made only by a command that
writes an entry (a refused command creates nothing).

Every command's ``--cache-dir`` defaults to it, and ``python -m analyses.zoo --list`` prints it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from seqprobe.errors import InputError

CACHE_ENV = "SEQPROBE_CACHE"


def user_cache_dir() -> Path:
    """The per-user cache directory of the suite: ``$XDG_CACHE_HOME/seqprobe``, else
    ``~/.cache/seqprobe``."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "seqprobe"


def default_cache_dir() -> Path:
    """The default checkpoint cache (module docstring): ``$SEQPROBE_CACHE`` (a relative one
    resolved here once, and written back absolute), else :func:`user_cache_dir`."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if not env:
        return user_cache_dir()
    path = Path(env).expanduser()
    if not path.is_absolute():
        path = Path(os.path.abspath(path))
        os.environ[CACHE_ENV] = str(path)  # the same folder after a cd, and in child processes
    return path


def cache_dir_or_default(cache_dir: str | os.PathLike | None) -> Path:
    """``cache_dir`` as a path, or :func:`default_cache_dir` when it is None or empty."""
    return Path(cache_dir) if cache_dir not in (None, "") else default_cache_dir()


def is_default_cache_dir(cache_dir: str | os.PathLike | None) -> bool:
    """``cache_dir`` is the default cache (so a command printed for it needs no
    ``--cache-dir``)."""
    if cache_dir in (None, ""):
        return True
    return os.path.abspath(cache_dir) == os.path.abspath(default_cache_dir())


def check_not_dangling(path: Path) -> None:
    """One line for a cache path that is a symbolic link leading nowhere (a loop, or a target
    removed): it reads as an empty cache, every entry "missing", and no write can create it."""
    if os.path.lexists(path) and not path.exists():
        try:
            os.stat(path)
        except OSError as e:
            raise InputError(f"cache directory {path}: a symbolic link that leads nowhere "
                             f"({e.strerror}); fix or remove it") from None


# Names that stand for a file wherever a checkpoint path goes (``zoo:NAME[@LEVEL]``): the layer
# that knows such names (analyses.zoo) registers a resolver here when it is imported, and
# models.load asks it. Here, at the bottom, so that registering one imports no model code.
NAME_RESOLVERS: dict[str, Callable[[str], str | os.PathLike]] = {}


def register_name_resolver(prefix: str, resolve: Callable[[str], str | os.PathLike]) -> None:
    """Let ``models.load`` take names starting with ``prefix``: ``resolve(name)`` gives the
    path (or one line why not)."""
    NAME_RESOLVERS[prefix] = resolve
