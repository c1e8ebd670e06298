"""Activation patching for Mamba / Mamba-2: the recurrent state as one object, and patching
helpers in the style of ``transformer_lens.patching`` for the mixer hooks it cannot reach.

The whole state of a mixer after position t is H_t *and* the causal conv's window, the last
w − 1 inputs of the conv (:class:`models.ssm.recurrent.SSMState`): the conv outputs at t + 1 …
t + w − 1 still read inputs from t and before, so a run continued from H_t alone is not the run
continued from the state. What this module gives:

* :func:`read_states` — every layer's :class:`SSMState` at position t, read from a cache
  (``hook_ssm_state`` at t, ``hook_in_proj``'s conv channels at t − w + 2 … t);
* :func:`start_from` / :func:`continue_from` — run tokens from given states instead of the zero
  state (the mixers' ``start_state``: the plain scan, with H_0 and the window set);
  :func:`transplant` — a run of ``tokens`` whose states after position t are replaced
  (positions ≤ t keep their logits; the rest continue from the new states);
  ``SSMState.zeroed()`` — the start state, so a run continued from it is the suffix run alone;
* :func:`get_act_patch_ssm` — per layer and position, the metric of the corrupted run with
  one mixer hook's activation at that position taken from the clean cache ([layer, pos], as
  ``transformer_lens.patching.get_act_patch_resid_pre``); :func:`get_state_patch` — the same
  for the whole state: layer l's state at t taken from the clean run, the corrupted run
  continued from it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache

from models.registry import SSM_ARCHS
from models.ssm.recurrent import SSMState
from seqprobe.config import check

STATE_HOOK = "blocks.{}.mixer.hook_ssm_state"  # H_t [batch, pos, heads, d_head, d_state]
IN_PROJ_HOOK = "blocks.{}.mixer.hook_in_proj"  # [batch, pos, d_in_proj]

Metric = Callable[[Tensor], Tensor]  # logits [batch, pos, vocab] -> a scalar tensor


def check_ssm(model) -> None:
    """One line unless ``model`` is a suite Mamba / Mamba-2 (the mixers with ``start_state``)."""
    arch = getattr(model, "arch", type(model).__name__)
    check(arch in SSM_ARCHS, f"SSM state patching needs a suite Mamba or Mamba-2 model "
          f"({', '.join(SSM_ARCHS)}); got {arch}")


def conv_channels(cfg, arch: str) -> slice:
    """Where the conv's input sits in ``hook_in_proj``'s last axis: Mamba-2's xBC (after z when
    gated), Mamba's x (its first half)."""
    if arch == "mamba2":
        start = cfg.d_inner if cfg.gated else 0
        return slice(start, start + cfg.conv_dim)
    return slice(0, cfg.d_inner)


def window(cfg) -> int:
    """w − 1, the inputs the conv keeps (0 without a conv)."""
    return cfg.d_conv - 1 if cfg.conv else 0


def state_hook_names(n_layers: int) -> list[str]:
    """The cache entries :func:`read_states` reads."""
    return [f.format(i) for i in range(n_layers) for f in (STATE_HOOK, IN_PROJ_HOOK)]


def read_states(model, cache: ActivationCache | dict, t: int) -> list[SSMState]:
    """Every layer's state after position ``t`` of the run ``cache`` was taken from (a cache
    holding :func:`state_hook_names`; ``model.run_with_cache`` keeps them)."""
    check_ssm(model)
    cfg = model.cfg
    _check_cached(cache, state_hook_names(cfg.n_layers))
    T = cache[IN_PROJ_HOOK.format(0)].shape[1]
    check(0 <= t < T, f"position t = {t} is outside the run's 0..{T - 1}")
    chans, w = conv_channels(cfg, model.arch), window(cfg)
    states = []
    for i in range(cfg.n_layers):
        h = cache[STATE_HOOK.format(i)][:, t]  # [batch, heads, d_head, d_state]
        rows = cache[IN_PROJ_HOOK.format(i)][:, max(0, t - w + 1): t + 1, chans]
        pad = rows.new_zeros(rows.shape[0], w - rows.shape[1], rows.shape[2])  # before the start
        states.append(SSMState(h, torch.cat([pad, rows], dim=1)))  # conv [batch, w, channels]
        check_state(model, states[-1], i)  # a cache of another model: one line here
    return states


