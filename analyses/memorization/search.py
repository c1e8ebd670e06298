"""Medium: for each N, the smallest memorising width of a ladder, found by a
search instead of training every (N, width) cell; one search per seed (data set and
initialisation), smallest N first, each N's answer guessing the next one's first probe."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from analyses.memorization.cells import CellSettings, CellStore, search_cell_name, torch_threads
from analyses.memorization.grid import CellSpace, Long
from models.train.runconfig import RunConfig
from seqprobe.config import check


def search_min_width(n_widths: int, memorises: Callable[[int], bool],
                     guess: int | None = None) -> int | None:
    """Index of the smallest width of a ladder (``n_widths`` sorted widths) that memorises,
    or None when not even the widest does; ``memorises(i)`` trains the cell of width i.

    Assumes that a wider model memorises whatever a narrower one does (it can, with the
    extra units unused; training noise can break this near the boundary, and the search then
    returns one crossing). With a ``guess``: a galloping search from it (probe the guess,
    then 1, 2, 4, … rungs down while it memorises or up while it does not), then bisection
    of the bracket; without: bisection of the whole ladder. Each index is probed at most once.
    """
    check(n_widths >= 1, "the width ladder is empty")
    seen: dict[int, bool] = {}

    def probe(i: int) -> bool:
        if i not in seen:
            seen[i] = bool(memorises(i))
        return seen[i]

    lo, hi = -1, n_widths  # lo: widest known to fail (-1: none); hi: narrowest known to pass
    if guess is not None:
        g, step = min(max(guess, 0), n_widths - 1), 1
        if probe(g):
            hi = g
            while hi > 0:
                i = max(hi - step, 0)
                if not probe(i):
                    lo = i
                    break
                hi, step = i, 2 * step
        else:
            lo = g
            while lo < n_widths - 1:
                i = min(lo + step, n_widths - 1)
                if probe(i):
                    hi = i
                    break
                lo, step = i, 2 * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            hi = mid
        else:
            lo = mid
    return hi if hi < n_widths else None


# The next N's first probe: the previous answer's width times (N'/N)^(3/8). Halfway (in log)
# between the two shapes under test (P ∝ m² ∝ N^k: m ∝ N^(1/4) for k = 1/2, N^(1/2) for k = 1),
# so the guess favours neither; the galloping search corrects it either way.
GUESS_EXPONENT = 3 / 8
# Where the next N has a longer step budget (the grid's ``long``), its guess is also scaled by
# (budget ratio)^-BUDGET_EXPONENT: more steps memorise with a narrower model. A rough guess
# that saves failing probes (the costliest cells at a long budget); the search corrects it.
BUDGET_EXPONENT = 0.2


def search_run_configs(space: CellSpace, widths: tuple[int, ...], n_examples: tuple[int, ...],
                       seed: int, steps: Mapping[int, int] | None = None
                       ) -> dict[tuple[int, int], RunConfig]:
    """The run of every (N, width) cell one seed's search may train: the data set and
    the initialisation are seeded by ``seed``; N is a nested prefix (fraction N / total);
    ``steps``: the step budget of the N it names (the others: ``space``'s)."""
    total = space.task_config["n_examples"]
    steps = steps or {}
    return {(n, m): space.run_config(m, n / total, seed=seed, steps=steps.get(n))
            for n in n_examples for m in widths}


def step_budgets(n_examples: tuple[int, ...], base: int, long: Long | None) -> dict[int, int]:
    """The step budget of each N: ``base``, times ``long.factor`` for the ``long.largest``
    largest N (none without ``long``)."""
    if not long:
        return {n: base for n in n_examples}
    top = set(sorted(n_examples)[max(0, len(n_examples) - long.largest):]
              if long.largest else ())
    return {n: base * long.factor if n in top else base for n in n_examples}


@dataclass(frozen=True)
class SearchJob:
    """One seed's search, as a task: the cells it may train (``space`` at ``seed``, every
    width × N, each N at its step budget ``steps``), how they are trained, and the folder of
    saved cells it reuses and adds to."""

    space: CellSpace
    widths: tuple[int, ...]
    n_examples: tuple[int, ...]
    seed: int
    settings: CellSettings
    store: CellStore
    steps: Mapping[int, int] = field(default_factory=dict)

    def run_configs(self) -> dict[tuple[int, int], RunConfig]:
        return search_run_configs(self.space, self.widths, self.n_examples, self.seed, self.steps)


def next_guess(widths: tuple[int, ...], found: int, n: int, nxt: int,
               steps: Mapping[int, int]) -> int:
    """The ladder index of the next N's first probe (:data:`GUESS_EXPONENT`,
    :data:`BUDGET_EXPONENT`)."""
    budget = steps.get(nxt, 1) / steps.get(n, 1)
    target = widths[found] * (nxt / n) ** GUESS_EXPONENT * budget ** -BUDGET_EXPONENT
    return next((j for j, m in enumerate(widths) if m >= target), len(widths) - 1)


def run_search(job: SearchJob) -> dict[str, Any]:
    """Task body: one seed's search over every N, smallest N first (each N's answer guesses
    the next one's first probe). Cells already saved with the same key are reused; each new
    one is saved as it lands where the folder is reachable (the caller saves them again, so
    the cells of remote Ray workers land too)."""
    t0 = time.process_time()
    run_configs = job.run_configs()
    widths, found_cells = job.widths, []
    answers: list[int | None] = []
    guess = None
    with torch_threads(job.settings.threads):
        for n in job.n_examples:
            def memorises(i: int, n=n) -> bool:
                cell = job.store.cell(search_cell_name(n, widths[i], job.seed),
                                      run_configs[(n, widths[i])], job.settings, job.seed)
                found_cells.append(cell)
                return bool(cell["memorized"])

            i = search_min_width(len(widths), memorises, guess)
            answers.append(None if i is None else widths[i])
            if i is None:  # not even the widest model memorises N: no larger N will either
                answers.extend([None] * (len(job.n_examples) - len(answers)))
                break
            nxt = job.n_examples[min(len(answers), len(job.n_examples) - 1)]
            guess = next_guess(widths, i, n, nxt, job.steps)
    return {"seed": job.seed, "min_width": answers, "cells": found_cells,
            "cpu_s": round(time.process_time() - t0, 1)}


def search_store_name(cell: dict[str, Any]) -> str:
    """The file of a search's cell in the store."""
    return search_cell_name(cell["n_examples"], cell["d_model"], cell["seed"])

