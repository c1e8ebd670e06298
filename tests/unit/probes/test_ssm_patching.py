"""SSM state patching (issue 37, probes/ssm_patching.py): the state is H_t *and* the conv
window. A corrupted run's state at t transplanted into the clean run gives the corrupted run's
logits after t exactly (float64), H_t alone does not; the patching helpers equal hand-written
``run_with_hooks`` loops."""

from __future__ import annotations

import pytest
import torch

from probes import ssm_patching as sp
from seqprobe.errors import InputError

T_SPLIT = 5  # the runs differ at positions ≤ T_SPLIT only
CLEAN = torch.tensor([[1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4], [6, 5, 4, 3, 2, 1, 0, 6, 5, 4, 3]])
CORRUPTED = CLEAN.clone()
CORRUPTED[:, T_SPLIT - 1: T_SPLIT + 1] = torch.tensor([[0, 0], [1, 1]])  # inside the window


def model64(tiny_model, arch: str, **kw):
    return tiny_model(arch, random=True, dtype=torch.float64, **kw).eval()


@pytest.mark.parametrize("arch", ["mamba2", "mamba"])
def test_transplanted_state_continues_as_the_run_it_came_from(tiny_model, arch):
    m = model64(tiny_model, arch)
    with torch.no_grad():
        clean, corrupted = m(CLEAN), m(CORRUPTED)
        states = sp.run_states(m, CORRUPTED, T_SPLIT)
        patched = sp.transplant(m, CLEAN, T_SPLIT, states)
        # H_t alone, with the clean run's conv window
        clean_states = sp.run_states(m, CLEAN, T_SPLIT)
        h_only = [sp.SSMState(s.h, c.conv) for s, c in zip(states, clean_states, strict=True)]
        h_only_logits = sp.transplant(m, CLEAN, T_SPLIT, h_only)
    after = slice(T_SPLIT + 1, None)
    assert (patched[:, after] - corrupted[:, after]).abs().max() <= 1e-10
    assert (patched[:, : T_SPLIT + 1] - clean[:, : T_SPLIT + 1]).abs().max() <= 1e-10
    assert (clean[:, after] - corrupted[:, after]).abs().max() > 1e-3  # the runs differ there
    assert (h_only_logits[:, after] - corrupted[:, after]).abs().max() > 1e-3
    assert states[0].conv.shape == (2, m.cfg.d_conv - 1, sp.conv_channels(m.cfg, arch).stop
                                    - sp.conv_channels(m.cfg, arch).start)


def test_zeroed_state_is_a_fresh_start_and_early_windows_are_padded(tiny_model):
    m = model64(tiny_model, "mamba2")
    with torch.no_grad():
        states = sp.run_states(m, CLEAN, 0)  # t = 0: the window reaches before the start
        assert bool((states[0].conv[:, 0] == 0).all()) and bool(states[0].conv[:, 1].any())
        fresh = sp.continue_from(m, [s.zeroed() for s in states], CLEAN[:, 3:])
        torch.testing.assert_close(fresh, m(CLEAN[:, 3:]), atol=1e-12, rtol=0)
        # from the state at 0, tokens 1.. continue the whole run
        on = sp.continue_from(m, states, CLEAN[:, 1:])
        torch.testing.assert_close(on, m(CLEAN)[:, 1:], atol=1e-10, rtol=0)
    assert all(b.mixer.start_state is None for b in m.blocks)  # nothing left behind


def metric(logits: torch.Tensor) -> torch.Tensor:
    return logits[:, -1, 0].mean()


@pytest.mark.parametrize("hook", ["mixer.hook_ssm_out", "mixer.hook_conv", "mixer.hook_x"])
def test_act_patch_equals_a_hand_written_loop(tiny_model, hook):
    m = model64(tiny_model, "mamba2")
    with torch.no_grad():
        _, clean_cache = m.run_with_cache(CLEAN)
    got = sp.get_act_patch_ssm(m, CORRUPTED, clean_cache, metric, hook=hook)
    want = torch.zeros(m.cfg.n_layers, CLEAN.shape[1], dtype=torch.float64)
    for layer in range(m.cfg.n_layers):
        name = f"blocks.{layer}.{hook}"
        for pos in range(CLEAN.shape[1]):
            def put(act, hook, pos=pos, name=name):
                act = act.clone()
                act[:, pos] = clean_cache[name][:, pos]
                return act
            with torch.no_grad():
                want[layer, pos] = metric(m.run_with_hooks(CORRUPTED, fwd_hooks=[(name, put)]))
    assert got.shape == (m.cfg.n_layers, CLEAN.shape[1])
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    assert got.std() > 1e-4  # some position matters


