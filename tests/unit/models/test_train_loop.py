"""The loop's parts agree with each other and a run is a pure function of its seed."""

import torch

from analyses.zoo.levels import make_run_config
from models.registry import build_model
from models.train.loop import train
from models.train.loss import loss_of, step_loss
from tasks.base import make_generator
from tasks.registry import make_task

TINY = dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32)


def _run_config(**train):
    return make_run_config("transformer", "copy", "quick", model=TINY, task_config=dict(max_len=5),
                     train=dict(steps=5, eval_every=5, eval_batches=1, eval_batch_size=4,
                                batch_size=4, seed=3, **train))


def _without_time(history):
    return [{k: v for k, v in h.items() if k != "time_s"} for h in history]


def test_two_runs_with_one_seed_are_bit_identical():
    a = train(_run_config(), device="cpu", progress=False)
    b = train(_run_config(), device="cpu", progress=False)
    for k, v in a["state_dict"].items():
        assert torch.equal(v, b["state_dict"][k]), k
    assert _without_time(a["history"]) == _without_time(b["history"])
    c = train(_run_config(lr=2e-3), device="cpu", progress=False)  # and the check can fail
    assert any(not torch.equal(v, c["state_dict"][k]) for k, v in a["state_dict"].items())


def test_the_training_loss_is_the_evaluation_loss():
    run_config = _run_config()
    model = build_model(run_config.arch, run_config.model).train()
    batch = make_task(run_config.task_name, run_config.task_dict).batch(4, make_generator(0))
    loss, value = step_loss(model, run_config.train, torch.device("cpu"))(batch)
    assert loss.requires_grad and value == loss.item()
    assert torch.equal(loss.detach(), loss_of(model, batch).detach())
