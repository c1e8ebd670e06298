"""Export to HuggingFace (issue 19, item 5): every exportable architecture and PE, built tiny with
every parameter moved off its init, comes back from ``from_pretrained`` with our logits (float32,
eager attention, 1e-5); the tokenizer keeps our ids; every refused configuration is one line and
writes nothing; OUT_DIR is replaced only with --overwrite; the command as a user types it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers as tf
from transformer_lens.model_bridge import TransformerBridge

from models import export_hf
from models.checkpoint import make_checkpoint, save_checkpoint
from models.export_hf import export, hf_tokenizer, main
from tasks.base import config_to_dict
from tasks.registry import make_task

ROOT = Path(__file__).resolve().parent.parent

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
    "mamba2_mlp": ("mamba2", dict(d_mlp=8), "no MLP"),
    "mamba2_relu": ("mamba2", dict(activation="relu"), "silu"),
    "mamba_no_gate": ("mamba", dict(gated=False), "silu(z)"),
    "mamba_unembed_bias": ("mamba", dict(unembed_bias=True), "lm_head has no bias"),
}


def copy_task_config(vocab_size: int) -> dict:
    """The copy task whose vocabulary (D letters + 4 specials) has ``vocab_size`` ids."""
    return {"D": vocab_size - 4, "max_len": 5}


def write_checkpoint(model, path: Path, task: str = "copy", task_config: dict | None = None
                     ) -> Path:
    task_config = copy_task_config(model.cfg.vocab_size) if task_config is None else task_config
    ck = make_checkpoint(model.arch, config_to_dict(model.cfg), task, task_config,
                         {"step": 7}, model.state_dict())
    return save_checkpoint(ck, path)


def hf_logits(out_dir: Path, tokens: torch.Tensor) -> torch.Tensor:
    hf = tf.AutoModelForCausalLM.from_pretrained(out_dir, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(tokens).logits


@pytest.mark.parametrize("name", list(EXPORTABLE))
def test_export_gives_our_logits(name, tiny_model, tokens, tmp_path):
    arch, overrides = EXPORTABLE[name]
    model = tiny_model(arch, random=True, **overrides).eval()
    ck = write_checkpoint(model, tmp_path / "m.pt")
    report = export(ck, tmp_path / "hf", verify=False)  # compared here, independently
    x = tokens(B=3, T=11, V=model.cfg.vocab_size)  # crosses Mamba-2's chunks of 4
    with torch.no_grad():
        ours = model(x)
    torch.testing.assert_close(hf_logits(tmp_path / "hf", x), ours, atol=1e-5, rtol=0)
    config = tf.AutoConfig.from_pretrained(tmp_path / "hf")
    assert config.architectures == [report.hf_class] == [export_hf.HF_CLASSES[arch]]
    assert config.seqprobe["arch"] == arch
    assert config.seqprobe["config"] == config_to_dict(model.cfg) | {
        k: list(v) for k, v in config_to_dict(model.cfg).items() if isinstance(v, tuple)}
    assert config.seqprobe["task"]["name"] == "copy" and config.seqprobe["step"] == 7
    assert config.tie_word_embeddings is False
    assert not list(tmp_path.glob(".hf.*")), "a temp directory was left beside OUT_DIR"
    if arch == "transformer":  # what transformers 4.x reads (its default fraction is 0.25)
        raw = json.loads((tmp_path / "hf" / "config.json").read_text())
        frac = model.cfg.rotary_frac if model.cfg.pe == "rope" else 0.0
        assert (raw["rotary_pct"], raw["rotary_emb_base"]) == (frac, model.cfg.rope_base)


def test_a_wrong_map_is_caught_and_nothing_is_written(tiny_model, tmp_path, monkeypatch):
    """The export's own check compares logits: dropping the unembedding bias (a map that loses
    a term) is refused, and OUT_DIR is not created."""
    model = tiny_model("transformer", random=True, pe="rope")
    ck = write_checkpoint(model, tmp_path / "m.pt")
    monkeypatch.setattr(export_hf, "fold_unembed_bias", lambda W, c, b: (b, 0.0))
    assert main([str(ck), str(tmp_path / "hf")]) == 2
    assert not (tmp_path / "hf").exists()
    assert not list(tmp_path.glob(".hf.*"))


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
    for one-character alphabets (spaces and newlines included) and multi-character ones."""
    t = make_task(task, config)
    tok = hf_tokenizer(t.vocab, t.vocab.size)
    assert len(tok) == t.vocab.size
    for row in t.batch(3, torch.Generator().manual_seed(0)).tokens.tolist():
        text = t.vocab.decode(row)
        assert tok(text, add_special_tokens=False).input_ids == row
        assert tok.decode(row) == text
    for s in t.vocab.specials:
        assert tok.convert_tokens_to_ids(f"<{s}>") == t.vocab.id(s)


