"""TransformerLens' weight processing on suite transformers (issue 55, models/weight_processing.py):
after ``process_weights`` the direct logit attributions of ``decompose_resid``'s components add
up to the logit difference (less the folded unembedding bias's difference, which no component
holds, as in TL), the forward computes what it did, and on a RoPE export the numbers are
``TransformerBridge``'s after ``enable_compatibility_mode()``; models that cannot be folded are
refused in one line."""

from __future__ import annotations

import pytest
import torch
from transformer_lens.model_bridge import TransformerBridge

import models
from models.hf import export as export_hf
from models.registry import model_class
from seqprobe.errors import InputError
from tests.export_hf_helpers import write_checkpoint

# the copy recipes' shapes (2 layers, Hard-ALiBi / RoPE / NoPE / ALiBi), small
SHAPE = dict(vocab_size=13, d_model=16, n_layers=2, n_heads=4, d_mlp=32)
PROMPTS = ["abcd<COPY>ab", "bcad<COPY>bc"]
TOL = 1e-4


def build(pe: str, randomize, **overrides):
    model = models.build_model("transformer", {**SHAPE, "pe": pe, **overrides})
    model.set_task("copy", {"D": 9, "max_len": 5})
    randomize(model, seed=5)  # norm weights ≠ 1, biases ≠ 0: every folded term matters
    return model.eval()


@pytest.mark.parametrize("pe", ["hard_alibi", "rope", "nope", "alibi"])
def test_folded_attributions_add_up_to_the_logit_difference(pe, randomize):
    model = build(pe, randomize)
    tokens = model.to_tokens(PROMPTS)
    right, wrong = tokens[:, -1], torch.full_like(tokens[:, -1], model.to_single_token("c"))
    with torch.no_grad():
        before_logits, before = model.run_with_cache(tokens)
        unfolded = before.logit_attrs(before.decompose_resid(pos_slice=-1), right,
                                      incorrect_tokens=wrong, pos_slice=-1).sum(0)
        assert model.process_weights() is model
        logits, cache = model.run_with_cache(tokens)
        attrs = cache.logit_attrs(cache.decompose_resid(pos_slice=-1), right,
                                  incorrect_tokens=wrong, pos_slice=-1)
    rows = torch.arange(len(tokens))
    diff = logits[rows, -1, right] - logits[rows, -1, wrong]
    bias = model.b_U[right] - model.b_U[wrong]
    torch.testing.assert_close(attrs.sum(0) + bias, diff, atol=TOL, rtol=0)
    # unfolded, the final norm's weight is missing from the sum (what the issue measured)
    assert (unfolded + bias - diff).abs().max() > 10 * TOL
    # the same function: logits up to a constant per position (center_unembed)
    centred = [x - x.mean(-1, keepdim=True) for x in (logits, before_logits)]
    torch.testing.assert_close(*centred, atol=TOL, rtol=0)
    for block in model.blocks:
        assert torch.equal(block.ln1.w, torch.ones_like(block.ln1.w))
        assert not block.attn.b_V.any()


def test_processing_twice_changes_nothing(randomize):
    model = build("hard_alibi", randomize).process_weights()
    once = {k: v.clone() for k, v in model.state_dict().items()}
    model.process_weights()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, once[k], atol=1e-6, rtol=0, msg=k)


def test_rope_export_equals_the_bridges_processed_numbers(randomize, tmp_path):
    model = build("rope", randomize)
    export_hf.export(write_checkpoint(model, tmp_path / "m.pt",
                                      task_config={"D": 9, "max_len": 5}),
                     tmp_path / "hf", verify=False)
    bridge = TransformerBridge.boot_transformers(str(tmp_path / "hf"), device="cpu")
    bridge.enable_compatibility_mode(disable_warnings=True)
    model.process_weights()
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_O", "W_in", "b_in", "W_out",
                 "b_out", "W_U", "W_E"):
        torch.testing.assert_close(getattr(model, name), getattr(bridge, name), atol=TOL, rtol=0,
                                   msg=name)
    for mode in "QKV":
        torch.testing.assert_close(model.all_composition_scores(mode),
                                   torch.as_tensor(bridge.all_composition_scores(mode).scores),
                                   atol=TOL, rtol=0, msg=f"composition {mode}")
    tokens = model.to_tokens(PROMPTS)
    right, wrong = tokens[:, -1], torch.full_like(tokens[:, -1], model.to_single_token("c"))
    with torch.no_grad():
        _, ours = model.run_with_cache(tokens)
        _, theirs = bridge.run_with_cache(tokens)
    stack, labels = ours.decompose_resid(return_labels=True)
    their_stack, their_labels = theirs.decompose_resid(return_labels=True)
    assert labels == their_labels
    torch.testing.assert_close(stack, their_stack, atol=TOL, rtol=0)
    torch.testing.assert_close(
        ours.logit_attrs(stack, right, incorrect_tokens=wrong),
        theirs.logit_attrs(their_stack, right, incorrect_tokens=wrong), atol=TOL, rtol=0)


def test_composition_scores_are_zero_unless_the_left_head_is_earlier(randomize):
    scores = build("hard_alibi", randomize).process_weights().all_composition_scores("K")
    assert scores.shape == (2, 4, 2, 4)
    assert not scores[1, :, 0].any() and not scores[0, :, 0].any()
    assert (scores[0, :, 1] > 0).all()
    with pytest.raises(InputError, match="mode must be one of"):
        build("nope", randomize).all_composition_scores("X")


@pytest.mark.parametrize("arch_config", [
    ("transformer", {**SHAPE, "normalization": "none"}, "has none"),
    ("mamba2", dict(model_class("mamba2").tiny_config), "not attention \\+ MLP blocks"),
])
def test_refused_in_one_line_where_nothing_can_be_folded(arch_config):
    arch, config, why = arch_config
    model = models.build_model(arch, config)
    with pytest.raises(InputError, match=why) as e:
        model.fold_layer_norm()
    assert "\n" not in str(e.value)
