"""Effective attention of a selective-SSM mixer: the matrix M with y_q = Σ_{k≤q} M[q, k] x_k.

A selective SSM is a causal linear map from its inputs x_k to its scan outputs y_q, with
weights that depend on the input only through Δ, B and C. Unrolling the recurrence
H_q = a_q H_{q−1} + Δ_q x_q b_qᵀ, y_q = H_q c_q gives (Mamba-2's state-space duality, Dao & Gu
2024 §3–4; "The Hidden Attention of Mamba", Ali et al. 2024):

    Mamba-2 (SSD), per head h:  M_h[q, k] = L_h[q, k] · (c_q · b_k) · Δ_{k,h},
                                L_h[q, k] = ∏_{k<r≤q} a_{r,h} = exp(Σ_{k<r≤q} Δ_{r,h} A_h)
    Mamba (S6), per channel d:  M_d[q, k] = Σ_n c_{q,n} b_{k,n} Δ_{k,d} L_{d,n}[q, k],
                                L_{d,n}[q, k] = exp(Σ_{k<r≤q} Δ_{r,d} A_{d,n})

so M = L ∘ (C Bᵀ) with the Δ of the key folded in (TransformerLens'
``include_dt_scaling=True``, its "reconstruction form"): Σ_k M[q, k] x_k is exactly the scan.
Outside M, and so outside this probe: the skip D·x_q (it adds x_q to itself, it mixes nothing),
the gate act(z_q) and the norm and out_proj after it (position-wise maps of y_q).

What a "head" is. Mamba-2: a head (its d_head channels share a_t, Δ_t and, within a group, b_t
and c_t, so one M per head moves every channel of the head's x the same way). Mamba: a channel.
Each of Mamba's d_inner channels has its own Δ_t and its own row of A, so its M differs from
every other channel's; a group of channels has no single M with y = M x (an average of their M
would no longer reproduce the scan). Channels as heads of width one is also how the suite's
Mamba hooks shape the state, and how TransformerLens' Mamba bridge indexes its effective
attention.

M is not a distribution: c_q·b_k has either sign and rows do not sum to one.
:func:`effective_pattern` turns it into one — each key's share of the row's |M| — so the
attention-pattern probes of :mod:`probes.attention` (n-gram match, target, previous-token) run
on SSM heads unchanged. :func:`head_patterns` gives the per-layer patterns of any model with
heads (attention or effective attention), and :func:`ablated_heads` / :func:`head_means` ablate
SSM heads the way :mod:`probes.ablation` ablates attention heads: the head's scan output
Σ_k M[q, k] x_k (what its effective attention contributes to y) is replaced by zero or by its
mean; the D skip stays.

Cache hooks read (``blocks.{i}.mixer.``): hook_x, hook_B, hook_C, hook_ssm_dt; A comes from the
mixer's ``A_log``. Those hooks fire on the fast (chunked) path too, so a cache filtered to
:func:`hook_names` does not force the per-position state loop that hook_decay would.

HF Mamba-2 / Mamba booted by :mod:`models.hf` (TransformerBridge) get the same M from the
bridge's cache (:func:`bridge_effective_attention`: in_proj / conv1d outputs, or x_proj /
dt_proj outputs), equal to TransformerLens' ``compute_ssm_effective_attention(...,
include_dt_scaling=True)``; their heads are ablated through the bridge's eager-scan
hook_ssm_state (:func:`bridge_ablation_hooks`). HF transformers are read as attention heads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from jaxtyping import Float, Int
from torch import Tensor

from models.registry import HF_ARCHS, HF_HYBRID, HF_TRANSFORMER
from models.ssm.mamba import MambaMixer
from models.ssm.ssd import Mamba2Mixer
from probes import ablation
from probes.attention import attention_patterns
from probes.bridge_attention import (
    BRIDGE_KIND,
    BRIDGE_READS,
    bridge_ablation_hooks,
    bridge_effective_attention,
    bridge_head_means,
    bridge_s6_terms,
    bridge_ssd_terms,
    eager_scan,
)
from probes.effective_matrix import (
    apply_effective_attention,
    decay_matrix,
    effective_pattern,
    s6_effective_attention,
    ssd_effective_attention,
)
from probes.ssm_patching import SSM_ARCHS
from seqprobe.config import check
from seqprobe.errors import InputError

READS = ("hook_x", "hook_B", "hook_C", "hook_ssm_dt")  # what effective attention reads
KINDS = ("attention", "ssd", "s6")  # transformer heads, Mamba-2 heads, Mamba channels

__all__ = ["BRIDGE_READS", "KINDS", "KIND_OF", "READS", "SSM_ARCHS", "ablated_heads",
           "apply_effective_attention", "bridge_ablation_hooks", "bridge_effective_attention",
           "bridge_head_means", "bridge_s6_terms", "bridge_ssd_terms", "decay_matrix",
           "eager_scan", "effective_attention", "effective_pattern", "head_means",
           "head_patterns", "hook_names", "is_hf", "kind", "mixer_A", "mixer_x", "n_heads",
           "s6_effective_attention", "ssd_effective_attention", "ssm_ablation_hooks",
           "ssm_head_means"]


# ---------------------------------------------------------------------------- suite models
KIND_OF = {"transformer": "attention", "mamba2": "ssd", "mamba": "s6",
           HF_TRANSFORMER: "attention", **BRIDGE_KIND}


def kind(model) -> str:
    """``attention`` (a transformer), ``ssd`` (Mamba-2) or ``s6`` (Mamba), for suite models and
    HF models booted by models.hf; one error line for a model with neither attention nor
    effective attention."""
    arch = getattr(model, "arch", None)
    if arch in KIND_OF:
        return KIND_OF[arch]
    if arch == HF_HYBRID:
        raise InputError("a hybrid HF model (attention and SSM layers in one stack): its layers "
                        "have heads of two kinds, which this probe does not mix")
    raise InputError(f"a {arch!r} model has no attention heads (a transformer) and no effective "
                    f"attention (an SSM: {', '.join(SSM_ARCHS)}); nothing to read heads from")


def is_hf(model) -> bool:
    """A HuggingFace model booted by models.hf (a TransformerBridge), not a suite model."""
    return getattr(model, "arch", "") in HF_ARCHS


def n_heads(model) -> int:
    """Heads per layer: attention heads, Mamba-2 heads, or Mamba channels (d_inner)."""
    k = kind(model)
    if not is_hf(model):
        return model.cfg.d_inner if k == "s6" else model.cfg.n_heads
    if k == "attention":
        return model.cfg.n_heads
    oc = model.blocks[0].mixer.original_component
    return oc.num_heads if k == "ssd" else oc.intermediate_size


def hook_names(layers: Iterable[int]) -> set[str]:
    """The cache entries :func:`effective_attention` reads for ``layers``."""
    return {f"blocks.{i}.mixer.{h}" for i in layers for h in READS}


def mixer_A(mixer) -> Tensor:
    """A = −exp(A_log): [heads] (Mamba-2; zeros when the model has no decay) or [channels, n]."""
    if isinstance(mixer, Mamba2Mixer) and not mixer.cfg.decay:
        return mixer.dt_bias.new_zeros(mixer.cfg.n_heads)
    return -torch.exp(mixer.A_log)


def effective_attention(model, cache, layer: int) -> Float[Tensor, "batch heads q k"]:
    """M of ``blocks.{layer}.mixer`` from a ``run_with_cache`` cache of a suite Mamba-2 or
    Mamba (hooks of :data:`READS`). Computed in the cache's dtype, at least float32. ``layer``
    as a list index (−1: the last); one out of range is one line."""
    n = len(model.blocks)
    check(isinstance(layer, int) and -n <= layer < n,
          f"layer {layer!r} is out of range: this model has {n} layer{'s' if n != 1 else ''} "
          f"(0..{n - 1})")
    layer = layer % n
    mixer = model.blocks[layer].mixer
    pre = f"blocks.{layer}.mixer."
    missing = [h for h in READS if pre + h not in cache]
    check(not missing, f"effective attention of layer {layer} needs {', '.join(missing)} in "
          f"the cache (run_with_cache with names_filter=hook_names(...))")
    dt, B, C = (cache[pre + h] for h in ("hook_ssm_dt", "hook_B", "hook_C"))
    dtype = torch.promote_types(dt.dtype, torch.float32)
    dt, B, C = dt.to(dtype), B.to(dtype), C.to(dtype)
    A = mixer_A(mixer).detach().to(dtype)
    if isinstance(mixer, Mamba2Mixer):
        return ssd_effective_attention(dt, A, B, C)
    if isinstance(mixer, MambaMixer):
        return s6_effective_attention(dt, A, B, C)
    raise InputError(f"layer {layer}'s mixer ({type(mixer).__name__}) has no effective attention")


def mixer_x(model, cache, layer: int) -> Float[Tensor, "batch pos heads d_head"]:
    """The mixer's x from the cache as [batch, pos, heads, d_head] (Mamba: d_head = 1)."""
    x = cache[f"blocks.{layer}.mixer.hook_x"]
    return x if x.dim() == 4 else x[..., None]


