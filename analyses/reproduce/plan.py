"""The plan and its jobs: which processes a reproduce run starts, in what order."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from analyses import zoo
from analyses.claims import Figure
from analyses.zoo import dryrun
from analyses.zoo.dryrun import recipe_run_config
from models.train.ensemble import ensemble_key, pays_off
from models.train.gpu_costs import device_kind, run_settings
from models.train.runconfig import Builder
from seqprobe.device import resolve_device
from seqprobe.memory import available_bytes
from seqprobe.registry import table
from seqprobe.sweep.commands import Command

# The analyses a reproduce run starts, in order: the ``[analyses]`` table of
# seqprobe/registry.toml but those in its ``[not_planned]`` table (each with why it is left
# out); tests/contract/test_hand_kept_lists.py checks that every analysis with a FIGURE has a row.
NOT_PLANNED: dict[str, str] = table("not_planned")
PLAN: tuple[str, ...] = tuple(n for n in table("analyses") if n not in NOT_PLANNED)
TRAIN = "train:"  # prefix of the jobs that train zoo recipes
MAX_MEMBERS = 32  # of one ensemble on a GPU (the memory check before training has the last word)

# Where a level's jobs run, for the levels that say (the others: the analyses' defaults, the
# zoo's training on "auto"): analysis -> (device, workers). The device is that of the analysis and
# of every recipe it trains (both get ``--device``, so a checkpoint is asked for on the device
# it was trained on); ``workers``, where not None, is the cores its own job keeps busy, passed as
# its ``--jobs`` (the runs it trains itself side by side), else its FIGURE's slots.
# Large: every sweep on the GPU ("auto": the GPU where there is one, so the level also runs on
# a CPU-only machine), trained as ensembles, which share a small model's kernel launches (one
# at a time the STU and Markov Mamba-2 runs are launch-bound there, and on CPU cores too slow
# for one lent call); copy_efficiency trains its best lrs' other seeds itself, memorization
# its (width, seed) searches on CPU cores, each taking part of the machine (a job waits until
# its cores are free) so that the other jobs run beside them.
PLACEMENT: dict[str, dict[str, tuple[str, int | None]]] = {
    "large": {"copy_efficiency": ("auto", 8), "ngram_lookup": ("auto", None),
              "stu_induction": ("auto", None), "markov_holdout": ("auto", None),
              "memorization": ("cpu", 8)},
}


def placement(name: str, level: str, cores: int | None = None) -> tuple[str | None, int | None]:
    """(device, workers) of analysis ``name`` at ``level`` (:data:`PLACEMENT`; (None, None):
    the defaults). ``workers`` is capped at ``cores`` (default this machine's: a plan for
    another machine, ``--list --jobs 16``, passes its cores)."""
    device, workers = PLACEMENT.get(level, {}).get(name, (None, None))
    cores = cores or os.cpu_count() or 1
    return device, None if workers is None else max(1, min(workers, cores))


def figure_of(name: str) -> Figure:
    return importlib.import_module(f"analyses.{name}").FIGURE


@dataclass(frozen=True)
class Job(Command):
    """One job of the run (a :class:`~seqprobe.sweep.commands.Command` of the one runner):
    training zoo recipes, or one analysis (a synthetic *task* is something else: :mod:`tasks`).
    ``name`` is the analysis name, or "train:" + the recipes' names."""

    figure: Figure | None = None  # analyses only
    recipes: tuple[str, ...] = ()  # the zoo recipes a training job trains (one ensemble or one)

    def __post_init__(self):
        if self.name.startswith(TRAIN) and not self.recipes:  # "train:NAME": that one recipe
            object.__setattr__(self, "recipes", (self.name[len(TRAIN):],))

    @property
    def recipe(self) -> str | None:
        """The zoo recipe a training job of one recipe trains (None for an analysis or an
        ensemble: see :attr:`recipes`)."""
        return self.recipes[0] if len(self.recipes) == 1 else None

    @property
    def stems(self) -> tuple[str, ...]:
        if self.figure is None:
            return ()
        return self.figure.outputs or (self.name,)

    def missing(self, out: Path) -> list[str]:
        """The analysis' JSON files not (yet) in ``out``."""
        return [f"{s}.json" for s in self.stems if not (out / f"{s}.json").exists()]


def analysis_argv(name: str, fig: Figure, level: str, out: Path, cache: Path,
                  cores: int | None = None) -> list[str]:
    train = ["--train", level, "--cache-dir", str(cache)] if fig.trains else []
    device, workers = placement(name, level, cores)
    placed = [*(["--device", device] if device else []),
              *(["--jobs", str(workers)] if workers else [])]
    offset = zoo.seed_offset()  # the models' seeds shifted: their evaluation data's too
    seed = ["--seed", str(offset)] if offset else []
    return [sys.executable, "-m", f"analyses.{name}", f"--{level}", "--out", str(out), *train,
            *fig.extra_args(level), *placed, *seed]


