"""Layers the suite's models share: norms, MLPs, activations and the hook test.

Parameter names are part of the checkpoint format, so each layer keeps the names of the model
family it came from: ``LayerNorm`` (``w``, ``b``) and ``MLP`` (``W_in``, ``b_in``, ``W_out``,
``b_out``) follow TransformerLens; ``RMSNorm``, ``GatedRMSNorm`` (``weight``) and ``GatedMLP``
(``fc1``, ``fc2``) follow HF / mamba-ssm, so Mamba state dicts convert by renaming alone.
"""

from __future__ import annotations

from collections.abc import Callable

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "relu": F.relu,
    "gelu": F.gelu,
    "identity": lambda v: v,
}


def activation(name: str) -> Callable[[Tensor], Tensor]:
    """The elementwise nonlinearity called ``name`` (a key of :data:`ACTIVATIONS`)."""
    return ACTIVATIONS[name]


def has_hooks(hp: HookPoint) -> bool:
    """True when a user hook (forward or backward) is attached to ``hp``, or a tracer that
    replaced its ``forward`` is running (:func:`traced`).

    Fast paths ask this before skipping an activation: a hooked activation must be computed.
    """
    return (bool(hp._forward_hooks) or bool(hp._backward_hooks) or bool(hp._backward_pre_hooks)
            or ("forward" in hp.__dict__ and traced(hp)))


def traced(hp: HookPoint) -> bool:
    """True while a tracer reads ``hp`` through a ``forward`` of its own instead of a torch hook.

    nnsight (0.8) installs a controller as the module's ``forward`` and leaves the hook lists
    empty, so without this a fast path would skip the activation the trace waits for (nnsight's
    OutOfOrderError). Its controller says whether a trace is running through the module now
    (``state.active()``); then the activation is computed, otherwise the fast path stays. Any
    other replaced ``forward`` is taken to read the activation."""
    active = getattr(getattr(hp.__dict__["forward"], "state", None), "active", None)
    return active is None or active()[0] is not None


def has_backward_hooks(hp: HookPoint) -> bool:
    """True when a backward hook is attached to ``hp`` (its activation must be in the graph)."""
    return bool(hp._backward_hooks) or bool(hp._backward_pre_hooks)


