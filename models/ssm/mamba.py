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
[batch, pos, d_inner]; hook_ssm_out [batch, pos, d_model]. As in Mamba-2, an edit through
hook_ssm_state is carried forward by the recurrence (:func:`~models.ssm.recurrent.carried_states`:
y changes at the edited position and after); hook_decay / hook_ssm_write edit its inputs.

Paths (same numbers; tests compare outputs and gradients in float64):
    plain   :func:`~models.ssm.recurrent.linear_scan_plain`, a loop over positions — the
            reference, and the default on CPU: the parallel scan's log2(T) passes over the
            whole [batch, pos, d_inner, d_state] tensor cost more memory traffic there than T
            small steps (timings in bench/bench_ssm.py's results);
    scan    :func:`~models.ssm.recurrent.linear_scan_parallel`, a log-depth (Hillis–Steele) scan
            of the same linear recurrence (few, large operations: the default on CUDA
            without mamba-ssm);
    chunked :func:`~models.ssm.recurrent.selective_scan_chunked`, chunks of ``chunk_size``
            positions whose a_t, writes and h_t are recomputed in the backward pass from the
            state at each chunk boundary: training memory that does not grow with
            d_state × pos (what lets the paper-size model train without mamba-ssm). ``auto``
            takes it when gradients are needed and one [batch, pos, d_inner, d_state] tensor
            has at least ``MambaConfig.CHUNKED_MIN_ELEMENTS`` elements;
    kernel  mamba-ssm's ``selective_scan_fn`` on CUDA, imported lazily.
The chunked and kernel paths are taken only when no hook is attached to hook_decay,
hook_ssm_write or hook_ssm_state; the plain and scan paths materialise every h_t, so every hook
fires on them.

Parameter names equal mamba-ssm / HF ``MambaForCausalLM`` inside the mixer; the LM wrapper
(embedding, pre-norm blocks, ln_final, unembed) is :mod:`models.ssm.recurrent`'s, and
:func:`models.ssm.recurrent.to_hf_state_dict` / ``from_hf_state_dict`` rename its parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from models.layers import activation
from models.ssm.recurrent import (
    SSMLanguageModel,
    SSMLMConfig,
    SSMMixer,
    carried_states,
    causal_conv_from,
    init_dt_bias,
    linear_scan_parallel,
    linear_scan_plain,
    optional_kernel,
    selective_scan_chunked,
)
from seqprobe.flags import MAX_DIM, MAX_LENGTH, MAX_SCALE, bound


@dataclass(frozen=True)
class MambaConfig(SSMLMConfig):
    """Mamba LM config: the shared SSM fields (:class:`~models.ssm.recurrent.SSMLMConfig`) plus
    the rank and scale of the Δ projection."""

    SCANS: ClassVar[tuple[str, ...]] = ("auto", "plain", "scan", "chunked", "kernel")
    # scan="auto" trains through the chunked path once one [batch, pos, d_inner, d_state]
    # tensor of a layer has this many elements (64 MiB in fp32): the plain and log-depth paths
    # keep several such tensors per layer for the backward pass, which stops mattering only
    # where they are small beside the rest of a step; below it they are faster (no
    # recomputation). Quick-level models stay below it, the paper copy Mamba (d_inner 2048,
    # N 32, 420 positions) is above it even at batch 1.
    CHUNKED_MIN_ELEMENTS: ClassVar[int] = 2**24
    vocab_size: int = 30
    d_model: int = 64
    n_layers: int = 2
    dt_rank: int = field(  # 0: ⌈d_model / 16⌉
        default=0, metadata=bound(0, MAX_DIM, "dt projection rank; 0: d_model / 16"))
    dt_scale: float = field(
        default=1.0, metadata=bound(0.0, MAX_SCALE, "the dt init scale; papers: 1"))
    # positions per chunk of the chunked scan (memory only; any value gives the same numbers):
    # the backward pass holds one chunk's [batch, chunk, d_inner, d_state] tensors, the
    # forward one [batch, d_inner, d_state] state per chunk
    chunk_size: int = field(
        default=64, metadata=bound(1, MAX_LENGTH, "tokens per scan chunk; the suite: 64"))

    @property
    def dt_rank_(self) -> int:
        return self.dt_rank or math.ceil(self.d_model / 16)

    @property
    def n_heads(self) -> int:
        """Heads as the state hooks lay them out (each channel a head of width one, with its own
        Δ and row of A); TransformerLens reads ``cfg.n_heads`` in every patching sweep."""
        return self.d_inner

    @property
    def d_head(self) -> int:
        return 1


def mamba_ssm_selective_scan():
    """mamba-ssm's ``selective_scan_fn`` or None (imported lazily, only on demand)."""
    return optional_kernel("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn")


class MambaMixer(SSMMixer):
    """The S6 mixer of the module docstring, hooks as in :class:`~models.ssm.recurrent.SSMMixer`
    (a channel is a head of width one)."""

    @classmethod
    def axes(cls, cfg: MambaConfig, batch: int, pos: int) -> dict[str, tuple[int, ...]]:
        B, T, D, N = batch, pos, cfg.d_inner, cfg.d_state  # B, C shared by every channel
        return {"x": (B, T, D), "bc": (B, T, N), "dt": (B, T, D), "decay": (B, T, D, N),
                "state": (B, T, D, 1, N), "proj": (2 if cfg.gated else 1) * D, "conv": D}

    def __init__(self, cfg: MambaConfig, layer: int = 0):
        super().__init__(cfg)
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
        self.reset_ssm_parameters()

    @torch.no_grad()
    def reset_ssm_parameters(self):
        """mamba-ssm's initialisation of dt_proj, A_log and D."""
        cfg = self.cfg
        std = cfg.dt_rank_ ** -0.5 * cfg.dt_scale
        nn.init.uniform_(self.dt_proj.weight, -std, std)
        self.dt_proj.bias.copy_(init_dt_bias(cfg.d_inner, cfg))
        A = torch.arange(1, cfg.d_state + 1, dtype=torch.float32)
        self.A_log.copy_(torch.log(einops.repeat(A, "n -> d n", d=cfg.d_inner)))
        if cfg.use_D:
            self.D.fill_(1.0)

    def _path(self, x: Tensor) -> str:
        """The path this forward takes (module docstring). ``auto``: mamba-ssm's kernel on CUDA
        where installed; else the chunked path when gradients are needed and the per-position
        states would be large (:attr:`MambaConfig.CHUNKED_MIN_ELEMENTS`); else the log-depth
        scan on CUDA, the loop elsewhere. A hook on a_t, the writes or h_t takes a path that
        materialises them (plain / scan), whatever was asked for."""
        if self.start_state is not None:  # only the loop starts from a given state
            return "plain"
        needs_state = self.state_hooked()
        if self.scan in ("plain", "scan"):
            return self.scan
        if not needs_state and x.is_cuda and (self.scan == "kernel" or self.cfg.use_kernels):
            if mamba_ssm_selective_scan() is not None:
                return "kernel"
        if self.scan == "kernel" and not needs_state:
            raise RuntimeError("scan='kernel' needs CUDA tensors and mamba-ssm installed")
        if not needs_state and (self.scan == "chunked" or (
                self.scan == "auto" and torch.is_grad_enabled()
                and x.shape[0] * x.shape[1] * x.shape[2] * self.cfg.d_state
                >= self.cfg.CHUNKED_MIN_ELEMENTS)):
            return "chunked"
        return "scan" if x.is_cuda else "plain"

    def forward(self, u: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        cfg = self.cfg
        N, R = cfg.d_state, cfg.dt_rank_
        xz = self.hook_in_proj(self.in_proj(u))  # [batch, pos, (2·)d_inner]
        x, z = (xz.chunk(2, dim=-1) if cfg.gated else (xz, None))
        start = self.start_state  # None: h_0 = 0 and a zero-padded conv window
        if cfg.conv:
            x = causal_conv_from(self.conv1d, x, None if start is None else start.conv)
        x = self.hook_x(self.act(self.hook_conv(x)))  # [batch, pos, d_inner]
        dt, Bm, Cm = self.x_proj(x).split([R, N, N], dim=-1)
        Bm, Cm = self.hook_B(Bm), self.hook_C(Cm)  # [batch, pos, d_state]
        dt = self.hook_ssm_dt(F.softplus(self.dt_proj(dt)))  # [batch, pos, d_inner]
        A = -torch.exp(self.A_log)  # [d_inner, d_state]

        path = self.last_path = self._path(x)  # last_path: what a dry run reports
        if path == "kernel":
            scan = mamba_ssm_selective_scan()
            y = scan(x.transpose(1, 2).contiguous(), dt.transpose(1, 2).contiguous(),
                     A.float().contiguous(), Bm.transpose(1, 2).contiguous(),
                     Cm.transpose(1, 2).contiguous()).transpose(1, 2).to(x.dtype)
        elif path == "chunked":  # hook_decay / hook_ssm_write / hook_ssm_state do not fire
            y = selective_scan_chunked(x, dt, A, Bm, Cm, cfg.chunk_size, parallel=x.is_cuda)
        else:
            a = self.hook_decay(torch.exp(dt[..., None] * A))  # [batch, pos, d_inner, d_state]
            write = (dt * x)[..., None, None] * Bm[:, :, None, None, :]
            write = self.hook_ssm_write(write)  # [batch, pos, d_inner, 1, d_state]
            scan = linear_scan_plain if path == "plain" else linear_scan_parallel
            h0 = None if start is None else start.h  # [batch, d_inner, 1, d_state]
            states = carried_states(self.hook_ssm_state,
                                    scan(a[..., None, :], write) if h0 is None
                                    else linear_scan_plain(a[..., None, :], write, h0),
                                    a[..., None, :], write, h0)
            y = torch.einsum("bpden,bpn->bpd", states, Cm)  # contract the state with c_t
        if cfg.use_D:
            y = y + self.D * x
        y = self.hook_y(y)  # [batch, pos, d_inner]
        if cfg.gated:
            y = y * self.hook_gate(self.act(z))
        return self.hook_ssm_out(self.out_proj(y))


class MambaLM(SSMLanguageModel):
    """Mamba (S6) language model; same wrapper, trainer and checkpoints as Mamba-2.

    Paths (``scans``, :meth:`set_scan`): auto | plain | scan | chunked | kernel.
    """

    arch = "mamba"
    config_cls = MambaConfig
    mixer_cls = MambaMixer
    tiny_config = MappingProxyType(dict(vocab_size=7, d_model=8, n_layers=2, d_state=4,
                                        d_conv=3))
    scans = MambaConfig.SCANS
    fast_scans = ("scan", "chunked")
