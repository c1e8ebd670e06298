"""Hooked Mamba (S6, Gu & Dao 2023) language model — the copy paper's GSSM (Jelassi et al.,
"Repeat After Me", §3, App. A.2: 24 layers, hidden 1024, state size S ∈ {16..256}, best 32).

The mixer follows mamba-ssm's ``Mamba`` / ``selective_scan_ref`` (and HF ``MambaMixer``):

    in_proj:  u_t -> (x_t, z_t)
    conv:     x_t <- act(conv1d(x_{t−w+1..t}))           depthwise causal, window w = d_conv
    x_proj:   x_t -> (δ_t, b_t, c_t)                      δ_t of width dt_rank
    Δ_t = softplus(dt_proj(δ_t))                          one Δ per channel
    h_t = exp(Δ_t ⊗ A) ⊙ h_{t−1} + (Δ_t ⊙ x_t) ⊗ b_t     per channel: a row of d_state
    y_t = h_t c_t + D ⊙ x_t,   o_t = out_proj(y_t ⊙ act(z_t))

Glossary (code name -> symbol):
    d_model, expand      d and E of the Mamba paper; d_inner = E·d channels
    d_state              N (the copy paper's "state size S"); the state is [d_inner, N]
    dt_rank              rank R of the Δ projection (0 -> ⌈d_model / 16⌉, mamba-ssm's "auto")
    A_log                [d_inner, N], A = −exp(A_log) (S4D-real init A_{dn} = −(n + 1))
    D                    [d_inner] skip term
    x_proj, dt_proj      the selective projections s_B, s_C, s_Δ of the Mamba paper (Alg. 2)

Hooks of ``blocks.{i}.mixer`` (shapes): hook_in_proj [batch, pos, 2·d_inner]; hook_conv
[batch, pos, d_inner] (conv output before the activation); hook_x [batch, pos, d_inner];
hook_B, hook_C [batch, pos, d_state]; hook_ssm_dt Δ_t [batch, pos, d_inner]; hook_decay
a_t = exp(Δ_t·A) [batch, pos, d_inner, d_state]; hook_ssm_write Δ_t·x_t⊗b_t and hook_ssm_state
h_t [batch, pos, heads = d_inner, d_head = 1, d_state] — DESIGN.md's state layout, reading each
channel as a head of width one (it has its own Δ and row of A), so state analyses written for
Mamba-2 run unchanged; hook_y [batch, pos, d_inner] (h_t c_t + D·x_t); hook_gate act(z_t)
[batch, pos, d_inner]; hook_ssm_out [batch, pos, d_model]. As in Mamba-2, patching
hook_ssm_state changes y at the patched positions only; patch hook_decay / hook_ssm_write to
change what the recurrence carries.

Paths (same numbers; tests compare outputs and gradients in float64):
    plain   a loop over positions — the reference, and the default on CPU: measured 4-8x
            faster there than the parallel scan (bench/bench_ssm.py), whose log2(T) passes
            over the whole [batch, pos, d_inner, d_state] tensor cost more memory traffic
            than T small steps;
    scan    a log-depth (Hillis–Steele) parallel scan of the same linear recurrence (few,
            large operations: the default on CUDA without mamba-ssm);
    kernel  mamba-ssm's ``selective_scan_fn`` on CUDA, imported lazily, taken only when no
            hook is attached to hook_decay, hook_ssm_write or hook_ssm_state.
The plain and scan paths materialise every h_t, so every hook fires on them.

Parameter names equal mamba-ssm / HF ``MambaForCausalLM`` inside the mixer; the LM wrapper
(embedding, pre-norm blocks, ln_final, unembed) is models.mamba2's, and
:func:`models.mamba2.to_hf_state_dict` / ``from_hf_state_dict`` rename its parameters.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from models.mamba2 import ACTIVATIONS, SSMLanguageModel, SSMLMConfig, activation, has_hooks
from tasks.base import check


@dataclass(frozen=True)
class MambaConfig(SSMLMConfig):
    vocab_size: int = 30
    d_model: int = 64
    n_layers: int = 2
    expand: int = 2
    d_state: int = 16  # N; the copy paper sweeps 16..256 and keeps 32
    d_conv: int = 4
    dt_rank: int = 0  # 0: ⌈d_model / 16⌉
    conv: bool = True
    conv_bias: bool = True
    activation: str = "silu"
    gated: bool = True
    use_D: bool = True
    proj_bias: bool = False
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    dt_scale: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        for name in ("expand", "d_state", "d_conv"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        check(self.dt_rank >= 0, f"dt_rank must be >= 0, got {self.dt_rank}")
        check(self.activation in ACTIVATIONS,
              f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        check(0 < self.dt_min <= self.dt_max, "need 0 < dt_min <= dt_max")
        check(self.scan in ("auto", "plain", "scan", "kernel"),
              f"scan must be auto, plain, scan or kernel for mamba, got {self.scan!r}")

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def dt_rank_(self) -> int:
        return self.dt_rank or math.ceil(self.d_model / 16)


def linear_scan_plain(a: Tensor, w: Tensor) -> Tensor:
    """h_t = a_t·h_{t−1} + w_t (h_0 = 0) along dim 1, by a loop (the reference)."""
    h = torch.zeros_like(w[:, 0])
    out = []
    # unbind, not a[:, t]: the backward of each indexing op would write a zero tensor of the
    # full [batch, pos, ...] size (quadratic in the length); unbind's backward is one stack
    for a_t, w_t in zip(a.unbind(1), w.unbind(1), strict=True):
        h = a_t * h + w_t
        out.append(h)
    return torch.stack(out, dim=1)


def linear_scan_parallel(a: Tensor, w: Tensor) -> Tensor:
    """The same recurrence by a Hillis–Steele scan: log2(T) steps of whole-tensor operations.

    Each step composes every affine map h -> a_t h + w_t with the one ``off`` steps earlier,
    (a, w)_t ∘ (a, w)_{t−off} = (a_t a_{t−off}, a_t w_{t−off} + w_t), so after the step with
    offset 2^j position t holds the composition of the last 2^(j+1) maps.
    """
    T = w.shape[1]
    off = 1
    while off < T:
        w = torch.cat([w[:, :off], w[:, off:] + a[:, off:] * w[:, :-off]], dim=1)
        if 2 * off < T:  # the last step's a is never read again
            a = torch.cat([a[:, :off], a[:, off:] * a[:, :-off]], dim=1)
        off *= 2
    return w


@functools.lru_cache(maxsize=1)
def mamba_ssm_selective_scan():
    """mamba-ssm's ``selective_scan_fn`` or None (imported lazily, only on demand)."""
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except Exception:  # noqa: BLE001 - not installed, or a broken CUDA build
        return None
    return selective_scan_fn


