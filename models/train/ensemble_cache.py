"""The checkpoint cache for ensembles: several runs trained together, each served as if alone.

:func:`train_runs_cached` is :func:`models.train.cache.train_run_cached` for many runs: the
runs already in the cache are served, the rest are grouped into ensembles
(:func:`models.train.ensemble.group_runs`) and each ensemble trains under the locks of all its
members' entries, each member writing the entry its solo run would (the same key, the same
checkpoint up to float rounding), a member stopped by a signal resumed from its entry.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path

from filelock import FileLock

from models.checkpoint.io import read_checkpoint
from models.train import distributed
from models.train.announce import announce
from models.train.cache import (
    cache_path,
    check_cache_dir,
    check_lock_file,
    entry_state,
    keyed,
    train_run_cached,
)
from models.train.ensemble import MemberFailed, group_runs, train_ensemble
from models.train.loop import TrainingDiverged
from models.train.runconfig import RunConfig
from seqprobe.config import check

ENSEMBLES = ("auto", "on", "off")  # --ensembles


def train_runs_cached(run_configs: list[RunConfig], cache_dir: str | Path | None = None,
                      device: str = "auto", progress: bool = True,
                      labels: list[str] | None = None, max_members: int = 32,
                      ensembles: str = "auto") -> list[Path | MemberFailed]:
    """The cached checkpoint of each run of ``run_configs``; those not cached are trained first, as
    ensembles of at most ``max_members`` (``ensembles``: ``auto`` where one
    :func:`~models.train.ensemble.pays_off`, ``on`` wherever the runs can form one, ``off``
    one run after another). Returns each run's path, or a :class:`MemberFailed` for a run whose
    training diverged (the others are trained and cached all the same). A run that trains
    alone goes through :func:`~models.train.cache.train_run_cached`, its solo path exactly."""
    check(ensembles in ENSEMBLES, f"ensembles must be one of {', '.join(ENSEMBLES)}, "
          f"got {ensembles!r}")
    labels = labels or [None] * len(run_configs)
    if distributed.world().active:  # under torchrun: one run at a time, every rank in it (DDP)
        return [train_run_cached(s, cache_dir, device, progress, label=lb)
                for s, lb in zip(run_configs, labels, strict=True)]
    run_configs = [keyed(s, device) for s in run_configs]
    paths = [cache_path(s, cache_dir) for s in run_configs]
    check(len(set(paths)) == len(paths), "the same run is asked for twice")
    out: list[Path | MemberFailed | None] = [None] * len(run_configs)
    todo = []
    for i, (s, p) in enumerate(zip(run_configs, paths, strict=True)):
        check_cache_dir(p.parent, write=False)
        if entry_state(p, s) == "done":
            out[i] = p
        else:
            todo.append(i)
    groups = ([[i] for i in range(len(todo))] if ensembles == "off" else
              group_runs([run_configs[i] for i in todo], max_members, ensembles == "auto"))
    for group in groups:
        idx = [todo[g] for g in group]
        if len(idx) == 1:
            i = idx[0]
            try:
                out[i] = train_run_cached(run_configs[i], cache_dir, device, progress,
                                          label=labels[i])
            except TrainingDiverged as e:
                out[i] = MemberFailed(str(e))
            continue
        for i, r in zip(idx, _train_group([run_configs[i] for i in idx], [paths[i] for i in idx],
                                          device, progress, [labels[i] for i in idx]),
                        strict=True):
            out[i] = r
    return out


def _train_group(run_configs, paths, device, progress, labels) -> list[Path | MemberFailed]:
    """One ensemble under its members' locks (taken in path order, so two processes asking for
    overlapping ensembles never wait on each other in a circle); a member another process
    finished meanwhile is served, not trained again."""
    check_cache_dir(paths[0].parent)
    order = sorted(range(len(paths)), key=lambda i: str(paths[i]))
    with ExitStack() as stack:
        for i in order:
            check_lock_file(Path(str(paths[i]) + ".lock"))
            stack.enter_context(FileLock(str(paths[i]) + ".lock"))
        states = [entry_state(p, s) for p, s in zip(paths, run_configs, strict=True)]
        train = [i for i, st in enumerate(states) if st != "done"]
        resumes = []
        for k, i in enumerate(train):
            if states[i] == "other":
                print(f"cache: {paths[i].name} holds another run's checkpoint; training this "
                      "run over it", file=sys.stderr)
            resume = paths[i] if states[i] == "interrupted" else None
            resumes.append(resume)
            # the ETA is the member's solo run's: the step-cost tables have no ensemble rows
            announce(run_configs[i], paths[i], what=labels[i], device=device,
                     resume_step=read_checkpoint(resume)["train"].get("step") if resume
                     else None, detail=f"member {k + 1} of an ensemble of {len(train)}")
        done = train_ensemble([run_configs[i] for i in train], [paths[i] for i in train], device,
                              resumes, progress) if train else []
    out: list[Path | MemberFailed] = list(paths)
    for i, r in zip(train, done, strict=True):
        if isinstance(r, MemberFailed):
            out[i] = r
    return out
