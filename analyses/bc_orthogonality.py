"""Are b^(ij) and c^(k) orthogonal for i ≠ k? (Markov paper §4.2.1, App. C.1, Fig. 5)

``python -m analyses.bc_orthogonality ckpt.pt [more checkpoints along training ...]`` (or
``--train --level quick``: the zoo's ``markov/mamba2`` and the converged L1 MambaZero
``markov/mambazero_fig5``; ``--trajectory N`` adds N checkpoints along one constant-lr run of
the latter, for Fig. 5a/b against the step).

In the Thm 1 mechanism the state holds Σ_ij n_ij x̃^(ij) b^(ij)ᵀ (Eq. 4) and the readout
c_t = c^(x_t) must keep only the counts of the current context: b^(ij)·c^(k) ≈ 0 whenever i ≠ k
(Eq. 5). With a convolution window w, b_t and c_t of the first layer are functions of the last
w tokens only, so every window can be enumerated and b(u)·c(v) tabulated for every pair of
windows (:mod:`probes.bc`, whose docstring gives the details).

Reported: the table T[i, j, c] (for w = k + 1 exactly the paper's b^(ij)·c^(k)), the
off-diagonal / diagonal magnitude ratio — per window pair and on the table — split into the
off-diagonal pairs the loss pins (``ratio_pinned``) and those it leaves free (``ratio_free``),
the same split of the logit-level coefficient κ (``ratio_readout_pinned``), and the *effective
β* (Fig. 5b): the β whose add-β estimator is closest (mean KL) to the model's predictions; for
an L1-normalised model (MambaZero) also the count-independent part of the output read as β
(the intercept of the output over the count coefficient, per current context).

Why the pinned ratio decides: a sequence is a walk over contexts, so the counts of the
transitions *into* the current context equal those out of it up to a first-token term, and a
readout of either is the add-β estimator. Only the off-diagonal entries of transitions that do
not enter the current context must vanish at the optimum; Fig. 5a shows all of them vanish,
and a trained MambaZero may take either side on the free ones. So ``ratio_pinned``, not
``ratio_pairs``, is the number the loss drives to 0.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from analyses import zoo
from analyses.claims import Claim, Figure, Margin, Reading
from analyses.common import Checkpoint, fmt, load_model, need, run_analysis, to_jsonable
from figures.style import COLORS, new_figure
from probes.bc import bc_table, conv_window, l1_count_independent, readout_ratio, window_vectors
from probes.markov import MAMBA2_ARCHS, fitted_beta, markov_task_of
from seqprobe.cli import add_fields
from seqprobe.config import check
from seqprobe.flags import MAX_EXAMPLES, MAX_LAYERS, MAX_SEEDS, Config, bound

NAME = "bc_orthogonality"
# the level's Mamba-2, and a converged L1 MambaZero (the model of Thm 1 and Fig. 5)
RECIPES = ("markov/mamba2", "markov/mambazero_fig5")
FIG5 = "markov/mambazero_fig5"


def compute(models: list[tuple[str, object]], layer: int = 0, n_seqs: int = 64, seed: int = 0,
            task_name: str | None = None, task_config: dict | None = None,
            max_windows: int = 4096, progress: bool = True) -> dict:
    """b·c tables, ratios and effective β for each ``(label, model)`` (e.g. along training)."""
    check(len(models) >= 1, "need at least one model")
    rows = []
    for label, model in tqdm(models, desc=NAME, disable=not progress, leave=False):
        check(model.arch in MAMBA2_ARCHS, f"bc_orthogonality needs Mamba-2 / MambaZero, got "
              f"{model.arch!r}")
        check(0 <= layer < model.cfg.n_layers, f"layer must be in 0..{model.cfg.n_layers - 1}")
        task = markov_task_of(model, task_name, task_config)
        S, k = task.cfg.S, task.cfg.order
        w = conv_window(model.cfg)
        check(S**w <= max_windows, f"S^w = {S}^{w} windows is more than max_windows "
              f"({max_windows})")
        windows, b, c = window_vectors(model, S, layer)
        series = f"{model.arch} d={model.cfg.d_model} N={model.cfg.d_state} w={w}"
        row = {"label": label, "series": series, "step": model.provenance.step,
               "S": S, "order": k,
               **bc_table(windows, b, c, S, k), "ratio_readout": None,
               "ratio_readout_pinned": None, "ratio_readout_free": None}
        if layer == 0:
            row.update(readout_ratio(model, S, k) or {})
        if not hasattr(task, "switch_id"):
            row.update(fitted_beta(model, task, n_seqs, seed))
            row["l1"] = l1_count_independent(model, task, n_seqs, seed)
        rows.append(row)
    return to_jsonable({"layer": layer, "seed": seed, "models": rows})


# ---------------------------------------------------------------------------- plot
RATIO_FLOOR = 1e-4  # the log axis' bottom: smaller ratios (0 included) are drawn at it


def plot(result: dict):
    rows = result["models"]
    fig, ax = new_figure(3, width_per_panel=4.2, height=3.4)
    defined = [r for r in rows if r["ratio_pairs"] is not None]

    def score(r):  # the pinned entries are the ones the loss forces to 0
        return r["ratio_pinned"] if r.get("ratio_pinned") is not None else r["ratio_pairs"]

    last = min(defined, key=score) if defined else rows[-1]  # the most orthogonal
    if last["table"] is not None:
        T = np.array(last["table"], dtype=float)  # [C, S, C]
        C, S = T.shape[0], T.shape[1]
        grid = T.reshape(C * S, C)
        vmax = max(np.abs(grid).max(), 1e-12)
        im = ax[0].imshow(grid, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
        for r in range(grid.shape[0]):  # row r = transition i -> j, r = i·S + j
            for q in range(C):  # free: i ≠ c and the transition enters c (module docstring)
                free = r // S != q and r % C == q
                ax[0].text(q, r, f"{grid[r, q]:.2g}" + (" (free)" if free else ""),
                           ha="center", va="center", fontsize=7)
        ax[0].set(xticks=range(C), yticks=range(C * S), xlabel="c: current context k",
                  yticklabels=[f"{i}->{j}" for i in range(C) for j in range(S)],
                  ylabel="b: transition i->j", title=f"b^(ij)·c^(k) ({last['label']})")
        ax[0].grid(False)
        fig.colorbar(im, ax=ax[0], fraction=0.046)
    else:
        ax[0].text(0.5, 0.5, last.get("note", "undefined"), ha="center", va="center",
                   wrap=True, fontsize=8, transform=ax[0].transAxes)
    series = list(dict.fromkeys(r.get("series", "") for r in rows))
    palette = list(COLORS.values())
    for si, name in enumerate(series):
        sr = [r for r in rows if r.get("series", "") == name]
        steps = [r["step"] if r["step"] is not None else i for i, r in enumerate(sr)]
        # a line only joins checkpoints of one run along its steps; single checkpoints (or
        # ones without a step) are points: a line between them would read as a trajectory
        trajectory = len(sr) >= 2 and all(r["step"] is not None for r in sr)
        one = "" if trajectory else " (one checkpoint)" if len(sr) == 1 else " (no steps)"
        for key, style in (("ratio_pairs", "-o"), ("ratio_pinned", "-D"),
                           ("ratio_table", "--s"), ("ratio_readout", ":^")):
            vals = [np.nan if r.get(key) is None else max(r[key], RATIO_FLOOR) for r in sr]
            if not np.all(np.isnan(vals)):
                ax[1].plot(steps, vals, style if trajectory else style[-1],
                           color=palette[si % len(palette)], ms=4,
                           label=f"{name}: {key.replace('ratio_', '')}{one}")
        fits = [r.get("beta_fit", np.nan) for r in sr]
        ax[2].plot(steps, fits, "-o" if trajectory else "o", ms=4,
                   color=palette[si % len(palette)],
                   label=f"{name}: β fitted to predictions{one}")
        for r_i, r in enumerate(sr):
            if r.get("l1"):
                bc = [b for ctx in r["l1"]["beta_per_context"] for b in ctx]
                ax[2].scatter([steps[r_i]] * len(bc), bc, s=10, marker="x",
                              color=palette[si % len(palette)])
    ax[1].axhline(0.1, color="grey", ls=":", lw=0.8, label="0.1: the claim's threshold")
    shown = [r.get(k) for r in rows for k in ("ratio_pairs", "ratio_pinned", "ratio_table",
                                               "ratio_readout") if r.get(k) is not None]
    floored = any(v < RATIO_FLOOR for v in shown)
    if floored:  # an exactly orthogonal construction has ratio 0, which no log axis shows
        ax[1].axhline(RATIO_FLOOR, color="grey", ls="-", lw=0.6,
                      label=f"below {RATIO_FLOOR:g} (0 included) drawn here")
    top = 2 * max(shown + [1.0])  # leave room above the largest marker
    ax[1].set(xlabel="training step", ylabel="mean magnitude off / on diagonal", yscale="log",
              ylim=(RATIO_FLOOR / 2, top),
              title="orthogonality (pairs, pinned pairs, table, logit κ)")
    ax[1].legend(fontsize=7)
    beta_true = rows[-1].get("beta_true", 1.0)
    ax[2].axhline(beta_true, color="black", ls="--", lw=0.8, label="true β")
    top = max([3 * beta_true] + [r.get("beta_fit", 0) * 1.2 for r in rows
                                 if r.get("beta_fit") and r["beta_fit"] < 10 * beta_true])
    ax[2].set(xlabel="training step", ylabel="β (x: L1 intercept / count coefficient)",
              ylim=(0, top), title="count-independent part (Fig. 5b)")
    ax[2].legend(fontsize=7)
    return fig


def table(result: dict) -> list[list]:
    out = [["model", "step", "w", "b.c pairs", "pinned", "free", "b.c table", "logit coef",
            "coef pinned", "beta fit", "KL@fit"]]

    def cell(v):
        return "-" if v is None else v

    for r in result["models"]:
        out.append([r["label"][-40:], cell(r["step"]), r["window"], cell(r["ratio_pairs"]),
                    cell(r.get("ratio_pinned")), cell(r.get("ratio_free")), cell(r["ratio_table"]),
                    cell(r["ratio_readout"]), cell(r.get("ratio_readout_pinned")),
                    r.get("beta_fit", "-"),
                    r.get("kl_at_fit", "-")])
    return out


# ---------------------------------------------------------------------------- training
def trajectory_steps(level: str, n_points: int) -> list[int]:
    """n_points evenly spaced steps up to the Fig. 5 recipe's length."""
    check(n_points >= 1, f"--trajectory takes a number of checkpoints >= 1, got {n_points}")
    total = zoo.run_config(FIG5, level, seed_offset=zoo.seed_offset()).train.steps
    return sorted({max(1, round(total * (i + 1) / n_points)) for i in range(n_points)})


