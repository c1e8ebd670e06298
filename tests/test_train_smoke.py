"""Trainer + checkpoint round trip on tiny configs, and the quick preset's learning run (slow)."""

import pytest
import torch

import models
from models.train import lr_at, make_spec, train, TrainConfig
from tasks import make_generator, make_task

TINY = dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32)


def test_train_save_load_gives_identical_logits(tmp_path):
    spec = make_spec("transformer", "copy", "quick", model=TINY,
                     task_config=dict(max_len=6), train=dict(steps=6, eval_every=3, eval_batches=1,
                                                             eval_batch_size=8, batch_size=4))
    ck = train(spec, out=tmp_path / "c.pt", device="cpu", progress=False)
    assert ck["train"]["step"] == 6 and ck["train"]["samples_seen"] == 24
    assert [h["step"] for h in ck["history"]] == [3, 6]
    assert {"loss", "eval_loss", "string_acc", "char_acc", "samples_seen"} <= set(ck["history"][-1])
    # the file alone rebuilds the model
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    assert raw["format"] == 1 and raw["model"]["arch"] == "transformer"
    m = models.load(tmp_path / "c.pt")
    fresh = models.build_model("transformer", ck["model"]["config"])
    fresh.load_state_dict(ck["state_dict"])
    tokens = torch.randint(0, 30, (2, 9))
    torch.testing.assert_close(m(tokens), fresh.eval()(tokens), rtol=0, atol=0)
    _, cache = m.run_with_cache(tokens)
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 2, 9, 9)


def test_lr_schedule_warmup_then_linear_decay():
    cfg = TrainConfig(steps=10, lr=1.0, warmup_steps=2, schedule="linear")
    assert [round(lr_at(cfg, s), 3) for s in range(4)] == [0.5, 1.0, 1.0, 0.875]
    assert lr_at(cfg, 9) == pytest.approx(0.125)


@pytest.mark.slow
def test_quick_preset_learns_copy(tmp_path):
    """Issue acceptance: the quick Hard-ALiBi preset reaches >= 95 % string accuracy on copy
    of strings up to length 20 (greedy decoding, fresh strings)."""
    spec = make_spec("transformer", "copy", "quick", model=dict(pe="hard_alibi"))
    train(spec, out=tmp_path / "c.pt", progress=False)
    m = models.load(tmp_path / "c.pt")
    task = make_task("copy", **m.checkpoint["task"]["config"])
    from models.generation import evaluate_prompts

    g = make_generator(123)
    accs = [evaluate_prompts(m, task.eval_batch(64, g))["string_acc"] for _ in range(8)]
    assert sum(accs) / len(accs) >= 0.95
