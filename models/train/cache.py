"""The checkpoint cache: train once per distinct run, reuse ever after.

Entries are ``cache_dir/{arch}-{task}-{hash}.pt`` (:meth:`RunConfig.hash`); ``cache_dir``
defaults to :func:`seqprobe.paths.default_cache_dir`, the same from any folder. A lock file beside
each entry makes a second process that asks for the same checkpoint (two analyses run side by
side) wait for the first and reuse it instead of training it again. An entry is served only
when it is this RunConfig's finished run (:func:`entry_state`): a broken file or another run's
checkpoint at the path is retrained, a run stopped by Ctrl-C or SIGTERM is resumed.

An entry means the same from any folder and after the cache is moved: a fine-tuned run's key
covers its ``init_from`` checkpoint's bytes (not its path), and the ``init_from`` its record
names is looked up in the entry's own cache directory by name (:func:`recorded_run`), never
against the current folder.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import torch
from filelock import FileLock

from models.checkpoint.io import read_checkpoint
from models.train.build import make_run_config, run_config_of_checkpoint
from models.train.runconfig import RunConfig
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.errors import CheckpointError, InputError
from seqprobe.paths import cache_dir_or_default, check_not_dangling  # noqa: F401 - re-exported


def keyed(run_config: RunConfig, device: str | torch.device = "auto") -> RunConfig:
    """``run_config`` as the cache keys and records it on ``device``: resolved for the device
    ("auto" precision / compile set: a CPU checkpoint is never served for a CUDA run, nor the
    reverse) and its ``init_from`` absolute (the record names the file from any folder)."""
    run_config = run_config.resolved(resolve_device(device))
    if run_config.train.init_from:
        init_from = os.path.abspath(run_config.train.init_from)
        run_config = run_config.replace(train={"init_from": init_from})
    return run_config


def cache_path(run_config: RunConfig, cache_dir: str | Path | None = None) -> Path:
    """Where ``run_config``'s run is cached (None: the default cache); resolve it for its device
    first (:meth:`RunConfig.resolved`: an unresolved run is keyed as its CPU run)."""
    name = f"{run_config.arch}-{run_config.task_name}-{run_config.hash()}.pt"
    return cache_dir_or_default(cache_dir) / name


def check_cache_dir(cache_dir: str | Path | None = None, write: bool = True) -> Path:
    """``cache_dir`` as a directory this process can write in (created if missing), or one
    :class:`InputError` line before any work. ``write=False``: a directory that exists and can
    be listed is enough (a shared read-only cache serves its finished entries; whether a write
    is needed is known only per entry, :func:`train_run_cached`)."""
    path = cache_dir_or_default(cache_dir)
    check_not_dangling(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"cache directory {path}: is a file, not a directory")
    if not write and path.is_dir():
        check(os.access(path, os.R_OK | os.X_OK),
              f"cache directory {path}: cannot read it (permission denied)")
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass  # os.access says yes to root even in a read-only or immutable directory
    except OSError as e:
        raise InputError(f"cache directory {path}: cannot write in it "
                        f"({e.strerror or type(e).__name__})") from None
    return path


def check_lock_file(lock: Path) -> None:
    """A lock path the lock may open: absent or a regular file. A symbolic link is refused,
    never followed (opening it would truncate the file it points to, anywhere, or loop)."""
    check(not lock.is_symlink(), f"{lock}: is a symbolic link, not a lock file (this suite "
          "never makes one, and does not follow it); remove it and run again")
    check(not lock.exists() or lock.is_file(),
          f"{lock}: is not a lock file (a directory?); remove it and run again")


def init_in_cache(init_from: str, cache_dir: str | Path) -> str:
    """Where the ``init_from`` a cached run records is now: the file of that name in the
    entry's own cache directory (a zoo parent is always cached beside its child, under a name
    that does not depend on where the cache is), else the path as recorded when it is absolute,
    else that path under ``cache_dir`` — never relative to the current folder."""
    here = Path(cache_dir) / Path(init_from).name
    if os.path.lexists(here) or Path(init_from).is_absolute():
        return str(here) if os.path.lexists(here) else init_from
    return str(Path(cache_dir) / init_from)


def recorded_run(ck: dict, cache_dir: str | Path) -> RunConfig:
    """The run a checkpoint in ``cache_dir`` records, its ``init_from`` found as
    :func:`init_in_cache` says (so its hash is the same from any folder)."""
    run = RunConfig.from_checkpoint(ck)
    if run.train.init_from:
        run = run.replace(train={"init_from": init_in_cache(run.train.init_from, cache_dir)})
    return run


def _run_config_hash(ck: dict, cache_dir: str | Path) -> str | None:
    """The cache hash of the run a checkpoint in ``cache_dir`` records, or None where it
    records none (or its init checkpoint cannot be read)."""
    try:
        if "config" not in ck["train"]:
            return None  # a construction, not a trained run
        return recorded_run(ck, cache_dir).hash()
    except (KeyError, TypeError, InputError, OSError):
        return None


def entry_state(path: Path, run_config: RunConfig | str | None = None) -> str:
    """What is at a cache path: ``missing``; ``broken`` (not a readable, sound checkpoint);
    ``other`` (a checkpoint of another run than ``run_config``, e.g. a file copied there);
    ``interrupted`` (this run, stopped by a signal before its last step: resumable); or
    ``done`` (this run, finished or stopped by its own rule, e.g. ``stop_at``).
    ``run_config`` may be given as its key (:meth:`RunConfig.hash`, the zoo's catalog's)."""
    if not path.exists():
        return "missing"
    try:
        ck = read_checkpoint(path)
    except CheckpointError:
        return "broken"
    key = run_config if isinstance(run_config, str) or run_config is None else run_config.hash()
    if key is not None and _run_config_hash(ck, path.parent) != key:
        return "other"
    tr = ck.get("train", {})
    steps = (tr.get("config") or {}).get("steps")
    if not tr.get("stop") and (tr.get("eval_pending") or (isinstance(steps, int)
                                                          and tr.get("step", steps) < steps)):
        return "interrupted"  # eval_pending: stopped during its evaluation, its last included
    return "done"


def is_cached(path: Path, run_config: RunConfig | None = None) -> bool:
    """``run_config``'s finished run is at ``path`` (without ``run_config``: some finished run)."""
    return entry_state(path, run_config) == "done"