def trajectory_checkpoints(level: str, cache_dir: str, device: str, n_points: int
                           ) -> list[Checkpoint]:
    """Checkpoints of one Fig. 5 MambaZero run at n_points evenly spaced steps. The schedule
    is ``constant`` (after warm-up), so the learning rate does not depend on where a run ends
    and each checkpoint is the same run stopped earlier; each one continues the previous
    (``resume``) instead of starting again from step 0."""
    out, prev = [], None
    for s in trajectory_steps(level, n_points):
        prev = zoo.checkpoint(FIG5, level, cache_dir, device, progress=False,
                              train={"steps": s, "schedule": "constant"}, resume=prev,
                              seed_offset=zoo.seed_offset())
        out.append(Checkpoint(f"{FIG5}@{s}", str(prev)))
    return out


@dataclass(frozen=True)
class Settings(Config):
    """What the analysis measures (each field is a flag: seqprobe.cli.add_fields)."""

    layer: int = field(default=0, metadata=bound(
        0, MAX_LAYERS, "a layer's index",
        help="mixer layer (its b, c see windows only in layer 0)"))
    n_seqs: int = field(default=64, metadata=bound(
        1, MAX_EXAMPLES, "sequences per point", help="test sequences for the β fit"))
    trajectory: int = field(default=0, metadata=bound(
        0, MAX_SEEDS, "a seed's index",
        help="with --train: also N checkpoints along one constant-lr MambaZero run (Fig. 5)"))


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    add_fields(p, Settings)


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    if args.train and args.trajectory:
        checkpoints = checkpoints + trajectory_checkpoints(args.train, args.cache_dir,
                                                           args.device, args.trajectory)
    need(checkpoints)
    models = [(c.label, load_model(c.path, archs=MAMBA2_ARCHS, device=args.device))
              for c in checkpoints]
    result = compute(models, layer=args.layer, n_seqs=args.n_seqs, seed=args.seed)
    result["checkpoints"] = [c.path for c in checkpoints]
    return result


