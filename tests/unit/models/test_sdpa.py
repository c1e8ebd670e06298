"""The transformer's SDPA attention path (issue 20 item 4) against the explicit one.

tests/contract/test_model_contract.py compares the two paths in float64 for every positional encoding
(logits and every parameter's gradient, to rounding). Here: the same in float32, the dtype
models train in, for causal LMs and encoders, and the rules that pick the path: a hook on the
scores or the pattern forces the explicit path, which fires it as before. The model takes no
padding mask (``forward(tokens)`` only; the tasks pad with a token), so there is none to test.
"""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import models.transformer as transformer
from models.transformer import PES

CASES = [(pe, causal) for pe in PES for causal in (True, False)]
IDS = [f"{pe}-{'causal' if causal else 'encoder'}" for pe, causal in CASES]


@pytest.fixture
def sdpa_calls(monkeypatch):
    """A list that grows by one per call of F.scaled_dot_product_attention from the model."""
    calls = []
    real = transformer.F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(kwargs.get("attn_mask"))
        return real(*args, **kwargs)

    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", counted)
    return calls


@pytest.mark.parametrize("pe,causal", CASES, ids=IDS)
def test_sdpa_equals_explicit_in_float32(pe, causal, tiny_model, tokens, assert_paths_agree,
                                         sdpa_calls):
    m = tiny_model("transformer", random=True, pe=pe, causal=causal)
    x = tokens(3, 11, m.cfg.vocab_size)
    assert_paths_agree(m, x, "sdpa", atol=1e-5)
    assert len(sdpa_calls) == m.cfg.n_layers  # the sdpa run took the fused call, each layer
    # a bias-free encoding goes in as is_causal (no mask): PyTorch's fastest kernels need that
    assert all((mask is None) == (pe in ("nope", "rope")) for mask in sdpa_calls)


@pytest.mark.parametrize("pe,causal", CASES, ids=IDS)
def test_sdpa_call_fits_the_fused_kernel(pe, causal, tiny_model, tokens):
    """Every encoding's SDPA call is one PyTorch's flash kernel takes (on CPU too): a 3-D
    ALiBi mask was not, and fell back to the path that materialises the scores."""
    m = tiny_model("transformer", pe=pe, causal=causal)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # only that kernel: no fallback
        m(tokens(2, 9, m.cfg.vocab_size)).pow(2).mean().backward()


def test_sdpa_equals_explicit_for_a_sequence_classifier(tiny_model, tokens, assert_paths_agree):
    """The memorization experiments' model: a RoPE encoder with a pooled classification head."""
    m = tiny_model("transformer", random=True, pe="rope", causal=False, head="seq_cls",
                   n_classes=5)
    assert_paths_agree(m, tokens(3, 11, m.cfg.vocab_size), "sdpa", atol=1e-5)


@pytest.mark.parametrize("hook", ["hook_pattern", "hook_attn_scores"])
def test_a_hook_on_the_pattern_forces_the_explicit_path(hook, tiny_model, tokens, sdpa_calls):
    m = tiny_model("transformer", random=True, pe="hard_alibi")
    x = tokens(2, 9, m.cfg.vocab_size)
    with torch.no_grad():
        ref = m(x)
        assert len(sdpa_calls) == 2  # unhooked: SDPA in both layers
        seen = []
        out = m.run_with_hooks(x, fwd_hooks=[(f"blocks.0.attn.{hook}",
                                              lambda v, hook: seen.append(v.clone()))])
    assert len(sdpa_calls) == 3  # layer 0 explicit (its hook fired), layer 1 still SDPA
    assert len(seen) == 1 and seen[0].shape == (2, m.cfg.n_heads, 9, 9)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    _, cache = m.run_with_cache(x)
    assert len(sdpa_calls) == 3  # run_with_cache reads every pattern: no SDPA anywhere
    torch.testing.assert_close(cache[f"blocks.0.attn.{hook}"], seen[0])


def test_a_pattern_hook_changes_the_output(tiny_model, tokens):
    """The hooked pattern is the one used: ablating a head in it moves the logits (the
    explicit path really runs, it is not computed beside SDPA for show)."""
    m = tiny_model("transformer", random=True, pe="alibi")
    x = tokens(2, 9, m.cfg.vocab_size)

    def ablate(pattern, hook):
        pattern[:, 0] = 0.0
        return pattern

    with torch.no_grad():
        ref = m(x)
        out = m.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_pattern", ablate)])
    assert (out - ref).abs().max() > 1e-4


@pytest.mark.parametrize("pe", ["alibi", "hard_alibi", "rope"])
def test_bias_and_rotation_follow_the_dtype(pe, tiny_model, tokens):
    """A bf16 model (or bf16 autocast) gets its mask and rotation in bf16, cached per length,
    device and dtype: SDPA refuses mixed dtypes, and a float32 rotation made a bf16 RoPE
    model fail."""
    m = tiny_model("transformer", random=True, pe=pe)
    x = tokens(2, 9, m.cfg.vocab_size)
    with torch.no_grad():
        ref = m(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = m(x)
        m16 = m.to(torch.bfloat16)
        outs = {}
        for scan in ("sdpa", "plain"):
            m16.set_scan(scan)
            outs[scan] = m16(x)
    for out in (auto, *outs.values()):
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.05)
    keys = m16.blocks[0].attn._cache.keys()
    assert {dtype for (_, T, _, dtype) in keys if T == 9} >= {torch.float32, torch.bfloat16}
