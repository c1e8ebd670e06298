"""The zoo's catalog: what ``zoo:NAME[@LEVEL]`` and ``python -m analyses.zoo --list`` need to
know of every recipe, read from one generated file (``catalog.json`` beside this module)
instead of building run configs, so that naming a model imports no training code.

It records, for every recipe: its levels and one-line doc; at every level, its cache key (the
keys tests/test_recipe_hashes.py holds still: a fine-tuned recipe's with a stand-in for its
parent's bytes, :data:`INIT_DIGEST`); and where the key is the recipe's alone (no parent
checkpoint, no data file whose bytes it covers), the cache file of its CPU run. That file is
all :func:`cached_file` serves: another device type (its run is resolved differently), a
nonzero seed offset, a fine-tuned recipe, or an entry older than the sources that define its
key get None, and the caller builds the run (:mod:`analyses.zoo.runs`): the catalog never
names a file the exact way would not. The sources are recorded by digest: the shared ones
(:data:`KEYING`, the zoo's recipe machinery) and each paper module of the zoo, so that an
edited or new paper module leaves the other papers' entries served; a name the catalog does
not know is refused from it only while every source is as recorded (else the recipes
themselves are asked).

Regenerate after changing a recipe, a level row or how a run is keyed (one command;
tests/test_recipe_hashes.py fails until it is done)::

    python -m analyses.zoo catalog          # writes analyses/zoo/catalog.json
    python -m analyses.zoo catalog --check  # exit 1 when it is stale

Cache keys never move: a moved key means every cached checkpoint of that run is retrained. So
regenerating refuses to change or drop a recorded key unless ``--move-keys`` says it is meant.

``zoo:NAME[@LEVEL]`` is parsed here too (:func:`parse_zoo_ref`), for the same reason.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from seqprobe.cli import LEVELS
from seqprobe.config import check

HERE = Path(__file__).resolve().parent
CATALOG = HERE / "catalog.json"
ROOT = HERE.parent.parent
# The files whose edits can move a key or a recipe: the zoo's paper modules (every .py of
# analyses/zoo/ but the serving ones and the shared ones), and (shared by every recipe) how a
# recipe becomes a run, the level rows and how a run is built and keyed.
NOT_KEYING = ("__init__.py", "__main__.py", "catalog.py", "runs.py")
KEYING = ("analyses/zoo/recipe.py", "analyses/zoo/recipes.py", "analyses/zoo/levels.py",
          "models/train/levels.py", "models/train/build.py", "models/train/runconfig.py",
          "models/train_config.py")
RECORDED_LEVELS = LEVELS  # every level is recorded (a recipe has the ones it lists)
INIT_DIGEST = "0123456789abcdef"  # a fine-tuned recipe's parent bytes, in its recorded key

# A recipe's cached checkpoint where a checkpoint path goes (``models.load``, every analysis):
# ``zoo:NAME`` (quick) or ``zoo:NAME@LEVEL``; resolved by :func:`analyses.zoo.resolve`
ZOO_PREFIX = "zoo:"


def is_zoo_ref(text: object) -> bool:
    """``text`` names a zoo checkpoint (``zoo:NAME[@LEVEL]``) rather than a file."""
    return isinstance(text, str) and text.startswith(ZOO_PREFIX)


def parse_zoo_ref(ref: str) -> tuple[str, str]:
    """``"zoo:copy/rope@medium"`` -> ``("copy/rope", "medium")``; the level defaults to quick.
    A malformed reference or an unknown level is one line (the name is checked by the zoo)."""
    check(is_zoo_ref(ref), f"{ref!r} is not a zoo name ({ZOO_PREFIX}NAME or "
          f"{ZOO_PREFIX}NAME@LEVEL)")
    name, at, level = ref[len(ZOO_PREFIX):].partition("@")
    check(bool(name.strip()), f"{ref!r}: no recipe name after {ZOO_PREFIX!r} (e.g. "
          f"{ZOO_PREFIX}copy/hard_alibi; `python -m analyses.zoo --list` lists them)")
    level = level if at else "quick"
    check(level in LEVELS, f"{ref!r}: unknown level {level!r} after '@'; levels: "
          f"{', '.join(LEVELS)}")
    return name, level


# ---------------------------------------------------------------------------- reading
def papers() -> list[str]:
    """The zoo's paper modules as the catalog keys them (``analyses/zoo/copy.py``): every
    module of the package but the serving and shared ones (a subpackage is no paper)."""
    return sorted(p.relative_to(ROOT).as_posix() for p in HERE.glob("*.py")
                  if p.name not in NOT_KEYING and p.relative_to(ROOT).as_posix() not in KEYING)


@functools.cache
def sources() -> dict[str, str]:
    """``{file: sha256 of its bytes (16 hex digits)}`` of :data:`KEYING` and :func:`papers`,
    as they are now."""
    out = {}
    for rel in (*KEYING, *papers()):
        path = ROOT / rel
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else ""
    return out


@functools.cache
def load() -> dict[str, Any]:
    """The catalog as written ({} when the file is missing or unreadable: every lookup then
    goes the exact way)."""
    try:
        return json.loads(CATALOG.read_text())
    except (OSError, ValueError):
        return {}


def _as_recorded(files: Iterable[str]) -> bool:
    recorded = load().get("sources", {})
    return all(recorded.get(f) == sources()[f] for f in files)


@functools.cache
def fresh() -> bool:
    """Every source is as the catalog recorded it, and no paper module was added: the catalog
    knows every recipe (module docstring)."""
    return bool(load()) and set(load()["sources"]) == set(sources()) and _as_recorded(sources())


def trusted(name: str) -> bool:
    """Recipe ``name``'s entry was generated from the sources as they are now (its paper
    module's and the shared ones)."""
    entry = load().get("recipes", {}).get(name)
    return (entry is not None and entry["module"] in sources()
            and _as_recorded((*KEYING, entry["module"])))


