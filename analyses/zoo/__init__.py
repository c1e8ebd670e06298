"""The checkpoint zoo: every trained model an analysis uses, served by name.

The recipes are data (:mod:`analyses.zoo.recipes`): a task × arch with overrides on top of its
paper's level rows at each level it has, and optionally another recipe whose checkpoint starts
it; one paper's settings, rows and recipes are one module here (:mod:`analyses.zoo.copy` …).
:func:`checkpoint` serves a recipe through the one locked, hashed cache of
:mod:`models.train.cache`: trained once, reused by every analysis and by
``python -m analyses.reproduce``, which trains what its plan needs from here. ``zoo:NAME`` or
``zoo:NAME@LEVEL`` names a cached checkpoint wherever a path goes (:func:`resolve`;
``models.load``, every analysis), and never trains.

The cache is ``--cache-dir``, else the default of :func:`seqprobe.paths.default_cache_dir`
(``$SEQPROBE_CACHE``, else ``$XDG_CACHE_HOME/seqprobe``, else ``~/.cache/seqprobe``): the
same folder from wherever a command runs; ``--list`` prints it.

    python -m analyses.zoo --list [--level L] [--cache-dir DIR]  # the level's recipes: state, path
    python -m analyses.zoo path copy/hard_alibi [--level L]         # its cached file; never trains
    python -m analyses.zoo train copy/hard_alibi markov/mamba2 [--paper] [--cache-dir DIR]
    python -m analyses.zoo train induction/stu_L16_s0 induction/stu_L16_s1 --ray [ADDRESS]
"""

from __future__ import annotations

import difflib
import os
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from analyses.zoo.recipe import ZOO_PREFIX, Recipe, is_zoo_ref, parse_zoo_ref
from analyses.zoo.recipes import RECIPES
from models.checkpoint.io import read_checkpoint
from models.loading import register_name_resolver
from models.train.cache import (
    cache_path,
    check_cache_dir,
    check_not_dangling,
    entry_state,
    is_cached,
    train_run_cached,
)
from models.train.ensemble import MemberFailed, group_runs
from models.train.ensemble_cache import ENSEMBLES, train_runs_cached
from models.train.runconfig import RunConfig
from seqprobe.cli import OneLineParser, add_device_argument, add_level_flag, run_cli
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.errors import CheckpointError, InputError
from seqprobe.paths import cache_dir_or_default, is_default_cache_dir
from seqprobe.sweep import (
    EXIT_SOME_FAILED,
    Backend,
    Failed,
    add_backend_arguments,
    add_workers_flag,
    backend_of,
    map_jobs,
)


class NotTrained(InputError):
    """A fine-tuned recipe was asked for before the recipe that starts it is in the cache
    (:func:`checkpoint` trains it first; :func:`untrained_init` asks without raising)."""


# ---------------------------------------------------------------------------- serving
# Every recipe's training seed shifted by this many (``reproduce --seed-offset K`` sets it for
# its own process and every job it starts), to measure a claim over seeds of the models it
# reads; unset or 0: the recipes as written, their cache keys unchanged.
SEED_OFFSET_ENV = "SEQPROBE_SEED_OFFSET"
MAX_SEED_OFFSET = 1000


def seed_offset() -> int:
    """The seed offset of :data:`SEED_OFFSET_ENV` (0 when unset), or one clear error."""
    text = os.environ.get(SEED_OFFSET_ENV, "").strip()
    if not text:
        return 0
    # isascii: "²" and "٣" are digits to str.isdigit, but not to int()
    check(text.isascii() and text.isdigit() and int(text) <= MAX_SEED_OFFSET,
          f"{SEED_OFFSET_ENV}={text!r}: expected an integer in 0..{MAX_SEED_OFFSET}")
    return int(text)


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        family = [n for n in RECIPES if n.split("/")[0] == name.split("/")[0]]
        close = list(dict.fromkeys([*difflib.get_close_matches(name, RECIPES, n=5, cutoff=0.6),
                                    *family]))[:5]
        hint = (f"; did you mean {', '.join(close)}?" if close else
                "; `python -m analyses.zoo --list` lists them")
        raise InputError(f"unknown recipe {name!r}{hint}")
    return RECIPES[name]


