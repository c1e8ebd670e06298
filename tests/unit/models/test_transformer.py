"""Hooked transformer: shapes, hooks, positional encodings (copy paper §2.2, App. A.1)."""

import math

import pytest
import torch

from models.transformer import PES, TransformerConfig, apply_rope, rope_cos_sin
from seqprobe.errors import InputError


@pytest.fixture
def tiny(tiny_model):
    """tiny(**overrides): the shared tiny transformer (vocab 11, d_model 16, 4 heads, d_mlp 32)."""
    return lambda **kw: tiny_model("transformer", **kw)


@pytest.mark.parametrize("pe", PES)
def test_patterns_are_causal_distributions(pe, tiny):
    """(Hook names and shapes: test_model_contract.py.) TransformerLens' ("pattern", layer)
    cache key reads hook_pattern; each row is a distribution over the keys up to the query."""
    m = tiny(pe=pe)
    _, cache = m.run_with_cache(torch.randint(0, 11, (3, 9)))
    pat = cache["pattern", 0]
    assert pat is cache["blocks.0.attn.hook_pattern"]
    torch.testing.assert_close(pat.sum(-1), torch.ones(3, 4, 9))
    assert (pat.triu(diagonal=1) == 0).all()


@pytest.mark.parametrize("pe", PES)
def test_per_head_results_sum_to_the_attention_output(pe, tiny):
    m = tiny(pe=pe)
    tokens = torch.randint(0, 11, (2, 7))
    _, cache = m.run_with_cache(tokens,
                                names_filter=lambda n: n.endswith(("hook_result", "attn_out")))
    torch.testing.assert_close(cache["blocks.0.attn.hook_result"].sum(2) + m.blocks[0].attn.b_O,
                               cache["blocks.0.hook_attn_out"], atol=1e-5, rtol=1e-5)


def test_sdpa_only_when_no_hook_reads_the_pattern(tiny):
    """Which attention path runs (the two are compared in test_model_contract.py)."""
    attn = tiny().blocks[0].attn
    assert attn._fast()  # use_sdpa, nothing hooked
    attn.hook_pattern.add_hook(lambda v, hook: v)
    assert not attn._fast()  # the pattern must be materialised
    attn.hook_pattern.remove_hooks()
    attn.scan = "plain"
    assert not attn._fast()
    off = tiny(use_sdpa=False).blocks[0].attn
    assert not off._fast()
    off.scan = "sdpa"
    assert off._fast()


def test_hard_alibi_heads_see_only_their_window(tiny):
    m = tiny(pe="hard_alibi", hard_alibi_heads=3, n_heads=4)
    _, cache = m.run_with_cache(torch.randint(0, 11, (2, 10)))
    pat = cache["pattern", 0]  # [batch, head, q, k]
    i = torch.arange(10)
    dist = i[:, None] - i[None, :]
    for h, w in enumerate((1, 2, 3)):
        outside = (dist >= w) | (dist < 0)
        assert pat[:, h][:, outside].abs().max() == 0, f"head {h} leaks outside window {w}"
        assert (pat[:, h][:, ~outside] > 0).all()
    assert torch.allclose(pat[:, 0], torch.eye(10).expand(2, 10, 10))  # window 1: own token only
    assert (pat[:, 3][:, dist >= 0] > 0).all()  # the unmasked head is NoPE: every earlier token


def test_alibi_scores_differ_from_nope_by_slope_times_distance(tiny):
    a, n = tiny(pe="alibi"), tiny(pe="nope")
    n.load_state_dict(a.state_dict())
    tokens = torch.randint(0, 11, (1, 8))
    _, ca = a.run_with_cache(tokens)
    _, cn = n.run_with_cache(tokens)
    sa, sn = ca["attn_scores", 0], cn["attn_scores", 0]
    i = torch.arange(8)
    dist = (i[:, None] - i[None, :]).float()
    causal = dist >= 0
    for h in range(4):
        m_h = 2.0 ** (-(h + 1) / 2)  # paper A.2
        diff = (sa[0, h] - sn[0, h])[causal]
        torch.testing.assert_close(diff, -m_h * dist[causal], atol=1e-5, rtol=1e-5)


def test_rope_scores_depend_only_on_relative_position(tiny):
    m = tiny(pe="rope", n_layers=1)
    # Same two tokens at distance 3, placed at different absolute offsets: equal scores.
    seq = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
    _, cache = m.run_with_cache(seq, names_filter=lambda n: n.endswith(("rot_q", "rot_k")))
    # after RoPE: hook_rot_q / hook_rot_k (TransformerLens' names); [pos, head, e]
    q, k = cache["blocks.0.attn.hook_rot_q"][0], cache["blocks.0.attn.hook_rot_k"][0]
    # Build rotated q/k for one fixed content vector at every position and compare dot products.
    content_q, content_k = torch.randn(1, 1, 4, 4), torch.randn(1, 1, 4, 4)
    cos, sin = rope_cos_sin(4, torch.arange(12), 10000.0)
    qs = apply_rope(content_q.expand(1, 12, 4, 4), cos, sin, 4)[0]
    ks = apply_rope(content_k.expand(1, 12, 4, 4), cos, sin, 4)[0]
    s = torch.einsum("qhe,khe->hqk", qs, ks)
    for delta in (0, 1, 3):
        diag = torch.stack([s[:, t + delta, t] for t in range(12 - delta)], dim=1)
        torch.testing.assert_close(diag, diag[:, :1].expand_as(diag), atol=1e-4, rtol=1e-4)
    assert q.shape == k.shape == (10, 4, 4)


def test_encoder_and_classification_heads(tiny):
    enc = tiny(causal=False, head="seq_cls", n_classes=5, pe="nope")
    tokens = torch.randint(0, 11, (3, 6))
    assert enc(tokens).shape == (3, 5)
    _, cache = enc.run_with_cache(tokens)
    assert (cache["pattern", 0].triu(1) > 0).any(), "encoder must attend to later tokens"
    tok = tiny(head="token_cls", n_classes=7)
    assert tok(tokens).shape == (3, 6, 7)


@pytest.mark.parametrize("bad", [dict(pe="sinusoid"), dict(d_model=10, n_heads=4),
                                 dict(hard_alibi_heads=9), dict(n_layers=0),
                                 dict(head="token_cls"), dict(alibi_slopes=(1.0,))])
def test_bad_configs_raise_task_error(bad, tiny):
    with pytest.raises(InputError):
        tiny(**bad)


def test_paper_alibi_slopes():
    cfg = TransformerConfig(n_heads=16, d_model=64, pe="alibi")
    assert cfg.slopes[0] == pytest.approx(2 ** -0.5)
    assert cfg.slopes[-1] == pytest.approx(2**-8)
    assert math.isclose(TransformerConfig(n_heads=16, d_model=64).M, 8)