def build_jobs(names: Sequence[str], level: str, out: Path, cache: Path,
               workers: int | None = None, ensembles: str = "auto",
               auto: str | None = None) -> list[Job]:
    """Training jobs for the recipes the analyses need that are not cached yet (each after
    the job of its ``init_from`` recipe), then one job per analysis, after its recipes'
    training. The recipes train as ensembles (:func:`training_groups`; ``workers``: the cores
    the run may use, default :func:`default_workers`; ``auto``: the kind of device "auto" means,
    default this machine's: ``--list --device cuda`` plans a GPU machine's run anywhere)."""
    needs: dict[str, str | None] = {}  # recipe -> the device its analysis places it on
    analyses = []
    for n in names:
        fig = figure_of(n)
        device, own_workers = placement(n, level, workers)
        recipes = list(fig.recipes(level)) if fig.trains else []
        offset = zoo.seed_offset()  # reproduce --seed-offset: the runs its jobs train
        missing = [r for r in recipes if zoo.status(r, level, cache, seed_offset=offset)
                   != "cached"]
        for r in missing:
            for d in [*zoo.dependencies(r, level), r]:
                if d == r or zoo.status(d, level, cache, seed_offset=offset) != "cached":
                    needs.setdefault(d, device)
        analyses.append((n, fig, device, own_workers, missing))
    jobs: dict[str, Job] = {}
    job_of: dict[str, str] = {}
    for group in training_groups(needs, level, workers or default_workers(level), ensembles,
                                 auto):
        name = TRAIN + ",".join(seed_ranges(group))
        parents = [p for r in group for p in zoo.dependencies(r, level)[-1:] if p in job_of]
        device = needs[group[0]]
        on = ("--device", device) if device else ()
        how = ("--ensembles", ensembles) if ensembles != "auto" else ()
        jobs[name] = Job(name, (sys.executable, "-m", "analyses.zoo", "train", *group,
                                f"--{level}", "--cache-dir", str(cache), "--no-progress",
                                *on, *how),
                         max(zoo.recipe(r).slots for r in group),
                         tuple(dict.fromkeys(job_of[p] for p in parents)), device=device,
                         recipes=tuple(group))
        job_of.update({r: name for r in group})
    return [*jobs.values(), *[
        Job(n, tuple(analysis_argv(n, fig, level, out, cache, workers)), own or fig.slots,
            tuple(dict.fromkeys(job_of[r] for r in missing)), device, figure=fig)
        for n, fig, device, own, missing in analyses]]


def training_groups(needs: Mapping[str, str | None], level: str, workers: int,
                    ensembles: str = "auto", auto: str | None = None) -> list[list[str]]:
    """The recipes ``needs`` (recipe -> device) as the training jobs that train them, in the
    order they can start (what a fine-tune starts from first): runs of one model on one device
    in one wave of the init chains form an ensemble where one pays off
    (:func:`models.train.ensemble.pays_off`; ``ensembles`` "on": wherever one can form, "off":
    never). On a GPU a sweep is one ensemble (of at most :data:`MAX_MEMBERS`); on CPU cores
    (``ensembles`` "on") it is split into one ensemble per core (at most ``workers``), as cores
    side by side are what speeds a CPU sweep up."""
    def kind(device: str | None) -> str:
        if auto is not None and device in (None, "auto"):
            return auto
        return device_kind(str(resolve_device(device or "auto")))

    keyed: dict[tuple, list[str]] = {}
    for r, device in needs.items():
        run_config = recipe_run_config(r, level)
        precision, _ = run_settings(run_config, kind(device))
        run_config = run_config.replace(train={"precision": precision, "compile": False,
                                               "device_type": kind(device)})
        depth = len(zoo.dependencies(r, level))
        key = ensemble_key(run_config) if ensembles == "on" or (
            ensembles == "auto" and pays_off(run_config)) else None
        keyed.setdefault((depth, device, key if key is not None else r), []).append(r)
    groups = []
    for (_depth, device, _), members in sorted(keyed.items(), key=lambda kv: kv[0][0]):
        cpu = kind(device) == "cpu"
        parts = min(len(members), workers) if cpu else -(-len(members) // MAX_MEMBERS)
        size = -(-len(members) // max(1, parts))
        groups += [members[i:i + size] for i in range(0, len(members), size)]
    return groups


def plan_models(names: Sequence[str], level: str) -> list[tuple[str, Builder]]:
    """Every model the analyses ``names`` train at ``level``, each once, in plan order:
    ``(label, RunConfig builder)``."""
    items: dict[str, Builder] = {}
    for n in names:
        fig = figure_of(n)
        if not fig.trains:
            continue
        for label, build in dryrun.recipe_builders(fig.recipes(level), level):
            items.setdefault(label, build)
        for label, build in fig.dry_run_configs(level):
            items.setdefault(label, build)
    return list(items.items())


# what one job holds at least: an interpreter with torch and the suite imported, a small model,
# its batches and its optimizer (a job's own check, models.train.build, sees only itself)
JOB_BYTES = 1 << 30


def default_workers(level: str) -> int:
    """Every core at every level but paper (one job at a time, each with the whole GPU): the
    suite's models are too small to use a second thread, so jobs side by side use the cores —
    as many as the free memory holds at :data:`JOB_BYTES` a job (each run also checks its
    own size before it starts, :mod:`models.train.build`)."""
    if level == "paper":
        return 1
    return max(1, min(os.cpu_count() or 1, available_bytes() // JOB_BYTES))


def seed_ranges(recipes: Sequence[str]) -> list[str]:
    """Recipe names with runs of consecutive seeds folded, for a plan that fits a screen:
    ``a_s0, a_s1, a_s2, b`` -> ``a_s0-2, b`` (order kept, by each group's first name)."""
    seeds: dict[str, list[int]] = {}
    for name in recipes:
        m = re.fullmatch(r"(.*_s)(\d+)", name)
        stem, seed = (m[1], int(m[2])) if m else (name, None)
        seeds.setdefault(stem, []).append(seed)
    out = []
    for stem, ss in seeds.items():
        if ss == [None]:
            out.append(stem)
        elif ss == list(range(ss[0], ss[0] + len(ss))) and len(ss) > 1:
            out.append(f"{stem}{ss[0]}-{ss[-1]}")
        else:
            out.extend(f"{stem}{x}" for x in ss)
    return out
