"""HuggingFace models through the one loader (models.hf, TransformerLens' TransformerBridge):
tiny GPT-NeoX, GPT-2, Mamba and Mamba-2 built from configs and saved with ``save_pretrained``
(tests/hf_fixtures.py), loaded by path exactly as a user's download would be."""

from __future__ import annotations

from tests import ROOT_DIR

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import models
from analyses.common import load_model
from analyses.copy_models import (
    COPY_OR_HF_ARCHS,
    COPY_TASKS,
    PRETRAINED_SEP,
    copy_prompts,
    label_for,
)
from models.hf import HF_MAMBA, HF_MAMBA2, HF_TRANSFORMER, HFModel, load_hf
from models.hf.checks import HFError
from probes.copying import accuracy_at
from seqprobe.errors import InputError
from tasks.base import make_generator
from tasks.copy import CopyConfig, CopyTask, DuplicatedNgramCopyTask, DupNgramConfig
from tests.hf_fixtures import CAUSAL_KINDS, CHARS, N_HEADS, N_LAYERS

ROOT = ROOT_DIR

ARCH = {"gpt_neox": HF_TRANSFORMER, "gpt2": HF_TRANSFORMER, "llama": HF_TRANSFORMER,
        "mamba": HF_MAMBA, "mamba2": HF_MAMBA2}


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


def run_cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m argv…`` from the repository root, as a user types it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("kind", [*CAUSAL_KINDS, "llama"])
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
    assert isinstance(e.value, InputError)  # every CLI turns it into one line and exit 2


