"""Hooked STU language model: shapes, hooks, the FFT convolution, both parameterisations.
The shared contract (run_with_cache, patching, save / load) is in test_model_contract.py."""

import pytest
import torch

from models.spectral import spectral_filters
from models.stu import PARAMS, STULM, STUConfig, causal_conv, scaled_filters
from seqprobe.errors import InputError


@pytest.fixture
def tiny(tiny_model):
    """tiny(**overrides): the shared tiny STU (vocab 7, d_model 8, 2 layers, T = 32, K = 6)."""
    return lambda **kw: tiny_model("stu", **kw)


@pytest.mark.parametrize("param", PARAMS)
def test_the_residual_stream_adds_the_stu_output(param, tiny):
    """(Hook names and shapes: test_model_contract.py.)"""
    m = tiny(param=param)
    tokens = torch.randint(0, 7, (3, 11))
    _, cache = m.run_with_cache(tokens)
    torch.testing.assert_close(cache["blocks.0.hook_resid_mid"],
                               cache["blocks.0.hook_resid_pre"] + cache["blocks.0.stu.hook_out"])
    feats = cache["blocks.0.stu.hook_features"]
    if param == "tensordot":  # the layer output is the sum of the two branches
        torch.testing.assert_close(feats.sum(2), cache["blocks.0.stu.hook_out"])
    assert feats.shape[2] == 2  # the positive and the negative branch
    one = tiny(param=param, negative_branch=False)
    _, c1 = one.run_with_cache(tokens)
    assert c1["blocks.0.stu.hook_features"].shape[2] == 1


@pytest.mark.parametrize("param", PARAMS)
def test_patching_the_features_and_the_output_reaches_the_logits(param, tiny):
    m = tiny(param=param)
    tokens = torch.randint(0, 7, (2, 9))
    ref = m(tokens)
    name = "blocks.0.stu.hook_features"
    zero = m.run_with_hooks(tokens, fwd_hooks=[(name, lambda x, hook: torch.zeros_like(x))])
    assert not torch.allclose(zero, ref)
    zero_out = m.run_with_hooks(tokens, fwd_hooks=[("blocks.1.stu.hook_out",
                                                    lambda x, hook: torch.zeros_like(x))])
    assert not torch.allclose(zero_out, ref)


@pytest.mark.parametrize("param", PARAMS)
def test_causal_and_finite_filter_support(param, tiny):
    m = tiny(param=param, n_layers=1, filter_len=8)
    tokens = torch.randint(0, 7, (2, 20))
    ref = m(tokens)
    later = tokens.clone()
    later[:, 12:] = (later[:, 12:] + 1) % 7
    torch.testing.assert_close(m(later)[:, :12], ref[:, :12])
    assert not torch.allclose(m(later)[:, 12:], ref[:, 12:])
    # one layer sees only the last filter_len tokens: changing token 0 leaves positions >= 8
    first = tokens.clone()
    first[:, 0] = (first[:, 0] + 1) % 7
    out = m(first)
    torch.testing.assert_close(out[:, 8:], ref[:, 8:], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out[:, :8], ref[:, :8])


def test_fft_convolution_equals_direct_sum():
    x = torch.randn(2, 13, 3, dtype=torch.float64)
    v = torch.randn(5, 3, dtype=torch.float64)
    ref = torch.zeros_like(x)
    for t in range(13):
        for j in range(5):
            if t - j >= 0:
                ref[:, t] += v[j] * x[:, t - j]
    torch.testing.assert_close(causal_conv(x, v), ref)


def test_layer_matches_direct_formula_and_tensordot_is_factored_full():
    torch.manual_seed(1)
    cfgs = dict(vocab_size=5, d_model=4, n_layers=1, filter_len=16, num_filters=5)
    td = STULM(STUConfig(**cfgs, param="tensordot")).double()
    full = STULM(STUConfig(**cfgs, param="full")).double()
    x = torch.randn(2, 10, 4, dtype=torch.float64)
    # full: y_t = Σ_k Σ_j (M⁺_k + (−1)^j M⁻_k)ᵀ φ_k[j] x_{t−j}
    layer = full.blocks[0].stu
    phi = layer.filters
    ref = torch.zeros_like(x)
    for t in range(10):
        for j in range(t + 1):
            W = layer.M_phi[0] + (-1) ** j * layer.M_phi[1]  # [K, d_in, d_out]
            ref[:, t] += torch.einsum("k,kio,bi->bo", phi[j], W, x[:, t - j])
    torch.testing.assert_close(layer(x), ref)
    # tensordot approximation = full layer with M^±_k[i, o] = M_in[i, o] · M^±_filters[k, o]
    tl = td.blocks[0].stu
    with torch.no_grad():
        layer.M_phi.copy_(torch.einsum("io,sko->skio", tl.M_inputs, tl.M_filters))
    torch.testing.assert_close(tl(x), layer(x))


def test_filters_are_scaled_hankel_eigenvectors_and_not_saved(tiny):
    m = tiny()
    sigma, phi = spectral_filters(32, 6)
    torch.testing.assert_close(m.blocks[0].stu.filters, (phi * sigma**0.25).float())
    torch.testing.assert_close(scaled_filters(32, 6), phi * sigma**0.25)
    assert not any("filters" == k.split(".")[-1] for k in m.state_dict())


@pytest.mark.parametrize("bad", [dict(param="x"), dict(num_filters=40), dict(d_model=0),
                                 dict(act_fn="tanh"), dict(normalization="rms")])
def test_config_checks(bad):
    with pytest.raises(InputError):
        STUConfig(**{"filter_len": 32, **bad})

