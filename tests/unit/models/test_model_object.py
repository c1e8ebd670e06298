"""The model object a researcher holds in IPython (issue 28, item 4): ``m.task``, typed records
(``train_config``, ``provenance``), ``m.save`` / ``models.load`` round trip, text wherever token
ids go, TransformerLens' ``return_type`` and one ``log_probs`` — on suite and HF models."""

from __future__ import annotations

import pytest
import torch

import models
from models.checkpoint.io import read_checkpoint
from models.checkpoint.layout import make_checkpoint
from models.checkpoint.write import save_checkpoint
from models.hf.checks import HFError
from models.hf.export import export
from models.outputs import log_probs
from models.registry import ARCHS
from models.train_config import TrainConfig
from seqprobe.config import config_to_dict
from seqprobe.errors import InputError
from tests.hf_fixtures import save_tiny_hf

COPY = {"D": 7, "min_len": 1, "max_len": 6}  # letters a..g = 0..6, BOS 7, EOS 8, COPY 9, PAD 10


@pytest.fixture
def copy_model(tiny_model):
    """A tiny transformer over the copy task's 11 tokens, random weights, its task set."""
    m = tiny_model("transformer", random=True).eval()
    m.set_task("copy", COPY)
    return m


def trained_checkpoint(model, model_config: dict) -> dict:
    """A checkpoint dict as the trainer writes it: the model fields the run set, its training
    config, RNG state, history and optimizer."""
    train = {"config": config_to_dict(TrainConfig(steps=5, lr=1e-2)), "seed": 0, "step": 5,
             "samples_seen": 160, "rng": torch.zeros(4, dtype=torch.uint8), "stop": "stop_at"}
    return make_checkpoint("transformer", model_config, "copy", COPY, train,
                           model.state_dict(), [{"step": 5, "loss": 1.5}], optimizer={})


# ---------------------------------------------------------------------------- records
def test_a_model_built_in_code_has_empty_records_and_cannot_be_saved(tiny_model, tmp_path):
    m = tiny_model("transformer")
    assert m.task is None and m.train_config is None and m.config is m.cfg
    assert m.provenance.source is None and m.provenance.step is None
    assert m.provenance.history == () and m.provenance.train == {}
    with pytest.raises(InputError, match="has no task .*set_task"):
        m.save(tmp_path / "m.pt")
    assert not (tmp_path / "m.pt").exists()


def test_load_gives_the_task_and_typed_records(copy_model, tiny_config, tmp_path):
    path = save_checkpoint(trained_checkpoint(copy_model, tiny_config("transformer")),
                           tmp_path / "c.pt")
    m = models.load(path)
    assert m.task.name == "copy" and config_to_dict(m.task.cfg) == COPY
    assert m.task.vocab.size == 11
    assert m.train_config == TrainConfig(steps=5, lr=1e-2)
    assert m.provenance.source == str(path) and m.provenance.step == 5
    assert m.provenance.samples_seen == 160 and m.provenance.stop == "stop_at"
    assert m.provenance.history == ({"step": 5, "loss": 1.5},)
    with pytest.warns(DeprecationWarning):  # the old dict, kept for callers not yet moved
        assert m.checkpoint["task"] == {"name": "copy", "config": COPY}


def test_save_load_round_trip(copy_model, tiny_config, tmp_path):
    """load -> save -> load keeps weights, task, training config, history and the model fields
    the run set (the cache key reads them); the RNG state of the run is dropped (the file has no
    optimizer: it is a model, not a paused run)."""
    set_fields = tiny_config("transformer")
    first = models.load(save_checkpoint(trained_checkpoint(copy_model, set_fields),
                                        tmp_path / "a.pt"))
    assert first.save(tmp_path / "b.pt") == tmp_path / "b.pt"
    again = models.load(tmp_path / "b.pt")
    x = first.to_tokens(["abc<COPY>ab", "gfe<COPY>gf"])
    torch.testing.assert_close(again(x), first(x), rtol=0, atol=0)
    assert config_to_dict(again.task.cfg) == COPY and again.train_config == first.train_config
    assert again.provenance.history == first.provenance.history
    assert again.provenance.train == {k: v for k, v in first.provenance.train.items()
                                      if k != "rng"}
    raw = read_checkpoint(tmp_path / "b.pt")  # the one format, digest included
    assert "optimizer" not in raw and raw["digest"].startswith("sha256:")
    assert raw["model"]["config"] == set_fields


def test_a_model_built_in_code_saves_once_it_has_a_task(copy_model, tmp_path):
    copy_model.save(tmp_path / "m.pt")
    m = models.load(tmp_path / "m.pt")
    assert m.task.name == "copy" and m.train_config is None and m.provenance.step == 0
    torch.testing.assert_close(m("abc"), copy_model("abc"), rtol=0, atol=0)


# ---------------------------------------------------------------------------- text
def test_strings_go_wherever_tokens_go(copy_model):
    m, text = copy_model, "abc<COPY>ab"
    tokens = m.to_tokens(text)
    assert tokens.tolist() == [[7, 0, 1, 2, 9, 0, 1]]
    torch.testing.assert_close(m(text), m(tokens), rtol=0, atol=0)
    logits, cache = m.run_with_cache(text)
    ref_logits, ref = m.run_with_cache(tokens)
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=0)
    torch.testing.assert_close(cache["pattern", 1], ref["pattern", 1], rtol=0, atol=0)
    zero_z = [("blocks.1.attn.hook_z", lambda z, hook: 0 * z)]
    torch.testing.assert_close(m.run_with_hooks(text, fwd_hooks=zero_z),
                               m.run_with_hooks(tokens, fwd_hooks=zero_z), rtol=0, atol=0)
    assert m.to_string(logits[0, -1].argmax()) in m.task.vocab.symbols