@torch.no_grad()
def head_patterns(model, tokens: Int[Tensor, "batch pos"]) -> list[Tensor]:
    """Per layer, ``[batch, head, q, k]`` patterns of ``model``'s heads on ``tokens``: the
    attention pattern (hook_pattern) of a transformer, :func:`effective_pattern` of the
    effective attention of a Mamba-2 / Mamba (suite or HF). Float32, on the CPU."""
    k = kind(model)
    if k == "attention":
        return attention_patterns(model, tokens)
    Lh = model.cfg.n_layers
    if is_hf(model):
        names = {f"blocks.{i}.mixer.{h}" for i in range(Lh) for h in BRIDGE_READS[k]}
        with eager_scan(model):
            _, cache = model.run_with_cache(tokens.to(model.device),
                                            names_filter=lambda n: n in names)
        return [effective_pattern(bridge_effective_attention(model, cache, i)).float().cpu()
                for i in range(Lh)]
    names = hook_names(range(Lh))
    _, cache = model.run_with_cache(tokens.to(model.device), names_filter=lambda n: n in names)
    return [effective_pattern(effective_attention(model, cache, i)).float().cpu()
            for i in range(Lh)]


# ---------------------------------------------------------------------------- ablation
def _check_heads(model, heads: list[tuple[int, int]]) -> None:
    H = n_heads(model)
    for layer, head in heads:
        check(0 <= layer < model.cfg.n_layers and 0 <= head < H,
              f"no head ({layer}, {head}) in a model with {model.cfg.n_layers} layers × {H} heads")


