"""The checkpoint zoo: every trained model an analysis uses, served by name.

The recipes are data (:mod:`analyses.zoo.recipes`): a task × arch with overrides on top of its
paper's level rows at each level it has, and optionally another recipe whose checkpoint starts
it; one paper's settings, rows and recipes are one module here (:mod:`analyses.zoo.copy` …).
:func:`checkpoint` serves a recipe through the one locked, hashed cache of
:mod:`models.train.cache`: trained once, reused by every analysis and by
``python -m analyses.reproduce``, which trains what its plan needs from here. ``zoo:NAME`` or
``zoo:NAME@LEVEL`` names a cached checkpoint wherever a path goes (:func:`resolve`;
``models.load``, every analysis), and never trains.

This module names and lists checkpoints from the zoo's catalog (:mod:`analyses.zoo.catalog`)
and imports no training code for that; building runs and training is
:mod:`analyses.zoo.runs`, imported where it is needed (a name the catalog cannot serve, a
``train`` command). Its names are served from here as before (``zoo.checkpoint``,
``zoo.run_config``, ``zoo.RECIPES``, …: :func:`__getattr__`).

The cache is ``--cache-dir``, else the default of :func:`seqprobe.paths.default_cache_dir`
(``$SEQPROBE_CACHE``, else ``$XDG_CACHE_HOME/seqprobe``, else ``~/.cache/seqprobe``): the
same folder from wherever a command runs; ``--list`` prints it.

    python -m analyses.zoo --list [--level L] [--cache-dir DIR]  # the level's recipes: state, path
    python -m analyses.zoo path copy/hard_alibi [--level L]         # its cached file; never trains
    python -m analyses.zoo train copy/hard_alibi markov/mamba2 [--level paper] [--cache-dir DIR]
    python -m analyses.zoo train induction/stu_L16_s0 induction/stu_L16_s1 --ray [ADDRESS]
    python -m analyses.zoo catalog [--check]  # regenerate the catalog (analyses.zoo.catalog)
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import types
from pathlib import Path
from typing import Any

from analyses.zoo import catalog
from analyses.zoo.catalog import (
    ZOO_PREFIX,
    NotTrained,
    is_zoo_ref,
    not_trained,
    parse_zoo_ref,
    train_command,  # noqa: F401 - zoo.train_command, as before
    unknown_recipe,
)
from analyses.zoo.catalog import where as _where
from seqprobe.cli import (
    LEVELS,
    OneLineParser,
    add_backend_arguments,
    add_device_argument,
    add_level_flag,
    add_workers_flag,
    run_cli,
)
from seqprobe.config import check
from seqprobe.errors import CheckpointError
from seqprobe.paths import (
    cache_dir_or_default,
    check_not_dangling,
    register_name_resolver,
)

# ---------------------------------------------------------------------------- the seed offset
# Every recipe's training seed shifted by this many (``reproduce --seed-offset K`` sets it for
# its own process and every job it starts), to measure a claim over seeds of the models it
# reads; unset or 0: the recipes as written, their cache keys unchanged. Read once, by a
# command's entry point (:func:`seed_offset`), and passed down as ``seed_offset=``.
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


# ---------------------------------------------------------------------------- names
def _runs():
    """:mod:`analyses.zoo.runs`: building runs and training (imports models.train)."""
    from analyses.zoo import runs

    return runs


def recipe(name: str):
    """The :class:`~analyses.zoo.recipe.Recipe` called ``name`` (:func:`analyses.zoo.runs.recipe`;
    an unknown name is one line with its near matches)."""
    return _runs().recipe(name)


def _live():
    """:mod:`analyses.zoo.runs` where this process has imported it already, else None. Its
    recipes are then in memory, and they are the truth: a session (a test) may have added or
    replaced one, which the catalog cannot know."""
    return sys.modules.get(f"{__name__}.runs")


def _from_catalog(name: str) -> bool:
    """The catalog's entry of ``name`` may be served: generated from the sources as they are,
    and the recipe in memory (if the recipes are loaded) the one its paper module built."""
    live = _live()
    if live is not None and (live.RECIPES.get(name) is None
                             or live.RECIPES.get(name) is not live.AS_BUILT.get(name)):
        return False
    return catalog.trusted(name)


def _names() -> list[str] | None:
    """Every recipe's name, where it is known without importing the recipes."""
    live = _live()
    return list(live.RECIPES) if live is not None else catalog.names()


