"""Are b^(ij) and c^(k) orthogonal for i ≠ k? (Markov paper §4.2.1, App. C.1, Fig. 5)

``python -m analyses.bc_orthogonality ckpt.pt [more checkpoints along training ...]``

In the Thm 1 mechanism the state holds Σ_ij n_ij x̃^(ij) b^(ij)ᵀ (Eq. 4) and the readout
c_t = c^(x_t) must keep only the counts of the current context: b^(ij)·c^(k) ≈ 0 whenever i ≠ k
(Eq. 5). With a convolution window w, b_t and c_t of the first layer are functions of the last
w tokens only, so every window can be enumerated: feed all S^w windows, read b (``hook_B``) and
c (``hook_C``) at the window's last position, and tabulate b(u)·c(v) for every pair of windows.
For order k, u's transition is (context i = u[−k−1:−1] -> j = u[−1]) and v's current context
is c = v[−k:]; "diagonal" pairs have i = c.

Reported: the table T[i, j, c] (mean of b·c over the windows with that (i, j) and c; for w = k + 1
exactly the paper's b^(ij)·c^(k)), the off-diagonal / diagonal magnitude ratio — both per
window pair (mean |b·c| off / mean |b·c| on) and on the table — split into the off-diagonal
pairs the loss pins and those it leaves free (below), and the *effective β* (Fig. 5b):
the β whose add-β estimator is closest (mean KL) to the model's predictions; for an
L1-normalised model (MambaZero) also the count-independent part of the output read as β (the
intercept of the output over the count coefficient, per current context). Given checkpoints
saved along training, every number is given per checkpoint (Fig. 5a/b against the step).

Which off-diagonal entries the loss pins (``ratio_pinned``) and which it leaves free
(``ratio_free``). A sequence is a walk over contexts, so for every context c, (transitions out
of c) − (transitions into c) = 1[first context = c] − 1[current context = c]: at readout c the
counts of the transitions *into* c from another context i ≠ c equal those out of c up to a
term of the first token. A logit that adds u·n_{i→c} and takes u off the out-of-c counts is
therefore the add-β estimator too, once the first-token term absorbs the difference. So at
the optimum b^(ij)·c^(c), i ≠ c, must vanish where the transition does not enter c (its count
is read at its own context, so its x̃ is not 0) and need not where it does: for S = 2, k = 1,
0→0 at current 1 and 1→1 at current 0 are pinned, 1→0 at current 0 and 0→1 at current 1
are free. Measured (``tests/test_markov_analyses.py``, slow): fine-tuning a
padded Thm 1 construction (d 8, N 4, float64, Adam 3e-3, 1000 steps) towards add-β while a
penalty holds one entry at half its row's diagonal b^(ij)·c^(i), a free entry (1→0 at 0) ends
at KL 1.9e-5 from add-β, a pinned one (1→1 at 0) at 2.9e-3. Fig. 5a shows all
four vanish; trained quick MambaZeros take either side: some keep n_{k→j} as the paper's,
others read n_{j→k} through the free entries and leave the out-of-k diagonal near 0 (for
S = 2, n_01 and n_10 differ by at most one, the paper's Thm 4 remark). So ``ratio_pinned``,
not ``ratio_pairs``, is the number the loss drives to 0; the logit-level κ is split alike
(``ratio_readout_pinned``) and, unlike b·c, does not change when b(u) grows while x̃(u) shrinks.
"""

from __future__ import annotations

import argparse
import itertools
import math
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from tqdm.auto import tqdm

from analyses.common import base_parser, load_model, run_main, to_jsonable, write_outputs
from analyses.markov_laplace import markov_batch, markov_task_of, model_probs
from figures.style import COLORS, new_figure
from probes.counts import context_index, current_counts
from probes.estimators import add_beta_probs
from tasks.base import check

NAME = "bc_orthogonality"
ARCHS = ("mamba2", "mambazero")


def _ctx(window: torch.Tensor, S: int) -> torch.Tensor:
    idx = torch.zeros(window.shape[0], dtype=torch.long)
    for m in range(window.shape[1]):
        idx = idx * S + window[:, m]
    return idx