def _skip(mixer, x: Tensor) -> Tensor:
    """D·x per head ([batch, pos, heads, d_head]); zero without D."""
    if not mixer.cfg.use_D:
        return torch.zeros_like(x)
    return mixer.D.to(x.dtype)[:, None] * x


@torch.no_grad()
def ssm_head_means(model, tokens: Tensor, layers: Iterable[int] | None = None
                   ) -> dict[int, Tensor]:
    """``{layer: [heads, d_head]}``: each SSM head's scan output Σ_k M[q, k] x_k (= y − D·x),
    averaged over the batch and positions."""
    layers = list(range(model.cfg.n_layers)) if layers is None else list(layers)
    names = {f"blocks.{i}.mixer.{h}" for i in layers for h in ("hook_x", "hook_y")}
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    out = {}
    for i in layers:
        x = mixer_x(model, cache, i)
        y = cache[f"blocks.{i}.mixer.hook_y"].reshape(x.shape)
        out[i] = (y - _skip(model.blocks[i].mixer, x)).mean(dim=(0, 1))
    return out


def ssm_ablation_hooks(model, heads: Iterable[tuple[int, int]], mode: str = "mean",
                       means: dict[int, Tensor] | None = None) -> list[tuple[str, Callable]]:
    """Forward hooks that replace the chosen SSM heads' scan output by zero or its mean: a
    hook on hook_x keeps x, the one on hook_y (which fires later in the same forward) sets
    y_h = D_h x_h (+ mean_h)."""
    by_layer = ablation.heads_by_layer(heads, mode, means)
    hooks = []
    for layer, hs in sorted(by_layer.items()):
        idx = torch.tensor(sorted(set(hs)))
        mixer = model.blocks[layer].mixer
        seen: dict[str, Tensor] = {}

        def keep_x(x, hook, seen=seen):
            seen["x"] = x
            return x

        def set_y(y, hook, idx=idx, layer=layer, mixer=mixer, seen=seen):
            x = seen.pop("x")
            x4 = x if x.dim() == 4 else x[..., None]  # [batch, pos, heads, d_head]
            y4 = y.reshape(x4.shape).clone()
            new = _skip(mixer, x4)[:, :, idx]
            if mode == "mean":
                new = new + means[layer][idx].to(y.dtype)
            y4[:, :, idx] = new
            return y4.reshape(y.shape)

        hooks += [(f"blocks.{layer}.mixer.hook_x", keep_x), (f"blocks.{layer}.mixer.hook_y", set_y)]
    return hooks


@torch.no_grad()
def head_means(model, tokens: Tensor) -> dict[int, Tensor]:
    """Mean head outputs for mean-ablation: z of attention heads (:mod:`probes.ablation`), the
    scan output of SSM heads (:func:`ssm_head_means`, :func:`bridge_head_means`)."""
    if kind(model) == "attention":
        return ablation.head_means(model, tokens)
    if is_hf(model):
        return bridge_head_means(model, tokens)
    return ssm_head_means(model, tokens)


@contextmanager
def ablated_heads(model, heads: Iterable[tuple[int, int]], mode: str = "mean",
                  means: dict[int, Tensor] | None = None) -> Iterator[None]:
    """Inside the ``with`` block ``model`` runs with ``heads`` ablated, attention heads as in
    :func:`probes.ablation.ablated_heads`, SSM heads as in :func:`ssm_ablation_hooks`."""
    heads = list(heads)
    if kind(model) == "attention":
        with ablation.ablated_heads(model, heads, mode, means):
            yield
        return
    _check_heads(model, heads)
    if is_hf(model):
        with eager_scan(model), model.hooks(fwd_hooks=bridge_ablation_hooks(
                model, heads, mode, means)):
            yield
        return
    with model.hooks(fwd_hooks=ssm_ablation_hooks(model, heads, mode, means)):
        yield
