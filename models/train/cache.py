"""The checkpoint cache: train once per distinct run spec, reuse ever after.

Entries are ``cache_dir/{arch}-{task}-{hash}.pt`` (:meth:`RunSpec.hash`). A lock file beside
each entry makes a second process that asks for the same checkpoint (two analyses run side by
side) wait for the first and reuse it instead of training it again; a broken entry is
retrained, never trusted.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

from filelock import FileLock

from models.checkpoint import CheckpointError, read_checkpoint
from models.device import resolve_device
from models.train import distributed
from models.train.loop import train
from models.train.spec import RunSpec, make_spec, spec_of_checkpoint
from tasks.base import check


def cache_path(spec: RunSpec, cache_dir: str | Path) -> Path:
    return Path(cache_dir) / f"{spec.arch}-{spec.task}-{spec.hash()}.pt"


def is_cached(path: Path) -> bool:
    """A readable, valid checkpoint is at ``path``."""
    if not path.exists():
        return False
    try:
        read_checkpoint(path)
    except CheckpointError:
        return False
    return True


def train_spec_cached(spec: RunSpec, cache_dir: str | Path = "checkpoints", device: str = "auto",
                      progress: bool = True, resume: str | Path | None = None) -> Path:
    """The cached checkpoint of ``spec``, trained first if it is not there (under a lock).

    ``resume``: a checkpoint of this same run stopped earlier, to continue instead of starting
    at step 0 (checkpoints along one run). Only where that is the same run: the spec may differ
    in ``steps`` alone and the schedule must be ``constant``, so the learning rate of a step
    does not depend on where the run ends."""
    path = cache_path(spec, cache_dir)
    world = distributed.world()
    if world.is_main:
        path.parent.mkdir(parents=True, exist_ok=True)
    # Under torchrun only rank 0 takes the lock and looks at the cache, and tells the others;
    # then every rank trains (DDP) and rank 0 writes. Every rank taking the lock would leave
    # rank 1 waiting on it while rank 0 waits on rank 1 inside training.
    with FileLock(str(path) + ".lock") if world.is_main else contextlib.nullcontext():
        cached = is_cached(path) if world.is_main else None
        if world.active:
            distributed.process_group(distributed.rank_device(resolve_device(device)))
            cached = distributed.broadcast(cached, world)
        if not cached:
            if resume is not None:
                _check_continues(spec, resume)
            train(spec, out=path, device=device, progress=progress, resume=resume)
    return path


def _check_continues(spec: RunSpec, resume: str | Path) -> None:
    ck = read_checkpoint(resume)
    earlier = spec_of_checkpoint(ck)
    same = replace(earlier, train=replace(earlier.train, steps=spec.train.steps))
    check(spec.train.schedule == "constant" and same.hash() == spec.hash()
          and ck["train"]["step"] <= spec.train.steps,
          f"resume {resume}: not this run stopped earlier (it must differ in steps alone, "
          "at a constant schedule)")


def train_cached(arch: str, task: str, preset: str = "quick", cache_dir: str | Path = "checkpoints",
                 model: dict | None = None, task_config: dict | None = None,
                 train_overrides: dict | None = None, device: str = "auto",
                 progress: bool = True) -> Path:
    """:func:`make_spec` then :func:`train_spec_cached`."""
    spec = make_spec(arch, task, preset, model, task_config, train_overrides)
    return train_spec_cached(spec, cache_dir, device, progress)
