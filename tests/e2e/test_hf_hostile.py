"""Hostile HuggingFace model directories and --text files (issue 29, items 1-7 and 15): each
fixture is the reproduction (a directory or file as a user would be handed it), and each must
be refused in one :class:`~models.hf.HFError` / ``InputError`` line before any work, or load
correctly. Memory bombs are checked by the refusal coming before any allocation (no model
built but on the meta device), never by allocating; bench/bench_hostile.py measures the peak
memory of refusing them.
"""

from __future__ import annotations

import os
import pickle
import struct

import pytest
import torch
import transformers

import models
from models.hf import load_hf
from models.hf.checks import HFError
from seqprobe.errors import InputError
from tasks.prompts import TEXT_MAX_BYTES, read_text
from tests.hf_fixtures import edit_json, edit_weights, hf_copy, save_tiny_hf


@pytest.fixture
def model_dir(hf_dirs, tmp_path):
    return hf_copy(hf_dirs["gpt_neox"], tmp_path / "model")


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The default device of every HF model built while the test runs."""
    seen: list[str] = []
    init = transformers.PreTrainedModel.__init__

    def spy(self, *args, **kwargs):
        seen.append(torch.get_default_device().type)
        init(self, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedModel, "__init__", spy)
    return seen


def refused(source, *needles: str, builds: list[str] | None = None) -> str:
    """``load_hf(source)``'s one HFError line, which must hold every needle; with ``builds``
    (the fixture), no model was built but on the meta device (a bomb refused before it
    allocates)."""
    with pytest.raises(HFError) as e:
        load_hf(source)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    for n in needles:
        assert n in msg, msg
    if builds is not None:
        assert set(builds) <= {"meta"}, (builds, msg)
    return msg


class _Runs:
    """A pickle that runs a shell command when unpickled (the classic payload)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# ---------------------------------------------------------------------------- 1. code
