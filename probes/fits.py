"""Least-squares trends of the memorization paper (Kim et al., §5.2, Fig. 2): the parameter
count of the smallest memorising model against the dataset size N, as the observed linear
trend and as the shape of the capacity theorems, and the exponent k of P = a + b·N^k that
tells the two apart (k = 1/2: Thm 3.1 / 4.1; k = 1: the linear trend of Fig. 2 and of the
bounded-depth Thms B.1 / B.2)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import t as student_t


def line_fit(x: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    """``y ≈ a + b·x`` by least squares: ``{"a", "b", "r2"}`` (r2 None when y is constant)."""
    A = np.stack([np.ones_like(x), x], axis=1)  # [points, 2]
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ np.array([a, b])
    rss = float((resid**2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - rss / ss_tot if ss_tot > 0 else None
    return {"a": float(a), "b": float(b), "r2": r2, "rss": rss,
            "rmse": float(np.sqrt(rss / len(y)))}


def fit_trends(n_examples: list[int], min_params: list[int | None], seq_len: int,
               level: str) -> dict[str, Any]:
    """Least-squares fits of the minimal parameter counts against N.

    ``linear``: P = a + b·N (the paper's observed trend, §5.2). ``theory``: P = a + b·√(nN)
    (Thm 3.1, token level) or a + b·√N (Thm 4.1, sequence level), a standing for d + n and the
    log factors dropped. Each with its coefficients and R²; None where fewer than two distinct
    N were memorised (``min_params`` None: not memorised).
    """
    pts = [(n, p) for n, p in zip(n_examples, min_params, strict=True) if p is not None]
    out: dict[str, Any] = {"points": len(pts)}
    if len(pts) < 2 or len({n for n, _ in pts}) < 2:
        return {**out, "linear": None, "theory": None}
    N = np.array([n for n, _ in pts], dtype=float)
    P = np.array([p for _, p in pts], dtype=float)
    scale = seq_len if level == "token" else 1
    out["linear"] = {**line_fit(N, P), "form": "a + b*N"}
    out["theory"] = {**line_fit(np.sqrt(scale * N), P),
                     "form": "a + b*sqrt(n*N)" if level == "token" else "a + b*sqrt(N)"}
    return out


def _profile(x: np.ndarray, y: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each exponent k of ``ks``: the residual sum of squares and slope b of the
    least-squares fit ``y ≈ a + b·x^k``. ``y`` may be a stack of samples ``[samples, points]``
    (x is then the points' x of each sample, the same shape); returns ``[samples, K]``."""
    xk = np.power(x[..., None, :], ks[:, None])  # [samples, K, points]
    xc = xk - xk.mean(-1, keepdims=True)
    yc = (y - y.mean(-1, keepdims=True))[..., None, :]  # [samples, 1, points]
    sxx = (xc**2).sum(-1)
    b = (xc * yc).sum(-1) / np.where(sxx > 0, sxx, np.nan)
    rss = (yc**2).sum(-1) - b * (xc * yc).sum(-1)
    return rss, b


def _two_level_resamples(groups: np.ndarray, boot: int, rng: np.random.Generator
                         ) -> np.ndarray:
    """``[boot, points]`` indices: per resample, as many groups as there are, drawn with
    replacement, and for each drawn group as many of its points as the groups hold on
    average, drawn with replacement from that group."""
    labels = np.unique(groups)
    members = [np.flatnonzero(groups == g) for g in labels]
    per_group = max(1, round(len(groups) / len(labels)))
    sizes = np.array([len(m) for m in members])
    padded = np.zeros((len(members), sizes.max()), int)  # [group, its points (padded)]
    for i, m in enumerate(members):
        padded[i, :len(m)] = m
    drawn = rng.integers(0, len(members), size=(boot, len(members)))  # [boot, group slot]
    within = (rng.random((boot, len(members), per_group))
              * sizes[drawn][..., None]).astype(int)  # [boot, group slot, point]
    return padded[drawn[..., None], within].reshape(boot, -1)


def power_fit(x, y, ks: np.ndarray | None = None, boot: int = 1000, seed: int = 0,
              groups=None) -> dict[str, Any]:
    """``y ≈ a + b·x^k`` by least squares, k on a grid (``ks``, default 0.05 … 2.5 in 0.01):
    the best k with a 95 % bootstrap interval (percentiles of ``boot`` resamples, seeded).

    ``groups`` (the N each point was measured at; default: each point its own): a two-level
    bootstrap, the groups with replacement and then, within each group drawn, its points (the
    seeds of that N) with replacement. Resampling the seeds alone would give an interval of
    zero width wherever the seeds agree (a search on a ladder of widths often lands every
    seed on the same rung), though the fit over a few N is far from exact; with one point per
    group it is the plain bootstrap over the points. Only resamples with three distinct x or
    more are kept (fewer fit any k). Points with x <= 0 are refused.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or len(set(x.tolist())) < 3 or (x <= 0).any():
        return {"k": None, "ci": None, "points": len(x)}
    ks = np.round(np.arange(0.05, 2.5001, 0.01), 2) if ks is None else np.asarray(ks, float)
    rss, b = _profile(x[None], y[None], ks)
    i = int(np.nanargmin(rss[0]))
    k, slope = float(ks[i]), float(b[0, i])
    a = float(y.mean() - slope * np.power(x, k).mean())
    rng = np.random.default_rng(seed)
    idx = _two_level_resamples(np.arange(len(x)) if groups is None else np.asarray(groups),
                               boot, rng)  # [boot, points]
    idx = idx[[len(set(x[row].tolist())) >= 3 for row in idx]]
    rss_b, _ = _profile(x[idx], y[idx], ks)  # [kept resamples, K]
    k_b = ks[np.nanargmin(np.where(np.isfinite(rss_b), rss_b, np.inf), axis=1)]
    lo, hi = np.percentile(k_b, [2.5, 97.5])
    return {"form": "a + b*N^k", "k": k, "a": a, "b": slope, "rss": float(rss[0, i]),
            "ci": [float(lo), float(hi)], "boot": boot, "boot_kept": len(idx),
            "points": len(x)}


def loglog_slope(x, y) -> dict[str, Any]:
    """Least-squares slope of log y on log x with its 95 % interval (Student t). With a
    constant term in y (a = d + n in the theorems) the slope is below the exponent k."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    n = len(lx)
    if n < 3 or np.ptp(lx) == 0:
        return {"slope": None, "ci": None, "points": n}
    fit = line_fit(lx, ly)
    se = np.sqrt(fit["rss"] / (n - 2) / ((lx - lx.mean()) ** 2).sum())
    half = float(student_t.ppf(0.975, n - 2) * se)
    return {"slope": fit["b"], "ci": [fit["b"] - half, fit["b"] + half], "r2": fit["r2"],
            "points": n}