def _init_path(name: str, level: str, cache_dir: str | Path,
               device: str | torch.device = "auto") -> Path | None:
    """Where the checkpoint that starts recipe ``name`` at ``level`` on ``device`` is cached
    (None: the recipe starts from random init)."""
    r = recipe(name)
    if level not in r.init_from:
        return None
    return cache_path(_resolved(run_config(r.init_from[level], level, cache_dir, None, device),
                                device), cache_dir)


def _resolved(run: RunConfig, device: str | torch.device) -> RunConfig:
    """``run`` as ``device`` trains it (its cache key): what the cache serves."""
    return run.resolved(resolve_device(device))


def untrained_init(name: str, level: str, cache_dir: str | Path,
                   device: str | torch.device = "auto") -> str | None:
    """The recipe that starts ``name`` at ``level`` when it is not in the cache yet (so
    neither is ``name``); None when there is none to wait for."""
    init = _init_path(name, level, cache_dir, device)
    return None if init is None or init.exists() else recipe(name).init_from[level]


def run_config(name: str, level: str, cache_dir: str | Path | None = None,
               train: Mapping[str, Any] | None = None,
               device: str | torch.device = "auto") -> RunConfig:
    """The run of recipe ``name`` at a level (:meth:`Recipe.run_config`), shifted by
    :func:`seed_offset`; an ``init_from`` recipe must be cached already (on ``device``;
    :func:`checkpoint` trains it first; else :class:`NotTrained`). ``train`` overrides training
    fields on top. :meth:`RunConfig.resolved` gives the run ``device`` trains, which the cache
    keys."""
    r = recipe(name)
    init = _init_path(name, level, cache_dir, device)
    if init is not None and not init.exists():
        raise NotTrained(f"recipe {name} starts from {r.init_from[level]}, which is not "
                         f"trained yet in {_where(cache_dir)}")
    return r.run_config(level, train, init, seed_offset())


def dependencies(name: str, level: str) -> list[str]:
    """The recipes ``name`` needs trained first (its init chain), nearest last."""
    r = recipe(name)
    if level not in r.init_from:
        return []
    parent = r.init_from[level]
    return [*dependencies(parent, level), parent]


def checkpoint(name: str, level: str = "quick", cache_dir: str | Path | None = None,
               device: str = "auto", progress: bool = True,
               train: Mapping[str, Any] | None = None, resume: str | Path | None = None) -> Path:
    """The path of recipe ``name``'s checkpoint at ``level``, trained (and its init chain
    first) if it is not cached. ``train`` overrides training fields (another cache entry);
    ``resume`` continues the same run stopped earlier (see ``train_run_cached``)."""
    for dep in dependencies(name, level):
        train_run_cached(run_config(dep, level, cache_dir, None, device), cache_dir, device,
                          progress, label=dep)
    return train_run_cached(run_config(name, level, cache_dir, train, device), cache_dir, device,
                             progress, resume, label=name)


def checkpoints(names: Iterable[str], level: str = "quick",
                cache_dir: str | Path | None = None, device: str = "auto",
                progress: bool = True) -> dict[str, Path]:
    """:func:`checkpoint` of each name: ``{name: path}``, trained as :func:`train_recipes`
    trains them; a run that fails is one line naming it."""
    done = train_recipes(names, level, cache_dir, device, progress=progress)
    failed = [f"{n} ({r.error})" for n, r in done.items() if isinstance(r, Failed)]
    check(not failed, f"training failed: {', '.join(failed)}")
    return dict(done)


def _train_group(names: list[str], level: str, cache_dir: str, device: str,
                 train: Mapping[str, Any] | None, ensembles: str,
                 progress: bool = False) -> list[str | Failed]:
    """Task body of :func:`train_recipes` (a worker process, a Ray worker or this one): the
    recipes ``names``, whose init recipes are cached, trained as ensembles where they can be
    (:func:`models.train.ensemble_cache.train_runs_cached`); each one's path, or a
    :class:`Failed` for a run that diverged."""
    run_configs = [run_config(n, level, cache_dir, train, device) for n in names]
    done = train_runs_cached(run_configs, cache_dir, device, progress=progress, labels=names,
                             ensembles=ensembles)
    return [Failed(r.error, 1) if isinstance(r, MemberFailed) else str(r) for r in done]


