"""Large: Fig. 2 by the inverted search. For each width of a short ladder (about
8 widths over ~30x in parameters) and each seed, the largest N the model memorises, bisected
over a fine ladder of N (nested data sets: the set of size N is the first N examples of the
seed's one set, so a larger N holds every smaller one). The parameter count is then exact
per point (the model's own) and N carries the search's resolution, where the medium search
quantised the parameter count to the width ladder's steps (17-49 % of it at the small end).

One search per (width, seed): the jobs are independent, so a machine's cores run them side by
side. The fits are those of the medium search (:mod:`.stats`), over the points (N*, P(m)),
with the bootstrap resampling the widths and then the seeds within each."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.stats import spearmanr

import analyses.memorization.cells as cells  # the module: tests replace its run_cell
from analyses.memorization.cells import CellSettings, CellStore, search_cell_name, torch_threads
from analyses.memorization.grid import METHOD, CellSpace, grid_settings
from analyses.memorization.search import search_min_width
from analyses.memorization.stats import shape_verdict
from figures.style import new_figure
from probes.fits import fit_trends, loglog_slope, power_fit
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.sweep import Backend, Failed


def search_max_n(n_sizes: int, memorises, guess: int | None = None) -> int | None:
    """Index of the largest dataset size of a ladder (``n_sizes`` sorted sizes) that the model
    memorises, or None when it memorises not even the smallest; ``memorises(i)`` trains the
    cell of size i. Assumes that a model memorising a set memorises each prefix of it (nested
    sets): failing is monotone in N, so the first failing size is a width search's first
    memorising rung (:func:`~.search.search_min_width`, each index probed at most once)."""
    first_fail = search_min_width(n_sizes, lambda i: not memorises(i), guess)
    if first_fail is None:  # even the largest memorised: a lower bound (run_max_n flags it)
        return n_sizes - 1
    return None if first_fail == 0 else first_fail - 1


def n_ladder(smallest: int, largest: int, per_octave: int) -> tuple[int, ...]:
    """Geometric dataset sizes from ``smallest`` to ``largest``, ``per_octave`` a doubling
    (rounded, duplicates dropped; ``largest`` always the last)."""
    check(1 <= smallest <= largest and per_octave >= 1,
          f"need 1 <= smallest <= largest and per_octave >= 1, got {smallest}, {largest}, "
          f"{per_octave}")
    steps = math.ceil(per_octave * math.log2(largest / smallest))
    sizes = {min(largest, round(smallest * 2 ** (i / per_octave))) for i in range(steps + 1)}
    return tuple(sorted(sizes | {largest}))


@dataclass(frozen=True)
class MaxNJob:
    """One (width, seed) search: the cells it may train (``space`` at ``seed``, every N of
    ``sizes`` as a prefix of the ``total`` examples), how, and the folder of saved cells."""

    space: CellSpace
    width: int
    sizes: tuple[int, ...]
    seed: int
    settings: CellSettings
    store: CellStore

    def run_config(self, n: int):
        total = self.space.task_config["n_examples"]
        return self.space.run_config(self.width, n / total, seed=self.seed)


def run_max_n(job: MaxNJob, train_cell=cells.run_cell) -> dict[str, Any]:
    """Task body: one (width, seed) search (:func:`search_max_n`). Cells already saved with the
    same key are reused; each new one is saved as it lands where the folder is reachable.
    ``train_cell(run_config, settings) -> cell`` trains one cell (tests pass an oracle)."""
    t0 = time.process_time()
    found: list[dict] = []

    def memorises(i: int) -> bool:
        n = job.sizes[i]
        cell = job.store.cell(search_cell_name(n, job.width, job.seed), job.run_config(n),
                              job.settings, job.seed, train_cell)
        found.append(cell)
        return bool(cell["memorized"])

    with torch_threads(job.settings.threads):
        i = search_max_n(len(job.sizes), memorises)
    return {"seed": job.seed, "d_model": job.width,
            "max_n": None if i is None else job.sizes[i],
            # the largest N of the ladder memorised: the true maximum may lie beyond it
            "at_top": i == len(job.sizes) - 1, "cells": found,
            "cpu_s": round(time.process_time() - t0, 1)}


def summarise_max_n(searches: list[dict], widths: tuple[int, ...], sizes: tuple[int, ...],
                    labels_per: str, steps: int) -> dict[str, Any]:
    """Per width: each seed's largest memorised N and the width's parameter counts; the fits
    of P against N* over every (width, seed) point found below the ladder's top (a point at
    the top is a lower bound, kept out of the fits), in the medium search's result shape
    (``n_examples``: the median N* per width, ``min_params_*``: that width's counts)."""
    seeds = sorted({r["seed"] for r in searches})
    by = {(r["d_model"], r["seed"]): r for r in searches}
    params: dict[int, dict[str, int]] = {}
    for r in searches:
        for c in r["cells"]:
            params.setdefault(r["d_model"], {"total": c["params_total"],
                                             "non_embedding": c["params_non_embedding"]})
    seq_len = next((c["seq_len"] for r in searches for c in r["cells"]), None)
    max_n = [[by[(m, s)]["max_n"] if (m, s) in by else None for m in widths] for s in seeds]
    at_top = [[bool(by[(m, s)]["at_top"]) if (m, s) in by else False for m in widths]
              for s in seeds]
    usable = [m for j, m in enumerate(widths) if m in params
              and all(row[j] is not None and not top[j]
                      for row, top in zip(max_n, at_top, strict=True))]
    med = {m: float(np.median([row[widths.index(m)] for row in max_n])) for m in usable}
    fits = {}
    for which in ("total", "non_embedding"):
        pts = [(row[widths.index(m)], params[m][which], m) for row in max_n for m in usable]
        ns, ps, gs = [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]
        fit = fit_trends(ns, ps, seq_len or 1, labels_per)
        fit["power"] = power_fit(ns, ps, groups=gs)
        half = (len(usable) + 1) // 2
        for part, keep in (("power_small", set(usable[:half])),
                           ("power_large", set(usable[-half:]))):
            sub = [p for p in pts if p[2] in keep]
            fit[part] = power_fit([p[0] for p in sub], [p[1] for p in sub],
                                  groups=[p[2] for p in sub])
        fit["loglog"] = loglog_slope(ns, ps)
        fit["verdict"] = shape_verdict(fit)
        fits[which] = fit
    n_star = [med[m] for m in usable]
    increasing = all(b > a for a, b in zip(n_star, n_star[1:], strict=False))
    return {
        "search": {"method": METHOD, "seeds": seeds, "widths": list(widths),
                   "sizes": list(sizes), "max_n": max_n, "at_top": at_top,
                   "params": {w: [params.get(m, {}).get(w) for m in widths]
                              for w in ("total", "non_embedding")},
                   "probes": [[len(by[(m, s)]["cells"]) if (m, s) in by else 0 for m in widths]
                              for s in seeds],
                   "steps": [steps] * len(usable)},
        "n_examples": n_star, "widths": list(widths), "min_width": usable, "seq_len": seq_len,
        "n_labels": [None] * len(usable),
        "min_params_total": [params[m]["total"] for m in usable],
        "min_params_non_embedding": [params[m]["non_embedding"] for m in usable],
        "fits": fits,
        "trends": {"min_params_nondecreasing": increasing, "n_memorized": len(usable),
                   "spearman_min_params_vs_n": (
                       float(spearmanr(n_star, [params[m]["non_embedding"]
                                                for m in usable]).statistic)
                       if len(usable) > 2 and len(set(n_star)) > 1 else None)},
        "n_ratio": (max(n_star) / min(n_star)) if n_star else None,
        "cells": [c for r in searches for c in r["cells"]],
    }


def compute_max_n(space: CellSpace, store: CellStore, run_jobs, *, threshold: float,
                  patience: int, n_jobs: int, device: str = "cpu", progress: bool = True,
                  backend: Backend | None = None, seeds: int | None = None,
                  widths: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Fig. 2 by the inverted search (a grid row whose ``search.method`` is
    :data:`METHOD`): every (width, seed) search as a task on ``backend``, each new cell saved
    as it lands (``run_jobs``: :func:`~.sweep.run_jobs`), then :func:`summarise_max_n`."""
    grid = grid_settings(space.level, space.data, space.labels_per)
    widths = tuple(sorted(widths or grid.widths))
    sizes = tuple(n for n in grid.search.n_examples if n <= space.task_config["n_examples"])
    n_seeds = seeds or grid.search.seeds
    check(len(widths) >= 1 and len(sizes) >= 1, "need at least one width and one N")
    check(n_seeds >= 1, f"seeds must be >= 1, got {n_seeds}")
    base_seed = space.task_config.get("seed", 0)
    space = replace(space, task_config={k: v for k, v in space.task_config.items()
                                        if k != "seed"},
                    train={k: v for k, v in space.train.items() if k != "seed"})
    settings = CellSettings(threshold, patience, str(resolve_device(device)))
    jobs = [MaxNJob(space, m, sizes, base_seed + i, settings, store)
            for i in range(n_seeds) for m in widths]
    for j in jobs:  # every RunConfig checked (widths against n_heads, N) before any training
        j.run_config(sizes[0]), j.run_config(sizes[-1])
    store.open()
    backend = backend or Backend(workers=n_jobs)
    # the widest first: the slowest searches do not trail at the end
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i].width)

    def landed(k: int, res: dict) -> tuple[list[tuple[str, dict]], dict]:
        return ([(search_cell_name(c["n_examples"], res["d_model"], res["seed"]),
                  {k2: v for k2, v in c.items() if k2 != "reused"}) for c in res["cells"]],
                {"m": res["d_model"], "seed": res["seed"], "max N": res["max_n"]})

    ran = run_jobs(run_max_n, [(jobs[i],) for i in order], backend, store, landed,
                   desc=space.name, progress=progress)
    ok = [r for r in ran.results if not isinstance(r, Failed)]
    steps = jobs[0].run_config(sizes[0]).train.steps
    result = summarise_max_n(ok, widths, sizes, space.labels_per, steps)
    found = [c for r in ok for c in r["cells"]]
    result.update({
        "cells_trained": sum(not c["reused"] for c in found),
        "cells_reused": sum(c["reused"] for c in found),
        "cells_failed": [{"seed": jobs[order[i]].seed, "d_model": jobs[order[i]].width,
                          "error": ran.results[i].error, "attempts": ran.results[i].attempts}
                         for i in ran.failed()],
        "train_cpu_s": round(sum(c.get("cpu_s", 0.0) for c in found if not c["reused"]), 1),
        "cells_cpu_s": round(sum(c.get("cpu_s", 0.0) for c in found), 1),
        "wall": ran.wall,
    })
    return result


def table_max_n(result: dict) -> list[list[Any]]:
    """Per width: its parameter counts, each seed's largest memorised N (``>=N`` at the
    ladder's top, ``-`` none), and the probes each search trained."""
    sr = result["search"]
    rows = [["m", "params", "non-emb", *[f"max N (seed {s})" for s in sr["seeds"]], "probes"]]
    for j, m in enumerate(sr["widths"]):
        cells_ = [("-" if row[j] is None else f"{'>=' if top[j] else ''}{row[j]}")
                  for row, top in zip(sr["max_n"], sr["at_top"], strict=True)]
        rows.append([m, sr["params"]["total"][j] or "-", sr["params"]["non_embedding"][j] or "-",
                     *cells_, "/".join(str(p[j]) for p in sr["probes"])])
    return rows


def plot_max_n(result: dict, ax=None, which: str = "non_embedding"):
    """Fig. 2 from the inverted search: each seed's (N*, P) point (open: a lower bound at the
    ladder's top), the median per width, and the fits."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, width_per_panel=4.5, height=3.6)
    sr = result["search"]
    for row, top in zip(sr["max_n"], sr["at_top"], strict=True):
        for j, n in enumerate(row):
            p = sr["params"][which][j]
            if n is not None and p is not None:
                ax.plot(n, p, "o", ms=4, color="#555555", mfc="none" if top[j] else "#555555",
                        alpha=0.6)
    ax.plot(result["n_examples"], result[f"min_params_{which}"], "-", color="k", lw=1,
            label=f"median over {len(sr['seeds'])} seeds")
    fit = result["fits"][which]
    if result["n_examples"] and fit.get("linear"):
        grid_n = np.linspace(min(result["n_examples"]), max(result["n_examples"]), 100)
        lin = fit["linear"]
        ax.plot(grid_n, lin["a"] + lin["b"] * grid_n, "--", color="#1f77b4", lw=1,
                label="linear")
        pw = fit.get("power") or {}
        if pw.get("k") is not None:
            ax.plot(grid_n, pw["a"] + pw["b"] * grid_n ** pw["k"], "-", color="#2ca02c", lw=1,
                    label=f"a + b·N^{pw['k']:.2f}")
    ax.set(xlabel="largest N memorised", ylabel=f"parameters ({which.replace('_', '-')})",
           title="memorization: largest N per width")
    ax.legend(fontsize=7)
    return fig if fig is not None else ax.figure
