"""Our hook names mean what TransformerLens means (issue 37): a TL notebook's read of
``attn.hook_q`` / ``hook_k`` (before RoPE), ``hook_rot_q`` / ``hook_rot_k`` (after it),
``ln*.hook_normalized`` (before the affine), ``hook_scale`` and ``hook_attn_scores`` (masked
scores at ``torch.finfo(dtype).min``) gives the same tensor on our model as on its export opened
through TransformerLens' ``TransformerBridge`` (``models.load`` of the HF directory)."""

from __future__ import annotations

import math

import pytest
import torch

import models
from models.checkpoint.layout import make_checkpoint
from models.checkpoint.write import save_checkpoint
from models.hf import export as export_hf
from seqprobe.config import config_to_dict

TASK = {"D": 9, "max_len": 5}  # copy: vocabulary 13
TOKENS = torch.tensor([[9, 0, 1, 2, 3, 10, 0, 1], [9, 3, 3, 1, 0, 10, 3, 3]])  # BOS … COPY …


def export_and_boot(model, tmp_path):
    """(our model in eval mode, its export booted by TransformerBridge)."""
    model = model.eval()
    ck = make_checkpoint(model.arch, config_to_dict(model.cfg), "copy", TASK, {"step": 1},
                         model.state_dict())
    save_checkpoint(ck, tmp_path / "m.pt")
    export_hf.export(tmp_path / "m.pt", tmp_path / "hf", verify=False)
    return model, models.load(tmp_path / "hf")


def both_caches(ours, bridge):
    with torch.no_grad():
        _, a = ours.run_with_cache(TOKENS)
        _, b = bridge.run_with_cache(TOKENS)
    return a, b


def test_transformer_hooks_read_what_tl_reads_on_the_export(tiny_model, tmp_path):
    ours, bridge = export_and_boot(tiny_model("transformer", random=True, vocab_size=13,
                                              pe="rope"), tmp_path)
    a, b = both_caches(ours, bridge)
    names = [f"blocks.{i}.{h}" for i in range(ours.cfg.n_layers)
             for h in ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z",
                       "attn.hook_pattern", "ln1.hook_normalized", "ln1.hook_scale",
                       "ln2.hook_normalized", "ln2.hook_scale")]
    names += ["ln_final.hook_normalized", "ln_final.hook_scale"]
    for name in names:
        assert a[name].shape == b[name].shape, name
        torch.testing.assert_close(a[name], b[name], atol=2e-5, rtol=0, msg=name)
    # the affine is not in hook_normalized: its output is hook_out (the bridge's name too)
    ln = ours.blocks[0].ln1
    torch.testing.assert_close(a["blocks.0.ln1.hook_out"],
                               a["blocks.0.ln1.hook_normalized"] * ln.w + ln.b)
    assert (a["blocks.0.ln1.hook_out"] - a["blocks.0.ln1.hook_normalized"]).abs().max() > 1e-2
    torch.testing.assert_close(a["blocks.1.ln1.hook_out"], b["blocks.1.ln1.hook_out"],
                               atol=2e-5, rtol=0)
    # masked scores: TL's finfo(dtype).min on both, the visible ones equal
    s_ours, s_tl = a["blocks.0.attn.hook_attn_scores"], b["blocks.0.attn.hook_attn_scores"]
    lowest = torch.finfo(s_ours.dtype).min
    masked = torch.ones(8, 8, dtype=torch.bool).triu(1).expand_as(s_ours)
    assert bool((s_ours[masked] == lowest).all()) and bool((s_tl[masked] == lowest).all())
    assert bool(torch.isfinite(s_ours).all())
    torch.testing.assert_close(s_ours[~masked], s_tl[~masked], atol=2e-5, rtol=0)
    # hook_rot_q / hook_rot_k are after RoPE: their dot products are the scores
    q, k = a["blocks.0.attn.hook_rot_q"], a["blocks.0.attn.hook_rot_k"]  # [b, pos, head, e]
    rot_scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(ours.cfg.d_head)
    torch.testing.assert_close(rot_scores[~masked], s_tl[~masked], atol=2e-5, rtol=0)
    assert (q - a["blocks.0.attn.hook_q"]).abs().max() > 1e-2  # RoPE moved them


