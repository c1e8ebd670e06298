"""b·c tables of a Mamba-2 / MambaZero mixer: are b^(ij) and c^(k) orthogonal for i ≠ k?
(Markov paper §4.2.1, App. C.1, Fig. 5)

In the Thm 1 mechanism the state holds Σ_ij n_ij x̃^(ij) b^(ij)ᵀ (Eq. 4) and the readout
c_t = c^(x_t) must keep only the counts of the current context: b^(ij)·c^(k) ≈ 0 whenever i ≠ k
(Eq. 5). With a convolution window w, b_t and c_t of the first layer are functions of the last
w tokens only, so every window can be enumerated (:func:`window_vectors`): feed all S^w
windows, read b (``hook_B``) and c (``hook_C``) at the window's last position, and tabulate
b(u)·c(v) for every pair of windows (:func:`bc_table`). For order k, u's transition is
(context i = u[−k−1:−1] -> j = u[−1]) and v's current context is c = v[−k:]; "diagonal" pairs
have i = c.

Which off-diagonal entries the loss pins and which it leaves free (:func:`pair_masks`). A
sequence is a walk over contexts, so for every context c, (transitions out of c) −
(transitions into c) = 1[first context = c] − 1[current context = c]: at readout c the counts
of the transitions *into* c from another context i ≠ c equal those out of c up to a term of
the first token. A logit that adds u·n_{i→c} and takes u off the out-of-c counts is therefore
the add-β estimator too, once the first-token term absorbs the difference. So at the optimum
b^(ij)·c^(c), i ≠ c, must vanish where the transition does not enter c (its count is read at
its own context, so its x̃ is not 0) and need not where it does: for S = 2, k = 1, 0→0 at
current 1 and 1→1 at current 0 are pinned, 1→0 at current 0 and 0→1 at current 1 are free
(a slow test in ``tests/integration/test_markov_analyses.py`` fine-tunes a construction with one entry
held off zero: a free entry keeps it at the add-β optimum, a pinned one cannot). For S = 2,
n_01 and n_10 differ by at most one (the paper's Thm 4 remark), so a trained model may read
either. The logit-level version (:func:`readout_ratio`) is split alike and, unlike b·c, does
not change when b(u) grows while x̃(u) shrinks.
"""

from __future__ import annotations

import itertools

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from probes.counts import current_counts
from probes.markov import markov_batch
from tasks.add_beta import context_index, window_index


def all_windows(S: int, w: int) -> Int[Tensor, "n w"]:
    """Every window of w symbols, in lexicographic order."""
    return torch.tensor(list(itertools.product(range(S), repeat=w)), dtype=torch.long)


def conv_window(cfg) -> int:
    """How many tokens b_t and c_t of the first layer see: the convolution window, or 1."""
    return cfg.d_conv if cfg.conv else 1


@torch.no_grad()
def last_position(model, windows: Int[Tensor, "n w"], hooks: list[str]) -> dict[str, Tensor]:
    """``{hook: its activation at each window's last position}`` (float64, CPU)."""
    model.eval()
    _, cache = model.run_with_cache(windows.to(model.device),
                                    names_filter=lambda n: n in set(hooks))
    return {h: cache[h][:, -1].double().cpu() for h in hooks}


def window_vectors(model, S: int, layer: int = 0
                   ) -> tuple[Int[Tensor, "n w"], Float[Tensor, "n groups N"],
                              Float[Tensor, "n groups N"]]:
    """(windows, b, c) for every window of w symbols at ``layer``'s mixer."""
    windows = all_windows(S, conv_window(model.cfg))
    pre = f"blocks.{layer}.mixer."
    got = last_position(model, windows, [pre + "hook_B", pre + "hook_C"])
    return windows, got[pre + "hook_B"], got[pre + "hook_C"]


def pair_masks(windows: Int[Tensor, "n w"], S: int, k: int) -> dict[str, Bool[Tensor, "n n"]]:
    """Masks over window pairs (u writes a transition, v reads): ``diag`` (u's transition
    leaves v's current context), ``free`` (off-diagonal, u's transition *enters* it) and
    ``pinned`` (the other off-diagonal pairs); see the module docstring."""
    w = windows.shape[1]
    i_u = window_index(windows[:, w - k - 1 : w - 1], S)  # context u's transition leaves
    c = window_index(windows[:, w - k :], S)  # v's current context = the one u's enters
    diag = i_u[:, None] == c[None, :]
    free = ~diag & (c[:, None] == c[None, :])
    return {"diag": diag, "free": free, "pinned": ~diag & ~free}


