"""Which parts of Mamba does in-context Markov learning need? (Markov paper Figs 3a, 3b, 6, 12,
Table 3)

``python -m analyses.markov_ablations --train quick [--groups conv,window,...]`` trains (cached)
small sweeps and compares each model's test loss with the add-β estimator's, |L(θ) − L_β| (§3):

* ``conv``   (Fig. 3a) full Mamba-2 vs Mamba-2 without the convolution vs MambaZero;
* ``window`` (Fig. 3b) convolution window w vs Markov order k: w ≥ k + 1 is needed (App. C.1);
* ``width``  (Fig. 6)  hidden size d vs order k (Thm 2: d = 2^k suffices, d·p ≥ 2^k needed);
* ``depth``  (Fig. 12) two layers without convolution vs one with it;
* ``noconv_width`` (Table 3) one layer without convolution at several widths: never enough.

Checkpoints given on the command line are evaluated the same way (one row each, labelled by
file). Every model is scored on the same fresh test sequences of its own task; the learning
curve (``loss_gap`` of the trainer's periodic evaluations) is kept for the Fig. 3a panel.
Transformers ± convolution (Fig. 11) need a conv option in the transformer, which the suite
does not have yet.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from analyses.common import base_parser, load_model, run_main, to_jsonable, write_outputs
from analyses.markov_laplace import evaluate_markov, markov_task_of
from figures.style import COLORS, new_figure
from tasks.base import TaskError, check

NAME = "markov_ablations"

# group -> [(label, arch, model overrides, task overrides)]. Quick sizes; "paper" widens them.
GROUPS: dict[str, list[tuple[str, str, dict, dict]]] = {
    "conv": [
        ("mamba2", "mamba2", {}, {}),
        ("mamba2 no conv", "mamba2", {"conv": False}, {}),
        # MambaZero keeps its L1 prediction (§4.1): with softmax its logits are linear in the
        # counts and cannot be log((n_1 + β)/(n_0 + β)) (measured gap 0.056 at quick scale).
        # Its size and training: see MAMBAZERO_MODEL / MAMBAZERO_TRAIN.
        ("mambazero", "mambazero", {}, {}),
    ],
    "window": [(f"k={k} w={w}", "mamba2", {"d_conv": w}, {"order": k})
               for k in (1, 2) for w in (1, 2, 3)],
    "width": [(f"k={k} d={d}", "mamba2", {"d_model": d, "d_conv": k + 1}, {"order": k})
              for k in (1, 2, 3) for d in (2, 4, 8)],
    "depth": [
        ("1 layer", "mamba2", {}, {}),
        ("1 layer no conv", "mamba2", {"conv": False}, {}),
        ("2 layers no conv", "mamba2", {"conv": False, "n_layers": 2}, {}),
    ],
    "noconv_width": [(f"no conv d={d}", "mamba2", {"conv": False, "d_model": d}, {})
                     for d in (10, 100)],
}
PAPER_EXTRA = {"noconv_width": [("no conv d=1000", "mamba2", {"conv": False, "d_model": 1000},
                                 {})]}
QUICK_GROUPS = ("conv",)
# quick sweeps beyond Fig. 3a: shorter runs on shorter sequences (~30-60 s each on 2 CPU cores);
# the conv group keeps the preset, so its full model is the checkpoint the other analyses use
QUICK_SWEEP = {"train": {"steps": 600}, "task": {"seq_len": 128}}


def runs_for(groups: list[str], preset: str) -> list[tuple[str, str, str, dict, dict, dict]]:
    """``[(group, label, arch, model, task, train)]`` overrides for the chosen groups."""
    out = []
    for g in groups:
        if g not in GROUPS:
            raise TaskError(f"unknown group {g!r}; allowed: {', '.join(GROUPS)}")
        extra = PAPER_EXTRA.get(g, []) if preset == "paper" else []
        sweep = QUICK_SWEEP if preset == "quick" and g != "conv" else {"train": {}, "task": {}}
        out += [(g, label, arch, model, {**sweep["task"], **task}, dict(sweep["train"]))
                for label, arch, model, task in GROUPS[g] + extra]
    return out


L1_INIT_BIAS = 1.0  # outputs start ≈ 1 > l1_eps: every output gets a gradient from step 1
# Fig. 3a's L1 MambaZero at quick scale (seed 0, the 2026-11-23 clean run): loss gap 0.029 nats
# to L_β (full model 0.0002, no conv 0.073), all-pairs b·c ratio 0.20. Thm 1's exact size
# d = 4, N = 2 stalled at gap 0.055-0.087 in earlier runs, hence d = 16, N = 8. This run is not
# at convergence (seeds 0-4: fitted β 4.7-1000); Fig. 5's converged MambaZero is trained with
# analyses.bc_orthogonality.FIG5_RECIPE (10 000 steps on T = 128).
MAMBAZERO_MODEL = {"d_model": 16, "d_state": 8}
MAMBAZERO_TRAIN = {"quick": {"lr": 1e-2, "steps": 2000}, "paper": {}}


def train_l1_mambazero(preset: str, cache_dir: str, device: str, model: dict | None = None,
                       task: dict | None = None, train_over: dict | None = None,
                       resume: str | Path | None = None) -> Path:
    """Train an L1-prediction MambaZero from an init whose outputs are all positive.

    With the default init every output is ≈ 0 ± 1e-3, the L1 prediction clamps the negative
    ones at ``l1_eps`` (no gradient), and training falls into the uniform predictor (measured:
    the loss gap never moved from ln 2 − L_β). So the unembedding gets a bias of
    ``L1_INIT_BIAS`` (the add-β logits β + n are positive too): the step-0 weights are written
    as a resumable checkpoint and the trainer continues from it (same data, same seed).
    ``model`` / ``train_over`` default to MAMBAZERO_MODEL / MAMBAZERO_TRAIN; ``resume``
    continues another run of this function instead (segments of one run, Fig. 5a).
    """
    from models.checkpoint import FORMAT, read_checkpoint, save_checkpoint
    from models.registry import build_model
    from models.train import make_spec, rng_state, train
    from tasks.base import config_to_dict, make_generator

    model = {**MAMBAZERO_MODEL, **(model or {}), "unembed_bias": True}
    train_over = {**MAMBAZERO_TRAIN.get(preset, {}), **(train_over or {})}
    spec = make_spec("mambazero", "markov", preset, model=model, task_config=task,
                     train=train_over)
    path = Path(cache_dir) / f"mambazero-l1init-markov-{spec.hash()}.pt"
    if path.exists():
        try:
            read_checkpoint(path)
            return path
        except TaskError:
            pass
    if resume is not None:
        train(spec, out=path, device=device, resume=resume, progress=False)
        return path
    torch.manual_seed(spec.train.seed)
    net = build_model("mambazero", spec.model)
    with torch.no_grad():
        net.unembed.bias.fill_(L1_INIT_BIAS)
    init = path.with_name(path.stem + ".init.pt")
    save_checkpoint({
        "format": FORMAT, "model": {"arch": "mambazero", "config": dict(spec.model)},
        "task": {"name": "markov", "config": dict(spec.task_config)},
        "train": {"config": config_to_dict(spec.train), "seed": spec.train.seed, "step": 0,
                  "samples_seen": 0, "rng": rng_state(make_generator(spec.train.seed))},
        "state_dict": net.state_dict(), "history": [],
    }, init)
    try:
        train(spec, out=path, device=device, resume=init, progress=False)
    finally:
        init.unlink(missing_ok=True)
    return path


def train_group_runs(runs, preset: str, cache_dir: str, device: str,
                     steps: int | None = None) -> list[tuple[str, str, str]]:
    """Train (cached) every run: ``[(group, label, checkpoint path)]``."""
    from models.train import train_cached

    out = []
    for group, label, arch, model, task, train in tqdm(runs, desc=f"{NAME} training",
                                                       leave=False):
        over = {**train, **({"steps": steps} if steps else {})} or None
        if arch == "mambazero" and model.get("prediction", "l1") == "l1":
            path = train_l1_mambazero(preset, cache_dir, device, model, task, over)
        else:
            path = train_cached(arch, "markov", preset, cache_dir, model=model, task_config=task,
                                train_overrides=over, device=device, progress=False)
        out.append((group, label, str(path)))
    return out


def compute(models: list[tuple[str, str, object]], n_seqs: int = 256, seed: int = 0) -> dict:
    """``[(group, label, model)]`` -> loss, L_β, gap and learning curve per model."""
    check(len(models) >= 1, "need at least one model")
    rows = []
    for group, label, model in tqdm(models, desc=NAME, leave=False):
        task = markov_task_of(model)
        ev = evaluate_markov(model, task, n_seqs, seed)
        cfg = model.cfg
        hist = (getattr(model, "checkpoint", None) or {}).get("history", [])
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


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--groups", default=None,
                   help=f"comma-separated: {', '.join(GROUPS)} (default with --train quick: "
                        f"{','.join(QUICK_GROUPS)}; --train paper: all)")
    p.add_argument("--steps", type=int, default=None, help="training steps of every sweep run "
                   "(default: the preset's)")
    p.add_argument("--n-seqs", type=int, default=256, help="test sequences")


def _main(argv):
    p = base_parser(NAME, __doc__.splitlines()[0], training=True)
    add_arguments(p)
    args = p.parse_args(argv)
    # the models are tiny: one thread avoids oversubscribing shared cores (an L1 MambaZero
    # run: 65 s single-threaded; a 1.5x longer one took 1281 s with 2 threads on busy cores)
    torch.set_num_threads(1)
    items = [("given", Path(c).stem, str(c)) for c in args.checkpoints]
    if args.train:
        default = QUICK_GROUPS if args.train == "quick" else tuple(GROUPS)
        groups = [g.strip() for g in args.groups.split(",")] if args.groups else list(default)
        runs = runs_for(groups, args.train)
        items += train_group_runs(runs, args.train, args.cache_dir, args.device, args.steps)
    check(len(items) >= 1, "give checkpoint(s) or --train quick")
    models = [(g, label, load_model(path, archs=("mamba2", "mambazero", "transformer"),
                                    device=args.device)) for g, label, path in items]
    result = compute(models, n_seqs=args.n_seqs, seed=args.seed)
    result["checkpoints"] = [path for *_, path in items]
    write_outputs(NAME, result, plot(result), args.out, table(result))
    return 0


def main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
