"""TransformerLens' HookedTransformer surface on suite models (issue 47, models/tl_surface.py):
the same numbers as the model's HF export booted through ``TransformerBridge`` (the quick RoPE
copy recipe's model, and a NoPE one), ``generate`` with the task's ``<BOS>``, the tokenizer the
export ships, one-line refusals on SSMs, near matches for hook-name typos, and nnsight on the
default attention path. docs/tl_surface.md is the table of what works, differs or is refused."""

from __future__ import annotations

from tests import ROOT_DIR

import doctest
import re
from pathlib import Path

import pytest
import torch
from transformer_lens import FactoredMatrix
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoTokenizer

import models
from models.base import ActivationNotFound
from models.checkpoint.layout import make_checkpoint
from models.checkpoint.write import save_checkpoint
from models.constructions import build_hash_copy_transformer
from models.generation import greedy_decode
from models.hf import export as export_hf
from models.tl_surface import NotInThisModel
from seqprobe.config import config_to_dict
from seqprobe.errors import InputError
from tests.tiny import zoo_stand_in

WEIGHTS = ("W_E", "W_U", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O",
           "W_in", "W_out", "b_in", "b_out")
PROMPTS = ["abcd<COPY>ab", "bcad<COPY>bc"]  # <BOS> first, as the task writes them
ATOL = 1e-5


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


@pytest.fixture(scope="module", params=["copy/rope", "nope"])
def exported(request, tmp_path_factory, randomize):
    """(suite model, the bridge of its export, the export's directory, the final norm's bias
    shift the export stores): the quick RoPE copy recipe's model (its configs; weights moved
    off their init) and a tiny NoPE copy model, each exported and booted offline."""
    tmp = tmp_path_factory.mktemp("tl_surface")
    if request.param == "copy/rope":
        model = models.load(zoo_stand_in("copy/rope", tmp / "checkpoints"))
    else:
        model = models.build_model("transformer", dict(vocab_size=13, d_model=16, n_layers=2,
                                                       n_heads=4, d_mlp=32, pe="nope"))
        model.set_task("copy", {"D": 9, "max_len": 5})
    randomize(model, seed=3)
    model.eval()
    task = model.task
    ck = make_checkpoint(model.arch, config_to_dict(model.cfg), task.name,
                         config_to_dict(task.cfg), {"step": 1}, model.state_dict())
    save_checkpoint(ck, tmp / "m.pt")
    export_hf.export(tmp / "m.pt", tmp / "hf", verify=False)
    bridge = TransformerBridge.boot_transformers(str(tmp / "hf"), device="cpu")
    shift = export_hf.read_provenance(tmp / "hf").get("ln_final_shift")
    shift = torch.zeros(model.cfg.d_model) if shift is None else torch.tensor(shift)
    return model, bridge, tmp / "hf", shift


def test_weights_equal_the_bridges(exported):
    model, bridge, _, _ = exported
    for name in WEIGHTS:
        ours, theirs = getattr(model, name), getattr(bridge, name)
        assert ours.shape == theirs.shape, name  # TL's layout: W_Q [layer, head, d_model, d_head]
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0, msg=name)
    for name in ("OV", "QK"):
        ours, theirs = getattr(model, name), getattr(bridge, name)
        assert isinstance(ours, FactoredMatrix) and ours.shape == theirs.shape
        torch.testing.assert_close(ours.AB, theirs.AB, atol=ATOL, rtol=0, msg=name)
    # GPT-NeoX has no unembedding bias: the export moves ours into the final norm's bias
    assert torch.equal(model.b_U, model.unembed.bias)
    assert model.W_Q.shape == (model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_model,
                               model.cfg.d_head)
    with pytest.raises(NotInThisModel, match="no suite model has one") as e:
        _ = model.W_pos
    one_line(e.value)


