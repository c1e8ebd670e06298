"""Export to HuggingFace (issue 19, item 5; issue 30): every exportable architecture and PE, built
tiny with every parameter moved off its init, comes back from ``from_pretrained`` with our logits
(float32, eager attention, 1e-5) and our activations at every hook of ``HOOK_MAP``; the tokenizer
keeps our ids, adds <BOS> and refuses foreign symbols; every refused configuration is one line and
writes nothing; the provenance is readable, a bfloat16 checkpoint keeps its dtype and an export
boots in TransformerLens (the output directory and the command line:
tests/e2e/test_export_hf_out_dir.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as tf
from tokenizers import Tokenizer
from transformer_lens.model_bridge import TransformerBridge

from models.hf import export as export_hf
from models.hf import export_hooks, export_map
from models.hf.export import export, main
from models.tokenizer import hf_tokenizer
from seqprobe.config import config_to_dict
from tasks.registry import make_task
from tests.export_hf_helpers import copy_task_config, leftovers, write_checkpoint

# (arch, config overrides of the tiny config): every exportable PE and each rewrite the export
# makes (parallel residual, partial rotary, relu MLP; no D, no decay, no conv, biases, groups)
EXPORTABLE = {
    "rope": ("transformer", dict(pe="rope")),
    "rope_partial_parallel_relu": ("transformer", dict(pe="rope", rotary_frac=0.5,
                                                       parallel_residual=True, act_fn="relu",
                                                       rope_base=500.0, ln_eps=1e-6)),
    "nope": ("transformer", dict(pe="nope")),
    "mamba2": ("mamba2", dict(n_groups=2)),
    "mamba2_no_D_decay_conv": ("mamba2", dict(use_D=False, decay=False, conv=False,
                                              proj_bias=True)),
    "mamba": ("mamba", dict()),
    "mamba_no_D_conv_bias": ("mamba", dict(use_D=False, conv=False, proj_bias=True,
                                           conv_bias=False, dt_rank=3)),
    # Mamba-2 with the Markov paper's gated MLP (SiLU) -> Bamba; the paper's init and no D too
    "mamba2_mlp": ("mamba2", dict(d_mlp=12, mlp_act="silu", n_groups=2)),
    "mamba2_mlp_paper_init_no_D_decay_conv": ("mamba2", dict(
        d_mlp=12, mlp_act="silu", paper_init=True, use_D=False, decay=False, conv=False,
        proj_bias=True)),
}

# refused configurations and a word of the line that says why
REFUSED = {
    "hard_alibi": ("transformer", dict(pe="hard_alibi"), "Hard-ALiBi"),
    "alibi": ("transformer", dict(pe="alibi"), "ALiBi"),
    "encoder": ("transformer", dict(pe="rope", causal=False), "encoder"),
    "no_norm": ("transformer", dict(pe="rope", normalization="none"), "normalization"),
    "stu": ("stu", dict(), "Spectral"),
    "lstm": ("lstm", dict(), "LSTM"),
    "mambazero": ("mambazero", dict(), "MambaZero"),
    "mamba2_relu_mlp": ("mamba2", dict(d_mlp=8), "one activation (hidden_act)"),
    "mamba2_ungated_mlp": ("mamba2", dict(d_mlp=8, mlp_gated=False, mlp_act="silu"),
                           "gates it"),
    "markov_paper_layernorm": ("mamba2", dict(norm="layernorm"), "bias-free LayerNorm"),
    "markov_paper_norm_before_gate": ("mamba2", dict(norm_before_gate=True), "norm(y) ⊙"),
    "markov_paper_model": ("mamba2", dict(d_mlp=8, norm="layernorm", norm_before_gate=True,
                                          use_D=False, mlp_act="silu", paper_init=True),
                           "norm=layernorm"),
    "mamba_mlp": ("mamba", dict(d_mlp=8), "Mamba-1"),
    "mamba2_relu": ("mamba2", dict(activation="relu"), "silu"),
    "mamba_no_gate": ("mamba", dict(gated=False), "silu(z)"),
    "mamba_unembed_bias": ("mamba", dict(unembed_bias=True), "lm_head has no bias"),
}


def hf_logits(out_dir: Path, tokens: torch.Tensor) -> torch.Tensor:
    hf = tf.AutoModelForCausalLM.from_pretrained(out_dir, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(tokens).logits


def hf_run(out_dir: Path, tokens: torch.Tensor, sites: dict) -> tuple[torch.Tensor, dict]:
    """(logits, {our hook name: HF activation}) of the export, read by forward hooks on the
    modules ``sites`` (export_hf.hook_sites) names, as a user of HOOK_MAP would."""
    hf = tf.AutoModelForCausalLM.from_pretrained(out_dir, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    acts, handles = {}, []
    for name, site in sites.items():
        def read(module, args, kwargs, out, name=name, site=site):
            if site.read == "input":  # the first input, passed by position or by name
                acts[name] = args[0] if args else next(iter(kwargs.values()))
            else:
                acts[name] = out[site.item] if isinstance(out, tuple) else out
        handles.append(hf.get_submodule(site.module).register_forward_hook(read,
                                                                           with_kwargs=True))
    try:
        with torch.no_grad():
            logits = hf(tokens).logits
    finally:
        for h in handles:
            h.remove()
    return logits, acts


def compare_hooks(model, out_dir: Path, x: torch.Tensor, hf_class: str) -> None:
    """Every HOOK_MAP hook equals the HF module's activation (the final LayerNorm up to the
    shift the export stores)."""
    sites = export_hf.hook_sites(hf_class, model.cfg.n_layers)
    with torch.no_grad():
        ours_logits, cache = model.run_with_cache(x)
    logits, acts = hf_run(out_dir, x, sites)
    torch.testing.assert_close(logits, ours_logits, atol=1e-5, rtol=0)
    shift = export_hf.read_provenance(out_dir).get("ln_final_shift")
    for name in sites:
        if name not in cache.cache_dict:  # a parallel-residual block has no resid_mid
            assert name.endswith("hook_resid_mid") and model.cfg.parallel_residual, name
            continue
        assert name in acts, f"{sites[name].module} did not run"
        ours = cache[name]
        if name == "ln_final.hook_out" and shift is not None:
            ours = ours + torch.tensor(shift, dtype=ours.dtype)
        theirs = acts[name]
        assert theirs.numel() == ours.numel(), (name, theirs.shape, ours.shape)
        torch.testing.assert_close(theirs, ours.reshape(theirs.shape), atol=1e-5, rtol=0,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("name", list(EXPORTABLE))
def test_export_gives_our_logits_and_activations(name, tiny_model, tokens, tmp_path):
    """Logits, and every activation HOOK_MAP names, equal ours (float32, eager attention)."""
    arch, overrides = EXPORTABLE[name]
    model = tiny_model(arch, random=True, **overrides).eval()
    ck = write_checkpoint(model, tmp_path / "m.pt")
    report = export(ck, tmp_path / "hf", verify=False)  # compared here, independently
    x = tokens(B=3, T=11, V=model.cfg.vocab_size)  # crosses Mamba-2's chunks of 4
    compare_hooks(model, tmp_path / "hf", x, report.hf_class)
    config = tf.AutoConfig.from_pretrained(tmp_path / "hf")
    assert config.architectures == [report.hf_class] == [export_map.hf_class(arch, model.cfg)]
    assert config.seqprobe["arch"] == arch
    assert config.seqprobe["config"] == config_to_dict(model.cfg) | {
        k: list(v) for k, v in config_to_dict(model.cfg).items() if isinstance(v, tuple)}
    assert config.seqprobe["task"]["name"] == "copy" and config.seqprobe["step"] == 7
    assert config.tie_word_embeddings is False
    assert not leftovers(tmp_path), "a temp directory was left beside OUT_DIR"
    if arch == "transformer":  # what transformers 4.x reads (its default fraction is 0.25)
        raw = json.loads((tmp_path / "hf" / "config.json").read_text())
        frac = model.cfg.rotary_frac if model.cfg.pe == "rope" else 0.0
        assert (raw["rotary_pct"], raw["rotary_emb_base"]) == (frac, model.cfg.rope_base)


# one model of each class HOOK_MAP covers (the activation test above compares them all)
HOOK_MAP_MODELS = {"GPTNeoXForCausalLM": ("transformer", {"pe": "rope"}),
                   "Mamba2ForCausalLM": ("mamba2", {}),
                   "BambaForCausalLM": ("mamba2", {"d_mlp": 12, "mlp_act": "silu"}),
                   "MambaForCausalLM": ("mamba", {})}


def test_hook_map_names_our_hooks(tiny_model):
    """Every HOOK_MAP key is a hook point of the models exported as that class (a typo would
    never fire, and the comparison above would skip it silently)."""
    assert set(HOOK_MAP_MODELS) == set(export_hooks.HOOK_MAP)
    for cls, (arch, overrides) in HOOK_MAP_MODELS.items():
        model = tiny_model(arch, **overrides)
        assert export_map.hf_class(arch, model.cfg) == cls
        sites = export_hf.hook_sites(cls, model.cfg.n_layers)
        assert set(sites) <= set(model.hook_dict), (cls, set(sites) - set(model.hook_dict))
        assert len(sites) == sum(model.cfg.n_layers if "{i}" in k else 1
                                 for k in export_hooks.HOOK_MAP[cls])


def test_ln_final_shift_is_what_the_fold_needs(tiny_model, tmp_path):
    """GPT-NeoX's final LayerNorm holds our unembedding bias (no lm_head bias): its output is
    ours plus the stored shift, and with a zero unembedding bias nothing is shifted."""
    model = tiny_model("transformer", random=True, pe="rope")
    export(write_checkpoint(model, tmp_path / "m.pt"), tmp_path / "hf", verify=False)
    shift = torch.tensor(export_hf.read_provenance(tmp_path / "hf")["ln_final_shift"])
    W, c = model.unembed.weight.detach().double(), model.unembed.bias.detach().double()
    torch.testing.assert_close(W @ shift.double(), c, atol=1e-6, rtol=0)  # same logits
    with torch.no_grad():
        model.unembed.bias.zero_()
    export(write_checkpoint(model, tmp_path / "z.pt"), tmp_path / "hz", verify=False)
    assert "ln_final_shift" not in export_hf.read_provenance(tmp_path / "hz")


def test_a_wrong_map_is_caught_and_nothing_is_written(tiny_model, tmp_path, monkeypatch):
    """The export's own check compares logits: dropping the unembedding bias (a map that loses
    a term) is refused, and OUT_DIR is not created."""
    model = tiny_model("transformer", random=True, pe="rope")
    ck = write_checkpoint(model, tmp_path / "m.pt")
    monkeypatch.setattr(export_map, "fold_unembed_bias", lambda W, c, b: (b, 0.0))
    assert main([str(ck), str(tmp_path / "hf")]) == 2
    assert not (tmp_path / "hf").exists()
    assert not leftovers(tmp_path)


def test_unembedding_bias_that_cannot_be_folded_is_refused(tiny_model, tmp_path, capsys):
    """vocab > d_model: a generic bias is off the span of W_U's columns, so GPT-NeoX (no lm_head
    bias) cannot compute the logits; with a zero bias the same shapes export exactly."""
    model = tiny_model("transformer", random=True, pe="rope", vocab_size=30)  # d_model 16
    ck = write_checkpoint(model, tmp_path / "m.pt")
    assert main([str(ck), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be moved" in err and "vocab 30 > d_model 16" in err
    assert not (tmp_path / "hf").exists()
    with torch.no_grad():
        model.unembed.bias.zero_()
    ck = write_checkpoint(model, tmp_path / "zero.pt")
    report = export(ck, tmp_path / "hf")
    assert report.notes == [] and report.max_logit_diff < 1e-5


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_is_one_line_and_writes_nothing(name, tiny_model, tmp_path, capsys):
    arch, overrides, word = REFUSED[name]
    if name == "mamba_unembed_bias":
        model = tiny_model(arch, random=True, **overrides)
    else:
        model = tiny_model(arch, **overrides)
    task_config = (copy_task_config(model.cfg.vocab_size) if model.cfg.vocab_size > 5
                   else {"S": model.cfg.vocab_size})
    task = "copy" if model.cfg.vocab_size > 5 else "markov"
    ck = write_checkpoint(model, tmp_path / "m.pt", task, task_config)
    assert main([str(ck), str(tmp_path / "out" / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: refused:") and word in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task,config", [("copy", {"D": 7}), ("phonebook", {}),
                                         ("markov", {"S": 12}), ("induction", {})])
def test_tokenizer_keeps_our_ids(task, config):
    """Our text form of a task batch (Vocab.decode) encodes to the same ids and decodes back,
    for one-character alphabets (spaces and newlines included) and multi-character ones; a
    plain string gets <BOS> in front where the task has one (issue 30: it predicted wrong
    without); a symbol outside the vocabulary is an error, never a silent id (issue 30)."""
    t = make_task(task, config)
    tok = hf_tokenizer(t.vocab, t.vocab.size)
    assert len(tok) == t.vocab.size
    bos = [t.vocab.id("BOS")] if "BOS" in t.vocab.specials else []
    for row in t.batch(3, torch.Generator().manual_seed(0)).tokens.tolist():
        text = t.vocab.decode(row)
        assert tok(text, add_special_tokens=False).input_ids == row
        assert tok.decode(row) == text
        body = row[1:] if row[:1] == bos else row
        assert tok(t.vocab.decode(body)).input_ids == bos + body
    for s in t.vocab.specials:
        assert tok.convert_tokens_to_ids(f"<{s}>") == t.vocab.id(s)
    foreign = "€" if all(len(a) == 1 for a in t.vocab.alphabet) else "s99"
    with pytest.raises(Exception, match="(?i)unk"):  # the tokenizers library's bare Exception
        tok(t.vocab.alphabet[0] + " " + foreign)
    assert tok.unk_token is None


def test_exported_tokenizer_and_special_ids(tiny_model, tmp_path):
    model = tiny_model("transformer", random=True, pe="rope", vocab_size=13)  # copy D = 9
    ck = write_checkpoint(model, tmp_path / "m.pt")
    export(ck, tmp_path / "hf", verify=False)
    vocab = make_task("copy", copy_task_config(13)).vocab
    tok = tf.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = [vocab.id("BOS"), 0, 8, 3, vocab.id("COPY"), 0, 8, 3, vocab.id("EOS")]
    assert tok(vocab.decode(ids), add_special_tokens=False).input_ids == ids
    assert tok(vocab.decode(ids[1:])).input_ids == ids  # <BOS> by the post-processor
    assert tok("a i d <COPY>").input_ids == ids[:5]  # spaces only separate, as in to_tokens
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<BOS>", "<EOS>", "<PAD>")
    assert "<COPY>" in tok.all_special_tokens
    # the form transformers 4.x reads too: a class name it knows, extra specials as a list
    raw = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert raw["tokenizer_class"] == "PreTrainedTokenizerFast" and raw["add_bos_token"] is True
    assert raw["additional_special_tokens"] == ["<COPY>"] and "extra_special_tokens" not in raw
    # tokenizer.json alone (the tokenizers library, other clients) adds <BOS> and names no
    # unknown token it does not have
    fast = json.loads((tmp_path / "hf" / "tokenizer.json").read_text())
    assert fast["model"]["unk_id"] is None and "unk_token" not in fast["model"]
    assert Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json")).encode("aid").ids == \
        ids[:4]
    config = tf.AutoConfig.from_pretrained(tmp_path / "hf")
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        vocab.id("BOS"), vocab.id("EOS"), vocab.id("PAD"))


def test_tokenizer_pads_a_wider_embedding():
    vocab = make_task("copy", {"D": 3}).vocab
    tok = hf_tokenizer(vocab, vocab.size + 2)
    assert len(tok) == vocab.size + 2
    assert tok.convert_tokens_to_ids("<unused1>") == vocab.size + 1


def test_provenance_is_readable(tiny_model, tmp_path):
    model = tiny_model("mamba", random=True)
    ck = write_checkpoint(model, tmp_path / "m.pt")
    export(ck, tmp_path / "hf", verify=False)
    prov = export_hf.read_provenance(tmp_path / "hf")
    assert prov["arch"] == "mamba" and prov["task"] == {"name": "copy",
                                                        "config": copy_task_config(7)}
    assert prov["digest"].startswith("sha256:")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.json").write_text('{"model_type": "gpt2"}')
    assert export_hf.read_provenance(tmp_path / "plain") is None


@pytest.mark.parametrize("arch", ["transformer", "mamba2"])
def test_bfloat16_checkpoint_keeps_its_dtype(arch, tiny_model, tokens, tmp_path):
    """A half-precision checkpoint is written in its own dtype; the export's check (and this
    test) compare both models upcast to float32, where only the mapping can differ."""
    extra = {"pe": "rope"} if arch == "transformer" else {}
    model = tiny_model(arch, random=True, dtype=torch.bfloat16, **extra)
    ck = write_checkpoint(model, tmp_path / "m.pt")
    report = export(ck, tmp_path / "hf")
    # GPT-NeoX holds our unembedding bias in its final LayerNorm bias, rounded to bfloat16
    atol = 1e-5 + 2 * report.rounding
    assert (report.rounding > 0) == (arch == "transformer")
    assert report.max_logit_diff < atol
    assert tf.AutoConfig.from_pretrained(tmp_path / "hf").dtype in ("bfloat16", torch.bfloat16)
    hf = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert next(hf.parameters()).dtype == torch.bfloat16
    x = tokens(V=model.cfg.vocab_size)
    with torch.no_grad():
        ours = model.float()(x)
    torch.testing.assert_close(hf_logits(tmp_path / "hf", x), ours, atol=atol, rtol=0)


@pytest.mark.parametrize("arch,overrides", [("transformer", {"pe": "rope"}), ("mamba2", {}),
                                            ("mamba2", {"d_mlp": 12, "mlp_act": "silu"})])
def test_export_boots_in_transformerlens(arch, overrides, tiny_model, tokens, tmp_path):
    """What the export is for: TransformerLens' TransformerBridge opens the directory offline,
    gives our logits, and a transformer's cache has the attention pattern under TL's name."""
    model = tiny_model(arch, random=True, **overrides).eval()
    export(write_checkpoint(model, tmp_path / "m.pt"), tmp_path / "hf", verify=False)
    bridge = TransformerBridge.boot_transformers(str(tmp_path / "hf"), device="cpu")
    x = tokens(V=model.cfg.vocab_size)
    with torch.no_grad():
        logits, cache = bridge.run_with_cache(x)
        ours = model(x)
    torch.testing.assert_close(logits, ours, atol=1e-5, rtol=0)
    if arch == "transformer":
        assert cache["blocks.1.attn.hook_pattern"].shape == (3, 4, 11, 11)