def check_recipe(name: str, level: str | None = None) -> None:
    """One line for a name that is no recipe (with near matches) or a level it lacks; from the
    catalog, else (recipes loaded already, or a catalog older than them) from the recipes."""
    known = catalog.names() if _live() is None else None
    if known is None:
        r = _runs().recipe(name)
        if level is not None:
            r.parts(level)
        return
    if name not in known:
        raise unknown_recipe(name, known)
    if level is not None:  # the words of Recipe.parts
        check(level in LEVELS, f"unknown level {level!r}; allowed: {', '.join(LEVELS)}")
        have = catalog.levels(name)
        check(level in have, f"recipe {name} has no {level} version (it has "
              f"{', '.join(have)})")


def _catalog_file(name: str, level: str, cache_dir: str | Path | None, device: Any,
                  seed_offset: int) -> Path | None:
    """The cache file the catalog names for the run (None: only building it can say)."""
    if not _from_catalog(name):
        return None
    file = catalog.cached_file(name, level, device, seed_offset)
    return None if file is None else cache_dir_or_default(cache_dir) / file


def status(name: str, level: str, cache_dir: str | Path | None, device: Any = "auto",
           seed_offset: int = 0) -> str:
    """``cached`` / ``missing`` / ``needs NAME`` (its init recipe is not trained yet) /
    ``interrupted`` (resumed when trained) / ``broken`` or ``other run`` (retrained), of the
    run ``device`` would train (a CPU checkpoint is not a CUDA run's), its seed shifted by
    ``seed_offset``. A file the catalog names is read only where it exists (its record must
    be the run of that key); elsewhere the run is built (:func:`analyses.zoo.runs.
    exact_status`)."""
    path = _catalog_file(name, level, cache_dir, device, seed_offset)
    if path is None:
        needs = _untrained_parent(name, level, cache_dir, device, seed_offset)
        return f"needs {needs}" if needs else _runs().exact_status(name, level, cache_dir,
                                                                   device, seed_offset)
    if not path.exists():
        return "missing"
    from models.train.cache import entry_state  # reading the entry's record: its run's key

    state = entry_state(path, path.stem.rsplit("-", 1)[1])
    return {"done": "cached", "other": "other run"}.get(state, state)


def _untrained_parent(name: str, level: str, cache_dir: str | Path | None, device: Any,
                      seed_offset: int) -> str | None:
    """The recipe that starts ``name`` where the catalog names its file and it is not in the
    cache (so ``name`` is not either); None where there is none, or the catalog cannot say."""
    if not _from_catalog(name):
        return None
    parent = catalog.parent(name, level)
    found = None if parent is None else _catalog_file(parent, level, cache_dir, device,
                                                      seed_offset)
    return parent if found is not None and not found.exists() else None


def path(name: str, level: str = "quick", cache_dir: str | Path | None = None,
         device: Any = "auto", seed_offset: int = 0) -> Path:
    """The path of recipe ``name``'s finished checkpoint at ``level`` in ``cache_dir`` (the run
    ``device`` trains: "auto" is this machine's; its seed shifted by ``seed_offset``); never
    trains, never writes. Not cached (missing, interrupted, another run's or a broken file,
    or what it starts from not trained yet): :class:`NotTrained`, one line with the command
    that trains it."""
    check_recipe(name, level)  # an unknown name or level: one line, with near matches
    found = _catalog_file(name, level, cache_dir, device, seed_offset)
    if found is None:
        return _runs().exact_path(name, level, cache_dir, device, seed_offset)
    state = status(name, level, cache_dir, device, seed_offset)
    if state != "cached":
        raise not_trained([(name, state)], level, cache_dir)
    return found


def resolve(ref: str, cache_dir: str | Path | None = None, device: Any = "auto",
            seed_offset: int = 0) -> Path:
    """``zoo:NAME`` / ``zoo:NAME@LEVEL`` (:func:`analyses.zoo.catalog.parse_zoo_ref`) -> the
    cached checkpoint's path (:func:`path`): what ``models.load`` and the analyses open for
    it."""
    name, level = parse_zoo_ref(ref)
    return path(name, level, cache_dir, device, seed_offset)


# models.load("zoo:NAME") resolves through the zoo once it is imported (models sits below it)
register_name_resolver(ZOO_PREFIX, resolve)


# ---------------------------------------------------------------------------- what runs.py holds
# served from here as they were before the split (zoo.run_config, zoo.checkpoint, zoo.RECIPES…)
_FROM_RUNS = frozenset({
    "ENSEMBLES", "RECIPES", "Recipe", "checkpoint", "checkpoints", "dependencies", "entry_state",
    "exact_path", "exact_status", "run_config", "train_recipes", "untrained_init",
    "_cached", "_entry", "_groups", "_init_path", "_resolved", "_train_group"})


