"""Least-squares trends of the memorization paper (Kim et al., §5.2, Fig. 2): the parameter
count of the smallest memorising model against the dataset size N, as the observed linear
trend and as the shape of the capacity theorems."""

from __future__ import annotations

from typing import Any

import numpy as np


def line_fit(x: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    """``y ≈ a + b·x`` by least squares: ``{"a", "b", "r2"}`` (r2 None when y is constant)."""
    A = np.stack([np.ones_like(x), x], axis=1)  # [points, 2]
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ np.array([a, b])
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else None
    return {"a": float(a), "b": float(b), "r2": r2}


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
