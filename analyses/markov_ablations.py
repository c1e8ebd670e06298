"""Which parts of Mamba does in-context Markov learning need? (Markov paper Figs 3a, 3b, 6, 12,
Table 3)

``python -m analyses.markov_ablations --train --level quick [--groups conv,...] [--ray [ADDRESS]]``
takes the zoo's ablation recipes (trained and cached on first use; with ``--ray`` as Ray
tasks, :mod:`seqprobe.sweep`) and compares each model's test loss with
the add-β estimator's, |L(θ) − L_β| (§3):

* ``conv``   (Fig. 3a) full Mamba-2 vs Mamba-2 without the convolution vs MambaZero;
* ``window`` (Fig. 3b) convolution window w vs Markov order k: w ≥ k + 1 is needed (App. C.1);
* ``width``  (Fig. 6)  hidden size d vs order k (Thm 2: d = 2^k suffices, d·p ≥ 2^k needed);
* ``depth``  (Fig. 12) two layers without convolution vs one with it;
* ``noconv_width`` (Table 3) one layer without convolution at several widths: never enough.

MambaZero keeps its L1 prediction (§4.1): with softmax its logits are linear in the counts and
cannot be log((n_1 + β)/(n_0 + β)). Fig. 3a's MambaZero is the converged one of Fig. 5
(``markov/mambazero_fig5`` in :mod:`analyses.zoo`, which says why its size, start and step size
were chosen): trained on sequences of 128, it is scored on its own task like every model here.

Checkpoints given on the command line are evaluated the same way (one row each, labelled by
file). Every model is scored on the same fresh test sequences of its own task; the learning
curve (``loss_gap`` of the training loop's periodic evaluations against the task's optimal
predictor) is kept for the Fig. 3a panel. Transformers ± convolution (Fig. 11) need a conv
option in the transformer, which the suite does not have yet.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from analyses import zoo
from analyses.claims import Claim, Figure, Margin, Reading
from analyses.common import Checkpoint, fmt, get, load_model, need, run_analysis, to_jsonable
from analyses.zoo import markov as zoo_markov
from figures.style import COLORS, new_figure
from probes.markov import MARKOV_ARCHS, evaluate_markov, markov_task_of
from seqprobe import flags
from seqprobe.cli import add_fields, add_workers_flag
from seqprobe.config import check
from seqprobe.errors import InputError
from seqprobe.flags import MAX_EXAMPLES, Config, bound

# The scheduler (seqprobe.sweep) is imported where --steps or --ray train: --help and the
# refusals read no scheduler.

NAME = "markov_ablations"
QUICK_GROUPS = ("conv",)
# Fig. 3a's three models; the full one is the checkpoint the other Markov analyses use
CONV_GROUP = {"markov/mamba2": "mamba2", "markov_ablation/conv/no_conv": "mamba2 no conv",
              "markov/mambazero_fig5": "mambazero"}
DEPTH_LABELS = {"1L": "1 layer", "1L_no_conv": "1 layer no conv",
                "2L_no_conv": "2 layers no conv"}


def figure_label(label: str) -> str:
    """The zoo's ``k1_w2`` / ``no_conv_d10`` / ``1L`` as the figure writes them: ``k=1 w=2`` /
    ``no conv d=10`` / ``1 layer``."""
    if label in DEPTH_LABELS:
        return DEPTH_LABELS[label]
    return " ".join(re.sub(r"^([kwd])(\d+)$", r"\1=\2", part) for part in label.split("_"))


# group -> {zoo recipe: label in the figure, the JSON and the claims}
GROUPS: dict[str, dict[str, str]] = {"conv": CONV_GROUP, **{
    g: {f"markov_ablation/{g}/{label}": figure_label(label) for label, *_ in runs}
    for g, runs in zoo_markov.ABLATION_GROUPS.items() if g != "conv"}}
LABELS = {recipe: (g, label) for g, recipes in GROUPS.items() for recipe, label in recipes.items()}


def recipes_for(groups: list[str], level: str) -> list[str]:
    """The zoo recipes of ``groups`` that exist at ``level``."""
    for g in groups:
        if g not in GROUPS:
            raise InputError(f"unknown group {g!r}; allowed: {', '.join(GROUPS)}")
    return [r for g in groups for r in GROUPS[g] if zoo.recipe(r).available(level)]


def default_groups(level: str) -> tuple[str, ...]:
    return QUICK_GROUPS if level == "quick" else tuple(GROUPS)


def compute(models: list[tuple[str, str, object]], n_seqs: int = 256, seed: int = 0) -> dict:
    """``[(group, label, model)]`` -> loss, L_β, gap and learning curve per model."""
    check(len(models) >= 1, "need at least one model")
    rows = []
    for group, label, model in tqdm(models, desc=NAME, leave=False):
        task = markov_task_of(model)
        ev = evaluate_markov(model, task, n_seqs, seed)
        cfg = model.cfg
        hist = model.provenance.history
        rows.append({
            "group": group, "label": label, "arch": model.arch, "S": task.cfg.S,
            "order": task.cfg.order, "d_model": cfg.d_model, "n_layers": cfg.n_layers,
            "conv": getattr(cfg, "conv", None), "d_conv": getattr(cfg, "d_conv", None),
            "loss": ev["loss"], "lbeta": ev["lbeta"], "loss_gap": ev["loss_gap"],
            "abs_gap": abs(ev["loss_gap"]), "rel_gap": ev["rel_gap"],
            "l1_mean_t_min": ev["l1_mean_t_min"],
            "curve": [{"step": h["step"], "loss_gap": h.get("loss_gap")} for h in hist],
        })
    summary = {}
    by = {(r["group"], r["label"]): r for r in rows}
    for g in ("conv", "depth"):
        full = by.get((g, "mamba2" if g == "conv" else "1 layer"))
        nc = by.get((g, "mamba2 no conv" if g == "conv" else "1 layer no conv"))
        if full and nc:
            summary[f"{g}_noconv_over_full_gap"] = nc["abs_gap"] / max(full["abs_gap"], 1e-9)
    return to_jsonable({"n_seqs": n_seqs, "seed": seed, "models": rows, "summary": summary})


# ---------------------------------------------------------------------------- plot
def plot(result: dict):
    rows = result["models"]
    groups = list(dict.fromkeys(r["group"] for r in rows))
    fig, ax = new_figure(len(groups) + 1, width_per_panel=3.9, height=3.4)
    palette = list(COLORS.values())
    conv_rows = [r for r in rows if r["group"] in ("conv", groups[0])]
    for i, r in enumerate(conv_rows):
        pts = [(h["step"], abs(h["loss_gap"])) for h in r["curve"] if h["loss_gap"] is not None]
        if pts:
            s, g = zip(*pts, strict=True)
            ax[0].plot(s, g, marker=".", color=palette[i % len(palette)], label=r["label"])
    ax[0].set(xlabel="training step", ylabel="|L(θ) − L_β| (eval)", yscale="log",
              title="learning curves (Fig. 3a)")
    if ax[0].lines:
        ax[0].legend(fontsize=6)
    for a, g in zip(ax[1:], groups, strict=True):
        gr = [r for r in rows if r["group"] == g]
        if g == "window":
            ks = sorted({r["order"] for r in gr})
            ws = sorted({r["d_conv"] if r["conv"] else 1 for r in gr})
            grid = np.full((len(ks), len(ws)), np.nan)
            for r in gr:
                grid[ks.index(r["order"]), ws.index(r["d_conv"] if r["conv"] else 1)] = \
                    r["abs_gap"]
            im = a.imshow(np.log10(np.maximum(grid, 1e-5)), cmap="viridis_r", aspect="auto")
            for i in range(len(ks)):
                for j in range(len(ws)):
                    a.text(j, i, f"{grid[i, j]:.3f}", ha="center", va="center", fontsize=7,
                           color="white")
            a.set(xticks=range(len(ws)), xticklabels=ws, yticks=range(len(ks)), yticklabels=ks,
                  xlabel="window w", ylabel="order k", title="|L − L_β| (Fig. 3b; w ≥ k+1)")
            a.grid(False)
            fig.colorbar(im, ax=a, fraction=0.046, label="log10 gap")
            continue
        a.bar(range(len(gr)), [max(r["abs_gap"], 1e-5) for r in gr],
              color=[palette[i % len(palette)] for i in range(len(gr))])
        a.set(xticks=range(len(gr)), yscale="log", ylabel="|L(θ) − L_β|", title=g)
        a.set_xticklabels([r["label"] for r in gr], rotation=30, ha="right", fontsize=7)
    return fig


def table(result: dict) -> list[list]:
    out = [["group", "model", "S", "k", "loss", "L_beta", "|gap|"]]
    for r in result["models"]:
        out.append([r["group"], r["label"], r["S"], r["order"], r["loss"], r["lbeta"],
                    r["abs_gap"]])
    for k, v in result["summary"].items():
        out.append([k, v, "", "", "", "", ""])
    return out


@dataclass(frozen=True)
class Settings(Config):
    """What the analysis measures (each field is a flag: seqprobe.cli.add_fields)."""

    n_seqs: int = field(default=256, metadata=bound(
        1, MAX_EXAMPLES, "sequences per point", help="test sequences"))


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--groups", default=None,
                   help=f"comma-separated: {', '.join(GROUPS)} (default at --level quick: "
                        f"{','.join(QUICK_GROUPS)}; --level paper: all)")
    p.add_argument("--steps", type=flags.flag("--steps"),
                   default=None, help="training steps of every run "
                   "(default: the recipe's; another cache entry)")
    add_fields(p, Settings)
    add_workers_flag(p, help="with --ray: the CPUs of the Ray instance started here "
                     "(default: all)")


def _recipes(args) -> list[str]:
    groups = [g.strip() for g in args.groups.split(",")] if args.groups else None
    return recipes_for(groups or list(default_groups(args.train)), args.train)


def _trained_here(args) -> bool:
    """``--steps`` (another cache entry than run_analysis' recipes) and ``--ray`` (the recipes
    on Ray) train in :func:`_compute`; otherwise run_analysis has trained them."""
    return bool(args.train and (args.steps or args.ray))


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    failed = []
    if _trained_here(args):
        from seqprobe.sweep import Failed, backend_of

        names = _recipes(args)
        backend = (backend_of(args, args.workers or os.cpu_count() or 1, args.device,
                              num_cpus=max((zoo.recipe(n).slots for n in names), default=1))
                   if args.ray else None)  # --steps alone: one after the other, as ever
        done = zoo.train_recipes(names, args.train, args.cache_dir, args.device, backend,
                                 train={"steps": args.steps} if args.steps else None,
                                 seed_offset=zoo.seed_offset())
        checkpoints = checkpoints + [Checkpoint(n, str(p)) for n, p in done.items()
                                     if not isinstance(p, Failed)]
        failed = [{"recipe": n, "error": f.error, "attempts": f.attempts}
                  for n, f in done.items() if isinstance(f, Failed)]
        for f in failed:
            print(f"{f['recipe']}: failed after {f['attempts']} attempt(s): {f['error']}")
    need(checkpoints)
    items = [(*LABELS.get(c.label, ("given", c.label)), c.path) for c in checkpoints]
    models = [(g, label, load_model(path, archs=MARKOV_ARCHS, device=args.device))
              for g, label, path in items]
    result = compute(models, n_seqs=args.n_seqs, seed=args.seed)
    result["checkpoints"] = [path for *_, path in items]
    result["failed"] = failed
    return result


# ---------------------------------------------------------------------------- the paper's claims
def _row(d: dict, label: str) -> dict | None:
    return next((r for r in d["models"] if r.get("label") == label), None)


def claim_noconv(d: dict) -> Reading:
    """Fig. 3a: without the convolution the gap is at least 5x the full model's."""
    v = get(d, "summary", "conv_noconv_over_full_gap")
    full, nc = _row(d, "mamba2"), _row(d, "mamba2 no conv")
    text = (f"loss gap: full {full['abs_gap']:.4f}, no conv {nc['abs_gap']:.4f} nats "
            f"(ratio {fmt(v, '.1f')})")
    return Reading(text, v is not None and v >= 5,
                   None if v is None else Margin("no-conv gap / full gap", v, ">=", 5, "×"))