def __getattr__(name: str) -> Any:
    """``zoo.run_config`` and the rest of :mod:`analyses.zoo.runs`, imported on first use; a
    submodule (``zoo.copy``, ``zoo.levels``) imported when named."""
    if name in _FROM_RUNS:
        return getattr(_runs(), name)
    if name in {m.name for m in pkgutil.iter_modules(__path__)}:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """This package: ``zoo.recipe`` stays the function above when the submodule of that name
    (:mod:`analyses.zoo.recipe`, imported later, where a run is built) is bound here by the
    import system."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "recipe" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


# ---------------------------------------------------------------------------- command line
def _main(argv: list[str] | None) -> int:
    p = OneLineParser(prog="python -m analyses.zoo", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="`train NAME...`: recipes to train; `path "
                   "NAME...`: their cached checkpoints' paths (never trains); `catalog`: "
                   "regenerate analyses/zoo/catalog.json; else name prefixes to list "
                   "(default: all)")
    p.add_argument("--list", action="store_true", help="list the recipes that exist at the "
                   "level, with each one's state and path (the default; creates nothing)")
    add_level_flag(p)
    p.add_argument("--cache-dir", default=None, help="the checkpoint cache (default: "
                   "$SEQPROBE_CACHE, else $XDG_CACHE_HOME/seqprobe, else ~/.cache/seqprobe)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--check", action="store_true", help="`catalog`: write nothing, exit 1 "
                   "when the catalog is stale")
    p.add_argument("--move-keys", action="store_true", help="`catalog`: write it even where "
                   "recorded cache keys move (their checkpoints are retrained)")
    add_workers_flag(p, help="with --ray: the CPUs of the Ray instance started here "
                     "(default: all)")
    add_device_argument(p, default="auto")
    add_backend_arguments(p)
    # its values are models.train.ensemble_cache.ENSEMBLES', checked there before any training
    p.add_argument("--ensembles", default="auto",
                   help="`train`: runs of one model trained as one ensemble (auto: where it "
                   "is faster: on a GPU; on CPU cores the same work or more, so not there; "
                   "on; off)")
    args = p.parse_intermixed_args(argv)  # `train --level medium NAME...`: flags between the names
    # read once, here: a bad $SEQPROBE_SEED_OFFSET is one line, not every recipe "invalid"
    offset = seed_offset()
    if args.names[:1] == ["catalog"] and not args.list:  # regenerate analyses/zoo/catalog.json
        check(args.names == ["catalog"], "`catalog` takes no names")
        check(not (args.check and args.move_keys), "--check or --move-keys, not both")
        return _catalog(args.check, args.move_keys)
    if args.names[:1] == ["path"] and not args.list:
        return _print_paths(args.names[1:], args.level, args.cache_dir, args.device, offset)
    if args.names[:1] == ["train"] and not args.list:
        args.names = args.names[1:]
        check(bool(args.names), "name the recipes to train (see --list)")
        for n in args.names:
            check_recipe(n, args.level)  # every name checked before any training
        return _train(args, offset)
    return _print_list(args.names, args.level, args.cache_dir, args.device, offset)


def _train(args, offset: int) -> int:
    """``train NAME...``: each recipe trained (:func:`analyses.zoo.runs.train_recipes`)."""
    from models.train.cache import check_cache_dir
    from seqprobe.device import resolve_device
    from seqprobe.sweep import EXIT_SOME_FAILED, Failed, backend_of

    runs = _runs()
    device = str(resolve_device(args.device))  # auto: what this machine has
    backend = None
    if args.ray is not None:
        workers = args.workers or os.cpu_count() or 1
        slots = max(runs.recipe(n).slots for n in args.names)
        backend = backend_of(args, workers, device, num_cpus=slots)
    # after every refusal (a refused command creates no cache); a read-only cache serves
    # the entries it has: an entry to train is checked for a write when it is trained
    check_cache_dir(args.cache_dir, write=False)
    done = runs.train_recipes(args.names, args.level, args.cache_dir, device, backend,
                              progress=not args.no_progress, ensembles=args.ensembles,
                              seed_offset=offset)
    for n, found in done.items():
        print(f"{n}: {found.error} (failed after {found.attempts} attempt(s))"
              if isinstance(found, Failed) else f"{n}: {found}")
    return EXIT_SOME_FAILED if any(isinstance(r, Failed) for r in done.values()) else 0


def _catalog(check_only: bool, move_keys: bool) -> int:
    """``catalog``: regenerate analyses/zoo/catalog.json from the recipes (``check_only``: say
    whether it is stale, write nothing); a recorded key that would move is refused unless
    ``move_keys``."""
    data = _runs().catalog_now()
    moved = catalog.moved_keys(catalog.load().get("keys", {}), data["keys"])
    check(not moved or move_keys or check_only, f"{len(moved)} recorded cache keys would move "
          f"or go (every cached checkpoint of those runs would be retrained), e.g. "
          f"{'; '.join(moved[:3])}; if that is meant, regenerate with --move-keys")
    if check_only:
        stale = catalog.load() != data
        print(f"{catalog.CATALOG}: " + ("stale: regenerate it with `python -m analyses.zoo "
                                        "catalog`" if stale else "up to date"), file=sys.stderr)
        return int(stale)
    catalog.write(data)
    print(f"wrote {catalog.CATALOG}", file=sys.stderr)
    return 0


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


def _print_paths(names: list[str], level: str, cache_dir: str | None, device: str,
                 offset: int) -> int:
    """``path NAME...``: each recipe's cached checkpoint, one path a line; any not cached is
    one line naming them and the command that trains them (nothing is trained)."""
    check(bool(names), "name the recipes whose paths to print (see --list)")
    names = [_bare_name(n, level) for n in names]
    _readable_cache_dir(cache_dir)
    for n in names:  # every name checked before any lookup
        check_recipe(n, level)
    states = {n: status(n, level, cache_dir, device, offset) for n in names}
    missing = [(n, st) for n, st in states.items() if st != "cached"]
    if missing:
        raise not_trained(missing, level, cache_dir)
    for n in names:
        print(path(n, level, cache_dir, device, offset))
    return 0


def _recipes_listed() -> list[tuple[str, tuple[str, ...], str]]:
    """``(name, levels, doc)`` of every recipe in --list order: the catalog's, else (older
    than the recipes) the recipes'."""
    if _live() is None and catalog.names() is not None:
        return [(n, catalog.levels(n), catalog.doc(n)) for n in catalog.names()]
    return [(n, r.levels, r.doc) for n, r in _runs().RECIPES.items()]