def off_diagonal_ratios(mag: Float[Tensor, "n n"], masks: dict[str, Tensor], prefix: str
                        ) -> dict[str, float | None]:
    """Mean magnitude off the diagonal (all, pinned, free) over the mean on it."""
    on = mag[masks["diag"]].mean()
    sel = {"": ~masks["diag"], "_pinned": masks["pinned"], "_free": masks["free"]}
    return {prefix + name: float(mag[m].mean() / on) if m.any() else None
            for name, m in sel.items()}


def bc_table(windows: Int[Tensor, "n w"], b: Float[Tensor, "n groups N"],
             c: Float[Tensor, "n groups N"], S: int, k: int) -> dict:
    """T[i, j, c] (mean b·c over the windows with that transition i -> j and current context
    c; for w = k + 1 exactly the paper's b^(ij)·c^(k)) and the off / on-diagonal magnitude
    ratios: per window pair (``ratio_pairs``; pinned and free pairs apart) and on the table."""
    n, w = windows.shape
    ip = torch.einsum("ugn,vgn->uv", b, c) / b.shape[1]  # [n_u, n_v], mean over groups
    out = {"window": w, "n_windows": n, "defined": w >= k + 1}
    if w < k + 1:  # b cannot see the transition's context: "diagonal" has no meaning
        out.update({"table": None, "ratio_pairs": None, "ratio_table": None,
                    "ratio_pinned": None, "ratio_free": None,
                    "note": f"window w={w} < k+1={k + 1}: b_t cannot tell the context of "
                            "the transition it writes (App. C.1, confusable sequences)"})
        return out
    i_u = window_index(windows[:, w - k - 1 : w - 1], S)  # context of u's transition
    j_u = windows[:, -1]
    c_v = window_index(windows[:, w - k :], S)  # current context of v
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
    r = off_diagonal_ratios(absip, masks, "ratio")
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
    w = conv_window(cfg)
    if w < k + 1:
        return None
    windows = all_windows(S, w)
    pre = "blocks.0.mixer."
    names = ["hook_x", "hook_B", "hook_C", "hook_ssm_dt"] + (["hook_gate"] if cfg.gated else [])
    got = last_position(model, windows, [pre + n for n in names])
    x = got[pre + "hook_x"]  # [n, heads, d_head]
    dt = got[pre + "hook_ssm_dt"]  # [n, heads]
    H, G = cfg.n_heads, cfg.n_groups
    bh = got[pre + "hook_B"].repeat_interleave(H // G, dim=1)  # [n, heads, N]
    ch = got[pre + "hook_C"].repeat_interleave(H // G, dim=1)
    bc = torch.einsum("uhn,vhn->uvh", bh, ch)  # [n_u, n_v, heads]
    y = torch.einsum("uh,uhp,uvh->uvhp", dt, x, bc).flatten(2)  # [n_u, n_v, d_inner]
    mixer = model.blocks[0].mixer
    if cfg.gated:
        y = y * got[pre + "hook_gate"][None]  # g(v)
    if cfg.mixer_norm:
        y = y * mixer.norm.weight.double().cpu()
    o = y @ mixer.out_proj.weight.double().cpu().T  # [n_u, n_v, d_model]
    if cfg.final_norm:
        o = o * model.ln_final.weight.double().cpu()
    logits = (o @ model.unembed.weight.double().cpu().T)[..., :S]  # [n_u, n_v, S]
    if getattr(cfg, "prediction", "softmax") != "l1":
        logits = logits - logits.mean(-1, keepdim=True)  # softmax ignores a shift; L1 does not
    kappa = logits.norm(dim=-1)  # [n_u, n_v]
    return off_diagonal_ratios(kappa, pair_masks(windows, S, k), "ratio_readout")


@torch.no_grad()
def l1_count_independent(model, task, n_seqs: int = 64, seed: int = 0) -> dict | None:
    """For an L1-normalised model: per current context c, regress the raw output v_j on
    (1, n_c0..n_c,S−1); β_j^(c) = intercept_j / coefficient_jj (Eq. 12 reads logit = β + n)."""
    if getattr(model.cfg, "prediction", "softmax") != "l1":
        return None
    cfg = task.cfg
    x = markov_batch(task, n_seqs, seed).tokens
    v = model.readout(x.to(model.device)).double().cpu()[..., : cfg.S]  # [batch, pos, S]
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