def test_auto_map_directory_code_never_runs(model_dir, tmp_path):
    marker = tmp_path / "code-ran"
    (model_dir / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import PretrainedConfig\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n")
    edit_json(model_dir / "config.json", model_type=None,
              auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.M"})
    refused(model_dir, "auto_map", "never runs")
    with pytest.raises(InputError, match="auto_map"):  # the suite's one entry point too
        models.load(model_dir)
    assert not marker.exists()


def test_tokenizer_auto_map_code_never_runs(model_dir, tmp_path):
    marker = tmp_path / "tokenizer-code-ran"
    (model_dir / "evil_tok.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    edit_json(model_dir / "tokenizer_config.json", tokenizer_class="EvilTokenizer",
              auto_map={"AutoTokenizer": ["evil_tok.EvilTokenizer", None]})
    load_hf(model_dir)  # the tokenizer.json beside it serves; the module is never imported
    assert not marker.exists()


# ---------------------------------------------------------------------------- 2. weight files
def test_pickle_bin_refused_and_not_run(model_dir, tmp_path):
    marker = tmp_path / "pickle-ran"
    (model_dir / "model.safetensors").unlink()
    (model_dir / "pytorch_model.bin").write_bytes(pickle.dumps(_Runs(marker)))
    refused(model_dir, "pytorch_model.bin", "weights_only")
    assert not marker.exists()


def test_plain_tensor_bin_still_loads(model_dir):
    from safetensors.torch import load_file

    sd = load_file(model_dir / "model.safetensors")
    (model_dir / "model.safetensors").unlink()
    torch.save(sd, model_dir / "pytorch_model.bin")
    m = load_hf(model_dir)
    torch.testing.assert_close(m.original_model.get_input_embeddings().weight,
                               sd["gpt_neox.embed_in.weight"])


@pytest.mark.parametrize("damage,needle", [
    (lambda b: b[: len(b) // 2], "not fully covered"),
    (lambda b: b"", "empty file"),
    (lambda b: struct.pack("<Q", 2**40) + b"{}", "header too large"),
    (lambda b: struct.pack("<Q", 4) + b"[1,]" + b[12:], "safetensors"),
])
def test_damaged_safetensors_one_line(model_dir, damage, needle):
    path = model_dir / "model.safetensors"
    path.write_bytes(damage(path.read_bytes()))
    refused(model_dir, "model.safetensors", needle)


# ---------------------------------------------------------------------------- 3. keys
def test_missing_weights_are_not_random(model_dir):
    edit_weights(model_dir, lambda sd: {k: v for k, v in sd.items() if "embed_in" not in k})
    refused(model_dir, "would be random")


def test_unexpected_weights_refused(model_dir):
    edit_weights(model_dir, lambda sd: {**sd, "evil.weight": torch.zeros(3)})
    refused(model_dir, "unexpected", "evil.weight")


# ---------------------------------------------------------------------------- 4. bombs
def test_vocab_bomb_refused_before_allocation(model_dir, builds):
    edit_weights(model_dir, lambda sd: {k: v for k, v in sd.items() if "embed" not in k})
    edit_json(model_dir / "config.json", vocab_size=20_000_000)
    refused(model_dir, "1,280,025,472 parameters", builds=builds)


def test_layer_bomb_refused_at_once(model_dir, builds):
    edit_json(model_dir / "config.json", num_hidden_layers=1_000_000)
    refused(model_dir, "1,000,000 layers", builds=builds)


def test_deep_config_over_many_small_tensors_is_extrapolated(model_dir, builds):
    # enough tensors to pass the layer count, so the size comes from the meta-device
    # extrapolation of one and two layers (a full meta build of the stack is not needed)
    edit_weights(model_dir, lambda sd: {**sd, **{f"pad.{i}": torch.zeros(1) for i in range(200)}})
    edit_json(model_dir / "config.json", num_hidden_layers=200)
    refused(model_dir, "parameters", "would be random", builds=builds)
    assert builds  # sized by meta builds


@pytest.mark.parametrize("field,value", [("D", 10**8), ("max_len", 10**9)])
def test_export_provenance_task_bounds(model_dir, field, value, builds):
    # what models.hf.export stores; ngram_heads rebuilds this task to probe the model
    edit_json(model_dir / "config.json", seqprobe={
        "arch": "transformer", "config": {}, "step": 1, "digest": None, "notes": [],
        "task": {"name": "copy", "config": {field: value}}})
    refused(model_dir, "seqprobe", f"{field} = {value}", builds=builds)


def test_export_provenance_wrong_types(model_dir):
    edit_json(model_dir / "config.json", seqprobe={"task": {"name": "copy", "config": {"D": "x"}}})
    refused(model_dir, "seqprobe")
    edit_json(model_dir / "config.json", seqprobe={"task": ["copy"]})
    refused(model_dir, "seqprobe", "'task' must be")


# ---------------------------------------------------------------------------- 5. types
def test_wrong_typed_config_field(model_dir):
    edit_json(model_dir / "config.json", hidden_size="32")
    refused(model_dir, "hidden_size")


@pytest.mark.parametrize("config", ["[]", "{", "\"gpt_neox\""])
def test_config_json_not_an_object(model_dir, config):
    (model_dir / "config.json").write_text(config)
    refused(model_dir, "config.json")


def test_tokenizer_model_type_evil(model_dir):
    edit_json(model_dir / "tokenizer.json",
              model={**__import__("json").loads((model_dir / "tokenizer.json").read_text())
                     ["model"], "type": "Evil"})
    refused(model_dir, "tokenizer")


def test_tokenizer_config_a_list(model_dir):
    (model_dir / "tokenizer_config.json").write_text("[]")
    refused(model_dir, "tokenizer")


# ---------------------------------------------------------------------------- 6. NaN
def test_nan_weight_refused_by_name(model_dir):
    def poison(sd):
        sd = {k: v.clone() for k, v in sd.items()}
        sd["gpt_neox.layers.1.mlp.dense_4h_to_h.weight"][3, 5] = float("nan")
        return sd
    edit_weights(model_dir, poison)
    refused(model_dir, "NaN", "gpt_neox.layers.1.mlp.dense_4h_to_h.weight")


# ---------------------------------------------------------------------------- 15. names
def test_shape_error_names_the_tensor(model_dir):
    edit_weights(model_dir, lambda sd: {**sd, "gpt_neox.embed_in.weight": torch.zeros(75, 16)})
    refused(model_dir, "gpt_neox.embed_in.weight is [75, 16]", "[75, 32]")


def test_larger_mis_shaped_tensor_named_after_loading(model_dir):
    # more values than the config needs: past the size check, named by transformers' report
    edit_weights(model_dir, lambda sd: {**sd, "embed_out.weight": torch.zeros(75, 64)})
    msg = refused(model_dir, "[75, 64]", "[75, 32]")
    assert "above report" not in msg


def test_symlink_loop_is_not_a_hub_name(tmp_path):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    refused(loop, "symbolic link", "cannot be followed")
    refused(tmp_path / "gone" / "x" / "y", "no such file or directory")


def test_fifo_is_refused_by_its_kind(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    refused(tmp_path / "fifo", "FIFO")


# ---------------------------------------------------------------------------- 7. --text
def test_text_is_a_bounded_prefix(tmp_path, capsys):
    path = tmp_path / "big.txt"
    with open(path, "wb") as f:  # a sparse 1 GB file: only its first block is written
        f.write(("wörd " * 100_000).encode())
        f.truncate(2**30)
    text = read_text(str(path))
    assert len(text.encode()) <= TEXT_MAX_BYTES and text.split()[0] == "wörd"
    assert "first" in capsys.readouterr().err


def test_text_prefix_cut_at_whitespace_not_inside_a_character(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("héllo wörld " * 10)
    # 9 bytes end inside the "ö" of "wörld": the cut goes back to the space before it
    assert read_text(str(path), max_bytes=9) == "héllo "
    assert read_text(str(path), max_bytes=10**6) == "héllo wörld " * 10


@pytest.mark.parametrize("make,kind", [(os.mkfifo, "FIFO"), (os.mkdir, "a directory")])
def test_text_refuses_non_files_by_kind(tmp_path, make, kind):
    path = tmp_path / "x"
    make(path)
    with pytest.raises(InputError) as e:
        read_text(str(path))
    assert kind in str(e.value) and "no such file" not in str(e.value)
    with pytest.raises(InputError, match="no such file"):
        read_text(str(tmp_path / "absent"))


# ---------------------------------------------------------------------------- found by fuzzing
def test_float_weight_stored_as_integers(model_dir):
    # transformers casts it silently: an all-integer embedding would be analysed
    edit_weights(model_dir, lambda sd: {**sd, "gpt_neox.embed_in.weight":
                                        sd["gpt_neox.embed_in.weight"].long()})
    refused(model_dir, "gpt_neox.embed_in.weight is stored as integers")


def test_tokenizer_file_fifo_or_huge(model_dir, builds):
    tok = model_dir / "tokenizer.json"
    tok.unlink()
    os.mkfifo(tok)
    refused(model_dir, "tokenizer.json", "FIFO")  # not a read that blocks forever
    tok.unlink()
    with open(tok, "wb") as f:  # sparse: nothing is written
        f.truncate(2**31)
    refused(model_dir, "tokenizer.json", "2.15 GB", builds=builds)


def test_architectures_not_a_list(model_dir):
    edit_json(model_dir / "config.json", architectures=-1)
    refused(model_dir, "architectures")


def test_config_that_makes_logits_nan(model_dir):
    # finite weights, but the layer norms take the root of a negative number
    edit_json(model_dir / "config.json", layer_norm_eps=-1)
    refused(model_dir, "NaN", "layer_norm_eps = -1")


# ---------------------------------------------------------------------------- not refused
def test_stale_buffers_of_real_checkpoints_still_load(model_dir, tmp_path):
    # Pythia's files carry old attention buffers, GPT-2's have no "transformer." prefix and
    # "attn.bias" masks: transformers knows them, so the checks above must not refuse them
    def pythia(sd):
        for i in range(2):
            p = f"gpt_neox.layers.{i}.attention."
            sd = {**sd, p + "bias": torch.ones(1, 1, 256, 256, dtype=torch.bool).tril(),
                  p + "masked_bias": torch.tensor(-1e9), p + "rotary_emb.inv_freq": torch.ones(2)}
        return sd
    edit_weights(model_dir, pythia)
    assert load_hf(model_dir).arch == "hf_transformer"
    gpt2 = save_tiny_hf("gpt2", tmp_path)
    edit_weights(gpt2, lambda sd: {**{k.removeprefix("transformer."): v for k, v in sd.items()},
                                   "h.0.attn.bias": torch.ones(1, 1, 256, 256).tril()})
    assert load_hf(gpt2).arch == "hf_transformer"
