"""The effective attention M of a selective-SSM mixer from its Δ, A, B and C: the formulas.

Mamba-2 (SSD), per head h:  M_h[q, k] = L_h[q, k] · (c_q · b_k) · Δ_{k,h}
Mamba (S6), per channel d:  M_d[q, k] = Σ_n c_{q,n} b_{k,n} Δ_{k,d} L_{d,n}[q, k]

with L the decay from key k to query q (:func:`decay_matrix`). Where M comes from a model
(suite hooks or an HF bridge's cache) and what a head is: :mod:`probes.effective_attention`.
"""

from __future__ import annotations

import einops
import torch
from jaxtyping import Float
from torch import Tensor

from seqprobe.config import check


def decay_matrix(log_a: Float[Tensor, "*batch pos"]) -> Float[Tensor, "*batch q k"]:
    """L[q, k] = exp(Σ_{k<r≤q} log a_r) for k ≤ q, else 0 (a difference of cumulative sums)."""
    cs = log_a.cumsum(-1)
    diff = cs[..., :, None] - cs[..., None, :]  # [..., q, k]
    T = log_a.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool, device=log_a.device).tril()
    # −inf before exp (not a mask after it): above the diagonal the difference is positive and
    # its exp can overflow
    return diff.masked_fill(~causal, float("-inf")).exp()


def ssd_effective_attention(dt: Float[Tensor, "batch pos heads"], A: Float[Tensor, " heads"],
                            B: Float[Tensor, "batch pos groups n"],
                            C: Float[Tensor, "batch pos groups n"],
                            ) -> Float[Tensor, "batch heads q k"]:
    """Mamba-2: M_h[q, k] = L_h[q, k] (c_q·b_k) Δ_{k,h}, heads split as (groups, heads per
    group) like mamba-ssm's."""
    H, G = dt.shape[-1], B.shape[2]
    check(H % G == 0, f"heads ({H}) must be a multiple of groups ({G})")
    L = decay_matrix(einops.rearrange(dt * A, "b t h -> b h t"))  # [batch, heads, q, k]
    CB = torch.einsum("bqgn,bkgn->bgqk", C, B)  # [batch, groups, q, k]
    CB = einops.repeat(CB, "b g q k -> b (g r) q k", r=H // G)
    return L * CB * einops.rearrange(dt, "b k h -> b h 1 k")


def s6_effective_attention(dt: Float[Tensor, "batch pos channels"],
                           A: Float[Tensor, "channels n"], B: Float[Tensor, "batch pos n"],
                           C: Float[Tensor, "batch pos n"]) -> Float[Tensor, "batch channels q k"]:
    """Mamba: M_d[q, k] = Σ_n c_{q,n} b_{k,n} Δ_{k,d} exp(Σ_{k<r≤q} Δ_{r,d} A_{d,n}).

    A loop over the state index n: the decay differs per (channel, n), and materialising all
    of them at once would take d_state times the memory of M."""
    M = None
    for n in range(A.shape[1]):
        L = decay_matrix(einops.rearrange(dt * A[:, n], "b t d -> b d t"))  # [b, d, q, k]
        term = L * torch.einsum("bq,bk->bqk", C[..., n], B[..., n])[:, None]
        M = term if M is None else M + term
    return M * einops.rearrange(dt, "b k d -> b d 1 k")


def apply_effective_attention(M: Float[Tensor, "batch heads q k"],
                              x: Float[Tensor, "batch pos heads d_head"],
                              ) -> Float[Tensor, "batch pos heads d_head"]:
    """y_q = Σ_k M[q, k] x_k per head (Mamba's x is [batch, pos, channels, 1])."""
    return torch.einsum("bhqk,bkhp->bqhp", M, x)


def effective_pattern(M: Float[Tensor, "batch heads q k"]) -> Float[Tensor, "batch heads q k"]:
    """Each key's share of the row's total |M| (rows of zeros stay zero): a pattern whose rows
    sum to one, for the probes that read attention mass."""
    a = M.abs()
    return a / a.sum(-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)
