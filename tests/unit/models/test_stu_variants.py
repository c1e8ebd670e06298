"""The STU options of issue 27: Flash STU's shared filter mixture (``mixture="shared"``) and
embeddings held at zero (``zero_embed``), against references written from the equations in
float64, and the config / cache-hash contract of the new fields."""

import json

import pytest
import torch

from analyses.zoo.levels import make_run_config
from models.stu import STULM, STUConfig
from seqprobe.config import config_from_dict, config_to_dict
from seqprobe.errors import InputError
from tasks.registry import make_task

TOL = dict(atol=1e-10, rtol=1e-10)
TINY = dict(vocab_size=6, d_model=4, filter_len=16, num_filters=5)


def test_shared_mixture_layer_matches_flash_stu_equation():
    """Flash STU's tensordot layer (flash-stu-2 ``STU._forward_standard`` with use_approx):
    ψ = φ M_filters, x̃ = x M_in, U⁺_t = Σ_j ψ[j] ⊙ x̃_{t−j}, U⁻_t = Σ_j (−1)^j ψ[j] ⊙ x̃_{t−j}
    (their sgn_t · conv(sgn ⊙ x̃, ψ)_t), y = U⁺ + U⁻."""
    torch.manual_seed(3)
    layer = STULM(STUConfig(**TINY, n_layers=1, mixture="shared")).double().blocks[0].stu
    assert layer.M_filters.shape == (1, 5, 4)  # one mixture for both branches
    x = torch.randn(2, 12, 4, dtype=torch.float64)
    psi = layer.filters @ layer.M_filters[0]  # [T, d]
    xt = x @ layer.M_inputs  # [b, t, d]
    sgn = torch.tensor([(-1.0) ** t for t in range(12)], dtype=torch.float64)[None, :, None]
    plus = torch.zeros_like(x)
    minus_in = torch.zeros_like(x)  # conv(sgn ⊙ x̃, ψ)
    for t in range(12):
        for j in range(t + 1):
            plus[:, t] += psi[j] * xt[:, t - j]
            minus_in[:, t] += psi[j] * (sgn[:, t - j] * xt[:, t - j])
    ref = plus + sgn * minus_in
    torch.testing.assert_close(layer(x), ref, **TOL)
    # and the per-branch default is not that: its − branch has a mixture of its own
    per = STULM(STUConfig(**TINY, n_layers=1)).double().blocks[0].stu
    assert per.M_filters.shape == (2, 5, 4)


def test_shared_mixture_reads_even_lags_only():
    """U⁺ + U⁻ = 2 Σ_{j even} ψ[j] x̃_{t−j}: a two-layer shared-mixture STU's output at the
    last position ignores every token an odd number of positions back (so it cannot recall
    an induction token at an odd lag); the per-branch STU does not."""
    torch.manual_seed(0)
    tokens = torch.randint(0, 6, (3, 14))
    for mixture, blind in (("shared", True), ("per_branch", False)):
        m = STULM(STUConfig(**TINY, n_layers=2, mixture=mixture)).double()
        ref = m(tokens)[:, -1]
        for lag in (1, 2, 3, 6, 9):
            other = tokens.clone()
            other[:, -1 - lag] = (other[:, -1 - lag] + 1) % 6
            moved = (m(other)[:, -1] - ref).abs().max().item()
            if blind and lag % 2:
                assert moved < 1e-10, (mixture, lag, moved)
            else:
                assert moved > 1e-4, (mixture, lag, moved)


def test_zero_embed_forward_equals_a_zeroed_plain_embedding_and_stays_zero():
    torch.manual_seed(1)
    held = STULM(STUConfig(**TINY, zero_embed=(4,))).double()
    assert held.embed.weight[4].abs().max() == 0  # the stored row is the one used
    plain = STULM(STUConfig(**TINY)).double()
    plain.load_state_dict(held.state_dict())
    tokens = torch.randint(0, 6, (2, 9))
    with torch.no_grad():
        held.embed.weight[4] = 1.0  # even a row set by hand is not used
    torch.testing.assert_close(held(tokens), plain(tokens), **TOL)
    with torch.no_grad():
        held.embed.weight[4] = 0.0
    opt = torch.optim.AdamW(held.parameters(), lr=0.1, weight_decay=0.1)
    for _ in range(3):
        opt.zero_grad()
        held(tokens).pow(2).mean().backward()
        assert held.embed.weight.grad[4].abs().max() == 0
        assert held.embed.weight.grad[tokens[0, 0]].abs().max() > 0
        opt.step()
    assert held.embed.weight[4].abs().max() == 0


def test_zero_blank_without_norm_makes_left_blank_padding_invisible_to_the_first_stu():
    """BLANK at zero, no norm: left-padding with BLANK leaves the first STU layer's output at
    the original positions unchanged (a window of BLANKs is a window before the start); with
    LayerNorm (LN(0) = its bias) it does not."""
    torch.manual_seed(2)
    blank = 4
    tokens = torch.randint(0, 4, (2, 8))
    padded = torch.cat([torch.full((2, 5), blank), tokens], 1)
    for norm, invisible in (("none", True), ("layernorm", False)):
        m = STULM(STUConfig(**TINY, zero_embed=(blank,), normalization=norm)).double()
        with torch.no_grad():  # LN's bias off its zero init, so LN(0) != 0
            for p in m.parameters():
                p.add_(0.1 * torch.randn_like(p))
        _, a = m.run_with_cache(tokens)
        _, b = m.run_with_cache(padded)
        gap = (a["blocks.0.stu.hook_out"] - b["blocks.0.stu.hook_out"][:, 5:]).abs().max().item()
        assert (gap < 1e-10) == invisible, (norm, gap)


@pytest.mark.parametrize("bad", [dict(mixture="tied"), dict(mixture="shared", param="full"),
                                 dict(zero_embed=(6,)), dict(zero_embed=(-1,))])
def test_config_checks(bad):
    with pytest.raises(InputError):
        STUConfig(**{**TINY, **bad})


def test_zero_embed_round_trips_through_a_checkpoints_json_as_a_tuple():
    cfg = STUConfig(**TINY, zero_embed=(4, 5), mixture="shared")
    back = config_from_dict(STUConfig, json.loads(json.dumps(config_to_dict(cfg))))
    assert back == cfg and back.zero_embed == (4, 5)


def test_new_fields_at_their_defaults_leave_the_run_hash_unchanged():
    """The run hash covers the model overrides given, not every config field: a recipe that
    does not name mixture / zero_embed hashes as before; one that names them does not."""
    base = make_run_config("stu", "induction", "quick", task_config={"length": 16})
    again = make_run_config("stu", "induction", "quick", task_config={"length": 16})
    assert base.hash() == again.hash() and "mixture" not in base.model_dict
    blank = make_task("induction", {"D": 4, "length": 16}).vocab.id("BLANK")
    for model in ({"mixture": "shared"}, {"zero_embed": (blank,), "normalization": "none"}):
        assert make_run_config("stu", "induction", "quick", model=model,
                         task_config={"length": 16}).hash() != base.hash()