def test_unknown_characters_are_one_line_naming_each(copy_model):
    with pytest.raises(InputError) as e:
        copy_model("abz<COPY>a0z")
    msg = str(e.value)
    assert "'z', '0' are not tokens of this model's task vocabulary" in msg and "\n" not in msg


# ---------------------------------------------------------------------------- return_type
def test_return_types_as_transformer_lens(copy_model):
    m, x = copy_model, copy_model.to_tokens(["abc<COPY>abc", "fg<COPY>fg"])  # padded
    logits = m(x)
    lp = m(x, return_type="log_probs")
    torch.testing.assert_close(lp, torch.log_softmax(logits, -1), rtol=0, atol=0)
    nll = -lp[:, :-1].gather(-1, x[:, 1:, None])[..., 0]  # [batch, pos - 1]
    torch.testing.assert_close(m(x, return_type="loss"), nll.mean())
    torch.testing.assert_close(m(x, return_type="loss", loss_per_token=True), nll)
    both_logits, both_loss = m(x, return_type="both")
    torch.testing.assert_close(both_logits, logits)
    torch.testing.assert_close(both_loss, nll.mean())
    assert m(x, return_type=None) is None
    # text of different lengths: the padding is left out of the loss, as TL's attention mask does
    padded = m(["abc<COPY>abc", "fg<COPY>fg"], return_type="loss")
    # row 1 is <BOS> f g <COPY> f g <PAD> <PAD>: 5 predictions, none of or from padding
    torch.testing.assert_close(padded, torch.cat([nll[0], nll[1, :5]]).mean())
    loss, cache = m.run_with_cache("abc<COPY>abc", return_type="loss")
    assert loss.dim() == 0 and "blocks.0.hook_resid_post" in cache
    with pytest.raises(InputError, match="return_type must be one of"):
        m(x, return_type="probs")


def test_loss_on_a_classifier_is_refused(tiny_model):
    m = tiny_model("transformer", head="seq_cls", n_classes=3)
    with pytest.raises(InputError, match="next-token loss of a language model"):
        m(torch.zeros(2, 5, dtype=torch.long), return_type="loss")


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_one_log_probs_on_every_arch(arch, tiny_model, tokens):
    m = tiny_model(arch, random=True)
    x = tokens(2, 6, m.cfg.vocab_size)
    ref = log_probs(m(x))
    for got in (m.log_probs(x), m(x, return_type="log_probs")):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    assert torch.allclose(ref.exp().sum(-1), torch.ones(2, 6), atol=1e-5)


def test_mambazero_forward_is_logits_and_its_readout_a_method(tiny_model, tokens):
    """MambaZero's prediction is L1-normalised |v| (§4.1): forward gives log |v|, whose
    softmax is that prediction; v itself is ``readout``."""
    m = tiny_model("mambazero", random=True, dtype=torch.float64)
    x = tokens(2, 9, 2)
    v = m.readout(x).abs().clamp_min(m.cfg.l1_eps)
    torch.testing.assert_close(m.log_probs(x), (v / v.sum(-1, keepdim=True)).log())
    torch.testing.assert_close(torch.softmax(m(x), -1), v / v.sum(-1, keepdim=True))


# ---------------------------------------------------------------------------- HuggingFace
def test_the_same_api_on_an_hf_model(tmp_path):
    m = models.load(save_tiny_hf("gpt_neox", tmp_path))
    assert m.task is None and m.train_config is None and m.config is m.cfg
    assert m.provenance.source == str(tmp_path / "gpt_neox")
    assert m.provenance.pretrained["hf_architecture"] == "GPTNeoXForCausalLM"
    text = "abc abc"
    logits = m(text)
    torch.testing.assert_close(m(text, return_type="log_probs"), log_probs(logits))
    torch.testing.assert_close(m.log_probs(m.to_tokens(text)), log_probs(logits))
    assert m(text, return_type="loss").dim() == 0  # TransformerBridge's own
    with pytest.raises(HFError, match="not saved by the suite.*save_pretrained"):
        m.save(tmp_path / "saved")  # the bridge's wrapped modules are not an HF model's layout
    assert not (tmp_path / "saved").exists()


def test_an_exported_model_knows_its_task(tiny_model, tmp_path):
    """An HF model our export wrote carries its task (config.json ``seqprobe``): ``m.task`` is
    that task, and it reads our token ids."""
    ours = tiny_model("transformer", random=True, pe="nope").eval()
    ours.set_task("copy", COPY)
    ours.save(tmp_path / "m.pt")
    export(tmp_path / "m.pt", tmp_path / "hf", verify=False)
    m = models.load(tmp_path / "hf")
    assert m.task.name == "copy" and config_to_dict(m.task.cfg) == COPY
    x = ours.to_tokens("abc<COPY>ab")
    torch.testing.assert_close(m(x), ours(x), atol=1e-4, rtol=0)