def test_state_patch_of_a_one_layer_model_is_the_clean_continuation(tiny_model):
    """With one layer, patching its whole state at t ≥ the last differing position gives the
    clean run's prediction after t; before it, the later corrupted tokens still differ."""
    m = model64(tiny_model, "mamba2", n_layers=1)
    with torch.no_grad():
        _, clean_cache = m.run_with_cache(CLEAN)
        clean, corrupted = m(CLEAN), m(CORRUPTED)
    got = sp.get_state_patch(m, CORRUPTED, clean_cache, metric)
    assert got.shape == (1, CLEAN.shape[1])
    for t in range(CLEAN.shape[1]):
        want = metric(torch.cat([corrupted[:, : t + 1], clean[:, t + 1:]], dim=1))
        if t >= T_SPLIT:
            assert abs(float(got[0, t] - want)) <= 1e-10, t
    assert abs(float(got[0, T_SPLIT - 2] - metric(clean))) > 1e-6


def test_a_transformer_is_refused_in_one_line(tiny_model):
    with pytest.raises(InputError, match="needs a suite Mamba or Mamba-2 model"):
        sp.run_states(tiny_model("transformer"), CLEAN, 2)


def _unchecked_state(h, conv):
    state = object.__new__(sp.SSMState)
    object.__setattr__(state, "h", h)
    object.__setattr__(state, "conv", conv)
    return state


@pytest.mark.parametrize("arch", ["mamba2", "mamba"])
def test_a_state_of_another_shape_is_refused_not_broadcast(tiny_model, arch):
    """Issue 48, failure 5: a state with d_state 1, one head or a conv window of 1 of w − 1
    gave silently wrong logits (only the batch was checked); NaN passed too."""
    m = model64(tiny_model, arch)
    with torch.no_grad():
        states = sp.run_states(m, CLEAN, T_SPLIT)
    s = states[0]
    bad = {
        "d_state": sp.SSMState(s.h[..., :1], s.conv),
        "heads": sp.SSMState(s.h[:, :1], s.conv),
        "window": sp.SSMState(s.h, s.conv[:, -1:]),
        "channels": sp.SSMState(s.h, s.conv[..., :1]),
        "batch": _unchecked_state(s.h, s.conv[:1]),  # jaxtyping refuses it under pytest only
        "nan": sp.SSMState(s.h.clone().fill_(float("nan")), s.conv),
        "type": s.h,
    }
    for what, state in bad.items():
        with pytest.raises(InputError, match="state of layer 0") as e:
            sp.continue_from(m, [state, *states[1:]], CLEAN[:, T_SPLIT + 1:])
        assert "\n" not in str(e.value), what
    assert all(b.mixer.start_state is None for b in m.blocks)


def test_caches_that_do_not_fit_are_one_line_not_raw_errors(tiny_model):
    m = model64(tiny_model, "mamba2")
    with torch.no_grad():
        _, cache = m.run_with_cache(CLEAN)
        _, short = m.run_with_cache(CLEAN[:, :4])
    with pytest.raises(InputError, match="the cache lacks"):
        sp.read_states(m, {}, 0)
    with pytest.raises(InputError, match="the cache lacks"):
        sp.get_act_patch_ssm(m, CORRUPTED, {}, metric)
    for run in (sp.get_act_patch_ssm, sp.get_state_patch):
        with pytest.raises(InputError, match="runs of one shape"):
            run(m, CORRUPTED, short, metric)
    other = model64(tiny_model, "mamba2", d_state=2)
    with pytest.raises(InputError, match="d_state"):
        sp.read_states(other, cache, 2)