def test_cache_methods_equal_the_bridges(exported):
    model, bridge, _, shift = exported
    tokens = model.to_tokens(PROMPTS)
    assert tokens[:, 0].eq(model.task_vocab.id("BOS")).all()
    with torch.no_grad():
        ours_logits, ours = model.run_with_cache(tokens)
        theirs_logits, theirs = bridge.run_with_cache(tokens)
    torch.testing.assert_close(ours_logits, theirs_logits, atol=ATOL, rtol=0)

    def same(a, b, what):
        assert a.shape == b.shape, what
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0, msg=what)

    stack, labels = ours.decompose_resid(return_labels=True)
    their_stack, their_labels = theirs.decompose_resid(return_labels=True)
    assert labels == their_labels and labels[0] == "embed" and "1_mlp_out" in labels
    same(stack, their_stack, "decompose_resid")
    same(ours.decompose_resid(apply_ln=True), theirs.decompose_resid(apply_ln=True),
         "decompose_resid(apply_ln=True)")
    same(ours.decompose_resid(layer=1, mlp_input=True, apply_ln=True),
         theirs.decompose_resid(layer=1, mlp_input=True, apply_ln=True), "at layer 1's MLP")
    # accumulated_resid(apply_ln=True) runs each state through the final LayerNorm itself: the
    # export's has our unembedding bias folded into its bias (the shift the export records)
    same(ours.accumulated_resid(apply_ln=True) + shift, theirs.accumulated_resid(apply_ln=True),
         "accumulated_resid(apply_ln=True)")
    same(ours.accumulated_resid(), theirs.accumulated_resid(), "accumulated_resid()")
    answer = tokens[:, -1]  # one token per row: [batch]
    same(ours.logit_attrs(stack, answer), theirs.logit_attrs(their_stack, answer), "logit_attrs")
    wrong = torch.full_like(answer, model.to_single_token("c"))
    same(ours.logit_attrs(stack, answer, incorrect_tokens=wrong),
         theirs.logit_attrs(their_stack, answer, incorrect_tokens=wrong), "logit_attrs diff")
    same(ours.apply_ln_to_stack(stack[:3], layer=1), theirs.apply_ln_to_stack(their_stack[:3],
                                                                              layer=1),
         "apply_ln_to_stack(layer=1)")
    same(ours.stack_head_results(), theirs.stack_head_results(), "stack_head_results")
    full = ours.get_full_resid_decomposition(expand_neurons=False)
    same(full, theirs.get_full_resid_decomposition(expand_neurons=False),
         "get_full_resid_decomposition")
    same(full.sum(0), ours["blocks.1.hook_resid_post"], "the decomposition sums to the stream")
    # every neuron (the quick recipe's d_mlp is 0, meaning 4·d_model: TL labels by the width)
    neurons, labels = ours.get_full_resid_decomposition(return_labels=True)
    their_neurons, their_labels = theirs.get_full_resid_decomposition(return_labels=True)
    assert labels == their_labels and len(labels) == neurons.shape[0]
    same(neurons, their_neurons, "get_full_resid_decomposition(expand_neurons=True)")
    lens, their_lens = ours.logit_lens(), theirs.logit_lens()  # TL's tool, on both caches
    assert lens.labels == their_lens.labels
    same(lens.readout.values, their_lens.readout.values, "logit_lens")
    same(model.tokens_to_residual_directions(answer),
         bridge.tokens_to_residual_directions(answer), "tokens_to_residual_directions")
    torch.testing.assert_close(model.loss_fn(ours_logits, tokens, per_token=True),
                               bridge.loss_fn(theirs_logits, tokens, per_token=True),
                               atol=ATOL, rtol=0)
    assert model.cfg.normalization_type == bridge.cfg.normalization_type == "LN"
    assert model.cfg.attn_only is bridge.cfg.attn_only is False


def test_tokenizer_is_the_exports(exported):
    model, _, hf_dir, _ = exported
    shipped = AutoTokenizer.from_pretrained(hf_dir)
    for text in PROMPTS:
        ids = model.tokenizer(text)["input_ids"]
        assert ids == shipped(text)["input_ids"] == model.to_tokens(text)[0].tolist()
        assert model.tokenizer.decode(ids) == model.to_string(torch.tensor(ids))
    assert model.tokenizer is model.tokenizer  # built once


# ---------------------------------------------------------------------------- generate
@pytest.fixture(scope="module")
def copier():
    """The hash-copy construction (Thm 2.3): it copies exactly, so generate's output is known."""
    model = build_hash_copy_transformer(2, 26)
    model.set_task("copy", {"D": 26})
    return model.eval()