def test_exported_tokenizer_and_special_ids(tiny_model, tmp_path):
    model = tiny_model("transformer", random=True, pe="rope", vocab_size=13)  # copy D = 9
    ck = write_checkpoint(model, tmp_path / "m.pt")
    export(ck, tmp_path / "hf", verify=False)
    vocab = make_task("copy", copy_task_config(13)).vocab
    tok = tf.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = [vocab.id("BOS"), 0, 8, 3, vocab.id("COPY"), 0, 8, 3, vocab.id("EOS")]
    assert tok(vocab.decode(ids), add_special_tokens=False).input_ids == ids
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<BOS>", "<EOS>", "<PAD>")
    assert "<COPY>" in tok.all_special_tokens
    # the form transformers 4.x reads too: a class name it knows, extra specials as a list
    raw = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert raw["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert raw["additional_special_tokens"] == ["<COPY>"] and "extra_special_tokens" not in raw
    config = tf.AutoConfig.from_pretrained(tmp_path / "hf")
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        vocab.id("BOS"), vocab.id("EOS"), vocab.id("PAD"))


def test_tokenizer_pads_a_wider_embedding():
    vocab = make_task("copy", {"D": 3}).vocab
    tok = hf_tokenizer(vocab, vocab.size + 2)
    assert len(tok) == vocab.size + 2
    assert tok.convert_tokens_to_ids("<unused1>") == vocab.size + 1


def test_overwrite(tiny_model, tmp_path, capsys):
    model = tiny_model("mamba2", random=True)
    ck = write_checkpoint(model, tmp_path / "m.pt")
    out = tmp_path / "hf"
    out.mkdir()
    assert main([str(ck), str(out)]) == 0  # an empty directory is fine
    (out / "mine.txt").write_text("keep")
    capsys.readouterr()
    assert main([str(ck), str(out)]) == 2  # non-empty: refused, untouched
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite" in err
    assert (out / "mine.txt").read_text() == "keep"
    refused = write_checkpoint(tiny_model("lstm"), tmp_path / "lstm.pt", "markov", {"S": 7})
    assert main([str(refused), str(out), "--overwrite"]) == 2  # refused before any writing
    assert (out / "mine.txt").exists()
    assert main([str(ck), str(out), "--overwrite"]) == 0
    assert not (out / "mine.txt").exists() and (out / "config.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "lstm.pt", "m.pt"]
    (tmp_path / "file").write_text("x")
    assert main([str(ck), str(tmp_path / "file"), "--overwrite"]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_missing_checkpoint_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nope.pt"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err
    assert not (tmp_path / "hf").exists()


def test_cli_as_a_user_types_it(tiny_model, tmp_path):
    model = tiny_model("transformer", random=True, pe="rope")
    ck = write_checkpoint(model, tmp_path / "m.pt")
    run = subprocess.run([sys.executable, "-m", "models.export_hf", str(ck),
                          str(tmp_path / "hf")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"wrote {tmp_path / 'hf'} (GPTNeoXForCausalLM")
    assert "unembedding bias was moved" in lines[1]
    diff = float(lines[-1].split("max |diff| = ")[1].split()[0])
    assert diff < 1e-5
    assert run.stderr == ""
    again = subprocess.run([sys.executable, "-m", "models.export_hf", str(ck),
                            str(tmp_path / "hf")], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and "--overwrite" in again.stderr


def test_out_dir_holding_the_checkpoint_or_the_working_directory_is_refused(
        tiny_model, tmp_path, capsys, monkeypatch):
    """--overwrite must never delete its own input, nor the directory the user stands in."""
    out = tmp_path / "out"
    out.mkdir()
    ck = write_checkpoint(tiny_model("mamba", random=True), out / "m.pt")
    assert main([str(ck), str(out), "--overwrite"]) == 2
    assert "holds the checkpoint" in capsys.readouterr().err
    assert ck.exists()
    monkeypatch.chdir(out)
    for target in (".", ".."):
        assert main([str(ck), target, "--overwrite"]) == 2
        assert "working directory" in capsys.readouterr().err
    assert ck.exists()


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


def test_sigterm_while_writing_leaves_out_dir_as_it_was(tiny_model, tmp_path, monkeypatch,
                                                         capsys):
    """SIGTERM mid-write (a job scheduler's timeout) is Ctrl-C: exit 130, one line, the temp
    directory removed, the old OUT_DIR still there even with --overwrite."""
    ck = write_checkpoint(tiny_model("mamba", random=True), tmp_path / "m.pt")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    real_save = export_hf._save

    def save_then_term(exp, directory):
        real_save(exp, directory)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(export_hf, "_save", save_then_term)
    assert main([str(ck), str(out), "--overwrite"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "m.pt"]
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


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


@pytest.mark.parametrize("arch,overrides", [("transformer", {"pe": "rope"}), ("mamba2", {})])
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
