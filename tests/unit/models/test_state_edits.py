"""An edit of the SSM state through ``hook_ssm_state`` means what it says (issue 55,
models.ssm.recurrent.carried_states): zeroing H_t moves the logits at t and after, exactly as
resetting the recurrence there does (a_t = 0 and the write at t = 0 through ``hook_decay`` and
``hook_ssm_write``), and leaves the positions before t alone; a hook that only reads changes
nothing."""

from __future__ import annotations

import pytest
import torch

import models
from tests.tiny import zoo_stand_in

T_EDIT = 5


def zero_at(t):
    def hook(act, hook):
        act[:, t] = 0.0  # in place, as TL users often write it
        return act
    return hook


@pytest.fixture(scope="module")
def markov_mamba2(tmp_path_factory):
    """The Markov paper's Mamba-2 (the quick markov/mamba2 recipe's configs), weights moved off
    their init."""
    from tests.conftest import randomize_parameters

    model = models.load(zoo_stand_in("markov/mamba2", tmp_path_factory.mktemp("zoo")))
    return randomize_parameters(model.double(), seed=2).eval()


def check_carried(model, layer: int = 0):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 12), generator=g)
    mixer = f"blocks.{layer}.mixer"
    with torch.no_grad():
        base = model(tokens)
        edited = model.run_with_hooks(tokens, fwd_hooks=[(f"{mixer}.hook_ssm_state",
                                                          zero_at(T_EDIT))])
        reset = model.run_with_hooks(tokens, fwd_hooks=[(f"{mixer}.hook_decay", zero_at(T_EDIT)),
                                                        (f"{mixer}.hook_ssm_write",
                                                         zero_at(T_EDIT))])
        read = model.run_with_hooks(tokens, fwd_hooks=[(f"{mixer}.hook_ssm_state",
                                                        lambda act, hook: None)])
    torch.testing.assert_close(edited[:, :T_EDIT], base[:, :T_EDIT], atol=1e-12, rtol=0)
    moved = (edited - base).abs().amax(dim=(0, 2))  # per position
    assert (moved[T_EDIT:] > 1e-6).all(), moved  # at t and every position after it
    torch.testing.assert_close(edited, reset, atol=1e-10, rtol=0)  # the recurrence, reset at t
    torch.testing.assert_close(read, base, atol=1e-12, rtol=0)  # the plain path vs the fast one


def test_zeroing_the_markov_mamba2s_state_moves_every_later_logit(markov_mamba2):
    check_carried(markov_mamba2)


@pytest.mark.parametrize("arch", ["mamba2", "mamba"])
def test_zeroing_the_state_carries_forward_on_every_mamba(arch, tiny_model):
    check_carried(tiny_model(arch, random=True, dtype=torch.float64), layer=1)
