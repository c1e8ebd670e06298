"""Statistics of a run: the heatmap and trends of a full grid (Figs. 1 and 2), and for a
search the per-N smallest memorising model over seeds, the linear and a + b·√(nN) fits, the
exponent of a + b·N^k with its bootstrap interval (also over each half of the N), the log-log
slope, and the verdict on Fig. 2's shape."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import spearmanr

from analyses.memorization.search import BUDGET_EXPONENT, GUESS_EXPONENT
from probes.fits import fit_trends, loglog_slope, power_fit


def summarise(cells: dict[tuple[float, int], dict], fractions: list[float], widths: list[int],
              threshold: float, level: str) -> dict[str, Any]:
    """Heatmap matrix, smallest memorising model per N, fits and trend statistics. A failed
    cell (``failed_cell``) has no error (NaN) and takes part in no trend pair; the sizes of a
    row or column come from any cell of it that ran."""
    err = np.array([[cells[(f, m)]["train_error"] for m in widths] for f in fractions],
                   dtype=float)

    def ran(of: list[dict], field: str):
        return next((c[field] for c in of if not c.get("failed")), None)

    rows = [[cells[(f, m)] for m in widths] for f in fractions]
    cols = [[cells[(f, m)] for f in fractions] for m in widths]
    n_ex = [ran(r, "n_examples") for r in rows]
    n_lab = [ran(r, "n_labels") for r in rows]
    seq_len = ran([c for r in rows for c in r], "seq_len")
    p_tot = [ran(c, "params_total") for c in cols]
    p_non = [ran(c, "params_non_embedding") for c in cols]
    min_width, min_tot, min_non = [], [], []
    for i in range(len(fractions)):
        ok = [j for j in range(len(widths)) if err[i, j] < threshold]
        j = ok[0] if ok else None
        min_width.append(widths[j] if ok else None)
        min_tot.append(p_tot[j] if ok else None)
        min_non.append(p_non[j] if ok else None)
    fits = {which: fit_trends(n_ex, mins, seq_len, level)
            for which, mins in (("total", min_tot), ("non_embedding", min_non))}
    # Trend checks (the claims of Fig. 1): error falls with width, rises with N.
    tol = 0.01
    finite = np.isfinite(err)
    w_pairs = [err[i, j + 1] <= err[i, j] + tol for i in range(len(fractions))
               for j in range(len(widths) - 1) if finite[i, j] and finite[i, j + 1]]
    n_pairs = [err[i + 1, j] >= err[i, j] - tol for i in range(len(fractions) - 1)
               for j in range(len(widths)) if finite[i, j] and finite[i + 1, j]]
    W, F = np.meshgrid(widths, [np.nan if n is None else n for n in n_ex])

    def rho(x: np.ndarray) -> float | None:  # over the cells that ran; None if x is constant
        x, y = x[finite], err[finite]
        return spearmanr(x, y).statistic if len(set(x.tolist())) > 1 else None

    rho_w, rho_n = rho(W), rho(F)
    found = [(n, p) for n, p in zip(n_ex, min_non, strict=True)
             if p is not None and n is not None]
    rho_p = (spearmanr([n for n, _ in found], [p for _, p in found]).statistic
             if len(found) > 1 and len({p for _, p in found}) > 1 else None)
    return {
        "fractions": fractions, "widths": widths, "n_examples": n_ex, "n_labels": n_lab,
        "seq_len": seq_len, "error": err.tolist(),
        "params_total": p_tot, "params_non_embedding": p_non,
        "min_width": min_width, "min_params_total": min_tot, "min_params_non_embedding": min_non,
        "fits": fits,
        "trends": {
            "tolerance": tol,
            "width_pairs_error_not_rising": float(np.mean(w_pairs)) if w_pairs else None,
            "n_pairs_error_not_falling": float(np.mean(n_pairs)) if n_pairs else None,
            "spearman_error_vs_width": _finite(rho_w),
            "spearman_error_vs_n": _finite(rho_n),
            "spearman_min_params_vs_n": _finite(rho_p),
            "min_params_nondecreasing": (all(b >= a for (_, a), (_, b)
                                             in zip(found, found[1:], strict=False))
                                         if found else None),
            "n_memorized": len(found),
        },
        "cells": [cells[(f, m)] for f in fractions for m in widths],
    }


def _finite(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def shape_verdict(fit: dict) -> str:
    """Which shape the minimal parameter counts follow: ``"linear"`` when the line leaves
    the smaller residuals and the exponent's interval excludes 1/2, ``"sqrt"`` when
    a + b·√(nN) does and the interval excludes 1, else ``"undecided"``."""
    lin, th, pw = fit.get("linear"), fit.get("theory"), fit.get("power") or {}
    if not lin or not th or pw.get("ci") is None:
        return "undecided"
    lo, hi = pw["ci"]
    if lin["rss"] < th["rss"] and lo > 0.5:
        return "linear"
    if th["rss"] < lin["rss"] and hi < 1.0:
        return "sqrt"
    return "undecided"


def summarise_search(searches: list[dict], n_examples: tuple[int, ...],
                     widths: tuple[int, ...], threshold: float, level: str) -> dict[str, Any]:
    """Per N: the smallest memorising width and parameter counts of each seed, their mean
    and spread; fits over every (N, seed) point: linear and a + b·√(nN) (their residuals),
    the exponent k of a + b·N^k with a bootstrap interval (the N resampled, then the seeds
    within each), the log-log slope, and the verdict (:func:`shape_verdict`)."""
    searches = sorted(searches, key=lambda r: r["seed"])
    by_width: dict[int, dict] = {}
    for r in searches:
        for c in r["cells"]:
            by_width.setdefault(c["d_model"], c)
    seq_len = next((c["seq_len"] for r in searches for c in r["cells"]), None)
    n_labels = {c["n_examples"]: c["n_labels"] for r in searches for c in r["cells"]}
    per_seed: dict[str, dict[str, list]] = {}
    for which in ("total", "non_embedding"):
        per_seed[which] = [[None if m is None else by_width[m][f"params_{which}"]
                            for m in r["min_width"]] for r in searches]

    def stats(rows: list[list]) -> dict[str, list]:
        cols = [[v for v in col if v is not None] for col in zip(*rows, strict=True)]
        return {"mean": [float(np.mean(c)) if c else None for c in cols],
                "std": [float(np.std(c, ddof=1)) if len(c) > 1 else None for c in cols],
                "min": [min(c) if c else None for c in cols],
                "max": [max(c) if c else None for c in cols],
                "found": [len(c) for c in cols]}

    fits, summary = {}, {}
    for which, rows in per_seed.items():
        summary[which] = stats(rows) if rows else None
        pts = [(n, p) for row in rows for n, p in zip(n_examples, row, strict=True)
               if p is not None]
        ns, ps = [n for n, _ in pts], [p for _, p in pts]
        fit = fit_trends(ns, ps, seq_len or 1, level)
        fit["power"] = power_fit(ns, ps, groups=ns)
        # the exponent over the smaller and the larger half of the N (the middle one in
        # both): Fig. 2's concavity "only at the low data regime" is k < 1 in the first only
        half = (len(n_examples) + 1) // 2
        for part, keep in (("power_small", set(n_examples[:half])),
                           ("power_large", set(n_examples[-half:]))):
            sub = [(n, p) for n, p in pts if n in keep]
            fit[part] = power_fit([n for n, _ in sub], [p for _, p in sub],
                                  groups=[n for n, _ in sub])
        fit["loglog"] = loglog_slope(ns, ps)
        fit["verdict"] = shape_verdict(fit)
        fits[which] = fit
    mean_non = summary["non_embedding"]["mean"] if searches else [None] * len(n_examples)
    found = [(n, p) for n, p in zip(n_examples, mean_non, strict=True) if p is not None]
    min_w = [[r["min_width"][i] for r in searches] for i in range(len(n_examples))]
    return {
        "search": {"seeds": [r["seed"] for r in searches], "widths": list(widths),
                   "min_width": [r["min_width"] for r in searches],
                   "params": per_seed, "summary": summary,
                   "probes": [len(r["cells"]) for r in searches],
                   "guess_exponent": GUESS_EXPONENT, "budget_exponent": BUDGET_EXPONENT},
        "n_examples": list(n_examples), "n_labels": [n_labels.get(n) for n in n_examples],
        "seq_len": seq_len, "widths": list(widths),
        "min_width": [None if any(m is None for m in ms) or not ms else float(np.median(ms))
                      for ms in min_w],
        "min_params_total": summary["total"]["mean"] if searches else None,
        "min_params_non_embedding": mean_non,
        "fits": fits,
        "trends": {
            "min_params_nondecreasing": (all(b >= a for (_, a), (_, b)
                                             in zip(found, found[1:], strict=False))
                                         if found else None),
            "n_memorized": len(found),
            "spearman_min_params_vs_n": (_finite(spearmanr([n for n, _ in found],
                                                           [p for _, p in found]).statistic)
                                         if len(found) > 2 else None),
        },
        "n_ratio": max(n_examples) / min(n_examples),
        "cells": [c for r in searches for c in r["cells"]],
    }
