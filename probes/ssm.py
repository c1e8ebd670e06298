"""Reading a Mamba-2 / MambaZero's internals over many sequences: the state H_t, the readout
y_t = H_t c_t + D·x_t, and the state-transition factor a_t (Markov paper §4.2, Figs. 4, 13).

* :func:`collect_hooks` runs the model in chunks of sequences and keeps only the named hooks;
* :func:`collect_states` flattens one hook per layer into features for linear probes
  (:mod:`probes.linear`);
* :func:`read_decay` reads a_t = exp(Δ_t·A) from ``hook_decay`` and
  :func:`decay_from_parameters` recomputes it from the weights (RMSNorm, in_proj's Δ row,
  dt_bias, A_log), a check on the hook;
* :func:`random_init_like` is the control every probe of a trained model needs: the same
  architecture and config, freshly initialised.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

STATE_HOOK = "blocks.{}.mixer.hook_ssm_state"  # H_t [batch, pos, heads, d_head, d_state]
READOUT_HOOK = "blocks.{}.mixer.hook_y"  # y_t [batch, pos, heads, d_head]
DECAY_HOOK = "blocks.{}.mixer.hook_decay"  # a_t [batch, pos, heads]


@torch.no_grad()
def collect_hooks(model, tokens: Int[Tensor, "batch pos"], names: Iterable[str],
                  chunk: int = 32) -> dict[str, Tensor]:
    """``{name: activation}`` over all of ``tokens`` (float64, CPU), run ``chunk`` sequences
    at a time so that a long batch never holds every other activation at once."""
    names = list(dict.fromkeys(names))
    wanted = set(names)
    parts: dict[str, list[Tensor]] = {n: [] for n in names}
    model.eval()
    for s in range(0, tokens.shape[0], chunk):
        _, cache = model.run_with_cache(tokens[s : s + chunk].to(model.device),
                                        names_filter=lambda n: n in wanted)
        for n in names:
            parts[n].append(cache[n].double().cpu())
    return {n: torch.cat(v) for n, v in parts.items()}


def collect_states(model, tokens: Int[Tensor, "batch pos"], layers: list[int], chunk: int = 32,
                   hook: str = STATE_HOOK) -> dict[int, np.ndarray]:
    """``{layer: [batch, pos, features]}`` float64 of ``hook`` (default H_t, flattened over
    heads, d_head, d_state; ``READOUT_HOOK``: y_t over heads, d_head)."""
    got = collect_hooks(model, tokens, [hook.format(i) for i in layers], chunk)
    return {i: got[hook.format(i)].flatten(2).numpy() for i in layers}


def read_decay(model, tokens: Int[Tensor, "batch pos"], chunk: int = 64
               ) -> Float[Tensor, "layers batch pos heads"]:
    """a_t from ``hook_decay`` of every layer (float64)."""
    names = [DECAY_HOOK.format(i) for i in range(model.cfg.n_layers)]
    got = collect_hooks(model, tokens, names, chunk)
    return torch.stack([got[n] for n in names])


@torch.no_grad()
def decay_from_parameters(model, tokens: Int[Tensor, "batch pos"], layer: int = 0
                          ) -> Float[Tensor, "batch pos heads"]:
    """a_t = exp(−exp(A_log)·softplus(⟨w_Δ, norm(u_t)⟩ + dt_bias)) computed from the weights
    and the block's input u_t (``hook_resid_pre``), not from the mixer's hooks."""
    block = model.blocks[layer]
    mixer = block.mixer
    _, cache = model.run_with_cache(tokens.to(model.device),
                                    names_filter=lambda n: n == f"blocks.{layer}.hook_resid_pre")
    u = block.norm(cache[f"blocks.{layer}.hook_resid_pre"])  # [batch, pos, d_model]
    H = model.cfg.n_heads
    w_dt = mixer.in_proj.weight[-H:]  # [heads, d_model]: the Δ rows are the last H
    dt = u @ w_dt.T  # [batch, pos, heads]
    if mixer.in_proj.bias is not None:
        dt = dt + mixer.in_proj.bias[-H:]
    delta = F.softplus(dt + mixer.dt_bias)
    if not model.cfg.decay:
        return torch.ones_like(delta)
    return torch.exp(-torch.exp(mixer.A_log) * delta)


def random_init_like(model, seed: int):
    """A freshly initialised model with the same architecture and config (the control)."""
    torch.manual_seed(seed)
    fresh = type(model)(model.cfg).to(model.device)
    return fresh.eval()
