"""The checkpoint cache: train once per distinct run, reuse ever after.

Entries are ``cache_dir/{arch}-{task}-{hash}.pt`` (:meth:`RunConfig.hash`). A lock file beside
each entry makes a second process that asks for the same checkpoint (two analyses run side by
side) wait for the first and reuse it instead of training it again. An entry is served only
when it is this spec's finished run (:func:`entry_state`): a broken file or another run's
checkpoint at the path is retrained, a run stopped by Ctrl-C or SIGTERM is resumed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

from models.checkpoint.io import read_checkpoint
from models.train import distributed
from models.train.announce import announce
from models.train.build import make_run_config, run_config_of_checkpoint
from models.train.loop import train
from models.train.runconfig import RunConfig
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.errors import CheckpointError, InputError


def cache_path(spec: RunConfig, cache_dir: str | Path) -> Path:
    """Where ``spec``'s run is cached; resolve it for its device first
    (:meth:`RunConfig.resolved`: an unresolved run is keyed as its CPU run)."""
    return Path(cache_dir) / f"{spec.arch}-{spec.task_name}-{spec.hash()}.pt"


def check_cache_dir(cache_dir: str | Path, write: bool = True) -> Path:
    """``cache_dir`` as a directory this process can write in (created if missing), or one
    :class:`InputError` line before any work. ``write=False``: a directory that exists and can
    be listed is enough (a shared read-only cache serves its finished entries; whether a write
    is needed is known only per entry, :func:`train_run_cached`)."""
    path = Path(cache_dir)
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


def _spec_hash(ck: dict) -> str | None:
    """The cache hash of the run a checkpoint records, or None where it records none."""
    try:
        if "config" not in ck["train"]:
            return None  # a construction, not a trained run
        return RunConfig.from_checkpoint(ck).hash()
    except (KeyError, TypeError, InputError, OSError):
        return None


def entry_state(path: Path, spec: RunConfig | None = None) -> str:
    """What is at a cache path: ``missing``; ``broken`` (not a readable, sound checkpoint);
    ``other`` (a checkpoint of another run than ``spec``, e.g. a file copied there);
    ``interrupted`` (this run, stopped by a signal before its last step: resumable); or
    ``done`` (this run, finished or stopped by its own rule, e.g. ``stop_at``)."""
    if not path.exists():
        return "missing"
    try:
        ck = read_checkpoint(path)
    except CheckpointError:
        return "broken"
    if spec is not None and _spec_hash(ck) != spec.hash():
        return "other"
    tr = ck.get("train", {})
    steps = (tr.get("config") or {}).get("steps")
    if not tr.get("stop") and (tr.get("eval_pending") or (isinstance(steps, int)
                                                          and tr.get("step", steps) < steps)):
        return "interrupted"  # eval_pending: stopped during its evaluation, its last included
    return "done"


def is_cached(path: Path, spec: RunConfig | None = None) -> bool:
    """``spec``'s finished run is at ``path`` (without ``spec``: some finished run)."""
    return entry_state(path, spec) == "done"


def train_run_cached(spec: RunConfig, cache_dir: str | Path = "checkpoints", device: str = "auto",
                      progress: bool = True, resume: str | Path | None = None,
                      label: str | None = None) -> Path:
    """The cached checkpoint of ``spec``, trained first if it is not there (under a lock).

    ``resume``: a checkpoint of this same run stopped earlier, to continue instead of starting
    at step 0 (checkpoints along one run). Only where that is the same run: the spec may differ
    in ``steps`` alone and the schedule must be ``constant``, so the learning rate of a step
    does not depend on where the run ends.

    Before training it says so in one line (:func:`models.train.announce.announce`: ``label``,
    the recipe's name, where there is one)."""
    # the run as this device trains it ("auto" precision / compile set): a CPU checkpoint is
    # never served for a CUDA run, nor the reverse (their keys differ)
    spec = spec.resolved(resolve_device(device))
    path = cache_path(spec, cache_dir)
    world = distributed.world()
    if world.is_main:
        check_cache_dir(path.parent, write=False)
        # A finished, verified entry is only read: served without the lock (its writer renamed
        # it into place whole), so a read-only cache serves it. Under torchrun every rank
        # takes part in the broadcast below, so there the locked path is taken as before.
        if not world.active and entry_state(path, spec) == "done":
            return path
        check_cache_dir(path.parent)  # this entry needs a write: the lock, then training
        check_lock_file(Path(str(path) + ".lock"))
    # Under torchrun only rank 0 takes the lock and looks at the cache, and tells the others;
    # then every rank trains (DDP) and rank 0 writes. Every rank taking the lock would leave
    # rank 1 waiting on it while rank 0 waits on rank 1 inside training.
    with FileLock(str(path) + ".lock") if world.is_main else contextlib.nullcontext():
        state = entry_state(path, spec) if world.is_main else None
        if world.active:
            distributed.process_group(distributed.rank_device(resolve_device(device)))
            state = distributed.broadcast(state, world)
        if state != "done":
            if state == "other" and world.is_main:
                print(f"cache: {path.name} holds another run's checkpoint; training this "
                      "run over it", file=sys.stderr)
            if state == "interrupted" and resume is None:
                resume = path  # the same spec stopped by a signal: continue it, not serve it
            elif resume is not None:
                _check_continues(spec, resume)
            if world.is_main:
                announce(spec, path, what=label, device=device, resume_step=read_checkpoint(
                    resume)["train"].get("step") if resume else None)
            train(spec, out=path, device=device, progress=progress, resume=resume)
    return path


def _check_continues(spec: RunConfig, resume: str | Path) -> None:
    ck = read_checkpoint(resume)
    earlier = run_config_of_checkpoint(ck)
    same = earlier.replace(train={"steps": spec.train.steps})
    check(spec.train.schedule == "constant" and same.hash() == spec.hash()
          and ck["train"]["step"] <= spec.train.steps,
          f"resume {resume}: not this run stopped earlier (it must differ in steps alone, "
          "at a constant schedule)")


def train_cached(arch: str, task: str, preset: str = "quick", cache_dir: str | Path = "checkpoints",
                 model: dict | None = None, task_config: dict | None = None,
                 train_overrides: dict | None = None, device: str = "auto",
                 progress: bool = True) -> Path:
    """:func:`make_run_config` then :func:`train_run_cached`."""
    spec = make_run_config(arch, task, preset, model, task_config, train_overrides)
    return train_run_cached(spec, cache_dir, device, progress)