def test_generate_copies_with_the_tasks_bos(copier):
    out = copier.generate("hello<COPY>", max_new_tokens=8, do_sample=False)
    assert out == "<BOS>hello<COPY>hello<EOS>"  # stops at <EOS>
    ids = copier.to_tokens(["abcdefg<COPY>", "gfedcba<COPY>"])
    assert ids[0, 0] == copier.task_vocab.id("BOS")
    got = copier.generate(ids, max_new_tokens=8, do_sample=False)  # ids in, ids out
    torch.testing.assert_close(got[:, ids.shape[1]:], greedy_decode(copier, ids, 8))
    assert copier.generate("abc<COPY>", max_new_tokens=2, do_sample=False,
                           return_type="tokens").shape == (1, 7)
    # sampling: a cold temperature or top_k=1 is the argmax; any draw is a token of the task
    for kw in (dict(temperature=1e-4), dict(top_k=1), dict(top_p=1e-6)):
        assert copier.generate("hello<COPY>", max_new_tokens=8, **kw).endswith("hello<EOS>")
    # TL's penalties: a heavy frequency penalty pushes the sampled copy off its letters
    assert copier.generate("hello<COPY>", max_new_tokens=8, top_k=1, freq_penalty=50.0) != \
        copier.generate("hello<COPY>", max_new_tokens=8, top_k=1)
    assert copier.generate(["ab<COPY>", "cd<COPY>"], max_new_tokens=4, do_sample=False) == \
        ["<BOS>ab<COPY>ab<EOS>", "<BOS>cd<COPY>cd<EOS>"]
    with pytest.raises(InputError, match="one length") as e:  # padding would be read as input
        copier.generate(["ab<COPY>", "abc<COPY>"])
    one_line(e.value)
    torch.manual_seed(0)
    drawn = copier.generate("ab<COPY>", max_new_tokens=5, temperature=50.0, stop_at_eos=False,
                            return_type="tokens")
    assert drawn.shape == (1, 9) and int(drawn.max()) < copier.task_vocab.size


def test_text_helpers(copier):
    assert copier.to_single_str_token(copier.task_vocab.id("COPY")) == "<COPY>"
    assert copier.get_token_position("a", "abca<COPY>abca") == 1  # <BOS> is position 0
    assert copier.get_token_position("a", "abca<COPY>abca", mode="last") == 9
    assert copier.get_token_position("a", "abca", prepend_bos=False) == 0
    with pytest.raises(InputError, match="does not occur") as e:
        copier.get_token_position("z", "abc")
    one_line(e.value)
    tokens = copier.to_tokens("abc<COPY>abc")
    torch.testing.assert_close(copier.loss_fn(copier(tokens), tokens),
                               copier(tokens, return_type="loss"))
    directions = copier.tokens_to_residual_directions(tokens)
    assert directions.shape == (1, tokens.shape[1], copier.cfg.d_model)
    torch.testing.assert_close(copier.tokens_to_residual_directions("<COPY>"),
                               copier.W_U[:, copier.task_vocab.id("COPY")])


# ---------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("arch,extra", [("mamba2", {}), ("mamba2", {"d_mlp": 12}),
                                        ("mamba", {}), ("lstm", {}), ("stu", {})])
def test_ssms_refuse_what_has_no_meaning_in_one_line(arch, extra, tiny_model, tokens):
    model = tiny_model(arch, random=True, **extra).eval()
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_O", "QK", "OV", "W_pos"):
        with pytest.raises(NotInThisModel) as e:
            getattr(model, name)
        assert name in one_line(e.value) and arch in one_line(e.value) or name == "W_pos"
        assert isinstance(e.value, InputError) and not hasattr(model, name)
    if arch != "stu":  # the STU's blocks have TL's MLP (W_in, b_in, W_out, b_out)
        with pytest.raises(NotInThisModel, match="W_in") as e:
            _ = model.W_in
        one_line(e.value)
    else:
        assert model.W_in.shape == (model.cfg.n_layers, model.cfg.d_model, model.cfg.d_mlp_)
    assert model.W_E.shape == (model.cfg.vocab_size, model.cfg.d_model)
    assert model.W_U.shape == (model.cfg.d_model, model.cfg.vocab_size)
    x = tokens(V=model.cfg.vocab_size)
    with torch.no_grad():
        logits, cache = model.run_with_cache(x)
    got = model.generate(x[:, :3], max_new_tokens=2, do_sample=False)
    torch.testing.assert_close(got[:, 3:], greedy_decode(model, x[:, :3], 2))
    with pytest.raises(NotInThisModel, match="accumulated_bias") as e:
        model.accumulated_bias(1)
    one_line(e.value)
    refusals = {"no attn_out": cache.decompose_resid,
                "TransformerLens' SSM bridge" if arch.startswith("mamba") else "needs SSM layers":
                cache.compute_ssm_state}
    if arch.startswith("mamba"):  # a Mamba block's norm is `norm`, not TL's ln1
        refusals["no blocks.1.ln1 "] = lambda: cache.accumulated_resid(layer=1, apply_ln=True)
    for match, call in refusals.items():
        with pytest.raises(InputError, match=match) as e:
            call()
        one_line(e.value)
    if arch == "lstm":  # its blocks are not residual: hook_h is a block's whole output
        with pytest.raises(ActivationNotFound, match="hook_resid_post") as e:
            cache.accumulated_resid(apply_ln=True)
        one_line(e.value)
        return
    # what does mean the same: the residual stream through the final norm, logit attributions
    acc = cache.accumulated_resid(apply_ln=True)
    assert acc.shape == (model.cfg.n_layers + 1, *x.shape, model.cfg.d_model)
    last = acc[-1] @ model.W_U + model.b_U
    torch.testing.assert_close(last, logits, atol=1e-5, rtol=0)
    lens = cache.logit_lens(return_type="logits").readout.values  # [stream, batch, vocab]
    torch.testing.assert_close(lens[-1], logits[:, -1], atol=1e-5, rtol=0)
    attrs = cache.logit_attrs(acc, x[:, -1])
    assert attrs.shape == (model.cfg.n_layers + 1, x.shape[0], x.shape[1])