def _check_cached(cache: ActivationCache | dict, names: Sequence[str]) -> None:
    """One line naming the first of ``names`` the cache lacks (not a bare KeyError)."""
    missing = [n for n in names if n not in cache]
    check(not missing, f"the cache lacks {missing[:1][0] if missing else ''!r} ("
          f"{len(missing)} of the {len(names)} entries needed); run_with_cache keeps them "
          "(names_filter=state_hook_names(n_layers), or no filter)")


def run_states(model, tokens: Int[Tensor, "batch pos"], t: int) -> list[SSMState]:
    """:func:`read_states` of a fresh run of ``tokens``."""
    check_ssm(model)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=state_hook_names(model.cfg.n_layers))
    return read_states(model, cache, t)


def check_state(model, state: object, layer: int) -> None:
    """One line unless ``state`` is an :class:`SSMState` of layer ``layer`` of ``model``: H of
    [batch, heads, d_head, d_state], a window of [batch, w − 1, conv channels], one batch,
    finite. A state of another model (d_state 1, one head, a window of 1 where the conv keeps
    2) would otherwise broadcast into silently wrong logits."""
    check(isinstance(state, SSMState), f"state of layer {layer}: an SSMState (or None), got "
          f"{type(state).__name__}")
    cfg = model.cfg
    chans = conv_channels(cfg, model.arch)
    want_h = (cfg.n_heads, cfg.d_head, cfg.d_state)
    want_conv = (window(cfg), chans.stop - chans.start)
    h, conv = state.h, state.conv
    check(isinstance(h, torch.Tensor) and h.dim() == 4 and tuple(h.shape[1:]) == want_h,
          f"state of layer {layer}: H of shape {tuple(getattr(h, 'shape', ()))}, but this "
          f"{model.arch} holds [batch, heads {want_h[0]}, d_head {want_h[1]}, d_state "
          f"{want_h[2]}]")
    check(isinstance(conv, torch.Tensor) and conv.dim() == 3
          and tuple(conv.shape[1:]) == want_conv,
          f"state of layer {layer}: conv window of shape {tuple(getattr(conv, 'shape', ()))}, "
          f"but this {model.arch} keeps [batch, w - 1 = {want_conv[0]}, channels "
          f"{want_conv[1]}]")
    check(conv.shape[0] == h.shape[0], f"state of layer {layer}: H of batch {h.shape[0]}, "
          f"window of batch {conv.shape[0]}")
    check(bool(torch.isfinite(h).all()) and bool(torch.isfinite(conv).all()),
          f"state of layer {layer}: holds NaN or infinite values")


@contextlib.contextmanager
def start_from(model, states: Sequence[SSMState | None]) -> Iterator[None]:
    """Within the block, every forward of ``model`` starts layer i from ``states[i]`` (None:
    the zero state) instead of H_0 = 0 and a zero-padded window; each checked
    (:func:`check_state`)."""
    check_ssm(model)
    check(len(states) == model.cfg.n_layers,
          f"{len(states)} states for a model of {model.cfg.n_layers} layers")
    for i, s in enumerate(states):
        if s is not None:
            check_state(model, s, i)
    mixers = [b.mixer for b in model.blocks]
    try:
        for mixer, s in zip(mixers, states, strict=True):
            mixer.start_state = s
        yield
    finally:
        for mixer in mixers:
            mixer.start_state = None


def continue_from(model, states: Sequence[SSMState | None], tokens: Int[Tensor, "batch pos"],
                  fwd_hooks: Sequence = ()) -> Float[Tensor, "batch pos vocab"]:
    """The logits of ``tokens`` run on from ``states`` (what the run that left those states
    predicts at its next positions, when it goes on with ``tokens``)."""
    check_ssm(model)
    for i, s in enumerate(states):
        if s is not None:
            check_state(model, s, i)
            check(s.h.shape[0] == tokens.shape[0], f"states of batch {s.h.shape[0]} for "
                  f"tokens of batch {tokens.shape[0]}")
    with start_from(model, states):
        return model.run_with_hooks(tokens, fwd_hooks=list(fwd_hooks))