# ---------------------------------------------------------------------------- the paper's claims
def claim_pinned(d: dict) -> Reading:
    """Fig. 5 is about MambaZero at convergence, and the loss pins only the off-diagonal
    entries of transitions that do not enter the current context (module docstring): the
    latest trained MambaZero's pinned ratio decides (< 0.1); the full ratios are shown."""
    last: dict[str, dict] = {}
    for r in d["models"]:
        if r.get("ratio_pairs") is None or r["label"].startswith("construction"):
            continue
        arch = r["series"].split()[0]
        if arch not in last or (r.get("step") or 0) >= (last[arch].get("step") or 0):
            last[arch] = r
    text = "off/on-diagonal |b·c|, all / pinned / free: " + ", ".join(
        f"{r['series']} {r['ratio_pairs']:.3f} / {fmt(r.get('ratio_pinned'))} / "
        f"{fmt(r.get('ratio_free'))} (step {r['step']}, β fit {fmt(r.get('beta_fit'))})"
        for r in last.values())
    m = last.get("mambazero")
    if m is None or m.get("ratio_pinned") is None:
        return Reading(text, False)
    margin = Margin("MambaZero pinned off/on-diagonal |b·c|", m["ratio_pinned"], "<", 0.1)
    return Reading(text, margin.holds, margin)


FIGURE = Figure(
    "b·c orthogonality", "Markov paper Fig. 5",
    (Claim("converged MambaZero: b^(ij)·c^(k) ≈ 0 for i ≠ k wherever the loss demands it "
           "(pinned off/on ratio < 0.1)", claim_pinned),),
    recipes=lambda level: RECIPES)


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
