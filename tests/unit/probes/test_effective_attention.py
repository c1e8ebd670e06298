"""Effective attention (probes/effective_attention.py): Σ_k M[q, k] x_k reproduces the scan of
our Mamba-2 and Mamba and of HF's Mamba-2 booted by TransformerLens, and equals TransformerLens'
``compute_ssm_effective_attention``; patterns and SSM-head ablation behave."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformer_lens.model_bridge import TransformerBridge
from transformers import Mamba2Config, Mamba2ForCausalLM, PreTrainedTokenizerFast

from models import load
from models.checkpoint.layout import FORMAT
from models.checkpoint.write import save_checkpoint
from probes import bridge_attention as ba
from probes import effective_attention as ea
from seqprobe.errors import InputError

TOKENS = torch.tensor([[1, 2, 3, 1, 2, 3, 4, 0, 5, 1, 2], [0, 0, 1, 6, 5, 4, 3, 2, 1, 0, 6]])


def scan_check(model, atol=1e-5):
    """For every layer: Σ_k M x_k + D·x equals hook_y (the scan output plus the skip)."""
    names = ea.hook_names(range(model.cfg.n_layers))
    names |= {f"blocks.{i}.mixer.hook_y" for i in range(model.cfg.n_layers)}
    _, cache = model.run_with_cache(TOKENS, names_filter=lambda n: n in names)
    for i in range(model.cfg.n_layers):
        M = ea.effective_attention(model, cache, i)
        x = ea.mixer_x(model, cache, i)
        assert M.shape == (2, ea.n_heads(model), TOKENS.shape[1], TOKENS.shape[1])
        assert torch.equal(M.triu(1), torch.zeros_like(M))  # causal
        mixer = model.blocks[i].mixer
        y = ea.apply_effective_attention(M, x) + mixer.D[:, None] * x
        torch.testing.assert_close(y, cache[f"blocks.{i}.mixer.hook_y"].reshape(x.shape),
                                   atol=atol, rtol=0)


@pytest.mark.parametrize("overrides", [{}, {"n_heads": 4, "n_groups": 2, "expand": 4},
                                       {"decay": False}])
@pytest.mark.parametrize("scan", ["plain", "chunked"])
def test_mamba2_effective_attention_reproduces_the_scan(tiny_model, overrides, scan):
    model = tiny_model("mamba2", random=True, **overrides)
    model.set_scan(scan)
    scan_check(model)


@pytest.mark.parametrize("scan", ["plain", "scan"])
def test_mamba_effective_attention_reproduces_the_scan(tiny_model, scan):
    model = tiny_model("mamba", random=True)
    model.set_scan(scan)
    scan_check(model)


def test_the_delta_of_the_key_is_part_of_M(tiny_model):
    """M without Δ_k (TransformerLens' default "attention-like form") does not reproduce the
    scan: the check above can fail."""
    model = tiny_model("mamba2", random=True)
    _, cache = model.run_with_cache(TOKENS)
    M = ea.effective_attention(model, cache, 0)
    dt = cache["blocks.0.mixer.hook_ssm_dt"]  # [batch, pos, heads]
    M_no_dt = M / dt.permute(0, 2, 1)[:, :, None, :]
    x = ea.mixer_x(model, cache, 0)
    scan = cache["blocks.0.mixer.hook_y"] - model.blocks[0].mixer.D[:, None] * x
    assert (ea.apply_effective_attention(M_no_dt, x) - scan).abs().max() > 1e-2


def tiny_hf_mamba2(tmp_path, randomize, **overrides):
    """A tiny HF Mamba2ForCausalLM with a character tokenizer, saved to ``tmp_path`` and booted
    by TransformerBridge with the eager scan (so conv1d.hook_out fires)."""
    cfg = dict(vocab_size=12, hidden_size=16, state_size=4, num_heads=4, head_dim=8, expand=2,
               n_groups=2, num_hidden_layers=2, conv_kernel=3, chunk_size=4, pad_token_id=0,
               bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    hf = Mamba2ForCausalLM(Mamba2Config(**{**cfg, **overrides}))
    randomize(hf)
    hf.save_pretrained(tmp_path)
    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate("abcdefghijkl")}, unk_token="a"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(tmp_path)
    bridge = TransformerBridge.boot_transformers(str(tmp_path), device="cpu")
    for block in bridge.blocks:
        block.mixer.eager_scan = True
    return hf, bridge


def test_hf_mamba2_through_the_bridge_matches_transformer_lens(tmp_path, randomize):
    hf, bridge = tiny_hf_mamba2(tmp_path, randomize)
    with torch.no_grad():
        logits, cache = bridge.run_with_cache(TOKENS)
        torch.testing.assert_close(logits, hf(TOKENS).logits, atol=1e-4, rtol=0)
    for i in range(2):
        t = ea.bridge_ssd_terms(bridge.blocks[i].mixer, cache, i)
        M = ea.ssd_effective_attention(t["dt"], t["A"], t["B"], t["C"])
        tl = cache.compute_ssm_effective_attention(layer=i, include_dt_scaling=True)
        torch.testing.assert_close(M, tl, atol=1e-6, rtol=1e-5)
        # and it reproduces HF's scan: y (before the gated norm) = Σ_k M x_k + D·x
        y = ea.apply_effective_attention(M, t["x"]) + t["D"][:, None] * t["x"]
        ref = cache[f"blocks.{i}.mixer.inner_norm.hook_in"]
        torch.testing.assert_close(y.reshape(ref.shape), ref, atol=1e-5, rtol=0)


def test_patterns_are_distributions_and_transformer_patterns_are_hook_pattern(tiny_model):
    ssm = tiny_model("mamba2", random=True)
    pats = ea.head_patterns(ssm, TOKENS)
    assert len(pats) == 2 and pats[0].shape == (2, 2, 11, 11)
    torch.testing.assert_close(pats[1].sum(-1), torch.ones(2, 2, 11))
    tr = tiny_model("transformer")
    pats = ea.head_patterns(tr, TOKENS)
    _, cache = tr.run_with_cache(TOKENS)
    torch.testing.assert_close(pats[1], cache["pattern", 1])
    assert ea.head_patterns(tiny_model("mamba"), TOKENS)[0].shape == (2, 16, 11, 11)  # channels


def test_a_model_without_heads_is_one_line(tiny_model):
    with pytest.raises(InputError, match="no attention heads .* no effective attention"):
        ea.head_patterns(tiny_model("lstm"), TOKENS)


@pytest.mark.parametrize("arch", ["mamba2", "mamba"])
def test_ssm_head_ablation(tiny_model, arch):
    """Zero-ablating every head of a layer leaves y = D·x there; an empty ablation changes
    nothing; mean-ablation writes the mean scan output; no hook stays attached."""
    model = tiny_model(arch, random=True)
    H = ea.n_heads(model)
    base = model(TOKENS)
    with ea.ablated_heads(model, [], "zero"):
        assert torch.equal(model(TOKENS), base)
    names = {"blocks.1.mixer.hook_x", "blocks.1.mixer.hook_y"}
    with ea.ablated_heads(model, [(1, h) for h in range(H)], "zero"):
        _, cache = model.run_with_cache(TOKENS, names_filter=lambda n: n in names)
    x = ea.mixer_x(model, cache, 1)
    D = model.blocks[1].mixer.D
    torch.testing.assert_close(cache["blocks.1.mixer.hook_y"].reshape(x.shape), D[:, None] * x)
    means = ea.head_means(model, TOKENS)
    with ea.ablated_heads(model, [(0, 1)], "mean", means):
        _, cache = model.run_with_cache(TOKENS, names_filter=lambda n: n == "blocks.0.mixer.hook_y")
        out = model(TOKENS)
    assert not torch.allclose(out, base)
    _, clean = model.run_with_cache(TOKENS, names_filter=lambda n: n == "blocks.0.mixer.hook_x")
    x = ea.mixer_x(model, clean, 0)
    y = cache["blocks.0.mixer.hook_y"].reshape(x.shape)
    mixer = model.blocks[0].mixer
    torch.testing.assert_close(y[:, :, 1], means[0][1] + mixer.D[1] * x[:, :, 1])
    assert torch.equal(model(TOKENS), base)
    with pytest.raises(InputError, match="no head"):
        with ea.ablated_heads(model, [(0, H)], "zero"):
            pass


def test_our_probe_on_our_mamba2_equals_transformer_lens_on_its_hf_export(tiny_model, randomize,
                                                                           tmp_path):
    """Export our Mamba-2 to HF (models.hf.export), boot the export through models.load (the
    TransformerBridge loader): our effective attention on our cache equals TransformerLens'
    compute_ssm_effective_attention on the bridge's cache."""
    export_hf = pytest.importorskip("models.hf.export")  # helper EXPORT's module

    model = randomize(tiny_model("mamba2", n_heads=4, n_groups=2, expand=4))
    ck = {"format": FORMAT, "model": model.to_checkpoint_dict(),
          "task": {"name": "copy", "config": {"D": 3, "max_len": 8}},
          "train": {"config": {}, "seed": 0, "step": 0, "samples_seen": 0},
          "state_dict": model.state_dict(), "history": []}
    path = save_checkpoint(ck, tmp_path / "m2.pt")
    export_hf.export(path, tmp_path / "hf")
    hf = load(str(tmp_path / "hf"))
    for block in hf.blocks:
        block.mixer.eager_scan = True
    tokens = TOKENS.clamp(max=6)
    with torch.no_grad():
        _, ours = model.run_with_cache(tokens)
        _, theirs = hf.run_with_cache(tokens)
    for i in range(2):
        torch.testing.assert_close(
            ea.effective_attention(model, ours, i),
            theirs.compute_ssm_effective_attention(layer=i, include_dt_scaling=True),
            atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def hf_models(hf_dirs, randomize):
    """Tiny HF Mamba, Mamba-2 and GPT-NeoX (tests/hf_fixtures.py) through models.load."""
    out = {}
    for k in ("mamba", "mamba2", "gpt_neox"):
        model = load(str(hf_dirs[k]))
        randomize(model.original_model)
        out[k] = model
    return out


@pytest.mark.parametrize("k", ["mamba", "mamba2"])
def test_hf_ssm_patterns_equal_transformer_lens_effective_attention(hf_models, k):
    model = hf_models[k]
    pats = ea.head_patterns(model, TOKENS)
    assert not any(b.mixer.eager_scan for b in model.blocks)  # switched back on exit
    with ea.eager_scan(model), torch.no_grad():
        _, cache = model.run_with_cache(TOKENS)
    for i in range(model.cfg.n_layers):
        tl = cache.compute_ssm_effective_attention(layer=i, include_dt_scaling=True)
        assert tl.shape[1] == ea.n_heads(model)
        torch.testing.assert_close(pats[i], ea.effective_pattern(tl), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("k", ["mamba", "mamba2"])
def test_hf_ssm_head_ablation_sets_the_scan_output(hf_models, k):
    """Zero: the ablated heads' scan output c_t·H_t is 0; mean: it is the head's mean; the
    other heads are untouched (read back from the ablated run's own state and c_t)."""
    model = hf_models[k]
    heads = [(1, 0), (1, 2)]
    means = ea.head_means(model, TOKENS)
    names = {"blocks.1.mixer.hook_ssm_state", ba._c_hook(model, 1)}

    def scan_out():
        with torch.no_grad():
            _, cache = model.run_with_cache(TOKENS, names_filter=lambda n: n in names)
        S = ba._state_per_head(model, cache["blocks.1.mixer.hook_ssm_state"])
        C = ba._bridge_C(model, 1, cache[ba._c_hook(model, 1)])[:, : S.shape[1]]
        return torch.einsum("bthpn,bthn->bthp", S, C.expand(-1, -1, S.shape[2], -1))

    with ea.eager_scan(model):
        clean = scan_out()
    for mode in ("zero", "mean"):
        with ea.ablated_heads(model, heads, mode, means):
            y = scan_out()
        for h in (0, 2):
            want = torch.zeros_like(y[:, :, h]) if mode == "zero" else means[1][h].expand_as(
                y[:, :, h])
            torch.testing.assert_close(y[:, :, h], want, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(y[:, :, 1], clean[:, :, 1])


def test_hf_transformer_heads_are_its_attention_patterns(hf_models):
    model = hf_models["gpt_neox"]
    assert ea.kind(model) == "attention" and ea.n_heads(model) == 4
    pats = ea.head_patterns(model, TOKENS)
    assert pats[0].shape == (2, 4, 11, 11)
    torch.testing.assert_close(pats[0].sum(-1), torch.ones(2, 4, 11))
