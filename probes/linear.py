"""Linear probes (scikit-learn) from activations to targets, scored on held-out data.

A probe is a ridge regression ``Y ≈ X W + b`` fitted on a training split and scored by R² on a
held-out split. Splits are by *group* (one group = one sequence), so positions of a test
sequence never leak into training. Two controls guard against a probe that "reads" what is
not there: the same probe on shuffled targets (rows of Y permuted within the training split:
any held-out R² it reaches is overfitting), and — done by the caller — the same probe on a
randomly initialised model's activations.

Used by :mod:`analyses.state_probe` to read the transition counts n_ij(t) from the Mamba state
H_t (Markov paper Eq. 4: in the Thm 1 construction H_t is a linear function of the counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from seqprobe.config import check

if TYPE_CHECKING:
    from sklearn.linear_model import Ridge

# scikit-learn (a large import) is imported where a probe is fitted: the analyses
# that import this module read none of it for their --help and refusals.

CONSTANT_VAR = 1e-12  # a held-out target with less variance than this has no defined R²


@dataclass
class ProbeResult:
    """Held-out scores of one probe. ``r2`` has one entry per target column (NaN for a target
    that is constant on the test split); ``r2_mean`` averages the defined ones; ``r2_pooled``
    is 1 − SSE/SST summed over all targets (variance-weighted)."""

    r2: np.ndarray
    r2_mean: float
    r2_pooled: float
    n_train: int
    n_test: int
    pred: np.ndarray  # [n_test, targets] predictions on the held-out split
    true: np.ndarray  # [n_test, targets]
    test_index: np.ndarray  # rows of X / Y in the held-out split
    model: Ridge | None = field(default=None, repr=False)


def split_groups(groups: np.ndarray, test_frac: float, seed: int) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """Boolean (train, test) row masks; whole groups go to one side, ≥ 1 group on each."""
    check(0 < test_frac < 1, f"test_frac must be in (0, 1), got {test_frac}")
    uniq = np.unique(groups)
    check(len(uniq) >= 2, f"need at least 2 groups (sequences) to split, got {len(uniq)}")
    rng = np.random.default_rng(seed)
    n_test = min(max(1, int(round(test_frac * len(uniq)))), len(uniq) - 1)
    test_groups = rng.choice(uniq, size=n_test, replace=False)
    test = np.isin(groups, test_groups)
    return ~test, test


def r2_per_target(true: np.ndarray, pred: np.ndarray) -> tuple[np.ndarray, float]:
    """R² of each column (NaN where the column is constant) and the pooled R²."""
    true = true.reshape(len(true), -1)
    pred = pred.reshape(len(pred), -1)
    sse = ((true - pred) ** 2).sum(0)
    sst = ((true - true.mean(0)) ** 2).sum(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(sst > CONSTANT_VAR * max(len(true), 1), 1 - sse / sst, np.nan)
    pooled = float(1 - sse.sum() / sst.sum()) if sst.sum() > 0 else float("nan")
    return r2, pooled


def fit_probe(X: np.ndarray, Y: np.ndarray, groups: np.ndarray | None = None,
              test_frac: float = 0.25, alpha: float = 1e-3, seed: int = 0,
              shuffle_targets: bool = False, keep_model: bool = False) -> ProbeResult:
    """Fit ridge ``X -> Y`` on a group split and score it on the held-out groups.

    ``X``: [rows, features]; ``Y``: [rows] or [rows, targets]; ``groups``: [rows] sequence ids
    (default: each row its own group). ``shuffle_targets`` permutes the training rows of Y
    (the control: a probe should then explain nothing on held-out data).
    """
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    Y = np.asarray(Y, dtype=np.float64)
    Y = Y.reshape(len(Y), -1)
    check(len(X) == len(Y), f"X has {len(X)} rows but Y has {len(Y)}")
    check(np.isfinite(X).all() and np.isfinite(Y).all(), "X and Y must be finite")
    check(alpha >= 0, f"alpha must be >= 0, got {alpha}")
    groups = np.arange(len(X)) if groups is None else np.asarray(groups)
    train, test = split_groups(groups, test_frac, seed)
    Yt = Y[train]
    if shuffle_targets:
        Yt = Yt[np.random.default_rng(seed + 1).permutation(len(Yt))]
    # centre / scale features on the training split so one alpha suits any activation scale
    mu, sd = X[train].mean(0), X[train].std(0)
    sd = np.where(sd > 0, sd, 1.0)
    from sklearn.linear_model import Ridge

    model = Ridge(alpha=alpha).fit((X[train] - mu) / sd, Yt)
    pred = model.predict((X[test] - mu) / sd).reshape(int(test.sum()), -1)
    r2, pooled = r2_per_target(Y[test], pred)
    defined = r2[np.isfinite(r2)]
    return ProbeResult(r2=r2, r2_mean=float(defined.mean()) if len(defined) else float("nan"),
                       r2_pooled=pooled, n_train=int(train.sum()), n_test=int(test.sum()),
                       pred=pred, true=Y[test], test_index=np.flatnonzero(test),
                       model=model if keep_model else None)


def r2_by_bucket(result: ProbeResult, positions: np.ndarray,
                 edges: list[int]) -> list[dict]:
    """Held-out R² (mean over targets, and pooled) per position bucket [edges[i], edges[i+1]).

    ``positions``: [rows] position of every row of the probe's X (the caller's layout)."""
    pos = np.asarray(positions)[result.test_index]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        sel = (pos >= lo) & (pos < hi)
        if sel.sum() < 2:
            out.append({"lo": int(lo), "hi": int(hi), "n": int(sel.sum()), "r2_mean": None,
                        "r2_pooled": None})
            continue
        r2, pooled = r2_per_target(result.true[sel], result.pred[sel])
        d = r2[np.isfinite(r2)]
        out.append({"lo": int(lo), "hi": int(hi), "n": int(sel.sum()),
                    "r2_mean": float(d.mean()) if len(d) else None,
                    "r2_pooled": pooled if np.isfinite(pooled) else None})
    return out


def r2_within(result: ProbeResult, labels: np.ndarray) -> float:
    """Held-out R² against the per-label mean instead of the global mean (pooled over targets).

    With ``labels`` = positions this asks how well the probe tracks a count *beyond* its
    average growth with t: a state that only encodes the position scores ≈ 0 here, while the
    plain R² of a growing count would already be high."""
    lab = np.asarray(labels)[result.test_index]
    true, pred = result.true, result.pred
    sse = ((true - pred) ** 2).sum()
    sst = 0.0
    for v in np.unique(lab):
        sel = lab == v
        sst += ((true[sel] - true[sel].mean(0)) ** 2).sum()
    return float(1 - sse / sst) if sst > 0 else float("nan")
