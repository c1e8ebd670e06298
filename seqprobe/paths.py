"""Where the suite keeps what it trains: one default checkpoint cache, found the same way from
any folder (as HuggingFace and torch find theirs).

:func:`default_cache_dir`, in order:

1. ``$SEQPROBE_CACHE`` when it is set (a relative value is relative to the current folder,
   as any path a user gives is);
2. the per-user cache directory ``$XDG_CACHE_HOME/seqprobe`` (``~/.cache/seqprobe``) when it
   exists;
3. the clone's ``checkpoints/`` when it exists (where the suite cached before it had a
   per-user location: a cache trained there keeps being served);
4. else the per-user cache directory (created by the first run that trains).

Every command's ``--cache-dir`` defaults to it, and ``python -m analyses.zoo --list`` prints it.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SEQPROBE_CACHE"
# the clone's root (seqprobe/ sits in it): its checkpoints/ was the default cache before
CLONE_ROOT = Path(__file__).resolve().parent.parent
CLONE_CACHE = CLONE_ROOT / "checkpoints"


def user_cache_dir() -> Path:
    """The per-user cache directory of the suite: ``$XDG_CACHE_HOME/seqprobe``, else
    ``~/.cache/seqprobe``."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "seqprobe"


def default_cache_dir() -> Path:
    """The default checkpoint cache (module docstring): the same folder from any current
    folder, unless ``$SEQPROBE_CACHE`` names a relative one."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    user = user_cache_dir()
    if user.is_dir():
        return user
    if CLONE_CACHE.is_dir():
        return CLONE_CACHE
    return user


def cache_dir_or_default(cache_dir: str | os.PathLike | None) -> Path:
    """``cache_dir`` as a path, or :func:`default_cache_dir` when it is None or empty."""
    return Path(cache_dir) if cache_dir not in (None, "") else default_cache_dir()


def is_default_cache_dir(cache_dir: str | os.PathLike | None) -> bool:
    """``cache_dir`` is the default cache (so a command printed for it needs no
    ``--cache-dir``)."""
    if cache_dir in (None, ""):
        return True
    return os.path.abspath(cache_dir) == os.path.abspath(default_cache_dir())
