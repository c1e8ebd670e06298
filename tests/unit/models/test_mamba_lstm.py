"""Hooked Mamba-1 (models/ssm/mamba.py) and LSTM (models/lstm.py). The shared contract (hook names
and shapes, run_with_cache, patching, save / load of a file and of a training run, fast ==
plain on the tiny configs, the kernels on CUDA) is in test_model_contract.py."""

import pytest
import torch

from models.registry import build_model
from models.ssm.mamba import MambaConfig, MambaLM
from models.ssm.recurrent import (
    from_hf_state_dict,
    linear_scan_parallel,
    linear_scan_plain,
    to_hf_state_dict,
)
from seqprobe.errors import InputError


@pytest.fixture
def tiny(tiny_model):
    """tiny(arch="mamba", **overrides): the shared tiny model, parameters off their init, in
    float64."""
    return lambda arch="mamba", **kw: tiny_model(arch, random=True, dtype=torch.float64, **kw)


# ---------------------------------------------------------------------------- Mamba-1
def test_mamba_hooks_reproduce_the_recurrence(tiny, tokens):
    m = tiny()
    _, cache = m.run_with_cache(tokens())
    c = {k.replace("blocks.0.mixer.", ""): v for k, v in cache.items()}
    # y_t = h_t c_t + D x_t from the hooked state, and h_t = a_t h_{t-1} + Δ x b
    mixer = m.blocks[0].mixer
    y = torch.einsum("bpdn,bpn->bpd", c["hook_ssm_state"][:, :, :, 0], c["hook_C"])
    assert torch.allclose(y + mixer.D * c["hook_x"], c["hook_y"], atol=1e-12)
    a = torch.exp(c["hook_ssm_dt"][..., None] * -torch.exp(mixer.A_log))
    assert torch.allclose(a, c["hook_decay"], atol=1e-12)
    h = torch.zeros_like(c["hook_ssm_state"][:, 0])
    for t in range(11):
        dx = c["hook_ssm_dt"][:, t] * c["hook_x"][:, t]  # [batch, d_inner]
        w = dx[..., None, None] * c["hook_B"][:, t, None, None]
        h = a[:, t, :, None] * h + w
        assert torch.allclose(h, c["hook_ssm_state"][:, t], atol=1e-12)


@pytest.mark.parametrize("kw", [dict(conv=False, gated=False, d_mlp=6),  # (the tiny config:
                                dict(dt_rank=3, use_D=False, activation="relu")])  # contract)
def test_mamba_plain_equals_parallel_scan(kw, tiny, tokens, assert_paths_agree):
    assert_paths_agree(tiny(**kw), tokens(T=21), "scan")


def test_linear_scans_agree():
    g = torch.Generator().manual_seed(0)
    for T in (1, 2, 5, 16, 33):
        a = torch.rand(2, T, 3, generator=g, dtype=torch.float64)
        w = torch.randn(2, T, 3, generator=g, dtype=torch.float64)
        assert torch.allclose(linear_scan_plain(a, w), linear_scan_parallel(a, w), atol=1e-12)


def test_hf_mamba_parity(randomize, tokens):
    transformers = pytest.importorskip("transformers")
    hc = transformers.MambaConfig(
        vocab_size=11, hidden_size=16, state_size=8, expand=2, conv_kernel=3,
        num_hidden_layers=2, use_bias=False, use_conv_bias=True, tie_word_embeddings=False,
        layer_norm_epsilon=1e-5, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    hf = randomize(transformers.MambaForCausalLM(hc).eval())
    ours = MambaLM(MambaConfig(vocab_size=11, d_model=16, d_state=8, expand=2, d_conv=3,
                               n_layers=2))
    ours.load_state_dict(from_hf_state_dict(hf.state_dict()))
    x = tokens(2, 17, 11)
    with torch.no_grad():
        ref = hf(x).logits
        for scan in ("plain", "scan"):
            ours.set_scan(scan)
            assert torch.allclose(ours(x), ref, atol=2e-5, rtol=1e-4), scan
    assert set(to_hf_state_dict(ours.state_dict())) == set(hf.state_dict())


def test_mamba_config_checks(tiny_config):
    for bad in (dict(d_state=0), dict(activation="tanh"), dict(scan="sdpa"), dict(dt_rank=-1),
                dict(chunk_size=0)):
        with pytest.raises(InputError):
            build_model("mamba", tiny_config("mamba", **bad))


# ---------------------------------------------------------------------------- LSTM
def test_lstm_hooks_hold_the_cell_state_and_gates(tiny, tokens):
    m = tiny("lstm")
    x = tokens()
    _, cache = m.run_with_cache(x)  # hooks on c and gates: the plain loop
    # h_t = σ(o) tanh(c_t) from the hooked gates and cell state
    o = cache["blocks.1.hook_gates"][:, :, 3]
    assert torch.allclose(torch.sigmoid(o) * torch.tanh(cache["blocks.1.hook_c"]),
                          cache["blocks.1.hook_h"], atol=1e-12)


def test_lstm_config_checks():
    with pytest.raises(InputError):
        build_model("lstm", {"d_model": 0})
    with pytest.raises(InputError):
        build_model("lstm", {"scan": "chunked"})