def test_an_edit_of_pre_rope_q_reaches_the_output(tiny_model):
    """hook_q sits before RoPE in the computation, not only in the cache: replacing it by
    itself changes nothing, replacing it by zeros gives uniform causal attention."""
    m = tiny_model("transformer", random=True, pe="rope", n_layers=1).eval()
    x = TOKENS % m.cfg.vocab_size
    with torch.no_grad():
        ref = m(x)
        same = m.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_q", lambda t, hook: t + 0)])
        _, cache = m.run_with_cache(x)
        zero_q = [("blocks.0.attn.hook_q", lambda t, hook: torch.zeros_like(t))]
        with m.hooks(fwd_hooks=zero_q):
            _, zc = m.run_with_cache(x)
    torch.testing.assert_close(same, ref, atol=1e-6, rtol=0)
    pattern = zc["blocks.0.attn.hook_pattern"][0, 0]  # [q, k]
    uniform = torch.ones(8, 8).tril() / torch.arange(1, 9)[:, None]
    torch.testing.assert_close(pattern, uniform)
    assert (cache["blocks.0.attn.hook_pattern"][0, 0] - uniform).abs().max() > 1e-3


@pytest.mark.parametrize("overrides", [{}, {"d_mlp": 12, "mlp_act": "silu"}],
                         ids=["Mamba2ForCausalLM", "BambaForCausalLM"])
def test_ssm_norm_hooks_read_what_tl_reads_on_the_export(tiny_model, tmp_path, overrides):
    ours, bridge = export_and_boot(tiny_model("mamba2", random=True, vocab_size=13, **overrides),
                                   tmp_path)
    a, b = both_caches(ours, bridge)
    # the bridge calls a Bamba block's norms ln1 / ln2 (our norm / norm2: docs/hooks-vs-tl.md)
    pairs = {"ln_final": "ln_final", "blocks.0.norm": "blocks.0.norm",
             "blocks.1.norm": "blocks.1.norm"}
    if overrides:
        pairs = {"ln_final": "ln_final", "blocks.0.norm": "blocks.0.ln1",
                 "blocks.1.norm2": "blocks.1.ln2"}
    for mine, theirs in pairs.items():
        for h in ("hook_normalized", "hook_scale", "hook_out"):
            torch.testing.assert_close(a[f"{mine}.{h}"], b[f"{theirs}.{h}"], atol=2e-5, rtol=0,
                                       msg=f"{mine}.{h}")
    n = ours.ln_final
    torch.testing.assert_close(a["ln_final.hook_out"], a["ln_final.hook_normalized"] * n.weight)


def test_rmsnorm_scale_edit_propagates_and_reading_changes_nothing(tiny_model):
    m = tiny_model("mamba2", random=True, dtype=torch.float64).eval()
    x = TOKENS % m.cfg.vocab_size
    with torch.no_grad():
        ref = m(x)
        # the norm's hooks only (a mixer hook would switch the scan to its plain path)
        logits, _ = m.run_with_cache(x, names_filter=lambda n: ".norm" in n or "ln_" in n)
        doubled = m.run_with_hooks(x, fwd_hooks=[("ln_final.hook_scale",
                                                  lambda t, hook: 2 * t)])
    assert torch.equal(logits, ref)  # reading the norms' hooks leaves the numbers as they were
    with torch.no_grad():
        resid = m.run_with_cache(x, names_filter="blocks.1.hook_resid_post")[1][
            "blocks.1.hook_resid_post"]
        want = m.unembed(m.ln_final(resid) / 2)  # a doubled scale halves the normalised stream
    torch.testing.assert_close(doubled, want)