def claim_mambazero(d: dict) -> Reading:
    """Fig. 3a: MambaZero (convolution, no gate or MLP) has under half the no-conv gap."""
    full, z, nc = _row(d, "mamba2"), _row(d, "mambazero"), _row(d, "mamba2 no conv")
    if z is None:
        return Reading("no MambaZero run", False)
    text = (f"MambaZero gap {z['abs_gap']:.4f} vs full {full['abs_gap']:.4f}, "
            f"no conv {nc['abs_gap']:.4f}")
    share = z["abs_gap"] / nc["abs_gap"] if nc["abs_gap"] else float("inf")
    m = Margin("MambaZero gap / no-conv gap", share, "<", 0.5)
    return Reading(text, z["abs_gap"] < nc["abs_gap"] / 2, m)


FIGURE = Figure(
    "Ablations: conv, window, width", "Markov paper Figs. 3, 6, 11, 12",
    (Claim("without the convolution the model fails (gap >= 5x the full model's)",
           claim_noconv),
     Claim("MambaZero (conv-only) recovers what no-conv loses", claim_mambazero)),
    recipes=lambda level: recipes_for(list(default_groups(level)), level))


def main(argv=None) -> int:
    """Exit 0, or 1 when the outputs were written without the recipes whose training failed
    on every attempt."""
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=1,
                        recipes=lambda a: [] if _trained_here(a) else _recipes(a),
                        failed_key="failed")

if __name__ == "__main__":
    raise SystemExit(main())