def names() -> list[str] | None:
    """Every recipe's name in --list order, or None where the catalog cannot say (a source
    changed or a paper added since it was generated: the recipes themselves can)."""
    return list(load()["recipes"]) if fresh() else None


def levels(name: str) -> tuple[str, ...]:
    return tuple(load()["recipes"][name]["levels"])


def doc(name: str) -> str:
    return load()["recipes"][name]["doc"]


def parent(name: str, level: str) -> str | None:
    """The recipe whose checkpoint starts ``name`` at ``level`` (None: random init)."""
    return load()["recipes"][name].get("init_from", {}).get(level)


def cpu_device(device: object) -> bool:
    """``device`` certainly means the CPU: "cpu" / "cpu:N", a CPU torch.device, or "auto" on a
    machine with no GPU. Where torch is imported already, "auto" is asked as
    :func:`seqprobe.device.resolve_device` asks it (so a test's stand-in GPU counts);
    otherwise no GPU driver on this machine means no GPU torch could use (without a driver,
    CUDA and ROCm see no device), so the answer needs no torch."""
    if not isinstance(device, str):
        return getattr(device, "type", None) == "cpu"
    if device == "cpu" or device.startswith("cpu:"):
        return True
    if device != "auto":
        return False
    if "torch" in sys.modules:
        from seqprobe.device import cuda_present

        return not cuda_present()
    drivers = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
    return not any(os.path.exists(p) for p in drivers)


def cached_file(name: str, level: str, device: object = "auto",
                seed_offset: int = 0) -> str | None:
    """The cache file name (``ARCH-TASK-KEY.pt``) of recipe ``name``'s run at ``level`` on
    ``device``, and its key, where the catalog knows them; None where only building the run
    can say (module docstring)."""
    if seed_offset or not trusted(name) or not cpu_device(device):
        return None
    return load()["files"].get(f"{name}@{level}")


