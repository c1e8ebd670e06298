"""The Mamba-2 (SSD) mixer: its config, the reference scan, the chunked scan and the kernel.

Used by :mod:`models.ssm.mamba2` (the Mamba-2 LM) and :mod:`models.ssm.mambazero`. The mixer is Mamba-2
as mamba-ssm and HF transformers define it (Dao & Gu 2024), written as the Markov paper's
equations (Bondaschi et al., "From Markov to Laplace", §2.2, App. B):

    in_proj:  u_t -> (z_t, xBC_t, dt_t)                 (z only when ``gated``)
    conv:     xBC_t <- act(conv1d(xBC_{t−w+1..t}))      depthwise causal, window w = d_conv
    split:    xBC_t = (x_t, b_t, c_t)
    Δ_t = softplus(dt_t + dt_bias),   a_t = exp(−exp(A_log)·Δ_t) ∈ (0, 1]
    H_t = a_t·H_{t−1} + Δ_t·x_t b_tᵀ                    (per head: [d_head, d_state])
    y_t = H_t c_t + D·x_t
    o_t = out_proj(RMSNorm(y_t ⊙ act(z_t)))             (gated RMSNorm, norm_before_gate=False)

The Markov paper's published runs (Bond1995/Markov-Mamba, ``--layernorm --conv --conv_act
--gate``) differ: no D term (``use_D=False``), and o_t = out_proj(LN(y_t) ⊙ act(z_t)) with a
bias-free LayerNorm over all of y_t (``norm="layernorm"``, ``norm_before_gate=True``).

Glossary (code name -> Markov paper symbol, §2.2 / §4.1 / Table 6):
    d_model          d, the embedding / residual width
    expand           e, so d_inner = e·d is the width of x_t (the paper's ed)
    d_state          N, the state width (columns of H_t)
    n_heads, d_head  heads share a scalar a_t; d_head = d_inner / n_heads (paper: 1 head)
    n_groups         groups of heads sharing b_t, c_t (mamba-ssm's ngroups)
    d_conv           w, the convolution window (the paper varies it from 2 to 6, Fig. 3b)
    in_proj.weight   rows [W_z; W_X; W_B; W_C; w_Δ] (W_z only when gated)
    conv1d.weight    [conv_dim, 1, w]: conv_X, conv_B, conv_C stacked over channels;
                     weight[:, 0, w−1] multiplies the current step, weight[:, 0, w−2] the one
                     before (Eq. (9)'s D^(1), D^(0))
    dt_bias          δ in Δ_t = softplus(⟨w_Δ, x_t⟩ + δ)
    A_log            log a in a_t = exp(−a·Δ_t); an A_log whose exp underflows to 0 gives
                     a_t = 1 (``decay=False`` drops A_log and fixes a_t = 1)
    D                the skip term D·x_t (absent from the paper's equations; ``use_D``)
    norm             "rms" (mamba-ssm / HF) or "layernorm": the paper's "layer norm" (torch
                     LayerNorm without bias, as the authors' code) — here on y_t, and in
                     :class:`models.ssm.mamba2.Mamba2LM` also before the mixer, the MLP and the
                     unembedding
    norm_before_gate False: norm(y_t ⊙ act(z_t)) (mamba-ssm); True: norm(y_t) ⊙ act(z_t)
                     (the authors' code)
    paper_init       the authors' initialisation: every Linear N(0, init_std), out_proj and
                     fc2 torch's default then ÷ √(2·n_layers); a = exp(A_log) ~ U(1, 16)
    out_proj.weight  W_o

Hooks (TransformerLens names, DESIGN.md) of ``blocks.{i}.mixer``:
    hook_in_proj [batch, pos, d_in_proj]; hook_conv [batch, pos, conv_dim] (conv output, before
    the activation); hook_x [batch, pos, heads, d_head]; hook_B, hook_C [batch, pos, groups,
    d_state]; hook_ssm_dt Δ_t [batch, pos, heads]; hook_decay a_t [batch, pos, heads];
    hook_ssm_write Δ_t·x_t⊗b_t [batch, pos, heads, d_head, d_state]; hook_ssm_state H_t
    [batch, pos, heads, d_head, d_state]; hook_y y_t = H_t c_t + D·x_t [batch, pos, heads,
    d_head]; hook_gate act(z_t) [batch, pos, d_inner]; hook_ssm_out the mixer's output
    out_proj(...) [batch, pos, d_model] (what is added to the residual stream).
Patching semantics: an edit of H_t through ``hook_ssm_state`` is carried forward as the
recurrence carries it (:func:`models.ssm.recurrent.carried_states`): the edited entries hold
what the hook wrote and H_{t+1}, H_{t+2} … run on from them, so y changes at t and after.
``hook_decay`` (a_t = 0 resets the state) and ``hook_ssm_write`` edit the recurrence's inputs.

Three paths give the same numbers (tested in float64, outputs and gradients):
    plain    :func:`ssd_plain`, a loop over positions that materialises H_t (every hook fires);
    chunked  :func:`ssd_chunked`, the SSD block decomposition (Dao & Gu 2024, "ssd_minimal"),
             no per-position state;
    kernel   mamba-ssm's Triton ``mamba_chunk_scan_combined`` on CUDA, imported lazily.
``scan="auto"`` takes the plain path whenever a hook is attached to hook_decay, hook_ssm_write
or hook_ssm_state (run_with_cache attaches all), else the kernel on CUDA when mamba-ssm is
importable, else the chunked path.

Parameter names and shapes equal HF ``Mamba2ForCausalLM`` / mamba-ssm's ``Mamba2`` inside the
mixer (:func:`models.ssm.recurrent.to_hf_state_dict` renames the LM wrapper's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from models.layers import BiasFreeLayerNorm, GatedRMSNorm, activation
from models.ssm.recurrent import (
    SSMLMConfig,
    SSMMixer,
    carried_states,
    causal_conv_from,
    init_dt_bias,
    linear_scan_plain,
    optional_kernel,
)
from seqprobe.config import check
from seqprobe.flags import MAX_HEADS, MAX_LENGTH, bound


# ---------------------------------------------------------------------------- config
@dataclass(frozen=True)
class Mamba2Config(SSMLMConfig):
    """Mamba-2 LM config: the shared SSM fields (:class:`~models.ssm.recurrent.SSMLMConfig`) plus
    Mamba-2's heads, groups, chunking and ablation switches."""

    SCANS: ClassVar[tuple[str, ...]] = ("auto", "plain", "chunked", "kernel")
    NORMS: ClassVar[tuple[str, ...]] = ("rms", "layernorm")
    n_heads: int = field(  # the Markov paper uses one head (Table 7)
        default=1, metadata=bound(1, MAX_HEADS, "heads per layer; papers: up to 16"))
    n_groups: int = field(default=1, metadata=bound(1, MAX_HEADS, "B/C groups; papers: 1"))
    chunk_size: int = field(  # SSD chunk length (speed only; any value gives the same numbers)
        default=64, metadata=bound(1, MAX_LENGTH, "tokens per scan chunk; the suite: 64"))
    mixer_norm: bool = True  # the gated RMSNorm before out_proj
    decay: bool = True  # False: a_t = 1 (no forgetting, "w/o gating factor a_t", Table 4)
    # the Markov paper's published model (module docstring); the defaults are mamba-ssm's
    norm: str = "rms"  # rms | layernorm (bias-free, the paper's "layer norm")
    norm_before_gate: bool = False  # True: norm(y) ⊙ act(z), the authors' order
    mlp_gated: bool = True  # False: fc2(act(fc1(u))), the authors' MLP without --gate
    paper_init: bool = False  # True: the authors' initialisation (module docstring)

    def __post_init__(self):
        super().__post_init__()
        check(self.d_inner % self.n_heads == 0,
              f"d_inner = expand·d_model = {self.d_inner} must be divisible by n_heads "
              f"({self.n_heads})")
        check(self.n_heads % self.n_groups == 0,
              f"n_heads ({self.n_heads}) must be divisible by n_groups ({self.n_groups})")
        check(self.norm in self.NORMS, f"norm must be one of {self.NORMS}, got {self.norm!r}")
        check(self.norm == "rms" or self.n_groups == 1,
              "norm='layernorm' normalises all of y_t (the authors' code): needs n_groups = 1")

    @property
    def d_head(self) -> int:
        return self.d_inner // self.n_heads

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def d_in_proj(self) -> int:
        return (self.d_inner if self.gated else 0) + self.conv_dim + self.n_heads


