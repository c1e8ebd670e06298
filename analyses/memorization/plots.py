"""The figures: Fig. 1 (training error per cell), Fig. 2 (parameters of the smallest
memorising model against N, with the fits), and for a search its probes and Fig. 2 over
seeds."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import NullFormatter, ScalarFormatter

from figures.style import new_figure


def labels_per(result: dict) -> str:
    """token or sequence: what one label belongs to (``"level"`` in a result written before
    it had this name)."""
    return result.get("labels_per", result.get("level"))

def plot_heatmap(result: dict, ax=None):
    """Fig. 1: training error per (N, width); darker is smaller, as in the paper."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, 4.8, 3.8)
    err = np.array(result["error"], dtype=float)
    im = ax.imshow(err, origin="lower", aspect="auto", cmap="magma", vmin=0,
                   vmax=max(float(np.nanmax(err)), result["threshold"]))
    ax.set_xticks(range(len(result["widths"])), [str(w) for w in result["widths"]])
    ax.set_yticks(range(len(result["n_examples"])), [str(n) for n in result["n_examples"]])
    ax.set_xlabel("embedding size m")
    ax.set_ylabel("dataset size N (sequences)")
    ax.grid(False)
    for i in range(err.shape[0]):
        for j in range(err.shape[1]):
            text = ("failed" if not np.isfinite(err[i, j]) else
                    f"{err[i, j]:.3f}".lstrip("0") if err[i, j] < 1 else "1")
            ax.text(j, i, text,
                    ha="center", va="center", fontsize=6,
                    color="white" if err[i, j] < 0.6 * im.get_clim()[1] else "black")
    ax.figure.colorbar(im, ax=ax, label="training error")
    ax.set_title(f"{result['data']} / {labels_per(result)} classification: training error")
    return fig if fig is not None else ax.figure