@torch.no_grad()
def window_vectors(model, S: int, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor,
                                                         torch.Tensor]:
    """(windows [n, w], b [n, groups, N], c [n, groups, N]) for every window of w symbols."""
    cfg = model.cfg
    w = cfg.d_conv if cfg.conv else 1
    windows = torch.tensor(list(itertools.product(range(S), repeat=w)), dtype=torch.long)
    names = {f"blocks.{layer}.mixer.hook_B", f"blocks.{layer}.mixer.hook_C"}
    model.eval()
    _, cache = model.run_with_cache(windows.to(model.device), names_filter=lambda n: n in names)
    b = cache[f"blocks.{layer}.mixer.hook_B"][:, -1].double().cpu()  # [n, groups, N]
    c = cache[f"blocks.{layer}.mixer.hook_C"][:, -1].double().cpu()
    return windows, b, c


def pair_masks(windows: torch.Tensor, S: int, k: int) -> dict[str, torch.Tensor]:
    """[n_u, n_v] masks over window pairs (u writes a transition, v reads): ``diag`` (u's
    transition leaves v's current context), ``free`` (off-diagonal, u's transition *enters*
    it) and ``pinned`` (the other off-diagonal pairs); see the module docstring."""
    w = windows.shape[1]
    i_u = _ctx(windows[:, w - k - 1 : w - 1], S)  # context u's transition leaves
    c = _ctx(windows[:, w - k :], S)  # v's current context = the one u's transition enters
    diag = i_u[:, None] == c[None, :]
    free = ~diag & (c[:, None] == c[None, :])
    return {"diag": diag, "free": free, "pinned": ~diag & ~free}


def _ratios(mag: torch.Tensor, masks: dict[str, torch.Tensor], prefix: str) -> dict:
    """Mean magnitude off the diagonal (all, pinned, free) over the mean on it."""
    on = mag[masks["diag"]].mean()
    sel = {"": ~masks["diag"], "_pinned": masks["pinned"], "_free": masks["free"]}
    return {prefix + name: float(mag[m].mean() / on) if m.any() else None
            for name, m in sel.items()}


def bc_table(windows: torch.Tensor, b: torch.Tensor, c: torch.Tensor, S: int, k: int) -> dict:
    """T[i, j, c] and the off/diagonal ratios (see the module docstring)."""
    n, w = windows.shape
    ip = torch.einsum("ugn,vgn->uv", b, c) / b.shape[1]  # [n_u, n_v], mean over groups
    out = {"window": w, "n_windows": n, "defined": w >= k + 1}
    if w < k + 1:  # b cannot see the transition's context: "diagonal" has no meaning
        out.update({"table": None, "ratio_pairs": None, "ratio_table": None,
                    "ratio_pinned": None, "ratio_free": None,
                    "note": f"window w={w} < k+1={k + 1}: b_t cannot tell the context of "
                            "the transition it writes (App. C.1, confusable sequences)"})
        return out
    i_u = _ctx(windows[:, w - k - 1 : w - 1], S)  # context of u's transition
    j_u = windows[:, -1]
    c_v = _ctx(windows[:, w - k :], S)  # current context of v
    C = S**k
    table = torch.zeros(C, S, C, dtype=torch.float64)
    for i in range(C):
        for j in range(S):
            rows = (i_u == i) & (j_u == j)
            for cc in range(C):
                table[i, j, cc] = ip[rows][:, c_v == cc].mean()
    masks = pair_masks(windows, S, k)
    diag = masks["diag"]  # [n_u, n_v]
    eye = torch.eye(C, dtype=torch.bool)[:, None, :].expand(C, S, C)
    absip = ip.abs()
    r = _ratios(absip, masks, "ratio")
    out.update({
        "table": table,
        "ratio_pairs": r["ratio"], "ratio_pinned": r["ratio_pinned"],
        "ratio_free": r["ratio_free"],
        "ratio_table": float(table.abs()[~eye].mean() / table.abs()[eye].mean()),
        "diag_mean": float(ip[diag].mean()), "off_mean": float(ip[~diag].mean()),
        "max_abs_off": float(absip[~diag].max()), "min_abs_diag": float(absip[diag].min()),
    })
    return out