# ---------------------------------------------------------------------------- norms
class LayerNorm(nn.Module):
    """LayerNorm with TransformerLens' hooks; the identity when ``enabled`` is False (hand-set
    constructions switch normalisation off but keep the parameters, so checkpoints match)."""

    def __init__(self, d: int, eps: float, enabled: bool = True):
        super().__init__()
        self.eps = eps
        self.enabled = enabled
        self.w = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        # TransformerLens' meaning: hook_scale the denominator, hook_normalized (x − mean)/scale
        # *before* the affine w, b; hook_out the norm's output (the TL bridge's name for it)
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d]
        self.hook_out = HookPoint()  # [batch, pos, d]

    def forward(self, x: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d"]:
        if not self.enabled:
            return self.hook_out(self.hook_normalized(x))
        if not (has_hooks(self.hook_scale) or has_hooks(self.hook_normalized)):
            # fused, same maths
            return self.hook_out(F.layer_norm(x, x.shape[-1:], self.w, self.b, self.eps))
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_out(self.hook_normalized(x / scale) * self.w + self.b)


class RMSNorm(nn.Module):
    """RMSNorm as HF Mamba2RMSNorm (parameter ``weight``); the identity (no parameter) when
    disabled, as the Markov paper's ablations remove the norm altogether."""

    def __init__(self, d: int, eps: float, enabled: bool = True):
        super().__init__()
        self.eps = eps
        self.enabled = enabled
        if enabled:
            self.weight = nn.Parameter(torch.ones(d))
        # TransformerLens' meaning, as LayerNorm: hook_normalized before the weight, hook_out after
        self.hook_scale = HookPoint()  # [batch, pos, 1], sqrt(mean(x²) + eps)
        self.hook_normalized = HookPoint()  # [batch, pos, d]
        self.hook_out = HookPoint()  # [batch, pos, d]

    def forward(self, x: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d"]:
        if not self.enabled:
            return self.hook_out(self.hook_normalized(x))
        ms = x.pow(2).mean(-1, keepdim=True) + self.eps  # [batch, pos, 1]
        inv = torch.rsqrt(ms)
        if has_hooks(self.hook_scale):
            scale = ms.sqrt()
            hooked = self.hook_scale(scale)
            # an edit (a reading hook returns None: the same tensor), or a backward hook that
            # needs the scale in the graph
            if hooked is not scale or has_backward_hooks(self.hook_scale):
                inv = 1.0 / hooked
        return self.hook_out(self.weight * self.hook_normalized(x * inv))


class GatedRMSNorm(nn.Module):
    """mamba-ssm's RMSNormGated with norm_before_gate=False: RMSNorm(y ⊙ gate) per group."""

    def __init__(self, d: int, n_groups: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
        self.n_groups = n_groups

    def forward(self, y: Float[Tensor, "batch pos d"], gate: Float[Tensor, "batch pos d"] | None
                ) -> Float[Tensor, "batch pos d"]:
        if gate is not None:
            y = y * gate
        yg = einops.rearrange(y, "... (g c) -> ... g c", g=self.n_groups)
        yg = yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * einops.rearrange(yg, "... g c -> ... (g c)")


# ---------------------------------------------------------------------------- MLPs
class MLP(nn.Module):
    """``act(x W_in + b_in) W_out + b_out`` (TransformerLens names). The weights are left
    uninitialised: each model draws them in its own scheme (and RNG order)."""

    def __init__(self, d_model: int, d_mlp: int, act: str):
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(d_model, d_mlp))
        self.b_in = nn.Parameter(torch.zeros(d_mlp))
        self.W_out = nn.Parameter(torch.empty(d_mlp, d_model))
        self.b_out = nn.Parameter(torch.zeros(d_model))
        self.act = activation(act)
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp]
        self.hook_post = HookPoint()  # [batch, pos, d_mlp]

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        pre = self.hook_pre(x @ self.W_in + self.b_in)  # [batch, pos, d_mlp]
        return self.hook_post(self.act(pre)) @ self.W_out + self.b_out


class GatedMLP(nn.Module):
    """v = fc2(fc1_a(u) ⊙ act(fc1_b(u))) — mamba-ssm's GatedMLP (fc1 holds both halves);
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
        return self.fc2(self.hook_post(value * self.act(gate)))  # [batch, pos, d_model]


# ---------------------------------------------------------------------------- the Markov paper's
# The authors' published Mamba-2 runs (Bondaschi et al., code Bond1995/Markov-Mamba, run with
# --layernorm) normalise with torch's LayerNorm(bias=False) and, without --gate, use a plain MLP.
class BiasFreeLayerNorm(nn.Module):
    """``(x − mean) / sqrt(var + eps) · weight`` over the last dim, no bias (torch
    ``nn.LayerNorm(d, bias=False)``; parameter ``weight`` as there)."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        # TransformerLens' meaning, as LayerNorm: hook_normalized before the weight, hook_out after
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d]
        self.hook_out = HookPoint()  # [batch, pos, d]

    def forward(self, x: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d"]:
        out = F.layer_norm(x, x.shape[-1:], self.weight, None, self.eps)  # fused
        if has_hooks(self.hook_scale) or has_hooks(self.hook_normalized):
            # the unfused parts for the hooks; the fused output stands unless a hook edits one
            xc = x - x.mean(-1, keepdim=True)
            scale = xc.pow(2).mean(-1, keepdim=True).add(self.eps).sqrt()
            hooked_scale = self.hook_scale(scale)
            normalized = xc / hooked_scale
            hooked = self.hook_normalized(normalized)
            if (hooked is not normalized or hooked_scale is not scale
                    or has_backward_hooks(self.hook_scale)
                    or has_backward_hooks(self.hook_normalized)):
                out = hooked * self.weight
        return self.hook_out(out)


class PlainMLP(nn.Module):
    """v = fc2(act(fc1(u))), no biases: the authors' ``MLP`` (Markov-Mamba, without --gate);
    fc1 is [d_mlp, d_model] as Table 6's mlp.fc1 (4d × d)."""

    def __init__(self, d_model: int, d_mlp: int, act: str):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_mlp, bias=False)
        self.fc2 = nn.Linear(d_mlp, d_model, bias=False)
        self.act = activation(act)
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp]
        self.hook_post = HookPoint()  # [batch, pos, d_mlp]

    def forward(self, u: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        return self.fc2(self.hook_post(self.act(self.hook_pre(self.fc1(u)))))