# ---------------------------------------------------------------------------- hook names
def test_a_typod_hook_name_gives_near_matches(tiny_model):
    model = tiny_model("transformer")
    x = torch.tensor([[1, 2, 3]])
    typo = "blocks.0.attn.hook_patern"
    calls = [lambda: model.run_with_hooks(x, fwd_hooks=[(typo, lambda t, hook: t)]),
             lambda: model.run_with_hooks(x, bwd_hooks=[(typo, lambda t, hook: t)]),
             lambda: model.add_hook(typo, lambda t, hook: t)]

    def in_context():
        with model.hooks(fwd_hooks=[(typo, lambda t, hook: t)]):
            pass

    _, cache = model.run_with_cache(x)
    for call in [*calls, in_context, lambda: cache[typo]]:
        with pytest.raises(ActivationNotFound) as e:
            call()
        assert "'blocks.0.attn.hook_pattern'" in one_line(e.value)
        assert isinstance(e.value, KeyError)  # code that caught TL's KeyError still does
    assert not any(hp.fwd_hooks or hp.bwd_hooks for hp in model.hook_dict.values())
    with pytest.raises(ActivationNotFound, match="did you mean 'blocks.1.hook_resid_post'"):
        cache["blocks.1.hook_resid_psot"]
    with pytest.raises(ActivationNotFound) as e:  # nothing close: no guess
        model.run_with_hooks(x, fwd_hooks=[("zzz", lambda t, hook: t)])
    assert "did you mean" not in one_line(e.value)


# ---------------------------------------------------------------------------- nnsight
@pytest.mark.parametrize("pe", ["rope", "alibi", "hard_alibi"])
def test_nnsight_reads_the_pattern_on_the_default_path(pe, tiny_model):
    """nnsight replaces a module's forward instead of adding a torch hook: the fast attention
    path sees the trace (models.layers.traced) and computes the pattern, as for a TL hook."""
    nnsight = pytest.importorskip("nnsight")
    model = tiny_model("transformer", random=True, pe=pe).eval()
    assert model.blocks[0].attn.scan == "auto" and model.cfg.use_sdpa
    x = torch.tensor([[1, 2, 3, 1, 2, 3, 4]])
    with torch.no_grad():
        logits, cache = model.run_with_cache(x)
    wrapped = nnsight.NNsight(model)
    with wrapped.trace(x):
        scale = wrapped.blocks[0].ln1.hook_scale.output.save()
        pattern = wrapped.blocks[1].attn.hook_pattern.output.save()
        out = wrapped.output.save()
    torch.testing.assert_close(pattern, cache["blocks.1.attn.hook_pattern"])
    torch.testing.assert_close(scale, cache["blocks.0.ln1.hook_scale"])
    torch.testing.assert_close(out, logits)
    with wrapped.trace(x):  # an edit through nnsight: a uniform pattern in layer 1
        wrapped.blocks[1].attn.hook_pattern.output[:] = torch.tril(torch.ones(7, 7)) / \
            torch.arange(1, 8)[:, None]
        edited = wrapped.output.save()
    assert (edited - logits).abs().max() > 1e-4
    # outside a trace the wrapped model takes its fast path again
    assert model.blocks[1].attn._path(x.device) != "plain"


# ---------------------------------------------------------------------------- the docs page
def test_the_docs_page_runs():
    """docs/tl_surface.md's example runs as a doctest (its table is what this module tests)."""
    page = ROOT_DIR / "docs" / "tl_surface.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert blocks, "docs/tl_surface.md has no ```python block"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    globs: dict = {}
    for i, block in enumerate(blocks):
        test = doctest.DocTestParser().get_doctest(block, globs, f"tl_surface.md [{i}]",
                                                   str(page), 0)
        runner.run(test, out=report.append, clear_globs=False)
        globs = test.globs
    assert runner.failures == 0, "".join(report)
    assert runner.tries >= 10
