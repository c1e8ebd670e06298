"""The zoo's recipes as runs: building a recipe's :class:`~models.train.runconfig.RunConfig`,
the cache's exact lookups of it, and training through the one locked, hashed cache of
:mod:`models.train.cache` (:func:`checkpoint`, :func:`train_recipes`). The part of the zoo
that imports training; :mod:`analyses.zoo` serves names from its catalog and comes here only
where the catalog cannot say (:mod:`analyses.zoo.catalog`) or to train.

``seed_offset`` (every function that builds a run takes it) shifts every recipe's training
seed by that many: another run, another cache key (``reproduce --seed-offset K``; 0: the
recipes as written).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from analyses.zoo import catalog
from analyses.zoo.catalog import NotTrained, not_trained, unknown_recipe
from analyses.zoo.catalog import where as _where
from analyses.zoo.recipe import Recipe
from analyses.zoo.recipes import RECIPES, papers
from models.train.cache import cache_path, entry_state, is_cached, keyed, train_run_cached
from models.train.ensemble import MemberFailed, group_runs
from models.train.ensemble_cache import ENSEMBLES, train_runs_cached
from models.train.runconfig import RunConfig
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.errors import InputError
from seqprobe.paths import cache_dir_or_default
from seqprobe.sweep import Backend, Failed, map_jobs

# each recipe as its paper module built it: what the catalog records (a recipe a session adds
# or replaces in RECIPES is not served from the catalog: analyses.zoo._from_catalog)
AS_BUILT = dict(RECIPES)

__all__ = ["ENSEMBLES", "RECIPES", "Recipe", "checkpoint", "checkpoints", "dependencies",
           "entry_state", "exact_path", "exact_status", "recipe", "run_config",
           "train_recipes", "untrained_init"]


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise unknown_recipe(name, RECIPES)
    return RECIPES[name]


def _init_path(name: str, level: str, cache_dir: str | Path,
               device: str | torch.device = "auto", seed_offset: int = 0) -> Path | None:
    """Where the checkpoint that starts recipe ``name`` at ``level`` on ``device`` is cached
    (None: the recipe starts from random init)."""
    r = recipe(name)
    if level not in r.init_from:
        return None
    return cache_path(_resolved(run_config(r.init_from[level], level, cache_dir, None, device,
                                           seed_offset), device), cache_dir)


def _resolved(run: RunConfig, device: str | torch.device) -> RunConfig:
    """``run`` as ``device`` trains it (its cache key): what the cache serves."""
    return run.resolved(resolve_device(device))


def untrained_init(name: str, level: str, cache_dir: str | Path,
                   device: str | torch.device = "auto", seed_offset: int = 0) -> str | None:
    """The recipe that starts ``name`` at ``level`` when it is not in the cache yet (so
    neither is ``name``); None when there is none to wait for."""
    init = _init_path(name, level, cache_dir, device, seed_offset)
    return None if init is None or init.exists() else recipe(name).init_from[level]


def run_config(name: str, level: str, cache_dir: str | Path | None = None,
               train: Mapping[str, Any] | None = None,
               device: str | torch.device = "auto", seed_offset: int = 0) -> RunConfig:
    """The run of recipe ``name`` at a level (:meth:`Recipe.run_config`), its seed shifted by
    ``seed_offset``; an ``init_from`` recipe must be cached already (on ``device``;
    :func:`checkpoint` trains it first; else :class:`NotTrained`). ``train`` overrides training
    fields on top. :meth:`RunConfig.resolved` gives the run ``device`` trains, which the cache
    keys."""
    r = recipe(name)
    init = _init_path(name, level, cache_dir, device, seed_offset)
    if init is not None and not init.exists():
        raise NotTrained(f"recipe {name} starts from {r.init_from[level]}, which is not "
                         f"trained yet in {_where(cache_dir)}")
    return r.run_config(level, train, init, seed_offset)


def dependencies(name: str, level: str) -> list[str]:
    """The recipes ``name`` needs trained first (its init chain), nearest last."""
    r = recipe(name)
    if level not in r.init_from:
        return []
    parent = r.init_from[level]
    return [*dependencies(parent, level), parent]


def checkpoint(name: str, level: str = "quick", cache_dir: str | Path | None = None,
               device: str = "auto", progress: bool = True,
               train: Mapping[str, Any] | None = None, resume: str | Path | None = None,
               seed_offset: int = 0) -> Path:
    """The path of recipe ``name``'s checkpoint at ``level``, trained (and its init chain
    first) if it is not cached. ``train`` overrides training fields (another cache entry);
    ``resume`` continues the same run stopped earlier (see ``train_run_cached``)."""
    for dep in dependencies(name, level):
        train_run_cached(run_config(dep, level, cache_dir, None, device, seed_offset), cache_dir,
                         device, progress, label=dep)
    return train_run_cached(run_config(name, level, cache_dir, train, device, seed_offset),
                            cache_dir, device, progress, resume, label=name)


def checkpoints(names: Iterable[str], level: str = "quick",
                cache_dir: str | Path | None = None, device: str = "auto",
                progress: bool = True, seed_offset: int = 0) -> dict[str, Path]:
    """:func:`checkpoint` of each name: ``{name: path}``, trained as :func:`train_recipes`
    trains them; a run that fails is one line naming it."""
    done = train_recipes(names, level, cache_dir, device, progress=progress,
                         seed_offset=seed_offset)
    failed = [f"{n} ({r.error})" for n, r in done.items() if isinstance(r, Failed)]
    check(not failed, f"training failed: {', '.join(failed)}")
    return dict(done)


def _train_group(names: list[str], level: str, cache_dir: str, device: str,
                 train: Mapping[str, Any] | None, ensembles: str,
                 progress: bool = False, seed_offset: int = 0) -> list[str | Failed]:
    """Task body of :func:`train_recipes` (a worker process, a Ray worker or this one): the
    recipes ``names``, whose init recipes are cached, trained as ensembles where they can be
    (:func:`models.train.ensemble_cache.train_runs_cached`); each one's path, or a
    :class:`Failed` for a run that diverged."""
    run_configs = [run_config(n, level, cache_dir, train, device, seed_offset) for n in names]
    done = train_runs_cached(run_configs, cache_dir, device, progress=progress, labels=names,
                             ensembles=ensembles)
    return [Failed(r.error, 1) if isinstance(r, MemberFailed) else str(r) for r in done]


def _cached(name: str, level: str, cache_dir: str | Path,
            train: Mapping[str, Any] | None, device: str = "auto",
            seed_offset: int = 0) -> Path | None:
    return _entry(name, level, cache_dir, train, device, seed_offset)[1]


def _entry(name: str, level: str, cache_dir: str | Path, train: Mapping[str, Any] | None,
           device: str = "auto", seed_offset: int = 0) -> tuple[RunConfig | None, Path | None]:
    """``(the run device trains, its cached path)``; the path is None where the entry is not
    this run's finished one, the run None where what it starts from is not trained yet."""
    if untrained_init(name, level, cache_dir, device, seed_offset):
        return None, None  # its init recipe is not trained yet: so neither is it
    run = _resolved(run_config(name, level, cache_dir, train, device, seed_offset), device)
    path = cache_path(run, cache_dir)
    return run, (path if is_cached(path, run) else None)


