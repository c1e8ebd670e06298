"""Hooked Mamba-2 (models/ssm/mamba2.py, models/ssm/ssd.py) and MambaZero (models/ssm/mambazero.py):
paths, hooks, HF parity, ablation switches. The shared contract (run_with_cache, patching,
save / load, chunked == plain on the tiny config) is in test_model_contract.py."""

import pytest
import torch

from models.registry import build_model
from models.ssm.mamba2 import Mamba2LM
from models.ssm.mambazero import MambaZeroConfig, MambaZeroLM
from models.ssm.recurrent import from_hf_state_dict, to_hf_state_dict
from models.ssm.ssd import Mamba2Config, ssd_chunked, ssd_plain
from seqprobe.config import config_to_dict
from seqprobe.errors import InputError


@pytest.fixture
def tiny(tiny_model):
    """tiny(random=False, **overrides): the shared tiny Mamba-2 (vocab 7, d_model 8, 2 layers,
    2 heads, N = 4, w = 3, chunks of 4); random ones in float64."""

    def make(random=False, **kw):
        return tiny_model("mamba2", random=random, dtype=torch.float64 if random else None, **kw)

    return make


# ---------------------------------------------------------------------------- hooks
def test_patching_state_with_itself_changes_nothing_and_decay_patch_resets(tiny, tokens):
    m = tiny(random=True)
    x = tokens()
    ref = m(x)
    out = m.run_with_hooks(x, fwd_hooks=[("blocks.0.mixer.hook_ssm_state", lambda v, hook: v)])
    assert torch.allclose(out, ref, atol=1e-12)

    def reset(a, hook):  # a_t = 0 at position 5: H_5 = write_5 (the state forgets x_1..x_5)
        a = a.clone()
        a[:, 5] = 0.0
        return a

    with m.hooks(fwd_hooks=[("blocks.0.mixer.hook_decay", reset)]):
        _, cache = m.run_with_cache(x)
    st, wr = cache["blocks.0.mixer.hook_ssm_state"], cache["blocks.0.mixer.hook_ssm_write"]
    assert torch.allclose(st[:, 5], wr[:, 5])
    assert not m.hook_dict["blocks.0.mixer.hook_decay"]._forward_hooks  # nothing left attached


