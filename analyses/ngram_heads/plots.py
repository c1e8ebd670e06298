"""The figure and the printed table of :mod:`analyses.ngram_heads`: match-score heat maps
(attention heads and SSM heads on one 0..1 scale), score against n, the previous-token profile
of the hashing heads and the causal check (match heads ablated against random heads); several
models side by side."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from figures.style import COLORS, new_figure

ANNOTATE_MAX_HEADS = 16  # write the scores into the heat map up to this many heads per layer
ANNOTATE_MIN_PT = 22  # ... in cells at least this wide (points): narrower, the numbers collide


def _heatmap(fig, ax, result: dict, title: str, key: str = "match_score") -> None:
    """``key`` (match score, or the per-head ablation drop) per layer and head, on the 0..1
    scale every panel shares."""
    ms = np.array(result[key], dtype=float)
    im = ax.imshow(ms, vmin=0, vmax=1, cmap="viridis", aspect="auto", interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.046)  # first: the cells' width is what it leaves
    cell_pt = ax.get_position().width * fig.get_figwidth() * 72 / ms.shape[1]
    if ms.shape[1] <= ANNOTATE_MAX_HEADS:
        ax.set(xticks=range(ms.shape[1]))
    if ms.shape[1] <= ANNOTATE_MAX_HEADS and cell_pt >= ANNOTATE_MIN_PT:
        for i in range(ms.shape[0]):
            for h in range(ms.shape[1]):  # ".99": the scale is 0..1, the 0 says nothing
                ax.text(h, i, f"{ms[i, h]:.2f}".replace("0.", ".", 1), ha="center",
                        va="center", fontsize=7, color="white" if ms[i, h] < 0.6 else "black")
    ax.set(xlabel="channel" if result.get("heads") == "s6" else "head", ylabel="layer",
           title=title, yticks=range(ms.shape[0]))
    ax.grid(False)


def _by_n(result: dict) -> np.ndarray:
    return np.array([[[np.nan if v is None else v for v in row] for row in layer]
                     for layer in result["match_by_n"]], dtype=float)


def plot(result: dict):
    if "models" in result:
        return plot_side_by_side(result)
    fig, ax = new_figure(4, width_per_panel=3.9, height=3.4)
    _heatmap(fig, ax[0], result, "n-gram match score (max over n)")

    by_n = _by_n(result)
    ns = np.arange(1, by_n.shape[2] + 1)
    for r in result["match_heads"]:
        ax[1].plot(ns, by_n[r["layer"], r["head"]], marker="o", label=f"L{r['layer']}H{r['head']}")
    ax[1].set(xlabel="n (length of the matched n-gram)", ylabel="mass on n-gram successors",
              ylim=(0, 1.05), title="match heads: score vs n")
    ax[1].legend()

    for r in result["hashing_heads"]:
        prof = np.array(r["profile"], dtype=float)
        ax[2].plot(np.arange(len(prof)), prof, marker="s", label=f"L{r['layer']}H{r['head']}")
    ax[2].set(xlabel="offset back from the query (0 = own token)", ylabel="attention mass",
              ylim=(0, 1.05), title="hashing heads: previous-token profile")
    ax[2].xaxis.set_major_locator(MaxNLocator(integer=True))  # offsets are whole tokens
    if result["hashing_heads"]:
        ax[2].legend()

    base, abl = result["accuracy"], result["ablated"]
    x = np.arange(2)
    w = 0.2
    ax[3].bar(x - 1.5 * w, [base["string_acc"], base["char_acc"]], w, label="no ablation",
              color=COLORS["hard_alibi"])
    bars = ax[3].bar(x - 0.5 * w, [abl["string_acc"], abl["char_acc"]], w,
                     label=f"match heads ({len(abl['heads'])})", color=COLORS["rope"])
    ax[3].bar_label(bars, fmt="%.2f", fontsize=6)
    for j, (key, label, color) in enumerate((("random", "random heads", COLORS["lstm"]),
                                             ("random_same_layer", "random, same layer",
                                              COLORS["alibi"]))):
        runs = result[key]["runs"]
        if not runs:
            continue
        rs = np.array([[r["string_acc"], r["char_acc"]] for r in runs])
        ax[3].bar(x + (0.5 + j) * w, rs.mean(0), w, color=color, capsize=3,
                  yerr=[rs.mean(0) - rs.min(0), rs.max(0) - rs.mean(0)],
                  label=f"{label} ({len(rs)} sets, range)")
    ax[3].set(xticks=x, xticklabels=["string", "char"], ylabel="copy accuracy", ylim=(0, 1.05),
              title=f"{result['mode']}-ablation")
    ax[3].legend(loc="lower left", fontsize=6)
    return fig


def plot_side_by_side(result: dict):
    """Several models on the same data: a match-score map per model (attention heads and SSM
    heads on one scale), the best head's score against n, and the ablation of each model's
    match heads against random heads."""
    runs = result["models"]
    N = len(runs)
    per_head = all(r.get("per_head_drop") is not None for r in runs)
    # with --per-head each model's map is followed by what ablating each head alone costs
    maps = N * (2 if per_head else 1)
    fig, ax = new_figure(maps + 2, width_per_panel=3.9, height=3.4)
    for j, r in enumerate(runs):
        what = "effective attention" if r["heads"] != "attention" else "attention"
        at = j * (2 if per_head else 1)
        _heatmap(fig, ax[at], r, f"{r['label']}: match score ({what})")
        if per_head:
            _heatmap(fig, ax[at + 1], r, f"{r['label']}: string acc. lost, head ablated alone",
                     "per_head_drop")
    ax = [*ax[:N], *ax[maps:]]
    a = ax[len(runs)]
    for r in runs:
        by_n = _by_n(r)
        best = r["match_heads"][0]
        a.plot(np.arange(1, by_n.shape[2] + 1), by_n[best["layer"], best["head"]], marker="o",
               color=COLORS.get(r["label"]), label=f"{r['label']} L{best['layer']}H{best['head']}")
    a.set(xlabel="n (matched n-gram's length)", ylabel="mass on n-gram successors",
          ylim=(0, 1.05), title="best head: score vs n")
    a.legend(fontsize=6)
    a = ax[len(runs) + 1]
    x = np.arange(len(runs))
    w = 0.27
    base = [r["accuracy"]["string_acc"] for r in runs]
    abl = [r["ablated"]["string_acc"] for r in runs]
    a.bar_label(a.bar(x - w, base, w, label="no ablation", color=COLORS["hard_alibi"]),
                fmt="%.2f", fontsize=6)
    a.bar_label(a.bar(x, abl, w, label="match heads ablated", color=COLORS["rope"]),
                fmt="%.2f", fontsize=6)
    labelled = False
    for j, r in enumerate(runs):
        rs = np.array([d["string_acc"] for d in r["random"]["runs"]], dtype=float)
        if rs.size:
            a.bar(x[j] + w, rs.mean(), w, color=COLORS["lstm"], capsize=3,
                  yerr=[[rs.mean() - rs.min()], [rs.max() - rs.mean()]],
                  label=None if labelled else "as many random heads (range)")
            labelled = True
    a.set(xticks=x, xticklabels=[r["label"] for r in runs], ylabel="string accuracy",
          ylim=(0, 1.05), title=f"{result['mode']}-ablation on {result['data']} data")
    a.legend(fontsize=7)  # figures.style.finish places it off the bars
    return fig


def _head_rows(result: dict, prefix: list) -> list[list]:
    rows = []
    for r in result["match_heads"]:
        rows.append([*prefix, r["layer"], r["head"], r["match_score"], r["best_n"],
                     r.get("lag", 0), r["target_score"]])
    return rows


PER_HEAD_ROWS = 5  # heads listed by the accuracy their ablation alone costs
GRID_HEADS = 32  # per-head match scores are printed for layers this narrow (not Mamba channels)


def _grid_rows(result: dict, prefix: list, width: int) -> list[list]:
    """Every head's match score, a row per layer (the figure's heat map, as numbers)."""
    scores = np.asarray(result["match_score"], dtype=float)  # [layer, head]
    if scores.ndim != 2 or scores.shape[1] > GRID_HEADS:
        return []
    return [[*prefix, f"match L{layer}", " ".join(f"{v:.2f}" for v in row),
             *[""] * (width - len(prefix) - 2)] for layer, row in enumerate(scores)]


def _per_head_rows(result: dict, prefix: list) -> list[list]:
    """The heads whose ablation alone costs the most string accuracy (with ``--per-head``),
    with their match and target scores."""
    drop = result.get("per_head_drop")
    if drop is None:
        return []
    d = np.array(drop, dtype=float)
    ms, ts = np.array(result["match_score"]), np.array(result["target_score"])
    order = np.argsort(-d, axis=None)[:PER_HEAD_ROWS]
    rows = []
    for flat in order:
        i, h = np.unravel_index(flat, d.shape)
        rows.append([*prefix, f"L{i}H{h} alone", f"drop {d[i, h]:.3f}", float(ms[i, h]), "",
                     "", float(ts[i, h])])
    return rows


def table(result: dict) -> list[list]:
    if "models" in result:
        rows = [["model", "layer", "head", "match", "best n", "lag", "target"]]
        for r in result["models"]:
            rows += _head_rows(r, [r["label"]])
        for r in result["models"]:
            rows += _per_head_rows(r, [r["label"]])
        for r in result["models"]:
            rows += _grid_rows(r, [r["label"]], 7)
        rows.append(["", "", "", "", "", "", ""])
        rows.append(["model", "string acc", "match heads abl.", "random abl. mean", "", "", ""])
        for r in result["models"]:
            rnd = r["random"]["string_drop_mean"]
            rows.append([r["label"], r["accuracy"]["string_acc"], r["ablated"]["string_acc"],
                         "" if rnd is None else r["accuracy"]["string_acc"] - rnd, "", "", ""])
        return rows
    rows = [["layer", "head", "match", "best n", "lag", "target"], *_head_rows(result, []),
            *_per_head_rows(result, []), *_grid_rows(result, [], 6)]
    b, a = result["accuracy"], result["ablated"]
    rows.append(["", "", "", "", "", ""])
    rows.append(["accuracy", "string", "char", "", "", ""])
    rows.append(["no ablation", b["string_acc"], b["char_acc"], "", "", ""])
    rows.append(["match heads", a["string_acc"], a["char_acc"], "", "", ""])
    rows.append(["drop", "string", "char", "", "", ""])
    rows.append(["match heads", a["drop"]["string_acc"], a["drop"]["char_acc"], "", "", ""])
    for key in ("random", "random_same_layer"):
        c = result[key]
        if c["runs"]:
            rows.append([f"{key} mean", c["string_drop_mean"], c["char_drop_mean"], "", "", ""])
            rows.append([f"{key} max", c["string_drop_max"], c["char_drop_max"], "", "", ""])
    return rows
