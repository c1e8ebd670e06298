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

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from models.hf import HF_HYBRID, HF_MAMBA, HF_MAMBA2, HF_TRANSFORMER
from models.mamba import MambaMixer
from models.registry import HF_ARCHS
from models.ssd import Mamba2Mixer
from probes import ablation
from probes.attention import attention_patterns
from tasks.base import TaskError, check

READS = ("hook_x", "hook_B", "hook_C", "hook_ssm_dt")  # what effective attention reads
SSM_ARCHS = ("mamba2", "mamba")  # suite models whose mixers have an effective attention
KINDS = ("attention", "ssd", "s6")  # transformer heads, Mamba-2 heads, Mamba channels


# ---------------------------------------------------------------------------- the formulas
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


# ---------------------------------------------------------------------------- suite models
KIND_OF = {"transformer": "attention", "mamba2": "ssd", "mamba": "s6",
           HF_TRANSFORMER: "attention", HF_MAMBA2: "ssd", HF_MAMBA: "s6"}


def kind(model) -> str:
    """``attention`` (a transformer), ``ssd`` (Mamba-2) or ``s6`` (Mamba), for suite models and
    HF models booted by models.hf; one error line for a model with neither attention nor
    effective attention."""
    arch = getattr(model, "arch", None)
    if arch in KIND_OF:
        return KIND_OF[arch]
    if arch == HF_HYBRID:
        raise TaskError("a hybrid HF model (attention and SSM layers in one stack): its layers "
                        "have heads of two kinds, which this probe does not mix")
    raise TaskError(f"a {arch!r} model has no attention heads (a transformer) and no effective "
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
    Mamba (hooks of :data:`READS`). Computed in the cache's dtype, at least float32."""
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
    raise TaskError(f"layer {layer}'s mixer ({type(mixer).__name__}) has no effective attention")


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


# ---------------------------------------------------------------------------- HF SSMs
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
