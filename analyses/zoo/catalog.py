"""The zoo's catalog: what ``zoo:NAME[@LEVEL]`` and ``python -m analyses.zoo --list`` need to
know of every recipe, read from one generated file (``catalog.json`` beside this module)
instead of building run configs, so that naming a model imports no training code.

It records, for every recipe: its levels and one-line doc; at every level, its cache key (the
keys tests/contract/test_recipe_hashes.py holds still: a fine-tuned recipe's with a stand-in for its
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
tests/contract/test_recipe_hashes.py fails until it is done)::

    python -m analyses.zoo catalog          # writes analyses/zoo/catalog.json
    python -m analyses.zoo catalog --check  # exit 1 when it is stale

Cache keys never move: a moved key means every cached checkpoint of that run is retrained. So
regenerating refuses to change or drop a recorded key unless ``--move-keys`` says it is meant.

``zoo:NAME[@LEVEL]`` is parsed here too (:func:`parse_zoo_ref`), and the one line a name that
is not served gets (:class:`NotTrained`, :func:`not_trained`), for the same reason.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from seqprobe.cli import LEVELS
from seqprobe.config import check
from seqprobe.errors import InputError
from seqprobe.paths import cache_dir_or_default, is_default_cache_dir

HERE = Path(__file__).resolve().parent
CATALOG = HERE / "catalog.json"
ROOT = HERE.parent.parent
# The files whose edits can move a key or a recipe: the zoo's paper modules (every .py of
# analyses/zoo/ but the serving ones and the shared ones), and (shared by every recipe) how a
# recipe becomes a run, the level rows and how a run is built and keyed.
NOT_KEYING = ("__init__.py", "__main__.py", "catalog.py", "runs.py")
KEYING = ("analyses/zoo/recipe.py", "analyses/zoo/recipes.py", "analyses/zoo/levels.py",
          "models/levels.py", "models/train/build.py", "models/train/runconfig.py",
          "models/train_config.py")
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


# ---------------------------------------------------------------------------- not served
class NotTrained(InputError):
    """A fine-tuned recipe was asked for before the recipe that starts it is in the cache
    (:func:`checkpoint` trains it first; :func:`untrained_init` asks without raising)."""


def train_command(names: Iterable[str], level: str = "quick",
                  cache_dir: str | Path | None = None) -> str:
    """The command that trains ``names`` at ``level`` into ``cache_dir`` (and what they start
    from), as a user would type it."""
    flags_ = ([] if level == "quick" else ["--level", level]) + (
        [] if is_default_cache_dir(cache_dir) else ["--cache-dir", str(cache_dir)])
    return shlex.join(["python", "-m", "analyses.zoo", "train", *names, *flags_])


def not_trained(pairs: Iterable[tuple[str, str]], level: str,
                cache_dir: str | Path | None) -> NotTrained:
    """One line for recipes ``(name, state)`` that are not served: their states and the exact
    command that trains them."""
    pairs = list(pairs)
    what = ", ".join(f"{n} ({st})" for n, st in pairs)
    return NotTrained(f"not trained at {level} in {where(cache_dir)}: {what}; train "
                      f"{'it' if len(pairs) == 1 else 'them'} with `"
                      f"{train_command([n for n, _ in pairs], level, cache_dir)}`")


def where(cache_dir: str | Path | None) -> str:
    """The cache folder for a message: absolute, so that it says where it looked."""
    return os.path.abspath(cache_dir_or_default(cache_dir))


# ---------------------------------------------------------------------------- reading
def papers() -> list[str]:
    """The zoo's paper modules as the catalog keys them (``analyses/zoo/copy.py``): every
    module of the package but the serving and shared ones (a subpackage is no paper). Found
    as files, not through the registry's [papers] table: reading that table counts as a link
    to each paper (tests/import_graph.py), and the catalog sits below the papers."""
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


def unknown_recipe(name: str, known: Iterable[str]) -> InputError:
    """The one-line refusal of a recipe name not among ``known``: the close names, and the
    names of its family (``copy/…``), as suggestions."""
    known = list(known)
    family = [n for n in known if n.split("/")[0] == name.split("/")[0]]
    close = list(dict.fromkeys([*difflib.get_close_matches(name, known, n=5, cutoff=0.6),
                                *family]))[:5]
    hint = (f"; did you mean {', '.join(close)}?" if close else
            "; `python -m analyses.zoo --list` lists them")
    return InputError(f"unknown recipe {name!r}{hint}")