def plot_params(result: dict, ax=None):
    """Fig. 2: parameters of the smallest memorising model vs N, with the fitted trends."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, 4.8, 3.8)
    n_ex = np.array(result["n_examples"], dtype=float)
    grid_n = np.linspace(n_ex.min(), n_ex.max(), 100)
    scale = result["seq_len"] if labels_per(result) == "token" else 1
    theory_label = "√(nN)" if labels_per(result) == "token" else "√N"
    for which, color, label in (("total", "#1f77b4", "all parameters"),
                                ("non_embedding", "#d62728", "without embeddings")):
        mins = result[f"min_params_{which}"]
        pts = [(n, p) for n, p in zip(n_ex, mins, strict=True) if p is not None]
        if pts:
            ax.plot([n for n, _ in pts], [p for _, p in pts], "o", color=color, label=label)
        missing = [n for n, p in zip(n_ex, mins, strict=True) if p is None]
        if missing:  # not memorised by the widest model: the count is above the largest one
            top = max((p for p in result[f"params_{which}"] if p is not None), default=0)
            ax.plot(missing, [top] * len(missing), "^", mfc="none", color=color,
                    label=f"not memorised (> {top:,})")
        fit = result["fits"][which]
        if fit.get("linear"):
            lin = fit["linear"]
            ax.plot(grid_n, lin["a"] + lin["b"] * grid_n, "--", color=color, lw=1,
                    label=f"linear fit, R²={_r2(lin)}")
            th = fit["theory"]
            ax.plot(grid_n, th["a"] + th["b"] * np.sqrt(scale * grid_n), ":", color=color,
                    lw=1.3, label=f"a + b·{theory_label}, R²={_r2(th)}")
    ax.set_xlabel("dataset size N (sequences)")
    ax.set_ylabel(f"parameters of the smallest model\nwith training error < {result['threshold']}")
    ax.set_title(f"{result['data']} / {labels_per(result)}: parameters to memorise")
    ax.legend(fontsize=7)
    return fig if fig is not None else ax.figure


def _r2(fit: dict) -> str:
    return "n/a" if fit.get("r2") is None else f"{fit['r2']:.2f}"


def plot(result: dict):
    """Both panels side by side (Fig. 1 and Fig. 2; a search: its probes and Fig. 2)."""
    fig, (a, b) = new_figure(2, 5.0, 4.0)
    if "search" in result:
        plot_probes(result, a)
        plot_search_params(result, b)
        return fig
    plot_heatmap(result, a)
    plot_params(result, b)
    return fig


def plot_probes(result: dict, ax=None):
    """The search's cells: width against N, filled where the cell memorised, open where
    not; the line is the median smallest memorising width over the seeds."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, 4.8, 3.8)
    cells = result["cells"]
    for ok, style in ((True, dict(marker="o", color="#2ca02c", label="memorised")),
                      (False, dict(marker="x", color="#d62728", label="not memorised"))):
        pts = [(c["n_examples"], c["d_model"]) for c in cells if bool(c["memorized"]) == ok]
        if pts:
            ax.plot([n for n, _ in pts], [m for _, m in pts], ls="none", alpha=0.6, **style)
    med = [(n, m) for n, m in zip(result["n_examples"], result["min_width"], strict=True)
           if m is not None]
    if med:
        ax.plot([n for n, _ in med], [m for _, m in med], "-", color="black", lw=1,
                label=f"median smallest width ({len(result['search']['seeds'])} seeds)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not powers of ten, on log axes
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    ax.set_yticks(sorted({c["d_model"] for c in cells}))
    ax.set_xticks(result["n_examples"])
    ax.set_xlabel("dataset size N (sequences)")
    ax.set_ylabel("embedding size m")
    ax.set_title(f"{result['data']} / {labels_per(result)}: search probes")
    ax.legend(fontsize=6)
    return fig if fig is not None else ax.figure


def plot_search_params(result: dict, ax=None, which: str = "non_embedding"):
    """Fig. 2 from the search: each seed's smallest memorising model, the mean over seeds,
    the linear and a + b·√(nN) fits and the fitted a + b·N^k."""
    fig = None
    if ax is None:
        fig, (ax,) = new_figure(1, 4.8, 3.8)
    n_ex = np.array(result["n_examples"], dtype=float)
    rows = result["search"]["params"][which]
    for j, row in enumerate(rows):
        pts = [(n, p) for n, p in zip(n_ex, row, strict=True) if p is not None]
        ax.plot([n for n, _ in pts], [p for _, p in pts], "o", ms=3, color="#7f7f7f",
                alpha=0.6, label="each seed" if j == 0 else None)
    summ = result["search"]["summary"][which]
    mean = [(n, m, s or 0.0) for n, m, s in zip(n_ex, summ["mean"], summ["std"], strict=True)
            if m is not None]
    if mean:
        ax.errorbar([n for n, _, _ in mean], [m for _, m, _ in mean],
                    yerr=[s for _, _, s in mean], fmt="s", color="black", ms=4, capsize=2,
                    label="mean ± sd over seeds")
    grid_n = np.linspace(n_ex.min(), n_ex.max(), 200)
    fit = result["fits"][which]
    scale = result["seq_len"] if labels_per(result) == "token" else 1
    if fit.get("linear"):
        lin, th = fit["linear"], fit["theory"]
        ax.plot(grid_n, lin["a"] + lin["b"] * grid_n, "--", color="#1f77b4",
                label=f"a + b·N, RMSE {lin['rmse']:,.0f}")
        ax.plot(grid_n, th["a"] + th["b"] * np.sqrt(scale * grid_n), ":", color="#d62728",
                lw=1.5, label=f"a + b·√(nN), RMSE {th['rmse']:,.0f}")
    pw = fit.get("power") or {}
    if pw.get("k") is not None:
        ax.plot(grid_n, pw["a"] + pw["b"] * grid_n ** pw["k"], "-", color="#2ca02c", lw=1,
                label=f"a + b·N^k, k = {pw['k']:.2f} [{pw['ci'][0]:.2f}, {pw['ci'][1]:.2f}]")
    ax.set_xlabel("dataset size N (sequences)")
    ax.set_ylabel(f"parameters ({which.replace('_', '-')}), error < {result['threshold']}")
    ax.set_title(f"smallest memorising model: {fit.get('verdict', 'undecided')}")
    ax.legend(fontsize=6)
    return fig if fig is not None else ax.figure