def train_run_cached(run_config: RunConfig, cache_dir: str | Path | None = None,
                     device: str = "auto",
                      progress: bool = True, resume: str | Path | None = None,
                      label: str | None = None) -> Path:
    """The cached checkpoint of ``run_config``, trained first if it is not there (under a lock).

    ``resume``: a checkpoint of this same run stopped earlier, to continue instead of starting
    at step 0 (checkpoints along one run). Only where that is the same run: the RunConfig may differ
    in ``steps`` alone and the schedule must be ``constant``, so the learning rate of a step
    does not depend on where the run ends.

    Before training it says so in one line (:func:`models.train.announce.announce`: ``label``,
    the recipe's name, where there is one)."""
    # the run as this device trains it ("auto" precision / compile set): a CPU checkpoint is
    # never served for a CUDA run, nor the reverse (their keys differ)
    # what trains, imported here: a reader of the cache (zoo:NAME, --list) needs none of it
    from models.train import distributed
    from models.train.announce import announce
    from models.train.loop import train

    run_config = keyed(run_config, device)
    path = cache_path(run_config, cache_dir)
    world = distributed.world()
    if world.is_main:
        check_cache_dir(path.parent, write=False)
        # A finished, verified entry is only read: served without the lock (its writer renamed
        # it into place whole), so a read-only cache serves it. Under torchrun every rank
        # takes part in the broadcast below, so there the locked path is taken as before.
        if not world.active and entry_state(path, run_config) == "done":
            return path
        check_cache_dir(path.parent)  # this entry needs a write: the lock, then training
        check_lock_file(Path(str(path) + ".lock"))
    # Under torchrun only rank 0 takes the lock and looks at the cache, and tells the others;
    # then every rank trains (DDP) and rank 0 writes. Every rank taking the lock would leave
    # rank 1 waiting on it while rank 0 waits on rank 1 inside training.
    with FileLock(str(path) + ".lock") if world.is_main else contextlib.nullcontext():
        state = entry_state(path, run_config) if world.is_main else None
        if world.active:
            distributed.process_group(distributed.rank_device(resolve_device(device)))
            state = distributed.broadcast(state, world)
        if state != "done":
            if state == "other" and world.is_main:
                print(f"cache: {path.name} holds another run's checkpoint; training this "
                      "run over it", file=sys.stderr)
            if state == "interrupted" and resume is None:
                resume = path  # the same RunConfig stopped by a signal: continue it, not serve it
            elif resume is not None:
                _check_continues(run_config, resume, path.parent)
            if world.is_main:
                announce(run_config, path, what=label, device=device, resume_step=read_checkpoint(
                    resume)["train"].get("step") if resume else None, measure=True)
            train(run_config, out=path, device=device, progress=progress, resume=resume)
    return path


def _check_continues(run_config: RunConfig, resume: str | Path, cache_dir: str | Path) -> None:
    ck = read_checkpoint(resume)
    init = (ck["train"].get("config") or {}).get("init_from")
    # its init_from found as the cache finds it (recorded_run), not from the current folder
    earlier = run_config_of_checkpoint(
        ck, train={"init_from": init_in_cache(init, cache_dir)} if init else None)
    same = earlier.replace(train={"steps": run_config.train.steps})
    check(run_config.train.schedule == "constant" and same.hash() == run_config.hash()
          and ck["train"]["step"] <= run_config.train.steps,
          f"resume {resume}: not this run stopped earlier (it must differ in steps alone, "
          "at a constant schedule)")


def train_cached(arch: str, task: str, level: str = "quick", cache_dir: str | Path | None = None,
                 model: dict | None = None, task_config: dict | None = None,
                 train_overrides: dict | None = None, device: str = "auto",
                 progress: bool = True) -> Path:
    """:func:`make_run_config` then :func:`train_run_cached`."""
    run_config = make_run_config(arch, task, level, model, task_config, train_overrides)
    return train_run_cached(run_config, cache_dir, device, progress)