# ---------------------------------------------------------------------------- scans
def ssd_plain(a: Float[Tensor, "batch pos heads"], write: Float[Tensor, "batch pos heads p n"],
              h0: Float[Tensor, "batch heads p n"] | None = None
              ) -> Float[Tensor, "batch pos heads p n"]:
    """H_t = a_t·H_{t−1} + write_t, H_0 = 0 (or ``h0``), by a loop over positions (the
    reference): one scalar a_t per head, broadcast over the head's [d_head, d_state] state."""
    return linear_scan_plain(a[..., None, None], write, h0)


def _segsum_exp(cs: Float[Tensor, "*batch L"]) -> Float[Tensor, "*batch L L"]:
    """exp(cs[..., i] − cs[..., j]) for i ≥ j, else 0.

    The decay from step j to step i is ∏_{j<s≤i} a_s = exp(cs_i − cs_j) for the cumulative
    sum cs of log a (mamba-ssm's chunk kernels use the same difference of cumsums).
    """
    L = cs.shape[-1]
    diff = cs[..., :, None] - cs[..., None, :]
    keep = torch.ones(L, L, dtype=torch.bool, device=cs.device).tril()
    # −inf before exp (not a mask after it): masked entries can be large positive numbers whose
    # exp would overflow and poison the gradient with inf·0
    return diff.masked_fill(~keep, float("-inf")).exp()


