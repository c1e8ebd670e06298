"""HuggingFace models through the one loader (models.hf, TransformerLens' TransformerBridge):
tiny GPT-NeoX, GPT-2, Mamba and Mamba-2 built from configs and saved with ``save_pretrained``
(tests/hf_fixtures.py), loaded by path exactly as a user's download would be."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

import models
from models.hf import HF_MAMBA, HF_MAMBA2, HF_TRANSFORMER, HFError, HFModel, load_hf
from tasks.base import TaskError
from tests.hf_fixtures import CAUSAL_KINDS, N_HEADS, N_LAYERS, save_tiny_hf

ARCH = {"gpt_neox": HF_TRANSFORMER, "gpt2": HF_TRANSFORMER, "mamba": HF_MAMBA,
        "mamba2": HF_MAMBA2}


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {kind: save_tiny_hf(kind, root) for kind in (*CAUSAL_KINDS, "bert")}


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
def test_bridge_logits_equal_hf_and_interface(hf_dirs, kind):
    path = hf_dirs[kind]
    m = models.load(path)  # the dispatch: a directory with config.json is an HF model
    assert isinstance(m, HFModel) and not m.training
    assert m.arch == ARCH[kind] and m.name == kind
    assert m.cfg.n_layers == N_LAYERS and m.cfg.vocab_size == len(m.tokenizer)
    assert m.cfg.n_heads == (1 if kind == "mamba" else N_HEADS)
    assert m.checkpoint["task"] is None and m.checkpoint["model"]["source"] == str(path)
    hf = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    tokens = m.to_tokens(["abcab cabca", "hello world"])  # [batch, pos]
    assert m.to_string(tokens[1]).endswith("hello world")
    with torch.no_grad():
        ours, ref = m(tokens), hf(tokens).logits  # [batch, pos, vocab]
    assert ours.shape == ref.shape == (2, tokens.shape[1], m.cfg.vocab_size)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)
    assert torch.allclose(m.log_probs(tokens).exp().sum(-1), torch.ones(2, tokens.shape[1]))
    assert ref.abs().max() > 1e-3  # the comparison is not between two zero tensors


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
def test_hook_names_and_cache(hf_dirs, kind):
    m = load_hf(hf_dirs[kind], "cpu")
    names = set(m.hook_names())
    if ARCH[kind] == HF_TRANSFORMER:
        need = [f"blocks.{i}.attn.hook_{h}" for i in range(N_LAYERS)
                for h in ("pattern", "attn_scores", "q", "k", "v", "z")]
    else:
        need = [f"blocks.{i}.mixer.hook_{h}" for i in range(N_LAYERS)
                for h in ("in_proj", "conv", "ssm_out")]
    need += [f"blocks.{i}.hook_resid_{p}" for i in range(N_LAYERS) for p in ("pre", "post")]
    assert set(need) <= names, sorted(set(need) - names)
    tokens = m.to_tokens("abcabc")
    logits, cache = m.run_with_cache(tokens)
    if ARCH[kind] == HF_TRANSFORMER:
        pattern = cache["blocks.1.attn.hook_pattern"]  # [batch, head, query, key]
        assert pattern.shape == (1, N_HEADS, tokens.shape[1], tokens.shape[1])
        torch.testing.assert_close(pattern.sum(-1), torch.ones(1, N_HEADS, tokens.shape[1]))
        assert torch.all(pattern.triu(1) == 0)  # causal
    # a hook that changes nothing leaves the logits alone; one that zeroes the residual does not
    same = m.run_with_hooks(tokens, fwd_hooks=[("blocks.0.hook_resid_post", lambda x, hook: x)])
    torch.testing.assert_close(same, logits)
    zero = m.run_with_hooks(tokens, fwd_hooks=[("blocks.0.hook_resid_post",
                                                lambda x, hook: torch.zeros_like(x))])
    assert not torch.allclose(zero, logits)
    assert not any(hp.fwd_hooks for hp in m.hook_dict.values())  # no hook left attached


def test_non_causal_model_is_one_line(hf_dirs):
    with pytest.raises(HFError) as e:
        models.load(hf_dirs["bert"])
    assert "not a causal language model" in one_line(e.value)
    assert isinstance(e.value, TaskError)  # every CLI turns it into one line and exit 2


def test_offline_hub_name_is_one_line(monkeypatch):
    # the hub cannot be reached: a closed port stands for a machine without internet
    for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(HFError) as e:
        models.load("EleutherAI/pythia-410m")
    assert "cannot be reached" in one_line(e.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HFError) as e:
        load_hf("EleutherAI/pythia-410m")
    assert "not in the HuggingFace cache" in one_line(e.value)


def test_directories_that_are_not_models(tmp_path):
    with pytest.raises(TaskError, match="is a directory") as e:
        models.load(tmp_path)  # no config.json
    one_line(e.value)
    with pytest.raises(TaskError, match="no such file"):
        models.load(tmp_path / "nope.pt")  # a checkpoint path stays a checkpoint path


def test_archs_refuses_an_hf_model_the_caller_cannot_use(hf_dirs):
    with pytest.raises(TaskError) as e:
        models.load(hf_dirs["mamba"], archs=("transformer", HF_TRANSFORMER))
    assert "'hf_mamba'" in one_line(e.value)