def _cached(name: str, level: str, cache_dir: str | Path,
            train: Mapping[str, Any] | None, device: str = "auto") -> Path | None:
    return _entry(name, level, cache_dir, train, device)[1]


def _entry(name: str, level: str, cache_dir: str | Path, train: Mapping[str, Any] | None,
           device: str = "auto") -> tuple[RunConfig | None, Path | None]:
    """``(the run device trains, its cached path)``; the path is None where the entry is not
    this run's finished one, the run None where what it starts from is not trained yet."""
    if untrained_init(name, level, cache_dir, device):
        return None, None  # its init recipe is not trained yet: so neither is it
    run = _resolved(run_config(name, level, cache_dir, train, device), device)
    path = cache_path(run, cache_dir)
    return run, (path if is_cached(path, run) else None)


def train_recipes(names: Iterable[str], level: str = "quick",
                  cache_dir: str | Path | None = None, device: str = "auto",
                  backend: Backend | None = None, train: Mapping[str, Any] | None = None,
                  progress: bool = True, ensembles: str = "auto") -> dict[str, Path | Failed]:
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
            run, path = _entry(n, level, cache_dir, train, device)
            if path is None:
                todo.append(n)
                runs.append(run)
            else:
                out[n] = path
        groups = _groups(todo, runs, ensembles)
        results = map_jobs(_train_group, [(g, level, cache, device,
                                           dict(train) if train else None, ensembles, here)
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


def status(name: str, level: str, cache_dir: str | Path, device: str = "auto") -> str:
    """``cached`` / ``missing`` / ``needs NAME`` (its init recipe is not trained yet) /
    ``interrupted`` (resumed when trained) / ``broken`` or ``other run`` (retrained), of the
    run ``device`` would train (a CPU checkpoint is not a CUDA run's)."""
    try:
        needs = untrained_init(name, level, cache_dir, device)
        if needs:
            return f"needs {needs}"
        run = _resolved(run_config(name, level, cache_dir, None, device), device)
    except InputError as e:
        return "invalid: " + str(e).splitlines()[0][:60]
    state = entry_state(cache_path(run, cache_dir), run)
    return {"done": "cached", "other": "other run"}.get(state, state)


def train_command(names: Iterable[str], level: str = "quick",
                  cache_dir: str | Path | None = None) -> str:
    """The command that trains ``names`` at ``level`` into ``cache_dir`` (and what they start
    from), as a user would type it."""
    flags_ = ([] if level == "quick" else [f"--{level}"]) + (
        [] if is_default_cache_dir(cache_dir) else ["--cache-dir", str(cache_dir)])
    return shlex.join(["python", "-m", "analyses.zoo", "train", *names, *flags_])


def not_trained(pairs: Iterable[tuple[str, str]], level: str,
                cache_dir: str | Path) -> NotTrained:
    """One line for recipes ``(name, state)`` that are not served: their states and the exact
    command that trains them."""
    pairs = list(pairs)
    what = ", ".join(f"{n} ({st})" for n, st in pairs)
    return NotTrained(f"not trained at {level} in {_where(cache_dir)}: {what}; train "
                      f"{'it' if len(pairs) == 1 else 'them'} with `"
                      f"{train_command([n for n, _ in pairs], level, cache_dir)}`")


def path(name: str, level: str = "quick", cache_dir: str | Path | None = None,
         device: str = "auto") -> Path:
    """The path of recipe ``name``'s finished checkpoint at ``level`` in ``cache_dir`` (the run
    ``device`` trains: "auto" is this machine's); never trains, never writes. Not cached
    (missing, interrupted, another run's or a broken file, or what it starts from not trained
    yet): :class:`NotTrained`, one line with the command that trains it."""
    recipe(name).parts(level)  # an unknown name or level: one line, with near matches
    state = status(name, level, cache_dir, device)
    if state != "cached":
        raise not_trained([(name, state)], level, cache_dir)
    run = _resolved(run_config(name, level, cache_dir, None, device), device)
    return cache_path(run, cache_dir)


def resolve(ref: str, cache_dir: str | Path | None = None, device: str = "auto") -> Path:
    """``zoo:NAME`` / ``zoo:NAME@LEVEL`` (:func:`analyses.zoo.recipe.parse_zoo_ref`) -> the cached
    checkpoint's path (:func:`path`): what ``models.load`` and the analyses open for it."""
    name, level = parse_zoo_ref(ref)
    return path(name, level, cache_dir, device)


# models.load("zoo:NAME") resolves through the zoo once it is imported (models sits below it)
register_name_resolver(ZOO_PREFIX, resolve)


# ---------------------------------------------------------------------------- command line
def _main(argv: list[str] | None) -> int:
    p = OneLineParser(prog="python -m analyses.zoo", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="`train NAME...`: recipes to train; `path "
                   "NAME...`: their cached checkpoints' paths (never trains); else name "
                   "prefixes to list (default: all)")
    p.add_argument("--list", action="store_true", help="list the recipes that exist at the "
                   "level, with each one's state and path (the default; creates nothing)")
    add_level_flag(p)
    p.add_argument("--cache-dir", default=None, help="the checkpoint cache (default: "
                   "$SEQPROBE_CACHE, else $XDG_CACHE_HOME/seqprobe, else ~/.cache/seqprobe)")
    p.add_argument("--no-progress", action="store_true")
    add_workers_flag(p, help="with --ray: the CPUs of the Ray instance started here "
                     "(default: all)")
    add_device_argument(p, default="auto")
    add_backend_arguments(p)
    p.add_argument("--ensembles", choices=ENSEMBLES, default="auto",
                   help="`train`: runs of one model trained as one ensemble (auto: where it "
                   "is faster: on a GPU; on CPU cores the same work or more, so not there)")
    args = p.parse_intermixed_args(argv)  # `train --medium NAME...`: flags between the names
    seed_offset()  # a bad $SEQPROBE_SEED_OFFSET is one line, not every recipe "invalid"
    if args.names[:1] == ["path"] and not args.list:
        return _print_paths(args.names[1:], args.level, args.cache_dir, args.device)
    if args.names[:1] == ["train"] and not args.list:
        args.names = args.names[1:]
        check(bool(args.names), "name the recipes to train (see --list)")
        for n in args.names:
            recipe(n).parts(args.level)  # every name checked before any training
        device = str(resolve_device(args.device))  # auto: what this machine has
        backend = None
        if args.ray is not None:
            jobs = args.workers or os.cpu_count() or 1
            slots = max(recipe(n).slots for n in args.names)
            backend = backend_of(args, jobs, device, num_cpus=slots)
        # after every refusal (a refused command creates no cache); a read-only cache serves
        # the entries it has: an entry to train is checked for a write when it is trained
        check_cache_dir(args.cache_dir, write=False)
        done = train_recipes(args.names, args.level, args.cache_dir, device, backend,
                             progress=not args.no_progress, ensembles=args.ensembles)
        for n, path in done.items():
            print(f"{n}: {path.error} (failed after {path.attempts} attempt(s))"
                  if isinstance(path, Failed) else f"{n}: {path}")
        return EXIT_SOME_FAILED if any(isinstance(r, Failed) for r in done.values()) else 0
    return _print_list(args.names, args.level, args.cache_dir, args.device)


def _where(cache_dir: str | Path | None) -> str:
    """The cache folder for a message: absolute, so that it says where it looked."""
    return os.path.abspath(cache_dir_or_default(cache_dir))


def _readable_cache_dir(cache_dir: str | Path | None) -> None:
    """Listing and looking up read the cache and create nothing: a missing directory is an
    empty cache; a file in its place is one line."""
    d = cache_dir_or_default(cache_dir)
    check_not_dangling(d)  # a symlink loop would list every recipe as "missing"
    check(not d.exists() or d.is_dir(), f"cache directory {d}: is a file, not a directory")


def _bare_name(name: str, level: str) -> str:
    """A recipe name as ``path`` takes it: ``NAME``, or ``zoo:NAME[@LEVEL]`` as a path is
    written (its level, if given, must be the one asked for)."""
    if not is_zoo_ref(name):
        return name
    bare, given = parse_zoo_ref(name)
    check("@" not in name or given == level, f"{name}: level {given}, but this lookup is at "
          f"{level}; give one: `path {bare} --level {given}`")
    return bare


def _print_paths(names: list[str], level: str, cache_dir: str | None, device: str) -> int:
    """``path NAME...``: each recipe's cached checkpoint, one path a line; any not cached is
    one line naming them and the command that trains them (nothing is trained)."""
    check(bool(names), "name the recipes whose paths to print (see --list)")
    names = [_bare_name(n, level) for n in names]
    _readable_cache_dir(cache_dir)
    for n in names:  # every name checked before any lookup
        recipe(n).parts(level)
    states = {n: status(n, level, cache_dir, device) for n in names}
    missing = [(n, st) for n, st in states.items() if st != "cached"]
    if missing:
        raise not_trained(missing, level, cache_dir)
    for n in names:
        print(path(n, level, cache_dir, device))
    return 0


def _print_list(prefixes: list[str], level: str, cache_dir: str | None, device: str) -> int:
    """The recipes that exist at ``level`` (and start with one of ``prefixes``): name, state,
    the path their checkpoint has (or will have) in ``cache_dir``, and what it is. The cache
    folder itself goes to stderr (stdout stays one row a recipe)."""
    _readable_cache_dir(cache_dir)
    print(f"cache: {_where(cache_dir)}" + ("" if cache_dir else " (the default: --cache-dir "
          "or $SEQPROBE_CACHE to choose another)"), file=sys.stderr)
    named = [n for n in RECIPES if not prefixes or n.startswith(tuple(prefixes))]
    check(bool(named), f"no recipe starts with {', '.join(prefixes)}; see "
          "`python -m analyses.zoo --list`")
    names = [n for n in named if RECIPES[n].available(level)]
    check(bool(names), f"none of the {len(named)} recipe(s) starting with "
          f"{', '.join(prefixes) or '(any)'} has a {level} version; their levels: "
          f"{', '.join(sorted({lv for n in named for lv in RECIPES[n].levels}))}")
    rows = []
    for n in names:
        state = status(n, level, cache_dir, device)
        try:
            run = _resolved(run_config(n, level, cache_dir, None, device), device)
            where = str(cache_path(run, cache_dir))
        except NotTrained:  # fine-tuned from a recipe not trained yet: no key until it is
            where = "-"
        score = accuracy_text(Path(where)) if state == "cached" else "-"
        rows.append((n, state, where, score, RECIPES[n].doc))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
    return 0


GOOD = 0.9  # the string accuracy --list reads a length as copied at


def accuracy_text(path: Path) -> str:
    """How well a cached checkpoint learnt, from its last evaluation (the training record):
    string accuracy and, for a task scored per length, the longest length up to which every
    length reaches :data:`GOOD` ("acc 0.22, >=0.9 to L=3"); its eval loss where it records no
    accuracy; "-" where it records neither (a construction, or a file that cannot be read)."""
    try:
        history = read_checkpoint(path).get("history") or []
    except CheckpointError:
        return "-"
    last = next((h for h in reversed(history) if isinstance(h, dict)
                 and ("string_acc" in h or "eval_loss" in h)), None)
    if last is None:
        return "-"
    if "string_acc" not in last:
        return f"eval loss {float(last['eval_loss']):.3g}"
    text = f"acc {float(last['string_acc']):.2f}"
    at = {int(k): float(v) for k, v in (last.get("string_acc_at") or {}).items()}
    if at:
        upto = 0
        for length in sorted(at):
            if at[length] < GOOD:
                break
            upto = length
        text += f", >={GOOD:g} to L={upto}" if upto else f", <{GOOD:g} from L={min(at)}"
    return text


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)


def hint(name: str) -> str | None:
    """How to open a bare recipe name that :func:`models.load` read as a hub name (this module
    is models.load's ``zoo:`` source, entry point ``seqprobe.sources``, with :func:`resolve`)."""
    return f"the zoo recipe {name} is opened as {ZOO_PREFIX}{name}" if name in RECIPES else None
