"""Exports opened by other tools (issue 30): nnsight 0.8 reads the activations HOOK_MAP names and
intervenes as our ``run_with_hooks`` does, and the docs' "Export to HuggingFace" page (nnsight
and TransformerLens in three lines each) runs as a doctest against an export made here.

nnsight is in the dev extra; without it these tests skip (the export page's TransformerLens part
still runs)."""

from __future__ import annotations


import pytest
import torch
from transformers import AutoTokenizer

from models.checkpoint.layout import make_checkpoint
from models.checkpoint.write import save_checkpoint
from models.hf import export as export_hf
from seqprobe.config import config_to_dict
from tasks.registry import make_task
from tests.docs_blocks import HAS_NNSIGHT, ROOT, python_blocks, run_doctests
from tests.tiny import zoo_stand_in

EXPORT_PAGE, SECTION = "docs/export.md", "# Export to HuggingFace"


def module_at(root, path: str):
    """``root``'s submodule at a HOOK_MAP path ("gpt_neox.layers.0.mlp"): works on a torch
    module and on nnsight's Envoy alike (list items by index)."""
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


@pytest.mark.parametrize("arch,overrides", [
    ("transformer", dict(pe="rope")),
    ("mamba2", dict(d_mlp=12, mlp_act="silu")),  # BambaForCausalLM
])
def test_nnsight_reads_and_patches_an_export_as_we_do(arch, overrides, tiny_model, tmp_path):
    """A string prompt (the tokenizer adds <BOS>), activations at mapped hooks of two layers and
    the final norm, and one intervention (block 0's MLP output zeroed) against ours."""
    nnsight = pytest.importorskip("nnsight")
    model = tiny_model(arch, random=True, vocab_size=13, **overrides).eval()  # copy, D = 9
    task = {"D": 9, "max_len": 5}
    ck = make_checkpoint(model.arch, config_to_dict(model.cfg), "copy", task, {"step": 1},
                         model.state_dict())
    save_checkpoint(ck, tmp_path / "m.pt")
    report = export_hf.export(tmp_path / "m.pt", tmp_path / "hf", verify=False)
    # nnsight 0.8 with transformers 5 guesses no tokenizer for a model it loads lazily (any
    # model, not only ours): the export page's three lines pass it
    lm = nnsight.TransformersModel(str(tmp_path / "hf"), task="text-generation",
                                   tokenizer=AutoTokenizer.from_pretrained(tmp_path / "hf"))
    prompt = "abcd<COPY>ab"
    vocab = make_task("copy", task).vocab
    tokens = torch.tensor([[vocab.id("BOS"), 0, 1, 2, 3, vocab.id("COPY"), 0, 1]])
    sites = export_hf.hook_sites(report.hf_class, model.cfg.n_layers)
    names = ["blocks.0.hook_mlp_out", "blocks.1.hook_resid_post", "ln_final.hook_out"]
    with torch.no_grad():
        ours_logits, cache = model.run_with_cache(tokens)
        zeroed = model.run_with_hooks(tokens, fwd_hooks=[
            ("blocks.0.hook_mlp_out", lambda t, hook: torch.zeros_like(t))])
    theirs = {}
    with lm.trace(prompt):  # modules in the order they run (nnsight requires it)
        ids = lm.inputs.save()
        for name in names:  # a decoder layer's output may be a tuple: HFSite.item of it
            out = module_at(lm, sites[name].module).output
            theirs[name] = export_hf.read_site(sites[name], (), {}, out).save()
        logits = lm.output.logits.save()
    assert ids[1]["input_ids"].tolist() == tokens.tolist()
    torch.testing.assert_close(logits, ours_logits, atol=1e-5, rtol=0)
    shift = export_hf.read_provenance(tmp_path / "hf").get("ln_final_shift")
    for name in names:
        ours = cache[name]
        if name == "ln_final.hook_out" and shift is not None:
            ours = ours + torch.tensor(shift)
        torch.testing.assert_close(theirs[name], ours, atol=1e-5, rtol=0, msg=name)
    with lm.trace(prompt):
        module_at(lm, sites["blocks.0.hook_mlp_out"].module).output[:] = 0  # an MLP's is a tensor
        patched = lm.output.logits.save()
    torch.testing.assert_close(patched, zeroed, atol=1e-5, rtol=0)
    assert (patched - logits).abs().max() > 1e-3  # the intervention did something


def readme_blocks() -> list[str]:
    """The ```python blocks of the docs' export page (docs/export.md), in order."""
    blocks = python_blocks(EXPORT_PAGE, SECTION)
    assert len(blocks) >= 2, f"{EXPORT_PAGE}'s {SECTION!r} section has fewer than two blocks"
    return blocks


def test_the_readme_export_section_runs(tmp_path, monkeypatch):
    """Each block runs as a doctest, in order and sharing names, on a stand-in of the quick RoPE
    copy checkpoint in the zoo's cache (its configs, untrained weights: no output shown depends
    on training). A
    block that imports nnsight is skipped where nnsight is not installed."""
    zoo_stand_in("copy/rope", tmp_path / "checkpoints")  # what zoo:copy/rope opens
    monkeypatch.chdir(tmp_path)  # the page's relative paths land here
    done = run_doctests(readme_blocks(), f"{EXPORT_PAGE}: export", ROOT / EXPORT_PAGE)
    assert done.runner.failures == 0, "".join(done.report)
    assert done.ran >= (3 if HAS_NNSIGHT else 2) and done.runner.tries >= 8  # found and run
