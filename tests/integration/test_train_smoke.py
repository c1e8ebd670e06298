"""Trainer on tiny configs: what a run records, init_from, the schedule; the quick level's
learning run (slow). The save / load round trip of a run is in test_model_contract.py."""

import pytest
import torch

import models
from analyses.zoo.levels import make_run_config
from models.train.loop import train
from models.train_config import TrainConfig, lr_at
from tasks.base import make_generator
from tasks.registry import make_task
from tests.tiny import TINY_RUN as TINY


def test_a_run_records_its_steps_samples_and_evaluations(tmp_path):
    run_config = make_run_config("transformer", "copy", "quick", model=TINY,
                     task_config=dict(max_len=6), train=dict(steps=6, eval_every=3, eval_batches=1,
                                                             eval_batch_size=8, batch_size=4))
    ck = train(run_config, out=tmp_path / "c.pt", device="cpu", progress=False)
    assert ck["train"]["step"] == 6 and ck["train"]["samples_seen"] == 24
    assert [h["step"] for h in ck["history"]] == [3, 6]
    assert {"loss", "eval_loss", "string_acc", "char_acc", "samples_seen"} <= set(ck["history"][-1])
    assert models.load(tmp_path / "c.pt").checkpoint["history"] == ck["history"]


def test_init_from_starts_from_the_weights_and_keys_the_cache_on_the_file(tmp_path):
    from models.train.cache import train_cached

    copy = make_run_config("transformer", "copy", "quick", model=TINY, task_config=dict(max_len=6),
                     train=dict(steps=3, eval_every=0, eval_batches=1, eval_batch_size=8,
                                batch_size=4, seed=1))  # seed 1: not the seed-0 init below
    init = train(copy, out=tmp_path / "copy.pt", device="cpu", progress=False)
    quick = dict(eval_every=0, eval_batches=1, eval_batch_size=8, batch_size=4)
    # zero steps would be refused: one step at a tiny lr moves the weights only a little
    ft = make_run_config("transformer", "lookup", "quick", model=TINY,
                   train=dict(steps=1, lr=1e-9, init_from=str(tmp_path / "copy.pt"), **quick))
    got = train(ft, device="cpu", progress=False)["state_dict"]
    for k, v in init["state_dict"].items():
        torch.testing.assert_close(got[k], v, rtol=0, atol=1e-6)
    # a random-init run of the same config is elsewhere
    fresh = train(make_run_config("transformer", "lookup", "quick", model=TINY,
                            train=dict(steps=1, lr=1e-9, **quick)), device="cpu", progress=False)
    assert any((fresh["state_dict"][k] - v).abs().max() > 1e-3 for k, v in got.items())
    # the cache entry depends on the init file's bytes, not on its name
    a = train_cached("transformer", "lookup", "quick", tmp_path / "c", model=TINY,
                     train_overrides=dict(steps=1, init_from=str(tmp_path / "copy.pt"), **quick),
                     device="cpu", progress=False)
    train(make_run_config("transformer", "copy", "quick", model=TINY, task_config=dict(max_len=6),
                    train=dict(steps=4, eval_every=0, batch_size=4)),
          out=tmp_path / "copy.pt", device="cpu", progress=False)  # retrained: new bytes, same name
    b = train_cached("transformer", "lookup", "quick", tmp_path / "c", model=TINY,
                     train_overrides=dict(steps=1, init_from=str(tmp_path / "copy.pt"), **quick),
                     device="cpu", progress=False)
    assert a != b and a.exists() and b.exists()


def test_init_from_refuses_another_model(tmp_path):
    from seqprobe.errors import InputError

    copy = make_run_config("transformer", "copy", "quick", model=TINY, task_config=dict(max_len=6),
                     train=dict(steps=1, eval_every=0, batch_size=4))
    train(copy, out=tmp_path / "copy.pt", device="cpu", progress=False)
    with pytest.raises(InputError, match="model config differs from this run's in d_model"):
        make_run_config("transformer", "lookup", "quick", model={**TINY, "d_model": 32},
                  train=dict(init_from=str(tmp_path / "copy.pt")))
    # with no model flags the run takes the init checkpoint's model config
    assert make_run_config("transformer", "lookup", "quick",
                     train=dict(init_from=str(tmp_path / "copy.pt"))).model.d_model == 16
    with pytest.raises(InputError, match="holds a transformer model, not lstm"):
        make_run_config("lstm", "lookup", "quick", train=dict(init_from=str(tmp_path / "copy.pt")))
    with pytest.raises(InputError, match="no such file"):
        make_run_config("transformer", "lookup", "quick", model=TINY,
                  train=dict(init_from=str(tmp_path / "none.pt")))


def test_lr_schedule_warmup_then_linear_decay():
    cfg = TrainConfig(steps=10, lr=1.0, warmup_steps=2, schedule="linear")
    assert [round(lr_at(cfg, s), 3) for s in range(4)] == [0.5, 1.0, 1.0, 0.875]
    assert lr_at(cfg, 9) == pytest.approx(0.125)


@pytest.mark.slow
def test_quick_level_learns_copy(tmp_path):
    """Issue acceptance: the quick Hard-ALiBi level reaches >= 95 % string accuracy on copy
    of strings up to length 20 (greedy decoding, fresh strings)."""
    run_config = make_run_config("transformer", "copy", "quick", model=dict(pe="hard_alibi"))
    train(run_config, out=tmp_path / "c.pt", progress=False)
    m = models.load(tmp_path / "c.pt")
    task = make_task("copy", **m.checkpoint["task"]["config"])
    from models.generation import evaluate_prompts

    g = make_generator(123)
    accs = [evaluate_prompts(m, task.eval_batch(64, g))["string_acc"] for _ in range(8)]
    assert sum(accs) / len(accs) >= 0.95
