"""Hooked Mamba-2 (SSD) and MambaZero language models.

The mixer is Mamba-2 as mamba-ssm and HF transformers define it (Dao & Gu 2024), written as the
Markov paper's equations (Bondaschi et al., "From Markov to Laplace", §2.2, App. B):

    in_proj:  u_t -> (z_t, xBC_t, dt_t)                 (z only when ``gated``)
    conv:     xBC_t <- act(conv1d(xBC_{t−w+1..t}))      depthwise causal, window w = d_conv
    split:    xBC_t = (x_t, b_t, c_t)
    Δ_t = softplus(dt_t + dt_bias),   a_t = exp(−exp(A_log)·Δ_t) ∈ (0, 1]
    H_t = a_t·H_{t−1} + Δ_t·x_t b_tᵀ                    (per head: [d_head, d_state])
    y_t = H_t c_t + D·x_t
    o_t = out_proj(RMSNorm(y_t ⊙ act(z_t)))             (gated RMSNorm, norm_before_gate=False)

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
    A_log            log a in a_t = exp(−a·Δ_t); A_log = −inf gives a_t = 1 (``decay=False``
                     drops A_log and fixes a_t = 1)
    D                the skip term D·x_t (absent from the paper's equations; ``use_D``)
    out_proj.weight  W_o
    unembed.weight   W_ℓ (the Linear layer), logits = W_ℓ·v_t

Hooks (TransformerLens names, DESIGN.md) of ``blocks.{i}.mixer``:
    hook_in_proj [batch, pos, d_in_proj]; hook_conv [batch, pos, conv_dim] (conv output, before
    the activation); hook_x [batch, pos, heads, d_head]; hook_B, hook_C [batch, pos, groups,
    d_state]; hook_ssm_dt Δ_t [batch, pos, heads]; hook_decay a_t [batch, pos, heads];
    hook_ssm_write Δ_t·x_t⊗b_t [batch, pos, heads, d_head, d_state]; hook_ssm_state H_t
    [batch, pos, heads, d_head, d_state]; hook_y y_t = H_t c_t + D·x_t [batch, pos, heads,
    d_head]; hook_gate act(z_t) [batch, pos, d_inner]; hook_ssm_out the mixer's output
    out_proj(...) [batch, pos, d_model] (what is added to the residual stream).
Patching semantics: H_t is computed by the recurrence first and *then* passed through
``hook_ssm_state``, so patching it changes y_t at the patched positions only. To change what
the recurrence carries forward, patch ``hook_decay`` (e.g. a_t = 0 resets the state) or
``hook_ssm_write``.

Three paths give the same numbers (tested in float64 to 1e-5, outputs and gradients):
    plain    a Python loop over positions, materialises H_t (every hook fires);
    chunked  the SSD block decomposition (Dao & Gu 2024, "ssd_minimal"), no per-position state;
    kernel   mamba-ssm's Triton ``mamba_chunk_scan_combined`` on CUDA, imported lazily.
``scan="auto"`` takes the plain path whenever a hook is attached to hook_decay, hook_ssm_write
or hook_ssm_state (run_with_cache attaches all), else the kernel on CUDA when mamba-ssm is
importable, else the chunked path.

Parameter names and shapes equal HF ``Mamba2ForCausalLM`` / mamba-ssm's ``Mamba2`` inside the
mixer; :func:`to_hf_state_dict` / :func:`from_hf_state_dict` rename the rest (embedding,
block norms, final norm, head) both ways.

MambaZero (§4.1): embedding -> x_t + MambaZero(x_1^t) -> Linear -> L1 normalisation. Its mixer
is the one above with no gate, no norm, no D and the identity activation ("just the
convolution"); :class:`MambaZeroConfig` holds these defaults, every switch stays settable.
The hand-set weights of Thm 1 (N = S, d = 2S, e = 1, w = 2) go into this layout (see
models/constructions.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from models.base import SuiteModel
from tasks.base import check

ACTIVATIONS = ("silu", "relu", "identity")
PREDICTIONS = ("softmax", "l1")
SCANS = ("auto", "plain", "chunked", "kernel")


def activation(name: str):
    return {"silu": F.silu, "relu": F.relu, "identity": lambda v: v}[name]


def has_hooks(hp: HookPoint) -> bool:
    """True when a user hook (forward or backward) is attached to ``hp``."""
    return bool(hp._forward_hooks) or bool(hp._backward_hooks) or bool(hp._backward_pre_hooks)


# ---------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class SSMLMConfig:
    """Fields shared by the state-space language models (Mamba-2, MambaZero, Mamba-1)."""

    vocab_size: int = 2
    d_model: int = 32
    n_layers: int = 1
    d_mlp: int = 0  # > 0: a gated MLP after each mixer (Markov paper Fig. 2 / App. B); 0: none
    mlp_act: str = "relu"  # the paper's MLP: W_2[ReLU(W_1 u) ⊙ W_3 u]
    block_norm: bool = True  # RMSNorm before the mixer (and before the MLP)
    final_norm: bool = True  # RMSNorm before the unembedding (ln_final)
    norm_eps: float = 1e-5
    unembed_bias: bool = False
    prediction: str = "softmax"  # softmax | l1 (MambaZero's L1-normalised prediction, §4.1)
    l1_eps: float = 1e-6  # l1: p ∝ max(|logit|, l1_eps) (see SSMLanguageModel.log_probs)
    init_std: float = 0.02  # embedding / unembedding init (mamba-ssm: 0.02)
    use_kernels: bool = True  # on CUDA with mamba-ssm installed, its kernels when allowed
    scan: str = "auto"  # force a path (see each model's docstring); auto picks the fastest

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        check(self.d_mlp >= 0, f"d_mlp must be >= 0, got {self.d_mlp}")
        check(self.mlp_act in ACTIVATIONS, f"mlp_act must be one of {ACTIVATIONS}")
        check(self.prediction in PREDICTIONS,
              f"prediction must be one of {PREDICTIONS}, got {self.prediction!r}")
        check(self.norm_eps > 0 and self.l1_eps > 0, "norm_eps and l1_eps must be > 0")
        check(self.init_std > 0, f"init_std must be > 0, got {self.init_std}")


@dataclass(frozen=True)
class Mamba2Config(SSMLMConfig):
    expand: int = 2  # e
    n_heads: int = 1  # the Markov paper uses one head (Table 7)
    d_state: int = 16  # N
    n_groups: int = 1
    d_conv: int = 4  # w
    chunk_size: int = 64  # SSD chunk length (speed only; any value gives the same numbers)
    conv: bool = True  # ablation: False removes the convolution (§3, Fig. 3a)
    conv_bias: bool = True
    activation: str = "silu"  # after the conv and on the gate: silu | relu | identity
    gated: bool = True  # ablation: False removes z and the gate y ⊙ act(z)
    mixer_norm: bool = True  # the gated RMSNorm before out_proj
    decay: bool = True  # False: a_t = 1 (no forgetting, "w/o gating factor a_t", Table 4)
    use_D: bool = True
    proj_bias: bool = False  # bias of in_proj / out_proj (HF use_bias)
    dt_min: float = 0.001  # Δ initialisation range (mamba-ssm / HF defaults)
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4

    def __post_init__(self):
        super().__post_init__()
        for name in ("expand", "n_heads", "d_state", "n_groups", "d_conv", "chunk_size"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        check(self.d_inner % self.n_heads == 0,
              f"d_inner = expand·d_model = {self.d_inner} must be divisible by n_heads "
              f"({self.n_heads})")
        check(self.n_heads % self.n_groups == 0,
              f"n_heads ({self.n_heads}) must be divisible by n_groups ({self.n_groups})")
        check(self.activation in ACTIVATIONS,
              f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        check(0 < self.dt_min <= self.dt_max, "need 0 < dt_min <= dt_max")
        check(self.scan in SCANS, f"scan must be one of {SCANS}, got {self.scan!r}")

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def d_head(self) -> int:
        return self.d_inner // self.n_heads

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state

    @property
    def d_in_proj(self) -> int:
        return (self.d_inner if self.gated else 0) + self.conv_dim + self.n_heads


@dataclass(frozen=True)
class MambaZeroConfig(Mamba2Config):
    """MambaZero (§4.1): only the embedding, the conv-SSM and the Linear layer remain.

    Thm 1's dimensions for S symbols: ``d_model = 2S, expand = 1, d_state = S, d_conv = 2``
    (one head). Defaults here are those for S = 2.
    """

    d_model: int = 4
    expand: int = 1
    d_state: int = 2
    d_conv: int = 2
    activation: str = "identity"  # "without ReLU and just the convolution" (§4.1)
    gated: bool = False
    mixer_norm: bool = False
    use_D: bool = False
    conv_bias: bool = False
    block_norm: bool = False
    final_norm: bool = False
    prediction: str = "l1"


# ---------------------------------------------------------------------------- pieces
class RMSNorm(nn.Module):
    """RMSNorm as HF Mamba2RMSNorm (parameter ``weight``); the identity when disabled."""

    def __init__(self, d: int, eps: float, enabled: bool = True):
        super().__init__()
        self.eps = eps
        self.enabled = enabled
        if enabled:
            self.weight = nn.Parameter(torch.ones(d))
        self.hook_normalized = HookPoint()  # [batch, pos, d]

    def forward(self, x: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d"]:
        if not self.enabled:
            return self.hook_normalized(x)
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.hook_normalized(self.weight * (x * scale))


class GatedRMSNorm(nn.Module):
    """mamba-ssm's RMSNormGated with norm_before_gate=False: RMSNorm(y ⊙ gate) per group."""

    def __init__(self, d: int, n_groups: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
        self.n_groups = n_groups

    def forward(self, y: Tensor, gate: Tensor | None) -> Tensor:
        if gate is not None:
            y = y * gate
        yg = einops.rearrange(y, "... (g c) -> ... g c", g=self.n_groups)
        yg = yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * einops.rearrange(yg, "... g c -> ... (g c)")


class GatedMLP(nn.Module):
    """v = u + fc2(fc1_a(u) ⊙ act(fc1_b(u))) — mamba-ssm's GatedMLP (fc1 holds both halves);
    with ReLU it is the Markov paper's MLP W_2[ReLU(W_1 u) ⊙ W_3 u] (App. B)."""

    def __init__(self, d_model: int, d_mlp: int, act: str):
        super().__init__()
        self.fc1 = nn.Linear(d_model, 2 * d_mlp, bias=False)
        self.fc2 = nn.Linear(d_mlp, d_model, bias=False)
        self.act = activation(act)
        self.hook_pre = HookPoint()  # [batch, pos, 2·d_mlp] (value half, then gate half)
        self.hook_post = HookPoint()  # [batch, pos, d_mlp]

    def forward(self, u: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        value, gate = self.hook_pre(self.fc1(u)).chunk(2, dim=-1)
        return self.fc2(self.hook_post(value * self.act(gate)))


# ---------------------------------------------------------------------------- scans
def ssd_plain(a: Float[Tensor, "batch pos heads"], write: Float[Tensor, "batch pos heads p n"]
              ) -> Float[Tensor, "batch pos heads p n"]:
    """H_t = a_t·H_{t−1} + write_t, H_0 = 0, by a loop over positions (the reference)."""
    state = torch.zeros_like(write[:, 0])  # [batch, heads, p, n]
    states = []
    # unbind, not a[:, t]: the backward of each indexing op would write a zero tensor of the
    # full [batch, pos, ...] size (quadratic in the length); unbind's backward is one stack
    for a_t, w_t in zip(a[..., None, None].unbind(1), write.unbind(1), strict=True):
        state = a_t * state + w_t
        states.append(state)
    return torch.stack(states, dim=1)


def _segsum_exp(cs: Tensor) -> Tensor:
    """exp(cs[..., i] − cs[..., j]) for i ≥ j, else 0: [..., L] -> [..., L, L].

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


@functools.lru_cache(maxsize=1)
def mamba_ssm_chunk_scan():
    """mamba-ssm's ``mamba_chunk_scan_combined`` or None (imported lazily, only on demand)."""
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception:  # noqa: BLE001 - not installed, or a broken CUDA / Triton setup
        return None
    return mamba_chunk_scan_combined


# ---------------------------------------------------------------------------- mixer
class Mamba2Mixer(nn.Module):
    def __init__(self, cfg: Mamba2Config, layer: int = 0):
        super().__init__()
        self.cfg = cfg
        self.scan = cfg.scan
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
            self.norm = GatedRMSNorm(cfg.d_inner, cfg.n_groups, cfg.norm_eps)
        self.out_proj = nn.Linear(cfg.d_inner, cfg.d_model, bias=cfg.proj_bias)
        self.act = activation(cfg.activation)

        self.hook_in_proj = HookPoint()  # [batch, pos, d_in_proj]
        self.hook_conv = HookPoint()  # [batch, pos, conv_dim] conv output, before act
        self.hook_x = HookPoint()  # [batch, pos, heads, d_head]
        self.hook_B = HookPoint()  # [batch, pos, groups, d_state]
        self.hook_C = HookPoint()  # [batch, pos, groups, d_state]
        self.hook_ssm_dt = HookPoint()  # [batch, pos, heads]  Δ_t
        self.hook_decay = HookPoint()  # [batch, pos, heads]  a_t = exp(Δ_t·A)
        self.hook_ssm_write = HookPoint()  # [batch, pos, heads, d_head, d_state]  Δ_t·x_t⊗b_t
        self.hook_ssm_state = HookPoint()  # [batch, pos, heads, d_head, d_state]  H_t
        self.hook_y = HookPoint()  # [batch, pos, heads, d_head]  H_t c_t + D·x_t
        self.hook_gate = HookPoint()  # [batch, pos, d_inner]  act(z_t)
        self.hook_ssm_out = HookPoint()  # [batch, pos, d_model]  out_proj(...)
        self.reset_ssm_parameters()

    @torch.no_grad()
    def reset_ssm_parameters(self):
        """mamba-ssm / HF initialisation of A_log, dt_bias and D."""
        cfg = self.cfg
        H = cfg.n_heads
        if cfg.decay:
            self.A_log.copy_(torch.log(torch.arange(1, H + 1, dtype=torch.float32)))  # A = 1..H
        dt = torch.exp(torch.rand(H) * (math.log(cfg.dt_max) - math.log(cfg.dt_min))
                       + math.log(cfg.dt_min)).clamp(min=cfg.dt_init_floor)
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        if cfg.use_D:
            self.D.fill_(1.0)

    def _path(self, x: Tensor) -> str:
        needs_state = any(has_hooks(h) for h in (self.hook_decay, self.hook_ssm_write,
                                                 self.hook_ssm_state))
        if self.scan == "plain" or needs_state:
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
        if cfg.conv:  # depthwise causal conv: left padding w − 1, keep the first T outputs
            xBC = self.conv1d(xBC.transpose(1, 2))[..., :T].transpose(1, 2)
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
            states = self.hook_ssm_state(ssd_plain(a, write))  # [batch, pos, heads, p, n]
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
        if cfg.mixer_norm:
            y = self.norm(y, gate)
        elif gate is not None:
            y = y * gate
        return self.hook_ssm_out(self.out_proj(y))


# ---------------------------------------------------------------------------- LM
class SSMBlock(nn.Module):
    """resid_post = resid_pre + mixer(norm(resid_pre)) [+ mlp(norm2(resid_mid))] (pre-norm)."""

    def __init__(self, cfg: SSMLMConfig, mixer: nn.Module):
        super().__init__()
        self.cfg = cfg
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.block_norm)
        self.mixer = mixer
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        if cfg.d_mlp:
            self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
            self.norm2 = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.block_norm)
            self.mlp = GatedMLP(cfg.d_model, cfg.d_mlp, cfg.mlp_act)
            self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(self, resid: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d"]:
        resid = self.hook_resid_pre(resid)
        resid = resid + self.mixer(self.norm(resid))
        if self.cfg.d_mlp:
            resid = self.hook_resid_mid(resid)
            resid = resid + self.hook_mlp_out(self.mlp(self.norm2(resid)))
        return self.hook_resid_post(resid)


class SSMLanguageModel(SuiteModel):
    """Embedding -> n blocks -> final norm -> unembedding, for any mixer (:meth:`make_mixer`).

    forward(tokens [batch, pos]) -> logits [batch, pos, vocab]. With ``prediction="l1"`` the
    outputs are read as unnormalised probabilities (:meth:`log_probs` L1-normalises them).
    """

    def __init__(self, cfg: SSMLMConfig):
        super().__init__(cfg)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([SSMBlock(cfg, self.make_mixer(cfg, i))
                                     for i in range(cfg.n_layers)])
        self.ln_final = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.final_norm)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.unembed_bias)
        self._init_weights()
        self.setup()

    def make_mixer(self, cfg, layer: int) -> nn.Module:
        raise NotImplementedError

    @torch.no_grad()
    def _init_weights(self):
        """mamba-ssm's scheme: embeddings N(0, init_std); Linear / conv keep PyTorch's default;
        out_proj / fc2 shrunk by √(residual writes per layer · n_layers) (prenorm rescale)."""
        cfg = self.cfg
        nn.init.normal_(self.embed.weight, std=cfg.init_std)
        nn.init.normal_(self.unembed.weight, std=cfg.init_std)
        if cfg.unembed_bias:
            nn.init.zeros_(self.unembed.bias)
        writes = 2 if cfg.d_mlp else 1
        for name, p in self.named_parameters():
            if name.endswith(("out_proj.weight", "fc2.weight")):
                p.div_(math.sqrt(writes * cfg.n_layers))
            elif name.endswith(("in_proj.bias", "out_proj.bias")):
                nn.init.zeros_(p)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
        resid = self.hook_embed(self.embed(tokens))  # [batch, pos, d_model]
        for block in self.blocks:
            resid = block(resid)
        return self.unembed(self.ln_final(resid))

    def log_probs(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """log softmax(logits), or with ``prediction="l1"`` log(v / ‖v‖₁) for v = max(|logits|,
        l1_eps) (MambaZero's Prediction layer, §4.1).

        Why |logits| and not max(logits, 0): both equal the logits wherever they are positive
        (Thm 1's construction makes them β + counts > 0), but clamping negatives kills their
        gradient, and a freshly initialised model then never leaves the uniform prediction
        (measured: stuck at log 2 for 800 steps); |·| keeps every output trainable."""
        out = self(tokens)
        if self.cfg.prediction == "l1":
            v = out.abs().clamp_min(self.cfg.l1_eps)
            return v.log() - v.sum(-1, keepdim=True).log()
        return torch.log_softmax(out.float() if out.dtype != torch.float64 else out, dim=-1)

    def set_scan(self, scan: str) -> None:
        """Force every mixer's path: auto | plain | chunked | kernel (does not change cfg)."""
        check(scan in SCANS, f"scan must be one of {SCANS}, got {scan!r}")
        for block in self.blocks:
            block.mixer.scan = scan


class Mamba2LM(SSMLanguageModel):
    """Mamba-2 language model (Markov paper Fig. 2 with ``d_mlp > 0``; HF Mamba2 layout)."""

    arch = "mamba2"
    config_cls = Mamba2Config

    def make_mixer(self, cfg, layer):
        return Mamba2Mixer(cfg, layer)


class MambaZeroLM(Mamba2LM):
    """MambaZero (§4.1): embedding -> x_t + conv-SSM(x_1^t) -> Linear -> L1 normalisation.

    Parameter layout (for hand-set weights, Thm 1 / App. C.2), with d = d_model, e = expand,
    N = d_state, one head and one group:
        embed.weight                   [S, d]             e_x (rows = tokens)
        blocks.0.mixer.in_proj.weight  [e·d + 2N + 1, d]  rows W_X (e·d), W_B (N), W_C (N), w_Δ (1)
        blocks.0.mixer.conv1d.weight   [e·d + 2N, 1, w]   [:, 0, −1] current step, [:, 0, −2]
                                                          the previous one (Eq. (9))
        blocks.0.mixer.dt_bias         [1]                δ (softplus(δ) = 1: δ = log(e − 1))
        blocks.0.mixer.A_log           [1]                −inf gives a_t = 1 (``decay=False``:
                                                          no A_log at all, a_t = 1)
        blocks.0.mixer.out_proj.weight [d, e·d]           W_o
        unembed.weight                 [S, d]             W_ℓ
    The block has no norm and the model no final norm, so logit_t = W_ℓ(x_t + W_o y_t).
    """

    arch = "mambazero"
    config_cls = MambaZeroConfig


# ---------------------------------------------------------------------------- conversion
def to_hf_state_dict(sd: dict[str, Tensor], flavor: str = "hf") -> dict[str, Tensor]:
    """Our state dict -> HF ``Mamba2ForCausalLM`` (``flavor="hf"``) or mamba-ssm's
    ``MambaLMHeadModel`` (``"mamba_ssm"``) names. Mixer parameters keep their names."""
    check(flavor in ("hf", "mamba_ssm"), f"flavor must be hf or mamba_ssm, got {flavor!r}")
    emb = "backbone.embeddings.weight" if flavor == "hf" else "backbone.embedding.weight"
    out = {}
    for k, v in sd.items():
        if k == "embed.weight":
            out[emb] = v
        elif k.startswith("blocks."):
            out["backbone.layers." + k[len("blocks."):]] = v
        elif k.startswith("ln_final."):
            out["backbone.norm_f." + k[len("ln_final."):]] = v
        elif k.startswith("unembed."):
            out["lm_head." + k[len("unembed."):]] = v
        else:
            out[k] = v
    return out


def from_hf_state_dict(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """HF / mamba-ssm names -> ours (inverse of :func:`to_hf_state_dict`)."""
    out = {}
    for k, v in sd.items():
        if k in ("backbone.embeddings.weight", "backbone.embedding.weight"):
            out["embed.weight"] = v
        elif k.startswith("backbone.layers."):
            out["blocks." + k[len("backbone.layers."):]] = v
        elif k.startswith("backbone.norm_f."):
            out["ln_final." + k[len("backbone.norm_f."):]] = v
        elif k.startswith("lm_head."):
            out["unembed." + k[len("lm_head."):]] = v
        else:
            out[k] = v
    return out
