"""Head ablation through hooks on ``blocks.{i}.attn.hook_z`` ([batch, pos, head, d_head]).

``with ablated_heads(model, [(layer, head), ...], mode="mean", means=...): ...`` replaces the
chosen heads' outputs z by zero (``mode="zero"``) or by their mean over a reference batch
(``mode="mean"``: the mean over batch and positions, so the head still writes its average
contribution, only the input dependence is removed). The hooks live only inside the ``with``
block (TransformerLens' ``model.hooks`` removes them on exit, also on errors).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from seqprobe.config import check

MODES = ("mean", "zero")


def z_hook_name(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z"


@torch.no_grad()
def head_means(model, tokens: Tensor, layers: Iterable[int] | None = None,
               mask: Tensor | None = None) -> dict[int, Tensor]:
    """``{layer: [head, d_head]}``: mean of z over the batch and positions (``mask`` [batch, pos]
    bool selects positions, e.g. to leave out padding)."""
    layers = list(range(model.cfg.n_layers)) if layers is None else list(layers)
    names = {z_hook_name(i) for i in layers}
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    out = {}
    for i in layers:
        z = cache[z_hook_name(i)]  # [batch, pos, head, d_head]
        if mask is None:
            out[i] = z.mean(dim=(0, 1))
        else:
            w = mask.to(z.dtype)[..., None, None]  # [batch, pos, 1, 1]
            out[i] = (z * w).sum((0, 1)) / w.sum((0, 1)).clamp(min=1)
    return out


def heads_by_layer(heads: Iterable[tuple[int, int]], mode: str,
                   means: dict[int, Tensor] | None) -> dict[int, list[int]]:
    """``{layer: [head, ...]}`` of the heads to ablate, after checking ``mode`` and that a mean
    ablation has the mean of every layer it touches (every ablation hook starts here)."""
    check(mode in MODES, f"ablation mode must be one of {MODES}, got {mode!r}")
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(int(layer), []).append(int(head))
    if mode == "mean":
        check(means is not None, "mode='mean' needs means (see head_means)")
        missing = sorted(set(by_layer) - set(means))
        check(not missing, f"no mean activations for layer(s) {missing}")
    return by_layer


def ablation_hooks(heads: Iterable[tuple[int, int]], mode: str = "mean",
                   means: dict[int, Tensor] | None = None) -> list[tuple[str, object]]:
    """Forward hooks (name, fn) that ablate ``heads``; empty list for no heads."""
    by_layer = heads_by_layer(heads, mode, means)
    hooks = []
    for layer, hs in sorted(by_layer.items()):
        idx = torch.tensor(sorted(set(hs)))

        def fn(z, hook, idx=idx, layer=layer):
            z = z.clone()
            if mode == "zero":
                z[:, :, idx] = 0.0
            else:
                z[:, :, idx] = means[layer][idx].to(z.dtype)
            return z

        hooks.append((z_hook_name(layer), fn))
    return hooks


@contextmanager
def ablated_heads(model, heads: Iterable[tuple[int, int]], mode: str = "mean",
                  means: dict[int, Tensor] | None = None) -> Iterator[None]:
    """Context manager: inside it, ``model`` runs with ``heads`` ablated; hooks removed after."""
    heads = list(heads)
    for layer, head in heads:
        check(0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads,
              f"no head ({layer}, {head}) in a model with {model.cfg.n_layers} layers × "
              f"{model.cfg.n_heads} heads")
    hooks = ablation_hooks(heads, mode, means)
    with model.hooks(fwd_hooks=hooks):
        yield