def train_recipes(names: Iterable[str], level: str = "quick",
                  cache_dir: str | Path | None = None, device: str = "auto",
                  backend: Backend | None = None, train: Mapping[str, Any] | None = None,
                  progress: bool = True, ensembles: str = "auto",
                  seed_offset: int = 0) -> dict[str, Path | Failed]:
    """:func:`checkpoint` of each name: the one way a sweep of recipes is trained. The ones not
    cached yet train in waves (what a fine-tune starts from first), each wave's recipes
    grouped into ensembles (``ensembles``: see :func:`~models.train.ensemble_cache.
    train_runs_cached`), each ensemble a task on ``backend`` (:mod:`seqprobe.sweep`; default:
    one after the other here). A recipe whose training fails maps to a :class:`Failed`; the
    others still train. The cache must be one the workers share (a cluster: a shared file
    system)."""
    names = list(dict.fromkeys(names))
    for n in names:  # every name checked before any training
        recipe(n).parts(level)
    check(ensembles in ENSEMBLES, f"--ensembles must be one of {', '.join(ENSEMBLES)}")
    cache = str(cache_dir_or_default(cache_dir))
    every = list(dict.fromkeys(d for n in names for d in [*dependencies(n, level), n]))
    backend = backend or Backend(retries=0)  # here: a failure is reported once, not retried
    # each run's own progress bar where it trains in this process (a sweep's bar elsewhere)
    here = not backend.ray and backend.workers == 1 and progress
    out: dict[str, Path | Failed] = {}
    for depth in sorted({len(dependencies(n, level)) for n in every}):
        wave = [n for n in every if len(dependencies(n, level)) == depth]
        todo, runs = [], []
        for n in wave:
            parent = recipe(n).init_from.get(level)
            if isinstance(out.get(parent), Failed):
                out[n] = Failed(f"{parent}, which it starts from, failed", 0)
                continue
            run, path = _entry(n, level, cache_dir, train, device, seed_offset)
            if path is None:
                todo.append(n)
                runs.append(run)
            else:
                out[n] = path
        groups = _groups(todo, runs, ensembles)
        results = map_jobs(_train_group, [(g, level, cache, device,
                                           dict(train) if train else None, ensembles, here,
                                           seed_offset)
                                          for g in groups],
                           backend, desc="train", progress=progress and not here,
                           done_before=0, on_done=lambda i, _, gs=groups: {"recipes": len(gs[i])})
        for g, r in zip(groups, results, strict=True):
            for k, n in enumerate(g):
                out[n] = r if isinstance(r, Failed) else (
                    r[k] if isinstance(r[k], Failed) else Path(r[k]))
    return {n: out[n] for n in names}


