"""Effective attention and head ablation of HuggingFace Mamba-2 / Mamba layers booted by
:mod:`models.hf` (TransformerLens' TransformerBridge), read from the bridge's cache.

HF's mixers fuse B, C and Δ into in_proj / conv1d (Mamba-2) or x_proj / dt_proj (Mamba)
outputs, so M is rebuilt from those (:func:`bridge_effective_attention`, equal to
TransformerLens' ``compute_ssm_effective_attention(..., include_dt_scaling=True)``); a head is
ablated through the eager scan's hook_ssm_state (:func:`bridge_ablation_hooks`). The
suite-model side and the dispatch over both: :mod:`probes.effective_attention`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from models.registry import HF_MAMBA, HF_MAMBA2
from probes import ablation
from probes.effective_matrix import s6_effective_attention, ssd_effective_attention
from seqprobe.config import check
from seqprobe.errors import InputError

BRIDGE_KIND = {HF_MAMBA2: "ssd", HF_MAMBA: "s6"}  # the HF SSMs with an effective attention


def kind(model) -> str:
    """``ssd`` (HF Mamba-2) or ``s6`` (HF Mamba)."""
    arch = getattr(model, "arch", None)
    if arch not in BRIDGE_KIND:
        raise InputError(f"a {arch!r} model is not an HF SSM booted by models.hf "
                        f"({', '.join(BRIDGE_KIND)})")
    return BRIDGE_KIND[arch]


# A bridge's cache entries the effective attention of each kind reads (HF's mixers fuse B, C
# and Δ into in_proj / conv1d (Mamba-2) or x_proj / dt_proj (Mamba) outputs)
BRIDGE_READS = {"ssd": ("in_proj.hook_out", "conv1d.hook_out"),
                "s6": ("x_proj.hook_out", "dt_proj.hook_out")}


@contextmanager
def eager_scan(model) -> Iterator[None]:
    """TransformerLens' eager scan on every SSM mixer of a bridge inside the block: HF's fused
    CPU path applies its conv functionally (conv1d.hook_out would not fire) and never
    materialises the state (hook_ssm_state, which :func:`bridge_ablation_hooks` edits)."""
    mixers = [b.mixer for b in model.blocks if hasattr(b.mixer, "eager_scan")]
    before = [m.eager_scan for m in mixers]
    for m in mixers:
        m.eager_scan = True
    try:
        yield
    finally:
        for m, b in zip(mixers, before, strict=True):
            m.eager_scan = b


def _weightless_rms(x: Tensor, eps: float) -> Tensor:
    """FalconMamba's parameter-free RMS norm of B, C (HF applies it after x_proj)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def bridge_s6_terms(mixer, cache, layer: int) -> dict[str, Tensor]:
    """``dt`` [batch, pos, channels], ``A`` [channels, n], ``B``, ``C`` [batch, pos, n] of an
    HF ``MambaMixer`` booted by TransformerBridge, from ``x_proj.hook_out`` (Δ's low-rank input,
    B, C) and ``dt_proj.hook_out`` (Δ before its softplus)."""
    oc = mixer.original_component
    pre = f"blocks.{layer}.mixer."
    for h in BRIDGE_READS["s6"]:
        check(pre + h in cache, f"{pre + h} is not in the cache")
    R, N = oc.time_step_rank, oc.ssm_state_size
    _, B, C = cache[pre + "x_proj.hook_out"].float().split([R, N, N], dim=-1)
    eps = getattr(oc, "rms_eps", None)
    if eps is not None:
        B, C = _weightless_rms(B, eps), _weightless_rms(C, eps)
    dt = F.softplus(cache[pre + "dt_proj.hook_out"].float())
    return {"dt": dt, "A": -torch.exp(oc.A_log.float()), "B": B, "C": C}


def bridge_effective_attention(model, cache, layer: int) -> Float[Tensor, "batch heads q k"]:
    """M of an HF Mamba-2 / Mamba layer from the bridge's cache (run with :func:`eager_scan`)."""
    mixer = model.blocks[layer].mixer
    if kind(model) == "ssd":
        t = bridge_ssd_terms(mixer, cache, layer)
        return ssd_effective_attention(t["dt"], t["A"], t["B"], t["C"])
    t = bridge_s6_terms(mixer, cache, layer)
    return s6_effective_attention(t["dt"], t["A"], t["B"], t["C"])