def test_offline_hub_name_is_one_line(monkeypatch, tmp_path):
    # the hub cannot be reached: a closed port stands for a machine without internet
    for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(HFError) as e:
        models.load("EleutherAI/pythia-410m")
    assert "cannot be reached" in one_line(e.value)
    # HF's offline mode (read when huggingface_hub is imported: a fresh process, as typed)
    r = run_cli("analyses.length_generalization", "EleutherAI/pythia-410m",
                env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")})
    assert r.returncode == 2 and "not in the HuggingFace cache" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_directories_that_are_not_models(tmp_path):
    with pytest.raises(InputError, match="is a directory") as e:
        models.load(tmp_path)  # no config.json
    one_line(e.value)
    with pytest.raises(InputError, match="no such file"):
        models.load(tmp_path / "nope.pt")  # a checkpoint path stays a checkpoint path


def test_archs_refuses_an_hf_model_the_caller_cannot_use(hf_dirs):
    with pytest.raises(InputError) as e:
        models.load(hf_dirs["mamba"], archs=("transformer", HF_TRANSFORMER))
    assert "'hf_mamba'" in one_line(e.value)


# ---------------------------------------------------------------------------- dispatch in analyses
def test_an_analysis_that_needs_a_suite_checkpoint_refuses_an_hf_model(hf_dirs):
    for archs in (None, ("transformer",)):  # reads a task / a suite config
        with pytest.raises(InputError) as e:
            load_model(str(hf_dirs["gpt_neox"]), archs=archs)
        assert "not a HuggingFace model" in one_line(e.value)
    m = load_model(str(hf_dirs["gpt_neox"]), archs=COPY_OR_HF_ARCHS, tasks=COPY_TASKS)
    assert label_for(m) == "gpt_neox"


# ---------------------------------------------------------------------------- copy prompts
def test_ordinary_tokens_of_the_character_tokenizer(hf_dirs):
    m = load_hf(hf_dirs["gpt2"])
    ids = m.ordinary_token_ids()
    text = [m.tokenizer.decode([i]) for i in ids.tolist()]
    assert len(ids) == len(CHARS) - 2  # every character but the space and the newline
    assert " " not in text and "\n" not in text and set(text) <= set(CHARS)
    assert m.bos_ids() == [m.tokenizer.bos_token_id]  # TransformerLens prepends BOS to GPT-2
    assert load_hf(hf_dirs["gpt_neox"]).bos_ids() == []  # ... and none to GPT-NeoX (Pythia)


def test_pretrained_copy_prompts_have_the_paper_format(hf_dirs):
    m = load_hf(hf_dirs["gpt2"])
    plain = copy_prompts(m, CopyTask(CopyConfig()))
    batch = plain.eval_batch(4, make_generator(0), length=7)
    assert batch.prompts.shape == (4, plain.example_len(7) - 6) and batch.answers.shape == (4, 6)
    for p, a in zip(batch.prompts, batch.answers, strict=True):
        x = m.tokenizer.decode(p[1 : 1 + 7])
        assert m.tokenizer.decode(p[1:]) == f"{x}\n\n{x}\n\n{x[0]}"  # §4.2: twice + first word
        assert m.tokenizer.decode(a) == x[1:]
    dup = copy_prompts(m, DuplicatedNgramCopyTask(DupNgramConfig(min_len=9, max_len=9, n=3)))
    x = dup.eval_batch(8, make_generator(1), length=9).prompts[:, 1:10]  # [batch, L] tokens
    assert all(any(r[i : i + 3].tolist() == r[j : j + 3].tolist() for i in range(7)
                   for j in range(i + 3, 7)) for r in x)  # the duplicated 3-gram, in tokens
    assert set(x.flatten().tolist()) <= set(m.ordinary_token_ids().tolist())


class PeriodCopier(torch.nn.Module):
    """A model that copies perfectly when a prompt repeats with period ``period``: its logits
    at position i put all mass on token i + 1 − period. Shows that prompts and answers line up
    with the accuracy probes: any offset makes it fail."""

    def __init__(self, vocab: int, period: int):
        super().__init__()
        self.vocab, self.period = vocab, period
        self.device = torch.device("cpu")

    def forward(self, tokens):  # [batch, pos] -> [batch, pos, vocab]
        src = torch.roll(tokens, self.period - 1, dims=1)
        return torch.nn.functional.one_hot(src, self.vocab).float()


def test_copy_prompts_line_up_with_the_accuracy_probe(hf_dirs):
    m = load_hf(hf_dirs["gpt_neox"])
    prompts = copy_prompts(m, CopyTask(CopyConfig()))
    sep = len(m.text_ids(PRETRAINED_SEP))
    for L in (2, 9):
        right = PeriodCopier(m.cfg.vocab_size, L + sep)
        acc = accuracy_at(right, prompts, L, 16, 0, prompts.example_len(L))
        assert acc == {"string_acc": 1.0, "char_acc": 1.0}
        wrong = PeriodCopier(m.cfg.vocab_size, L + sep + 1)
        assert accuracy_at(wrong, prompts, L, 16, 0, prompts.example_len(L))["string_acc"] < 0.2


# ---------------------------------------------------------------------------- the CLIs, as typed


def test_duplicated_ngrams_cli_on_pretrained_models(hf_dirs, tmp_path):
    r = run_cli("analyses.duplicated_ngrams", str(hf_dirs["gpt_neox"]), str(hf_dirs["mamba"]),
                "--n", "1,2", "--lengths", "8", "--n-examples", "8", "--reference-n", "2",
                "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads((tmp_path / "duplicated_ngrams.json").read_text())
    assert list(d["curves"]) == ["gpt_neox", "mamba", "construction n=2"]
    for curve in d["curves"].values():
        (entry,) = curve
        assert entry["length"] == 8 and [row["n"] for row in entry["by_n"]] == [1, 2]
        assert 0 <= entry["baseline"]["string_acc"] <= 1
    assert (tmp_path / "duplicated_ngrams.png").stat().st_size > 0


def test_length_generalization_cli_on_pretrained_models(hf_dirs, tmp_path):
    r = run_cli("analyses.length_generalization", str(hf_dirs["gpt2"]), str(hf_dirs["mamba2"]),
                "--lengths", "2,6", "--n-examples", "8", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads((tmp_path / "length_generalization.json").read_text())
    assert list(d["curves"]) == ["gpt2", "mamba2"]
    assert [row["L"] for row in d["curves"]["gpt2"]] == [2, 6]
    assert d["train"]["mamba2"]["pretrained"] == str(hf_dirs["mamba2"])
    assert (tmp_path / "length_generalization.png").stat().st_size > 0
    # a string whose prompt does not fit GPT-2's context: one line, exit 2, nothing written
    r = run_cli("analyses.length_generalization", str(hf_dirs["gpt2"]), "--lengths", "100",
                "--n-examples", "2", "--out", str(tmp_path / "long"))
    assert r.returncode == 2 and "more than the model's context" in r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr  # no bar
    assert not (tmp_path / "long").exists()