# ---------------------------------------------------------------------------- writing
def generate() -> dict[str, Any]:
    """The catalog of the recipes as they are now: builds every recipe's run at every level
    (slow: imports training; run by the command below and by the test that checks the file)."""
    import tempfile

    from analyses.zoo import recipes as zoo_recipes
    from analyses.zoo import runs
    from models.train import cache

    module = {r.name: Path(paper.__file__).resolve().relative_to(ROOT).as_posix()
              for paper in zoo_recipes.papers() for r in paper.recipes()}
    keys: dict[str, str] = {}
    files: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp, _stand_in_parents(Path(tmp)) as run_config:
        for name, r in runs.RECIPES.items():
            for level in r.levels:
                run = run_config(name, level)
                keys[f"{name}@{level}"] = run.hash()
                if level in r.init_from or run.train.init_from or _content_files(run):
                    continue  # its key covers bytes the recipe does not hold
                try:
                    cpu = cache.keyed(run, "cpu")
                except Exception:  # noqa: BLE001 - a run the CPU cannot train: the exact way
                    continue
                if cpu.hash() == keys[f"{name}@{level}"]:
                    files[f"{name}@{level}"] = cache.cache_path(cpu, tmp).name
    return {"about": "generated by `python -m analyses.zoo catalog` (see analyses/zoo/"
                     "catalog.py); do not edit by hand",
            "sources": dict(sources()),
            "recipes": {n: {"module": module[n], "levels": list(r.levels), "doc": r.doc,
                            **({"init_from": dict(r.init_from)} if r.init_from else {})}
                        for n, r in runs.RECIPES.items()},
            "keys": dict(sorted(keys.items())), "files": dict(sorted(files.items()))}


def _content_files(run) -> bool:
    files = getattr(run.task, "content_files", None)
    return bool(files and files())


class _stand_in_parents:
    """Within: a fine-tuned recipe's parent is a stand-in file in ``cache_dir`` (its model entry
    the parent's own record, its digest :data:`INIT_DIGEST`), and the size check is skipped (a
    key does not depend on whether the run fits this machine; the check builds every model on
    the meta device). Gives ``run_config(name, level)``."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self):
        from analyses.zoo import runs
        from models.train import build, cache, runconfig

        records: dict[str, dict] = {}
        real = runs.run_config

        def run_config(name, level, cache_dir=self.cache_dir, train=None, device="cpu",
                       seed_offset=0):
            run = real(name, level, cache_dir, train, device, seed_offset)
            path = cache.cache_path(run, cache_dir)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()  # the child's recipe asks only that its parent exists
            records[str(path)] = run.to_dict()["model"]
            return run

        for obj, attr, value in ((runs, "run_config", run_config),
                                 (build, "_init_model_entry", lambda path: records[str(path)]),
                                 (runconfig, "file_digest", lambda path: INIT_DIGEST),
                                 (build, "check_run_size", lambda *a, **k: 0)):
            self.saved.append((obj, attr, getattr(obj, attr)))
            setattr(obj, attr, value)
        return run_config

    def __exit__(self, *exc):
        for obj, attr, value in reversed(self.saved):
            setattr(obj, attr, value)


def dumps(data: dict[str, Any]) -> str:
    """The catalog as its file holds it: one line a recipe, a key, a file (diffs read well)."""
    parts = []
    for k, v in data.items():
        if isinstance(v, dict):
            rows = ",\n".join(f"  {json.dumps(n)}: {json.dumps(x, ensure_ascii=False)}"
                               for n, x in v.items())
            parts.append(f" {json.dumps(k)}: {{\n{rows}\n }}")
        else:
            parts.append(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write(data: dict[str, Any]) -> None:
    CATALOG.write_text(dumps(data))
    for cached in (load, fresh, sources):
        cached.cache_clear()


def moved_keys(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """The recorded keys that ``current`` changes or drops, as ``name@level: old -> new``."""
    return [f"{k}: {v} -> {current.get(k, '(gone)')}" for k, v in sorted(recorded.items())
            if current.get(k) != v]


def main(argv: Iterable[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    check(argv in ([], ["--check"], ["--move-keys"]),
          "usage: python -m analyses.zoo catalog [--check | --move-keys]")
    data = generate()
    moved = moved_keys(load().get("keys", {}), data["keys"])
    check(not moved or argv != [], f"{len(moved)} recorded cache keys would move or go (every "
          f"cached checkpoint of those runs would be retrained), e.g. {'; '.join(moved[:3])}; "
          "if that is meant, regenerate with --move-keys")
    if argv == ["--check"]:
        stale = load() != data
        print(f"{CATALOG}: " + ("stale: regenerate it with `python -m analyses.zoo catalog`"
                                if stale else "up to date"), file=sys.stderr)
        return int(stale)
    write(data)
    print(f"wrote {CATALOG}", file=sys.stderr)
    return 0
