"""The zoo's exportable Mamba-2 copy model (issue 37): ``copy/mamba2_mlp``, a Mamba-2 with a
gated SiLU MLP, is accepted by ``models.hf.export`` as a BambaForCausalLM and opens in
transformers with our logits. (Its copying at the quick level is measured by training it:
README and the issue's report, not here.)"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

import models
from analyses import zoo
from models.checkpoint.layout import make_checkpoint
from models.checkpoint.write import save_checkpoint
from models.hf import export as export_hf
from models.hf.export_hooks import BAMBA
from models.hf.export_map import hf_class, refusal
from seqprobe.config import config_to_dict

NAME = "copy/mamba2_mlp"


def test_the_recipe_is_a_copy_mamba2_the_exporter_accepts(tmp_path):
    run = zoo.run_config(NAME, "quick", tmp_path)
    assert zoo.recipe(NAME).task == "copy" and zoo.recipe(NAME).arch == "mamba2"
    assert run.model.d_mlp > 0 and run.model.mlp_act == run.model.activation == "silu"
    assert refusal("mamba2", run.model) is None and hf_class("mamba2", run.model) == BAMBA
    # the quick Markov Mamba-2's ReLU MLP is what the exporter refuses
    markov = zoo.run_config("markov/mamba2", "quick", tmp_path).model
    assert refusal("mamba2", markov) is not None


def test_an_export_of_the_recipe_model_opens_in_transformers(tmp_path):
    run = zoo.run_config(NAME, "quick", tmp_path)
    torch.manual_seed(0)
    m = models.build_model("mamba2", config_to_dict(run.model)).eval()
    with torch.no_grad():  # off the init, so that every weight matters to the logits
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ck = make_checkpoint("mamba2", config_to_dict(run.model), "copy", config_to_dict(run.task),
                         {"step": 1}, m.state_dict())
    save_checkpoint(ck, tmp_path / "m.pt")
    report = export_hf.export(tmp_path / "m.pt", tmp_path / "hf")  # verifies logits and hooks
    assert report.hf_class == BAMBA and report.max_logit_diff < 1e-4
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tokens = torch.tensor([[26, 0, 1, 2, 3, 28, 0, 1, 2]])  # <BOS> a b c d <COPY> a b c
    with torch.no_grad():
        ours, theirs = m(tokens), hf(tokens).logits  # [batch, pos, vocab]
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)
    assert ours.std() > 1e-3