def ssd_chunked(x: Float[Tensor, "batch pos heads p"], dA: Float[Tensor, "batch pos heads"],
                B: Float[Tensor, "batch pos groups n"], C: Float[Tensor, "batch pos groups n"],
                chunk: int) -> Float[Tensor, "batch pos heads p"]:
    """y_t = Σ_{s≤t} (c_t·b_s) exp(Σ_{s<r≤t} dA_r) x_s by SSD chunks (Dao & Gu 2024, §6).

    ``x`` is already multiplied by Δ_t and ``dA = Δ_t·A = log a_t``. Heads are split as
    (groups, heads per group) so b and c are broadcast, never copied per head.
    """
    T, G = x.shape[1], B.shape[2]
    pad = (-T) % chunk
    if pad:
        x = F.pad(x, (0, 0, 0, 0, 0, pad))
        dA = F.pad(dA, (0, 0, 0, pad))
        B = F.pad(B, (0, 0, 0, 0, 0, pad))
        C = F.pad(C, (0, 0, 0, 0, 0, pad))
    xs = einops.rearrange(x, "b (c l) (g r) p -> b c l g r p", l=chunk, g=G)
    Bs = einops.rearrange(B, "b (c l) g n -> b c l g n", l=chunk)
    Cs = einops.rearrange(C, "b (c l) g n -> b c l g n", l=chunk)
    dAs = einops.rearrange(dA, "b (c l) (g r) -> b g r c l", l=chunk, g=G)
    cs = dAs.cumsum(dim=-1)  # [b, g, r, c, l]

    # 1. within each chunk: a masked, decayed "attention" C·Bᵀ applied to x
    CB = torch.einsum("bclgn,bcsgn->bgcls", Cs, Bs)  # [b, g, c, l, s]
    M = _segsum_exp(cs) * CB[:, :, None]  # [b, g, r, c, l, s]
    y = torch.einsum("bgrcls,bcsgrp->bclgrp", M, xs)

    # 2. the state each chunk leaves behind (decayed to the chunk's end)
    decay_to_end = (cs[..., -1:] - cs).exp()  # [b, g, r, c, l]
    xd = xs * einops.rearrange(decay_to_end, "b g r c l -> b c l g r")[..., None]
    chunk_states = torch.einsum("bclgn,bclgrp->bcgrpn", Bs, xd)  # [b, c, g, r, p, n]

    # 3. states entering each chunk: a recurrence over chunks, as one small decay matrix
    n_chunks = xs.shape[1]
    if n_chunks > 1:
        last = F.pad(cs[..., -1], (1, 0))  # [b, g, r, c + 1]
        decay_chunks = _segsum_exp(last.cumsum(dim=-1))  # [b, g, r, c + 1, c + 1]
        padded = F.pad(chunk_states, (0, 0, 0, 0, 0, 0, 0, 0, 1, 0))  # [b, c + 1, g, r, p, n]
        entering = torch.einsum("bgrzc,bcgrpn->bzgrpn", decay_chunks, padded)[:, :-1]
        # 4. what the entering state contributes at each step of the chunk
        y_off = torch.einsum("bclgn,bcgrpn->bclgrp", Cs, entering)
        y = y + y_off * einops.rearrange(cs.exp(), "b g r c l -> b c l g r")[..., None]
    y = einops.rearrange(y, "b c l g r p -> b (c l) (g r) p")
    return y[:, :T]


