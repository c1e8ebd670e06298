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

PLAN: tuple[str, ...] = (
    "ngram_heads", "duplicated_ngrams", "copy_bounds", "length_generalization",
    "copy_efficiency", "ngram_lookup",
    "markov_laplace", "state_probe", "bc_orthogonality", "mamba_decay", "markov_ablations",
    "markov_holdout",
    "memorization",
    "spectral_lds", "stu_induction",
)
# Analyses that declare a FIGURE but are left out of PLAN, each with why (every other analysis
# with a FIGURE is in PLAN: tests/test_hand_kept_lists.py checks both lists).
NOT_PLANNED: dict[str, str] = {
    # it trains nothing: it evaluates pretrained HuggingFace LMs (Pythia, Mamba) given on its
    # command line, which a reproduce run has no weights for (hub download or local dirs)
    "pretrained_copy": "needs pretrained HuggingFace weights; run it by hand",
}
TRAIN = "train:"  # prefix of the jobs that train a zoo recipe

# Where a level's jobs run, for the levels that say (the others: the analyses' defaults, the
# zoo's training on "auto"): analysis -> (device, jobs). The device is that of the analysis and
# of every recipe it trains (both get ``--device``, so a checkpoint is asked for on the device
# it was trained on); ``jobs``, where not None, is the cores its own job keeps busy, passed as
# its ``--jobs`` (the runs it trains itself side by side), else its FIGURE's slots.
# Large (issue 36 §2; one GPU and 16 CPU cores): the tiny models (STU, the Markov Mamba-2, the
# memorization cells) on CPU cores, one process per core, because on a GPU they are
# launch-bound; the copy and lookup models (~1M parameters, contexts of 420) on the GPU
# ("auto": the GPU where there is one, so the level also runs on a CPU-only machine), several
# processes at once; copy_efficiency trains its best lrs' other seeds itself, memorization its
# 16 (width, seed) searches: 8 cores each, so that neither holds the whole machine (a job
# waits until its cores are free) and the other jobs run beside them.
PLACEMENT: dict[str, dict[str, tuple[str, int | None]]] = {
    "large": {"copy_efficiency": ("auto", 8), "ngram_lookup": ("auto", None),
              "stu_induction": ("cpu", None), "markov_holdout": ("cpu", None),
              "memorization": ("cpu", 8)},
}


def placement(name: str, preset: str) -> tuple[str | None, int | None]:
    """(device, jobs) of analysis ``name`` at ``preset`` (:data:`PLACEMENT`; (None, None):
    the defaults). ``jobs`` is capped at this machine's cores."""
    device, jobs = PLACEMENT.get(preset, {}).get(name, (None, None))
    return device, None if jobs is None else max(1, min(jobs, os.cpu_count() or 1))


def figure_of(name: str) -> Figure:
    return importlib.import_module(f"analyses.{name}").FIGURE


@dataclass(frozen=True)
class Job:
    """One process of the run: training a zoo recipe, or one analysis (a synthetic *task* is
    something else: :mod:`tasks`)."""

    name: str  # the analysis name, or "train:" + recipe name
    argv: tuple[str, ...]
    slots: int = 1  # cores it keeps busy
    after: tuple[str, ...] = ()  # jobs that must have succeeded first
    figure: Figure | None = None  # analyses only
    device: str | None = None  # the --device it was given (None: its default)

    @property
    def recipe(self) -> str | None:
        """The zoo recipe a training job trains (None for an analysis)."""
        return self.name[len(TRAIN):] if self.name.startswith(TRAIN) else None

    @property
    def stems(self) -> tuple[str, ...]:
        if self.figure is None:
            return ()
        return self.figure.outputs or (self.name,)

    def missing(self, out: Path) -> list[str]:
        """The analysis' JSON files not (yet) in ``out``."""
        return [f"{s}.json" for s in self.stems if not (out / f"{s}.json").exists()]


def analysis_argv(name: str, fig: Figure, preset: str, out: Path, cache: Path) -> list[str]:
    train = ["--train", preset, "--cache-dir", str(cache)] if fig.trains else []
    device, jobs = placement(name, preset)
    placed = ([*(["--device", device] if device else []), *(["--jobs", str(jobs)] if jobs else [])])
    offset = zoo.seed_offset()  # the models' seeds shifted: their evaluation data's too
    seed = ["--seed", str(offset)] if offset else []
    return [sys.executable, "-m", f"analyses.{name}", f"--{preset}", "--out", str(out), *train,
            *fig.extra_args(preset), *placed, *seed]


def build_jobs(names: Sequence[str], preset: str, out: Path, cache: Path) -> list[Job]:
    """Training jobs for the recipes the analyses need that are not cached yet (each after
    its ``init_from`` recipe), then one job per analysis, after its recipes' training."""
    jobs: dict[str, Job] = {}

    def need(recipe: str, device: str | None) -> str:
        name = TRAIN + recipe
        if name not in jobs:
            parent = zoo.dependencies(recipe, preset)[-1:]
            after = tuple(need(p, device) for p in parent
                          if zoo.status(p, preset, cache) != "cached")
            on = ("--device", device) if device else ()
            jobs[name] = Job(name, (sys.executable, "-m", "analyses.zoo", "train", recipe,
                                    f"--{preset}", "--cache-dir", str(cache), "--no-progress",
                                    *on), zoo.recipe(recipe).slots, after, device=device)
        return name

    analyses = []
    for n in names:
        fig = figure_of(n)
        device, slots = placement(n, preset)
        recipes = list(fig.recipes(preset)) if fig.trains else []
        after = [need(r, device) for r in recipes if zoo.status(r, preset, cache) != "cached"]
        analyses.append(Job(n, tuple(analysis_argv(n, fig, preset, out, cache)),
                            slots or fig.slots, tuple(dict.fromkeys(after)), fig, device))
    return [*jobs.values(), *analyses]


def priorities(jobs: Sequence[Job], expected: Mapping[str, float]) -> dict[str, float]:
    """Each job's expected seconds plus the longest chain of expected seconds that waits on
    it: of the jobs ready to start, the highest goes first, so that no long chain is left to
    run alone at the end (the scheduler and the ETA's packing both use it)."""
    waiting_on: dict[str, list[str]] = {j.name: [] for j in jobs}
    for j in jobs:
        for a in j.after:
            if a in waiting_on:
                waiting_on[a].append(j.name)
    memo: dict[str, float] = {}

    def chain(name: str) -> float:
        if name not in memo:
            memo[name] = expected.get(name, 0.0) + max(
                (chain(n) for n in waiting_on[name]), default=0.0)
        return memo[name]

    return {j.name: chain(j.name) for j in jobs}


def plan_models(names: Sequence[str], preset: str) -> list[tuple[str, dryrun.Builder]]:
    """Every model the analyses ``names`` train at ``preset``, each once, in plan order:
    ``(label, spec builder)``."""
    items: dict[str, dryrun.Builder] = {}
    for n in names:
        fig = figure_of(n)
        if not fig.trains:
            continue
        for label, build in dryrun.recipe_builders(fig.recipes(preset), preset):
            items.setdefault(label, build)
        for label, build in fig.dry_run_specs(preset):
            items.setdefault(label, build)
    return list(items.items())


def default_jobs(preset: str) -> int:
    """Quick and medium: two cores' worth at once (most models are too small to use a second
    thread, the copy models take both). Large: every core (its small models side by side,
    :data:`PLACEMENT`). Paper: one at a time, each with the whole GPU."""
    if preset == "large":
        return os.cpu_count() or 1
    return 1 if preset == "paper" else min(2, os.cpu_count() or 1)


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