class MambaMixer(nn.Module):
    def __init__(self, cfg: MambaConfig, layer: int = 0):
        super().__init__()
        self.cfg = cfg
        self.scan = cfg.scan
        D, N, R = cfg.d_inner, cfg.d_state, cfg.dt_rank_
        self.in_proj = nn.Linear(cfg.d_model, (2 if cfg.gated else 1) * D, bias=cfg.proj_bias)
        if cfg.conv:
            self.conv1d = nn.Conv1d(D, D, cfg.d_conv, groups=D, padding=cfg.d_conv - 1,
                                    bias=cfg.conv_bias)
        self.x_proj = nn.Linear(D, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, D, bias=True)
        self.A_log = nn.Parameter(torch.empty(D, N))
        if cfg.use_D:
            self.D = nn.Parameter(torch.ones(D))
        self.out_proj = nn.Linear(D, cfg.d_model, bias=cfg.proj_bias)
        self.act = activation(cfg.activation)

        self.hook_in_proj = HookPoint()  # [batch, pos, 2·d_inner]
        self.hook_conv = HookPoint()  # [batch, pos, d_inner] before act
        self.hook_x = HookPoint()  # [batch, pos, d_inner]
        self.hook_B = HookPoint()  # [batch, pos, d_state]
        self.hook_C = HookPoint()  # [batch, pos, d_state]
        self.hook_ssm_dt = HookPoint()  # [batch, pos, d_inner]  Δ_t
        self.hook_decay = HookPoint()  # [batch, pos, d_inner, d_state]  exp(Δ_t·A)
        self.hook_ssm_write = HookPoint()  # [batch, pos, d_inner, 1, d_state]  Δ_t·x_t⊗b_t
        self.hook_ssm_state = HookPoint()  # [batch, pos, d_inner, 1, d_state]  h_t
        self.hook_y = HookPoint()  # [batch, pos, d_inner]
        self.hook_gate = HookPoint()  # [batch, pos, d_inner]
        self.hook_ssm_out = HookPoint()  # [batch, pos, d_model]
        self.reset_ssm_parameters()

    @torch.no_grad()
    def reset_ssm_parameters(self):
        """mamba-ssm's initialisation of dt_proj, A_log and D."""
        cfg = self.cfg
        std = cfg.dt_rank_ ** -0.5 * cfg.dt_scale
        nn.init.uniform_(self.dt_proj.weight, -std, std)
        dt = torch.exp(torch.rand(cfg.d_inner) * (math.log(cfg.dt_max) - math.log(cfg.dt_min))
                       + math.log(cfg.dt_min)).clamp(min=cfg.dt_init_floor)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        A = torch.arange(1, cfg.d_state + 1, dtype=torch.float32)
        self.A_log.copy_(torch.log(einops.repeat(A, "n -> d n", d=cfg.d_inner)))
        if cfg.use_D:
            self.D.fill_(1.0)

    def _path(self, x: Tensor) -> str:
        needs_state = any(has_hooks(h) for h in (self.hook_decay, self.hook_ssm_write,
                                                 self.hook_ssm_state))
        if self.scan in ("plain", "scan"):
            return self.scan
        if not needs_state and x.is_cuda and (self.scan == "kernel" or self.cfg.use_kernels):
            if mamba_ssm_selective_scan() is not None:
                return "kernel"
        if self.scan == "kernel" and not needs_state:
            raise RuntimeError("scan='kernel' needs CUDA tensors and mamba-ssm installed")
        return "scan" if x.is_cuda else "plain"

    def forward(self, u: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        cfg = self.cfg
        T = u.shape[1]
        N, R = cfg.d_state, cfg.dt_rank_
        xz = self.hook_in_proj(self.in_proj(u))  # [batch, pos, (2·)d_inner]
        x, z = (xz.chunk(2, dim=-1) if cfg.gated else (xz, None))
        if cfg.conv:
            x = self.conv1d(x.transpose(1, 2))[..., :T].transpose(1, 2)
        x = self.hook_x(self.act(self.hook_conv(x)))  # [batch, pos, d_inner]
        dt, Bm, Cm = self.x_proj(x).split([R, N, N], dim=-1)
        Bm, Cm = self.hook_B(Bm), self.hook_C(Cm)  # [batch, pos, d_state]
        dt = self.hook_ssm_dt(F.softplus(self.dt_proj(dt)))  # [batch, pos, d_inner]
        A = -torch.exp(self.A_log)  # [d_inner, d_state]

        path = self._path(x)
        if path == "kernel":
            scan = mamba_ssm_selective_scan()
            y = scan(x.transpose(1, 2).contiguous(), dt.transpose(1, 2).contiguous(),
                     A.float().contiguous(), Bm.transpose(1, 2).contiguous(),
                     Cm.transpose(1, 2).contiguous()).transpose(1, 2).to(x.dtype)
        else:
            a = self.hook_decay(torch.exp(dt[..., None] * A))  # [batch, pos, d_inner, d_state]
            write = (dt * x)[..., None, None] * Bm[:, :, None, None, :]
            write = self.hook_ssm_write(write)  # [batch, pos, d_inner, 1, d_state]
            scan = linear_scan_plain if path == "plain" else linear_scan_parallel
            states = self.hook_ssm_state(scan(a[..., None, :], write))
            y = torch.einsum("bpden,bpn->bpd", states, Cm)  # contract the state with c_t
        if cfg.use_D:
            y = y + self.D * x
        y = self.hook_y(y)  # [batch, pos, d_inner]
        if cfg.gated:
            y = y * self.hook_gate(self.act(z))
        return self.hook_ssm_out(self.out_proj(y))


class MambaLM(SSMLanguageModel):
    """Mamba (S6) language model; same wrapper, trainer and checkpoints as Mamba-2."""

    arch = "mamba"
    config_cls = MambaConfig

    def make_mixer(self, cfg, layer):
        return MambaMixer(cfg, layer)

    def set_scan(self, scan: str) -> None:
        """Force every mixer's path: auto | plain | scan | kernel (does not change cfg)."""
        check(scan in ("auto", "plain", "scan", "kernel"), f"unknown scan {scan!r}")
        for block in self.blocks:
            block.mixer.scan = scan