def mamba_ssm_chunk_scan():
    """mamba-ssm's ``mamba_chunk_scan_combined`` or None (imported lazily, only on demand)."""
    return optional_kernel("mamba_ssm.ops.triton.ssd_combined", "mamba_chunk_scan_combined")


# ---------------------------------------------------------------------------- mixer
class Mamba2Mixer(SSMMixer):
    """The Mamba-2 mixer of the module docstring, hooks as in :class:`SSMMixer`."""

    @classmethod
    def axes(cls, cfg: Mamba2Config, batch: int, pos: int) -> dict[str, tuple[int, ...]]:
        B, T, H, P, N, G = batch, pos, cfg.n_heads, cfg.d_head, cfg.d_state, cfg.n_groups
        return {"x": (B, T, H, P), "bc": (B, T, G, N), "dt": (B, T, H), "decay": (B, T, H),
                "state": (B, T, H, P, N), "proj": cfg.d_in_proj, "conv": cfg.conv_dim}

    def __init__(self, cfg: Mamba2Config, layer: int = 0):
        super().__init__(cfg)
        H = cfg.n_heads
        self.in_proj = nn.Linear(cfg.d_model, cfg.d_in_proj, bias=cfg.proj_bias)
        if cfg.conv:
            self.conv1d = nn.Conv1d(cfg.conv_dim, cfg.conv_dim, cfg.d_conv, groups=cfg.conv_dim,
                                    padding=cfg.d_conv - 1, bias=cfg.conv_bias)
        self.dt_bias = nn.Parameter(torch.empty(H))
        if cfg.decay:  # decay=False fixes a_t = 1: no A at all
            self.A_log = nn.Parameter(torch.empty(H))
        if cfg.use_D:
            self.D = nn.Parameter(torch.ones(H))
        if cfg.mixer_norm:
            self.norm = (GatedRMSNorm(cfg.d_inner, cfg.n_groups, cfg.norm_eps)
                         if cfg.norm == "rms" else BiasFreeLayerNorm(cfg.d_inner, cfg.norm_eps))
        self.out_proj = nn.Linear(cfg.d_inner, cfg.d_model, bias=cfg.proj_bias)
        self.act = activation(cfg.activation)
        self.reset_ssm_parameters()

    @torch.no_grad()
    def reset_ssm_parameters(self):
        """mamba-ssm / HF initialisation of A_log, dt_bias and D."""
        cfg = self.cfg
        H = cfg.n_heads
        if cfg.decay and cfg.paper_init:  # the authors' A_init_range = (1, 16)
            self.A_log.copy_(torch.empty(H).uniform_(1.0, 16.0).log())
        elif cfg.decay:
            self.A_log.copy_(torch.log(torch.arange(1, H + 1, dtype=torch.float32)))  # A = 1..H
        self.dt_bias.copy_(init_dt_bias(H, cfg))
        if cfg.use_D:
            self.D.fill_(1.0)

    def _path(self, x: Tensor) -> str:
        if self.scan == "plain" or self.state_hooked() or self.start_state is not None:
            return "plain"
        if self.scan == "chunked":
            return "chunked"
        if x.is_cuda and (self.scan == "kernel" or self.cfg.use_kernels):
            if mamba_ssm_chunk_scan() is not None:
                return "kernel"
        if self.scan == "kernel":
            raise RuntimeError("scan='kernel' needs CUDA tensors and mamba-ssm installed")
        return "chunked"

    def forward(self, u: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        cfg = self.cfg
        Bsz, T, _ = u.shape
        H, P, G, N = cfg.n_heads, cfg.d_head, cfg.n_groups, cfg.d_state
        zxbcdt = self.hook_in_proj(self.in_proj(u))  # [batch, pos, d_in_proj]
        d_z = cfg.d_inner if cfg.gated else 0
        z, xBC, dt = zxbcdt.split([d_z, cfg.conv_dim, H], dim=-1)
        start = self.start_state  # None: H_0 = 0 and a zero-padded conv window
        if cfg.conv:  # depthwise causal conv: left padding w − 1, keep the first T outputs
            xBC = causal_conv_from(self.conv1d, xBC, None if start is None else start.conv)
        xBC = self.act(self.hook_conv(xBC))  # [batch, pos, conv_dim]
        x, Bm, Cm = xBC.split([cfg.d_inner, G * N, G * N], dim=-1)
        x = self.hook_x(x.reshape(Bsz, T, H, P))
        Bm = self.hook_B(Bm.reshape(Bsz, T, G, N))
        Cm = self.hook_C(Cm.reshape(Bsz, T, G, N))
        dt = self.hook_ssm_dt(F.softplus(dt + self.dt_bias))  # [batch, pos, heads] Δ_t
        A = -torch.exp(self.A_log) if cfg.decay else dt.new_zeros(H)  # [heads]
        dA = dt * A  # log a_t

        path = self._path(x)
        if path == "plain":
            a = self.hook_decay(dA.exp())  # [batch, pos, heads]
            Bh = einops.repeat(Bm, "b p g n -> b p (g r) n", r=H // G)
            Ch = einops.repeat(Cm, "b p g n -> b p (g r) n", r=H // G)
            write = self.hook_ssm_write(torch.einsum("bph,bphd,bphn->bphdn", dt, x, Bh))
            h0 = None if start is None else start.h  # [batch, heads, p, n]
            states = carried_states(self.hook_ssm_state, ssd_plain(a, write, h0),
                                    a[..., None, None], write, h0)  # [batch, pos, heads, p, n]
            y = torch.einsum("bphdn,bphn->bphd", states, Ch)
        elif path == "kernel":
            scan = mamba_ssm_chunk_scan()
            y = scan(x.contiguous(), dt.contiguous(), A.float().contiguous(), Bm.contiguous(),
                     Cm.contiguous(), chunk_size=cfg.chunk_size).to(x.dtype)
        else:
            y = ssd_chunked(x * dt[..., None], dA, Bm, Cm, cfg.chunk_size)
        if cfg.use_D:
            y = y + self.D[:, None] * x
        y = self.hook_y(y)  # [batch, pos, heads, d_head]
        y = y.reshape(Bsz, T, cfg.d_inner)
        gate = self.hook_gate(self.act(z)) if cfg.gated else None  # [batch, pos, d_inner]
        if cfg.mixer_norm and not cfg.norm_before_gate:  # norm(y ⊙ act(z)) (mamba-ssm)
            y = self.norm(y, gate) if cfg.norm == "rms" else self.norm(
                y if gate is None else y * gate)
        else:  # norm(y) ⊙ act(z) (the authors' code), or no norm
            if cfg.mixer_norm:
                y = self.norm(y, None) if cfg.norm == "rms" else self.norm(y)
            if gate is not None:
                y = y * gate
        return self.hook_ssm_out(self.out_proj(y))