def _groups(names: list[str], runs: list[RunConfig | None],
            ensembles: str) -> list[list[str]]:
    """``names`` (their ``runs``) as the ensembles they train in (one name a group where none
    forms)."""
    if ensembles == "off" or len(names) < 2 or None in runs:
        return [[n] for n in names]
    return [[names[i] for i in g] for g in group_runs(runs, only_if_it_pays=ensembles == "auto")]


def exact_status(name: str, level: str, cache_dir: str | Path, device: str = "auto",
                 seed_offset: int = 0) -> str:
    """:func:`analyses.zoo.status` the exact way: the run built, resolved for ``device``, and
    its cache entry read."""
    try:
        needs = untrained_init(name, level, cache_dir, device, seed_offset)
        if needs:
            return f"needs {needs}"
        run = _resolved(run_config(name, level, cache_dir, None, device, seed_offset), device)
    except InputError as e:
        return "invalid: " + str(e).splitlines()[0][:60]
    state = entry_state(cache_path(run, cache_dir), run)
    return {"done": "cached", "other": "other run"}.get(state, state)


def exact_file(name: str, level: str, cache_dir: str | Path | None, device: str = "auto",
               seed_offset: int = 0) -> Path:
    """Where recipe ``name``'s run at ``level`` on ``device`` is (or would be) cached; a
    fine-tuned recipe whose parent is not trained yet has no key: :class:`NotTrained`."""
    return cache_path(_resolved(run_config(name, level, cache_dir, None, device, seed_offset),
                                device), cache_dir)


def exact_path(name: str, level: str, cache_dir: str | Path | None, device: str = "auto",
               seed_offset: int = 0) -> Path:
    """:func:`analyses.zoo.path` the exact way (:func:`exact_status`)."""
    state = exact_status(name, level, cache_dir, device, seed_offset)
    if state != "cached":
        raise not_trained([(name, state)], level, cache_dir)
    return exact_file(name, level, cache_dir, device, seed_offset)


# ---------------------------------------------------------------------------- the catalog
def catalog_now() -> dict[str, Any]:
    """:mod:`analyses.zoo.catalog`'s file as the recipes are now: builds every recipe's run at
    every level (``python -m analyses.zoo catalog``, and the test that checks the file)."""
    module = {r.name: Path(paper.__file__).resolve().relative_to(catalog.ROOT).as_posix()
              for paper in papers() for r in paper.recipes()}
    keys: dict[str, str] = {}
    files: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp, _stand_in_parents(Path(tmp)) as run_config:
        for name, r in RECIPES.items():
            for level in r.levels:
                run = run_config(name, level)
                keys[f"{name}@{level}"] = run.hash()
                if level in r.init_from or run.train.init_from or _content_files(run):
                    continue  # its key covers bytes the recipe does not hold
                try:
                    cpu = keyed(run, "cpu")
                except Exception:  # noqa: BLE001 - a run the CPU cannot train: the exact way
                    continue
                if cpu.hash() == keys[f"{name}@{level}"]:
                    files[f"{name}@{level}"] = cache_path(cpu, tmp).name
    return {"about": "generated by `python -m analyses.zoo catalog` (see analyses/zoo/"
                     "catalog.py); do not edit by hand",
            "sources": dict(catalog.sources()),
            "recipes": {n: {"module": module[n], "levels": list(r.levels), "doc": r.doc,
                            **({"init_from": dict(r.init_from)} if r.init_from else {})}
                        for n, r in RECIPES.items()},
            "keys": dict(sorted(keys.items())), "files": dict(sorted(files.items()))}


def _content_files(run) -> bool:
    files = getattr(run.task, "content_files", None)
    return bool(files and files())


class _stand_in_parents:
    """Within: a fine-tuned recipe's parent is a stand-in file in ``cache_dir`` (its model entry
    the parent's own record, its digest :data:`~analyses.zoo.catalog.INIT_DIGEST`), and the
    size check is skipped (a key does not depend on whether the run fits this machine; the
    check builds every model on the meta device). Gives ``run_config(name, level)``."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self):
        import analyses.zoo.runs as runs  # this module: its run_config is what is replaced
        from models.train import build, runconfig

        records: dict[str, dict] = {}
        real = runs.run_config

        def run_config(name, level, cache_dir=self.cache_dir, train=None, device="cpu",
                       seed_offset=0):
            run = real(name, level, cache_dir, train, device, seed_offset)
            path = cache_path(run, cache_dir)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()  # the child's recipe asks only that its parent exists
            records[str(path)] = run.to_dict()["model"]
            return run

        for obj, attr, value in ((runs, "run_config", run_config),
                                 (build, "_init_model_entry", lambda path: records[str(path)]),
                                 (runconfig, "file_digest", lambda path: catalog.INIT_DIGEST),
                                 (build, "check_run_size", lambda *a, **k: 0)):
            self.saved.append((obj, attr, getattr(obj, attr)))
            setattr(obj, attr, value)
        return run_config

    def __exit__(self, *exc):
        for obj, attr, value in reversed(self.saved):
            setattr(obj, attr, value)