def transplant(model, tokens: Int[Tensor, "batch pos"], t: int,
               states: Sequence[SSMState | None], fwd_hooks: Sequence = ()
               ) -> Float[Tensor, "batch pos vocab"]:
    """The run of ``tokens`` with its state after position ``t`` replaced by ``states``: logits
    at 0..t as the run's own, at t + 1.. continued from ``states``."""
    check(0 <= t < tokens.shape[1], f"position t = {t} is outside 0..{tokens.shape[1] - 1}")
    head = model.run_with_hooks(tokens[:, : t + 1], fwd_hooks=list(fwd_hooks))
    if t + 1 == tokens.shape[1]:
        return head
    tail = continue_from(model, states, tokens[:, t + 1:], fwd_hooks)
    return torch.cat([head, tail], dim=1)  # [batch, pos, vocab]


def get_act_patch_ssm(model, corrupted_tokens: Int[Tensor, "batch pos"],
                      clean_cache: ActivationCache | dict, patching_metric: Metric,
                      hook: str = "mixer.hook_ssm_out") -> Float[Tensor, "layer pos"]:
    """``patching_metric`` of the corrupted run with ``blocks.{l}.{hook}`` at position p taken
    from ``clean_cache``, for every layer l and position p ([n_layers, pos]; TransformerLens'
    ``get_act_patch_*`` layout). Every mixer hook has position on axis 1. Patching
    ``hook_ssm_state`` carries H_t forward (the recurrence runs on from it) but not the conv's
    window; :func:`get_state_patch` carries the whole state (H_t and the window) forward."""
    check_ssm(model)
    L, T = model.cfg.n_layers, corrupted_tokens.shape[1]
    out = torch.zeros(L, T, dtype=torch.float64)  # the metric as computed, not rounded
    for layer in range(L):
        name = f"blocks.{layer}.{hook}"
        check(name in model.hook_dict, f"{model.arch} has no hook {name!r}")
        _check_cached(clean_cache, [name])
        clean = clean_cache[name]
        check(tuple(clean.shape[:2]) == tuple(corrupted_tokens.shape), f"the clean cache's "
              f"{name} is of [batch, pos] {tuple(clean.shape[:2])}, the corrupted tokens "
              f"{tuple(corrupted_tokens.shape)}: patching needs runs of one shape")
        for pos in range(T):
            def setter(act, hook, pos=pos, clean=clean):
                check(act.shape == clean.shape, f"{hook.name}: the clean cache's activation "
                      f"is {tuple(clean.shape)}, this model's {tuple(act.shape)} (a cache of "
                      "another model?)")
                act = act.clone()
                act[:, pos] = clean[:, pos]
                return act
            with torch.no_grad():
                logits = model.run_with_hooks(corrupted_tokens, fwd_hooks=[(name, setter)])
            out[layer, pos] = patching_metric(logits).item()
    return out


def get_state_patch(model, corrupted_tokens: Int[Tensor, "batch pos"],
                    clean_cache: ActivationCache | dict, patching_metric: Metric
                    ) -> Float[Tensor, "layer pos"]:
    """``patching_metric`` of the corrupted run continued after position t from its own states
    with layer l's whole state (H_t and the conv window) taken from the clean run, for every
    layer l and position t ([n_layers, pos]). ``clean_cache`` holds :func:`state_hook_names`."""
    check_ssm(model)
    L, T = model.cfg.n_layers, corrupted_tokens.shape[1]
    _check_cached(clean_cache, state_hook_names(L))
    check(tuple(clean_cache[IN_PROJ_HOOK.format(0)].shape[:2]) == tuple(corrupted_tokens.shape),
          f"the clean cache is of [batch, pos] "
          f"{tuple(clean_cache[IN_PROJ_HOOK.format(0)].shape[:2])}, the corrupted tokens "
          f"{tuple(corrupted_tokens.shape)}: patching needs runs of one shape")
    with torch.no_grad():
        _, corrupted_cache = model.run_with_cache(corrupted_tokens,
                                                  names_filter=state_hook_names(L))
    out = torch.zeros(L, T, dtype=torch.float64)  # the metric as computed, not rounded
    for t in range(T):
        corrupted = read_states(model, corrupted_cache, t)
        clean = read_states(model, clean_cache, t)
        for layer in range(L):
            states = [clean[i] if i == layer else corrupted[i] for i in range(L)]
            with torch.no_grad():
                logits = transplant(model, corrupted_tokens, t, states)
            out[layer, t] = patching_metric(logits).item()
    return out