def _print_list(prefixes: list[str], level: str, cache_dir: str | None, device: str,
                offset: int = 0) -> int:
    """The recipes that exist at ``level`` (and start with one of ``prefixes``): name, state,
    the path their checkpoint has (or will have) in ``cache_dir``, and what it is. The cache
    folder itself goes to stderr (stdout stays one row a recipe)."""
    _readable_cache_dir(cache_dir)
    print(f"cache: {_where(cache_dir)}" + ("" if cache_dir else " (the default: --cache-dir "
          "or $SEQPROBE_CACHE to choose another)"), file=sys.stderr)
    every = _recipes_listed()
    named = [r for r in every if not prefixes or r[0].startswith(tuple(prefixes))]
    check(bool(named), f"no recipe starts with {', '.join(prefixes)}; see "
          "`python -m analyses.zoo --list`")
    listed = [r for r in named if level in r[1]]
    check(bool(listed), f"none of the {len(named)} recipe(s) starting with "
          f"{', '.join(prefixes) or '(any)'} has a {level} version; their levels: "
          f"{', '.join(sorted({lv for r in named for lv in r[1]}))}")
    rows = []
    for n, _, doc in listed:
        rows.append(_list_row(n, doc, level, cache_dir, device, offset))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
    return 0


def _list_row(n: str, doc: str, level: str, cache_dir: str | None, device: str,
              offset: int) -> tuple[str, str, str, str, str]:
    """One --list row: name, state, path, how well it learnt, doc. A file there is read once
    (its state and its score); a missing one is not opened, so no torch is imported for it."""
    found = _catalog_file(n, level, cache_dir, device, offset)
    if ((found is not None and not found.exists())
            or (found is None and _untrained_parent(n, level, cache_dir, device, offset))):
        # missing, or fine-tuned from a recipe not trained yet (no key until it is)
        where = "-" if found is None else str(found)
        return n, status(n, level, cache_dir, device, offset), where, "-", doc
    from models.checkpoint.io import read_once

    with read_once():
        state = status(n, level, cache_dir, device, offset)
        if found is None and not state.startswith("needs "):  # else: no key until it is
            try:
                found = _runs().exact_file(n, level, cache_dir, device, offset)
            except NotTrained:  # fine-tuned from a recipe not trained yet: no key until it is
                pass
        where = "-" if found is None else str(found)
        return n, state, where, accuracy_text(Path(where)) if state == "cached" else "-", doc


GOOD = 0.9  # the string accuracy --list reads a length as copied at


def accuracy_text(path: Path) -> str:
    """How well a cached checkpoint learnt, from its last evaluation (the training record):
    string accuracy and, for a task scored per length, the longest length up to which every
    length reaches :data:`GOOD` ("acc 0.22, >=0.9 to L=3"); its eval loss where it records no
    accuracy; "-" where it records neither (a construction, or a file that cannot be read)."""
    from models.checkpoint.io import read_checkpoint  # a cached entry: read already (status)

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
    known = _names()
    known = known if known is not None else list(_runs().RECIPES)
    return f"the zoo recipe {name} is opened as {ZOO_PREFIX}{name}" if name in known else None