def test_state_recurrence_reproduces_y(tiny, tokens):
    """Read H_t from hook_ssm_state, contract with c_t, add D·x_t: that is hook_y; and H_t is
    a_t H_{t−1} + Δ_t x_t b_tᵀ."""
    m = tiny(random=True, n_groups=2)
    _, cache = m.run_with_cache(tokens())
    c = {k.replace("blocks.1.mixer.", ""): v for k, v in cache.items()}
    H, G = m.cfg.n_heads, m.cfg.n_groups
    Ch = c["hook_C"].repeat_interleave(H // G, dim=2)  # [batch, pos, heads, n]
    Bh = c["hook_B"].repeat_interleave(H // G, dim=2)
    D = m.blocks[1].mixer.D
    y = torch.einsum("bphdn,bphn->bphd", c["hook_ssm_state"], Ch) + D[:, None] * c["hook_x"]
    assert torch.allclose(y, c["hook_y"], atol=1e-12)
    write = c["hook_ssm_dt"][..., None, None] * c["hook_x"][..., None] * Bh[..., None, :]
    assert torch.allclose(write, c["hook_ssm_write"], atol=1e-12)
    prev = torch.zeros_like(c["hook_ssm_state"][:, 0])
    for t in range(c["hook_ssm_state"].shape[1]):
        prev = c["hook_decay"][:, t, :, None, None] * prev + write[:, t]
        assert torch.allclose(prev, c["hook_ssm_state"][:, t], atol=1e-12)
    A = -torch.exp(m.blocks[1].mixer.A_log)
    assert torch.allclose(c["hook_decay"], torch.exp(c["hook_ssm_dt"] * A), atol=1e-12)


# ---------------------------------------------------------------------------- paths
VARIANTS = [  # the tiny config itself is in test_model_contract.py
    dict(n_heads=4, n_groups=2, chunk_size=3),  # groups, a partial last chunk
    dict(chunk_size=64),  # one chunk
    dict(conv=False, gated=False, activation="relu", d_mlp=6),
    dict(decay=False, mixer_norm=False, use_D=False, activation="identity"),
]


@pytest.mark.parametrize("kw", VARIANTS)
def test_plain_equals_chunked_outputs_and_gradients(kw, tiny, tokens, assert_paths_agree):
    assert_paths_agree(tiny(random=True, **kw), tokens(T=13), "chunked")


def test_ssd_functions_agree_on_random_inputs():
    g = torch.Generator().manual_seed(0)
    Bz, T, H, P, N, G = 2, 37, 4, 3, 5, 2
    x = torch.randn(Bz, T, H, P, generator=g, dtype=torch.float64)
    dA = -torch.rand(Bz, T, H, generator=g, dtype=torch.float64) * 2
    B = torch.randn(Bz, T, G, N, generator=g, dtype=torch.float64)
    C = torch.randn(Bz, T, G, N, generator=g, dtype=torch.float64)
    Bh, Ch = B.repeat_interleave(2, 2), C.repeat_interleave(2, 2)
    states = ssd_plain(dA.exp(), x[..., None] * Bh[..., None, :])
    y_ref = torch.einsum("bphdn,bphn->bphd", states, Ch)
    for chunk in (1, 4, 8, 64):
        assert torch.allclose(ssd_chunked(x, dA, B, C, chunk), y_ref, atol=1e-10)


def test_auto_path_uses_chunks_unless_a_state_hook_is_attached(tiny):
    m = tiny()
    mixer = m.blocks[0].mixer
    x = torch.zeros(1, 3, m.cfg.d_model * 2)
    assert mixer._path(x) == "chunked"
    with m.hooks(fwd_hooks=[("blocks.0.mixer.hook_ssm_state", lambda v, hook: v)]):
        assert mixer._path(x) == "plain"
    assert mixer._path(x) == "chunked"


# ---------------------------------------------------------------------------- HF parity
def _hf_pair(randomize, n_groups=2, seed=0):
    transformers = pytest.importorskip("transformers")
    hc = transformers.Mamba2Config(
        vocab_size=11, hidden_size=16, state_size=8, num_heads=4, head_dim=8, expand=2,
        n_groups=n_groups, conv_kernel=3, num_hidden_layers=2, chunk_size=5, use_bias=False,
        use_conv_bias=True, tie_word_embeddings=False, layer_norm_epsilon=1e-5,
        pad_token_id=0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    hf = transformers.Mamba2ForCausalLM(hc).eval()
    randomize(hf, seed)
    ours = Mamba2LM(Mamba2Config(vocab_size=11, d_model=16, d_state=8, n_heads=4, expand=2,
                                 n_groups=n_groups, d_conv=3, n_layers=2, chunk_size=4))
    return hf, ours


@pytest.mark.parametrize("n_groups", [1, 2])
def test_hf_mamba2_parity(n_groups, randomize, tokens):
    hf, ours = _hf_pair(randomize, n_groups)
    sd = from_hf_state_dict(hf.state_dict())
    assert set(sd) == set(ours.state_dict())
    for k, v in ours.state_dict().items():
        assert v.shape == sd[k].shape, k
    ours.load_state_dict(sd)
    x = tokens(2, 17, 11)
    with torch.no_grad():
        ref = hf(x).logits
        assert ref.abs().max() > 0.1
        for scan in ("chunked", "plain"):
            ours.set_scan(scan)
            assert torch.allclose(ours(x), ref, atol=2e-5, rtol=1e-4), scan
    # and back: our weights load into HF under the converted names
    back = to_hf_state_dict(ours.state_dict())
    assert set(back) == set(hf.state_dict())
    hf.load_state_dict(back)


# ---------------------------------------------------------------------------- ablation switches
def _x_at(model, x, t):
    _, cache = model.run_with_cache(x, names_filter=lambda n: n.endswith("mixer.hook_x"))
    return cache["blocks.0.mixer.hook_x"][:, t]


def test_no_conv_removes_dependence_on_previous_tokens_through_the_conv(tiny, tokens):
    x = tokens(2, 9)
    x2 = x.clone()
    x2[:, 4] = (x2[:, 4] + 1) % 7  # change the token just before position 5
    with_conv = tiny(random=True, n_layers=1)
    no_conv = tiny(random=True, n_layers=1, conv=False)
    assert not hasattr(no_conv.blocks[0].mixer, "conv1d")
    assert not torch.allclose(_x_at(with_conv, x, 5), _x_at(with_conv, x2, 5))
    assert torch.allclose(_x_at(no_conv, x, 5), _x_at(no_conv, x2, 5))


@pytest.mark.parametrize("w", [1, 2, 4])
def test_conv_window_is_d_conv(w, tiny, tokens):
    m = tiny(random=True, n_layers=1, d_conv=w)
    x = tokens(2, 10)
    t = 7
    far, near = x.clone(), x.clone()
    far[:, t - w] = (far[:, t - w] + 1) % 7  # just outside the window
    near[:, t - w + 1] = (near[:, t - w + 1] + 1) % 7  # the oldest token inside it
    assert torch.allclose(_x_at(m, x, t), _x_at(m, far, t))
    assert not torch.allclose(_x_at(m, x, t), _x_at(m, near, t))
    assert m.blocks[0].mixer.conv1d.weight.shape == (m.cfg.conv_dim, 1, w)


def test_gating_activation_and_decay_switches(tiny, tokens):
    x = tokens()
    no_gate = tiny(gated=False)
    cfg = no_gate.cfg
    assert no_gate.blocks[0].mixer.in_proj.weight.shape[0] == cfg.conv_dim + cfg.n_heads
    _, cache = no_gate.run_with_cache(x)
    assert "blocks.0.mixer.hook_gate" not in cache
    gated = tiny()
    assert gated.blocks[0].mixer.in_proj.weight.shape[0] == cfg.d_inner + cfg.conv_dim + 2

    ident = tiny(activation="identity")
    _, c = ident.run_with_cache(x)
    conv = c["blocks.0.mixer.hook_conv"][..., : ident.cfg.d_inner]
    assert torch.equal(c["blocks.0.mixer.hook_x"].flatten(2), conv)
    relu = tiny(activation="relu")
    _, c = relu.run_with_cache(x)
    assert c["blocks.0.mixer.hook_x"].min() >= 0 and c["blocks.0.mixer.hook_gate"].min() >= 0

    keep = tiny(decay=False)
    _, c = keep.run_with_cache(x)
    a = c["blocks.0.mixer.hook_decay"]
    assert torch.equal(a, torch.ones_like(a))


def test_config_checks(tiny_config):
    for bad in (dict(n_heads=3), dict(n_heads=2, n_groups=4), dict(activation="gelu"),
                dict(prediction="sparsemax"), dict(d_conv=0), dict(scan="fast"),
                dict(unembed_bias_init=1.0),  # without the bias it would initialise
                dict(unembed_bias=True, unembed_bias_init=float("nan"))):
        with pytest.raises(InputError):
            build_model("mamba2", tiny_config("mamba2", **bad))
    with pytest.raises(InputError):
        build_model("mamba2", {"nonsense": 1})


# ---------------------------------------------------------------------------- MambaZero
def test_mambazero_layout_and_l1_prediction(tokens):
    m = MambaZeroLM(MambaZeroConfig())
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    d, N = 4, 2
    assert shapes == {
        "embed.weight": (2, d),
        "blocks.0.mixer.in_proj.weight": (d + 2 * N + 1, d),
        "blocks.0.mixer.conv1d.weight": (d + 2 * N, 1, 2),
        "blocks.0.mixer.dt_bias": (1,), "blocks.0.mixer.A_log": (1,),
        "blocks.0.mixer.out_proj.weight": (d, d),
        "unembed.weight": (2, d),
    }
    x = tokens(2, 9, 2)
    lp = m.log_probs(x)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(2, 9), atol=1e-5)
    v = m.readout(x).abs().clamp_min(m.cfg.l1_eps)
    assert torch.allclose(lp.exp(), v / v.sum(-1, keepdim=True), atol=1e-6)
    assert torch.allclose(m(x), v.log(), atol=1e-6)  # forward is logits: softmax(log v) = v/‖v‖₁
    # residual: readout = W_ℓ(x_t + mixer(x)_t) with no norm anywhere
    _, c = m.run_with_cache(x)
    u = c["hook_embed"] + c["blocks.0.mixer.hook_ssm_out"]
    assert torch.allclose(m.readout(x), u @ m.unembed.weight.T, atol=1e-6)
    assert isinstance(build_model("mambazero", {}), MambaZeroLM)


def test_mambazero_with_a_t_one_counts(tiny_model, tokens):
    """With a_t = 1 (decay off) the state is the plain sum of the writes (§4.2, fact (i))."""
    m = tiny_model("mambazero", random=True, dtype=torch.float64, decay=False)
    _, c = m.run_with_cache(tokens(2, 9, 2))
    st, wr = c["blocks.0.mixer.hook_ssm_state"], c["blocks.0.mixer.hook_ssm_write"]
    assert torch.allclose(st, wr.cumsum(1), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 3])
def test_mambazero_unembed_bias_init_is_the_hand_set_start(seed):
    """unembed_bias_init builds what the L1 recipe once set by hand after build_model (the
    bias filled under the same seed): same weights, same random stream afterwards."""
    kw = dict(vocab_size=2, d_model=16, d_state=8, unembed_bias=True)
    torch.manual_seed(seed)
    by_hand = build_model("mambazero", kw)
    with torch.no_grad():
        by_hand.unembed.bias.fill_(1.0)
    after_hand = torch.rand(4)
    torch.manual_seed(seed)
    built = build_model("mambazero", {**kw, "unembed_bias_init": 1.0})
    assert torch.equal(torch.rand(4), after_hand)  # no random draw added or removed
    assert built.state_dict().keys() == by_hand.state_dict().keys()
    for k, v in by_hand.state_dict().items():
        assert torch.equal(built.state_dict()[k], v), k
    assert torch.equal(built.unembed.bias, torch.ones(2))
    # a config written before the field existed still builds (and gets a zero bias)
    old = {k: v for k, v in config_to_dict(built.cfg).items() if k != "unembed_bias_init"}
    assert build_model("mambazero", old).cfg.unembed_bias_init is None
    assert torch.equal(build_model("mambazero", old).unembed.bias, torch.zeros(2))


# ---------------------------------------------------------------------------- learning (slow)
@pytest.mark.slow
def test_quick_mamba2_learns_the_add_beta_estimator():
    """Markov paper Fig. 1a at quick scale: a 1-layer Mamba-2 trained on binary first-order
    chains gets within 0.01 nats of L_beta."""
    from analyses.zoo.levels import make_run_config
    from models.train.loop import train

    torch.set_num_threads(1)
    run_config = make_run_config("mamba2", "markov", "quick", train={"steps": 600,
                                                                     "eval_every": 600})
    last = train(run_config, out=None, progress=False)["history"][-1]
    assert last["loss_gap"] < 0.01, last
    assert abs(last["eval_loss"] - last["lbeta"]) < 0.01