@torch.no_grad()
def readout_ratio(model, S: int, k: int) -> dict | None:
    """Logit-level version of the orthogonality, for a 1-layer model without MLP.

    A transition written by window u adds Δ(u)·x(u)·(b(u)·c(v)) to y_t when the current window
    is v; the gate g(v) (elementwise), the RMS norms (a positive scalar per position, the same
    for every u) and the linear maps W_o, W_ℓ carry it to the logits. So the effective logit
    coefficient of the count of u at readout v is, up to that common scalar,
    κ(u, v) = W_ℓ diag(w_f) W_o diag(w_n) [(Δ(u) x(u) (b(u)·c(v))) ⊙ g(v)], centred over the
    symbols for a softmax model (softmax ignores a shift; MambaZero's L1 normalisation does not,
    so its κ is left whole). In full Mamba-2 the gate can select the current
    context's counts that b·c lets through, so κ, not b·c, is what must vanish off the
    diagonal. Ratio: mean ‖κ‖ over i ≠ c pairs / mean ‖κ‖ over i = c pairs. (With
    ``n_groups > 1`` the mixer norm's scale differs per group; it is ignored here.)"""
    cfg = model.cfg
    if cfg.n_layers != 1 or cfg.d_mlp:
        return None
    w = cfg.d_conv if cfg.conv else 1
    if w < k + 1:
        return None
    windows = torch.tensor(list(itertools.product(range(S), repeat=w)), dtype=torch.long)
    pre = "blocks.0.mixer."
    names = {pre + n for n in ("hook_x", "hook_B", "hook_C", "hook_ssm_dt", "hook_gate")}
    model.eval()
    _, cache = model.run_with_cache(windows.to(model.device), names_filter=lambda n: n in names)
    x = cache[pre + "hook_x"][:, -1].double().cpu()  # [n, heads, d_head]
    dt = cache[pre + "hook_ssm_dt"][:, -1].double().cpu()  # [n, heads]
    b = cache[pre + "hook_B"][:, -1].double().cpu()  # [n, groups, N]
    c = cache[pre + "hook_C"][:, -1].double().cpu()
    H, G = cfg.n_heads, cfg.n_groups
    bh = b.repeat_interleave(H // G, dim=1)  # [n, heads, N]
    ch = c.repeat_interleave(H // G, dim=1)
    bc = torch.einsum("uhn,vhn->uvh", bh, ch)  # [n_u, n_v, heads]
    y = torch.einsum("uh,uhp,uvh->uvhp", dt, x, bc).flatten(2)  # [n_u, n_v, d_inner]
    mixer = model.blocks[0].mixer
    if cfg.gated:
        y = y * cache[pre + "hook_gate"][:, -1].double().cpu()[None]  # g(v)
    if cfg.mixer_norm:
        y = y * mixer.norm.weight.double().cpu()
    o = y @ mixer.out_proj.weight.double().cpu().T  # [n_u, n_v, d_model]
    if cfg.final_norm:
        o = o * model.ln_final.weight.double().cpu()
    logits = (o @ model.unembed.weight.double().cpu().T)[..., :S]  # [n_u, n_v, S]
    if getattr(cfg, "prediction", "softmax") != "l1":
        logits = logits - logits.mean(-1, keepdim=True)  # softmax ignores a shift; L1 does not
    kappa = logits.norm(dim=-1)  # [n_u, n_v]
    return _ratios(kappa, pair_masks(windows, S, k), "ratio_readout")


def fitted_beta(model, task, n_seqs: int = 64, seed: int = 0, t_min: int = 1) -> dict:
    """The β whose add-β estimator is closest in mean KL(P_β ‖ P_θ) to the model's
    predictions at positions ≥ t_min (Fig. 5b's "count-independent part", for any model)."""
    cfg = task.cfg
    check(not hasattr(task, "switch_id"), "fitted_beta needs plain Markov data")
    x = markov_batch(task, n_seqs, seed).tokens
    p = model_probs(model, x)[:, t_min:, : cfg.S]
    logp = p.clamp_min(1e-300).log()

    def loss(logb: float) -> float:
        q = add_beta_probs(x, cfg.S, cfg.order, math.exp(logb))[:, t_min:]
        return float((q * (q.log() - logp)).sum(-1).mean())

    res = minimize_scalar(loss, bounds=(math.log(1e-3), math.log(1e3)), method="bounded",
                          options={"xatol": 1e-6})
    return {"beta_fit": math.exp(res.x), "kl_at_fit": float(res.fun),
            "kl_at_true_beta": loss(math.log(cfg.beta)), "beta_true": cfg.beta}


@torch.no_grad()
def l1_count_independent(model, task, n_seqs: int = 64, seed: int = 0) -> dict | None:
    """For an L1-normalised model: per current context c, regress the raw output v_j on
    (1, n_c0..n_c,S−1); β_j^(c) = intercept_j / coefficient_jj (Eq. 12 reads logit = β + n)."""
    if getattr(model.cfg, "prediction", "softmax") != "l1":
        return None
    cfg = task.cfg
    x = markov_batch(task, n_seqs, seed).tokens
    v = model(x.to(model.device)).double().cpu()[..., : cfg.S]  # [batch, pos, S]
    n = current_counts(x, cfg.S, cfg.order).double()  # [batch, pos, S]
    ctx = context_index(x, cfg.S, cfg.order)  # [batch, pos], −1 before a full context
    betas = []
    for c in range(cfg.S**cfg.order):
        sel = ctx == c
        A = torch.cat([torch.ones(int(sel.sum()), 1, dtype=torch.float64), n[sel]], 1)
        coef = torch.linalg.lstsq(A, v[sel]).solution  # [1 + S, S]
        alpha, gamma = coef[0], coef[1:]
        betas.append((alpha / gamma.diagonal()).tolist())
    return {"beta_per_context": betas}


def compute(models: list[tuple[str, object]], layer: int = 0, n_seqs: int = 64, seed: int = 0,
            task_name: str | None = None, task_config: dict | None = None,
            max_windows: int = 4096, progress: bool = True) -> dict:
    """b·c tables, ratios and effective β for each ``(label, model)`` (e.g. along training)."""
    check(len(models) >= 1, "need at least one model")
    rows = []
    for label, model in tqdm(models, desc=NAME, disable=not progress, leave=False):
        check(model.arch in ARCHS, f"bc_orthogonality needs Mamba-2 / MambaZero, got "
              f"{model.arch!r}")
        check(0 <= layer < model.cfg.n_layers, f"layer must be in 0..{model.cfg.n_layers - 1}")
        task = markov_task_of(model, task_name, task_config)
        S, k = task.cfg.S, task.cfg.order
        w = model.cfg.d_conv if model.cfg.conv else 1
        check(S**w <= max_windows, f"S^w = {S}^{w} windows is more than max_windows "
              f"({max_windows})")
        windows, b, c = window_vectors(model, S, layer)
        ck = getattr(model, "checkpoint", None) or {}
        series = f"{model.arch} d={model.cfg.d_model} N={model.cfg.d_state} w={w}"
        row = {"label": label, "series": series, "step": ck.get("train", {}).get("step"),
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
        for key, style in (("ratio_pairs", "-o"), ("ratio_pinned", "-D"),
                           ("ratio_table", "--s"), ("ratio_readout", ":^")):
            vals = [np.nan if r.get(key) is None else r[key] for r in sr]
            if not np.all(np.isnan(vals)):
                ax[1].plot(steps, vals, style, color=palette[si % len(palette)], ms=4,
                           label=f"{name}: {key.replace('ratio_', '')}")
        fits = [r.get("beta_fit", np.nan) for r in sr]
        ax[2].plot(steps, fits, "-o", ms=4, color=palette[si % len(palette)],
                   label=f"{name}: β fitted to predictions")
        for r_i, r in enumerate(sr):
            if r.get("l1"):
                bc = [b for ctx in r["l1"]["beta_per_context"] for b in ctx]
                ax[2].scatter([steps[r_i]] * len(bc), bc, s=10, marker="x",
                              color=palette[si % len(palette)])
    ax[1].axhline(0.1, color="grey", ls=":", lw=0.8)
    ax[1].set_yscale("symlog", linthresh=1e-3)
    shown = [r.get(k) for r in rows for k in ("ratio_pairs", "ratio_pinned", "ratio_table",
                                               "ratio_readout") if r.get(k) is not None]
    top = 2 * max(shown + [1.0])  # symlog: leave room above the largest marker
    ax[1].set(xlabel="training step", ylabel="mean magnitude off / on diagonal", ylim=(0, top),
              title="orthogonality (pairs, pinned pairs, table, logit κ)")
    ax[1].legend(fontsize=5)
    beta_true = rows[-1].get("beta_true", 1.0)
    ax[2].axhline(beta_true, color="black", ls="--", lw=0.8, label="true β")
    top = max([3 * beta_true] + [r.get("beta_fit", 0) * 1.2 for r in rows
                                 if r.get("beta_fit") and r["beta_fit"] < 10 * beta_true])
    ax[2].set(xlabel="training step", ylabel="β (x: L1 intercept / count coefficient)",
              ylim=(0, top), title="count-independent part (Fig. 5b)")
    ax[2].legend(fontsize=5)
    return fig


def table(result: dict) -> list[list]:
    out = [["model", "step", "w", "b.c pairs", "pinned", "free", "b.c table", "logit coef",
            "coef pinned", "beta fit", "KL@fit"]]

    def fmt(v):
        return "-" if v is None else v

    for r in result["models"]:
        out.append([r["label"][-40:], fmt(r["step"]), r["window"], fmt(r["ratio_pairs"]),
                    fmt(r.get("ratio_pinned")), fmt(r.get("ratio_free")), fmt(r["ratio_table"]),
                    fmt(r["ratio_readout"]), fmt(r.get("ratio_readout_pinned")),
                    r.get("beta_fit", "-"),
                    r.get("kl_at_fit", "-")])
    return out


# ---------------------------------------------------------------------------- training
# Fig. 5 is about MambaZero *at convergence*. The 2000-step quick MambaZero of markov_ablations
# is not there (seeds 0-4: fitted β 4.7-1000, two of them collapsed to the uniform prediction;
# mean a_t 0.89-0.998; pinned ratio 0.18-0.49). This recipe is (measured, d 16, N 8, w 2,
# batch 32, seeds 0/1/2): KL at the fitted β 0.0065 / 0.0010 / 0.0010, β 1.59 / 1.11 / 1.11,
# mean a_t 0.968 / 0.997 / 0.996 (mamba_decay), pinned ratio 0.049 / 0.013 / 0.012 (all pairs
# 0.15 / 1.0 / 0.84: seeds 1 and 2 read n_{j→k} through the free entries); the plan's step
# takes 422 s alone with it. Shorter sequences buy the 10 000 steps (the paper's count) on a CPU.
FIG5_RECIPE = {"quick": {"task": {"seq_len": 128}, "train": {"lr": 3e-3, "steps": 10000}}}


def train_fig5_mambazero(preset: str, cache_dir: str, device: str,
                         train_over: dict | None = None, resume: str | Path | None = None
                         ) -> Path:
    """The L1 MambaZero of Fig. 5, trained (cached) with :data:`FIG5_RECIPE` for ``preset``
    (the preset's own training elsewhere, e.g. ``paper``)."""
    from analyses.markov_ablations import train_l1_mambazero

    recipe = FIG5_RECIPE.get(preset, {})
    return train_l1_mambazero(preset, cache_dir, device, task=recipe.get("task"),
                              train_over={**recipe.get("train", {}), **(train_over or {})},
                              resume=resume)


def trajectory_checkpoints(preset: str, cache_dir: str, device: str, n_points: int
                           ) -> list[str]:
    """Checkpoints of one Fig. 5 MambaZero run at n_points evenly spaced steps, trained in
    segments that each resume from the previous one. The schedule is ``constant`` (after
    warm-up) so the learning rate does not depend on where a segment ends: the segments
    retrace one run exactly."""
    from models.train import make_spec

    total = FIG5_RECIPE.get(preset, {}).get("train", {}).get("steps") or make_spec(
        "mambazero", "markov", preset).train.steps
    steps = sorted({max(1, round(total * (i + 1) / n_points)) for i in range(n_points)})
    paths, prev = [], None
    for s in steps:
        prev = train_fig5_mambazero(preset, cache_dir, device,
                                    train_over={"steps": s, "schedule": "constant"}, resume=prev)
        paths.append(str(prev))
    return paths


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layer", type=int, default=0, help="mixer layer (its b, c see windows only "
                   "in layer 0)")
    p.add_argument("--n-seqs", type=int, default=64, help="test sequences for the β fit")
    p.add_argument("--trajectory", type=int, default=0,
                   help="with --train: also N checkpoints along one constant-lr MambaZero run "
                        "(Fig. 5)")


def _main(argv):
    p = base_parser(NAME, __doc__.splitlines()[0], training=True)
    add_arguments(p)
    args = p.parse_args(argv)
    # the models are tiny: one thread avoids oversubscribing shared cores (an L1 MambaZero
    # run: 65 s single-threaded; a 1.5x longer one took 1281 s with 2 threads on busy cores)
    torch.set_num_threads(1)
    ckpts = list(args.checkpoints)
    if args.train:
        from analyses.state_probe import quick_checkpoint

        # the preset's Mamba-2, and a converged L1 MambaZero (the model of Thm 1 and Fig. 5)
        ckpts.append(quick_checkpoint(args.train, args.cache_dir, args.device))
        ckpts.append(str(train_fig5_mambazero(args.train, args.cache_dir, args.device)))
        if args.trajectory:
            ckpts += trajectory_checkpoints(args.train, args.cache_dir, args.device,
                                            args.trajectory)
    check(len(ckpts) >= 1, "give checkpoint(s) or --train quick")
    models = [(Path(c).stem, load_model(c, archs=ARCHS, device=args.device)) for c in ckpts]
    result = compute(models, layer=args.layer, n_seqs=args.n_seqs, seed=args.seed)
    result["checkpoints"] = ckpts
    write_outputs(NAME, result, plot(result), args.out, table(result))
    return 0


def main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