def _bridge_C(model, layer: int, cache_or_act: Tensor) -> Tensor:
    """c_t of an HF mixer per head, [batch, pos, heads, n], from conv1d.hook_out (Mamba-2,
    [batch, conv_dim, pos + w − 1] before the activation) or x_proj.hook_out (Mamba)."""
    oc = model.blocks[layer].mixer.original_component
    if kind(model) == "ssd":
        H, P, G, N = oc.num_heads, oc.head_dim, oc.n_groups, oc.ssm_state_size
        xBC = oc.act(cache_or_act.float())
        C = xBC[:, H * P + G * N :].transpose(1, 2)  # [batch, pos + w − 1, G·N]
        C = einops.rearrange(C, "b t (g n) -> b t g n", g=G)
        return einops.repeat(C, "b t g n -> b t (g r) n", r=H // G)
    R, N = oc.time_step_rank, oc.ssm_state_size
    C = cache_or_act.float()[..., R + N :]
    eps = getattr(oc, "rms_eps", None)
    if eps is not None:
        C = _weightless_rms(C, eps)
    return C[:, :, None, :]  # one c_t shared by every channel


def _c_hook(model, layer: int) -> str:
    return f"blocks.{layer}.mixer." + ("conv1d.hook_out" if kind(model) == "ssd"
                                       else "x_proj.hook_out")


def _state_per_head(model, S: Tensor) -> Tensor:
    """hook_ssm_state as [batch, pos, heads, d_head, n] (Mamba's is [batch, channels, pos, n])."""
    return S if kind(model) == "ssd" else einops.rearrange(S, "b c t n -> b t c 1 n")


def _state_back(model, S: Tensor) -> Tensor:
    return S if kind(model) == "ssd" else einops.rearrange(S, "b t c 1 n -> b c t n")


@torch.no_grad()
def bridge_head_means(model, tokens: Tensor) -> dict[int, Tensor]:
    """``{layer: [heads, d_head]}``: mean scan output C_t·H_t of each head of an HF SSM."""
    Lh = model.cfg.n_layers
    names = {f"blocks.{i}.mixer.hook_ssm_state" for i in range(Lh)}
    names |= {_c_hook(model, i) for i in range(Lh)}
    with eager_scan(model):
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    out = {}
    for i in range(Lh):
        S = _state_per_head(model, cache[f"blocks.{i}.mixer.hook_ssm_state"].float())
        C = _bridge_C(model, i, cache[_c_hook(model, i)])[:, : S.shape[1]]
        out[i] = torch.einsum("bthpn,bthn->bthp", S, C.expand(-1, -1, S.shape[2], -1)
                              ).mean(dim=(0, 1))
    return out


def bridge_ablation_hooks(model, heads: Iterable[tuple[int, int]], mode: str = "mean",
                          means: dict[int, Tensor] | None = None) -> list[tuple[str, Callable]]:
    """Ablation of HF SSM heads through the eager scan's hook_ssm_state, which feeds only the
    output at its own position (y_t = c_t·H_t + D·x_t): H_t of an ablated head becomes 0
    (``zero``), or m ⊗ c_t / ‖c_t‖² so that c_t·H_t is the head's mean scan output m
    (``mean``). The skip D·x_t stays, as on suite models."""
    by_layer = ablation.heads_by_layer(heads, mode, means)
    hooks = []
    for layer, hs in sorted(by_layer.items()):
        idx = torch.tensor(sorted(set(hs)))
        seen: dict[str, Tensor] = {}

        def keep_c(act, hook, seen=seen, layer=layer):
            seen["C"] = _bridge_C(model, layer, act)
            return act

        def set_state(S, hook, idx=idx, layer=layer, seen=seen):
            S4 = _state_per_head(model, S).clone()  # [batch, pos, heads, d_head, n]
            C = seen.pop("C")[:, : S4.shape[1]].expand(-1, -1, S4.shape[2], -1)[:, :, idx]
            if mode == "zero":
                S4[:, :, idx] = 0.0
            else:
                unit = C / C.pow(2).sum(-1, keepdim=True).clamp_min(torch.finfo(C.dtype).tiny)
                m = means[layer][idx].to(S4.dtype)  # [k, d_head]
                S4[:, :, idx] = m[None, None, :, :, None] * unit[:, :, :, None, :]
            return _state_back(model, S4)

        hooks += [(_c_hook(model, layer), keep_c),
                  (f"blocks.{layer}.mixer.hook_ssm_state", set_state)]
    return hooks


def bridge_ssd_terms(mixer, cache, layer: int) -> dict[str, Tensor]:
    """``dt``, ``A``, ``x``, ``B``, ``C`` of an HF ``Mamba2Mixer`` booted by TransformerLens'
    ``TransformerBridge`` (``mixer = bridge.blocks[layer].mixer``), read from the bridge's
    cache: ``in_proj.hook_out`` (Δ's pre-activation is its last n_heads columns) and
    ``conv1d.hook_out`` (channel-first, w − 1 steps too long; the activation comes after).

    HF's fused CPU path applies the conv functionally, so conv1d.hook_out fires only with the
    bridge's eager scan on (``mixer.eager_scan = True`` before ``run_with_cache``)."""
    oc = mixer.original_component
    pre = f"blocks.{layer}.mixer."
    for h in ("in_proj.hook_out", "conv1d.hook_out"):
        check(pre + h in cache, f"{pre + h} is not in the cache (set eager_scan on the bridge's "
              f"mixers before run_with_cache)")
    proj = cache[pre + "in_proj.hook_out"].float()  # [batch, pos, d_in_proj]
    Bsz, T = proj.shape[:2]
    H, P, G, N = oc.num_heads, oc.head_dim, oc.n_groups, oc.ssm_state_size
    lo, hi = oc.time_step_limit
    dt = F.softplus(proj[..., -H:] + oc.dt_bias.float()).clamp(float(lo), float(hi))
    xBC = oc.act(cache[pre + "conv1d.hook_out"].float()[..., :T]).transpose(1, 2)
    x, B, C = xBC.split([H * P, G * N, G * N], dim=-1)
    return {"dt": dt, "A": -torch.exp(oc.A_log.float()), "x": x.reshape(Bsz, T, H, P),
            "B": B.reshape(Bsz, T, G, N), "C": C.reshape(Bsz, T, G, N), "D": oc.D.float()}
