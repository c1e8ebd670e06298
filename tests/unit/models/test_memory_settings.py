"""Memory settings change memory, never the numbers (issue 35 §1): gradient accumulation
(``TrainConfig.micro_batch``) equals the whole batch, block checkpointing
(``checkpoint_blocks``) equals running the blocks as they are, on every architecture, in float64;
neither moves a run's cache key."""

from contextlib import contextmanager

import pytest
import torch

from analyses.zoo.levels import make_run_config
from models.registry import build_model
from models.train.loop import train
from models.train.loss import backward, step_loss
from models.train_config import TrainConfig
from seqprobe.errors import InputError
from tasks.base import make_generator
from tasks.registry import make_task

TINY = dict(d_model=16, n_layers=2, n_heads=2, d_mlp=32, use_sdpa=False)
EAGER = dict(precision="fp32", compile=False)  # what a CPU run resolves to, stated


def _run_config(**train):
    return make_run_config("transformer", "copy", "quick", model=TINY, task_config=dict(max_len=5),
                     train=dict(steps=4, eval_every=2, eval_batches=1, eval_batch_size=4,
                                batch_size=6, warmup_steps=1, seed=3, **EAGER, **train))


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_micro_batches_train_the_whole_batch_run(float64):
    """Weights after a few steps and every logged loss equal the unsplit run's (micro-batches
    of 2 and of 3 rows: random-length copy strings give each a different target count, which a
    mean of micro-batch means would get wrong)."""
    whole = train(_run_config(), device="cpu", progress=False)
    assert whole["state_dict"]["embed.weight"].dtype == torch.float64
    for micro in (2, 3):
        split = train(_run_config(micro_batch=micro), device="cpu", progress=False)
        assert _max_diff(split["state_dict"], whole["state_dict"]) <= 1e-10, micro
        for h_split, h_whole in zip(split["history"], whole["history"], strict=True):
            assert h_split["loss"] == pytest.approx(h_whole["loss"], abs=1e-12, rel=0)
    other = train(_run_config(micro_batch=2, lr=2e-3), device="cpu", progress=False)
    assert _max_diff(other["state_dict"], whole["state_dict"]) > 1e-6  # the check can fail


def test_a_mean_of_micro_batch_means_would_differ(float64):
    """Why each micro-batch is divided by the whole batch's target count: the batch's rows
    have different counts, so the mean of the parts' means is another loss."""
    run_config = _run_config()
    model = build_model(run_config.arch, run_config.model)
    batch = make_task(run_config.task_name, run_config.task_dict).batch(6, make_generator(1))
    loss_fn = step_loss(model, run_config.train, torch.device("cpu"))
    whole = backward(loss_fn, batch)
    split = backward(loss_fn, batch, micro_batch=2)
    assert split == pytest.approx(whole, abs=1e-12, rel=0)
    means = [loss_fn(type(batch)(batch.tokens[i:i + 2], batch.targets[i:i + 2]))[1]
             for i in (0, 2, 4)]
    assert abs(sum(means) / 3 - whole) > 1e-6


def test_all_but_the_last_micro_batch_skip_the_gradient_sync(float64):
    """Under DDP the loss function's ``no_sync`` wraps every micro-batch's forward and backward
    except the last one's (checked with a stand-in: DDP itself is tests/integration/test_ddp.py's)."""
    run_config = _run_config()
    model = build_model(run_config.arch, run_config.model)
    batch = make_task(run_config.task_name, run_config.task_dict).batch(6, make_generator(1))
    inner = step_loss(model, run_config.train, torch.device("cpu"))
    events = []

    @contextmanager
    def no_sync():
        events.append("off")
        yield
        events.append("on")

    def loss_fn(part, count=None):
        events.append(len(part.tokens))
        return inner(part, count)

    loss_fn.no_sync = no_sync
    backward(loss_fn, batch, micro_batch=2)
    assert events == ["off", 2, "on", "off", 2, "on", 2]
    events.clear()
    backward(loss_fn, batch)  # no micro-batches: one pass, synchronised
    assert events == [6]


def test_micro_batch_must_divide_the_batch():
    with pytest.raises(InputError, match="batch_size 6 must be a multiple of micro_batch 4"):
        TrainConfig(batch_size=6, micro_batch=4)
    with pytest.raises(InputError, match="TrainConfig.micro_batch -1 is out of range: must be 0"):
        TrainConfig(micro_batch=-1)
    assert TrainConfig(batch_size=6, micro_batch=3).micro_batch == 3


def test_memory_settings_are_not_in_the_cache_key():
    base = _run_config()
    assert _run_config(micro_batch=2, checkpoint_blocks=True).hash() == base.hash()
    assert _run_config(lr=2e-3).hash() != base.hash()  # the check can fail


# every architecture that trains through the loop, tiny, with two blocks
ARCH_MODELS = {
    "transformer": TINY,
    "mamba": dict(d_model=8, n_layers=2, d_state=4),
    "mamba2": dict(d_model=8, n_layers=2, n_heads=2, d_state=4, d_mlp=16),
    "lstm": dict(d_model=8, n_layers=2),
    "stu": dict(d_model=8, n_layers=2, filter_len=16, num_filters=4),
}


@pytest.mark.parametrize("arch", sorted(ARCH_MODELS))
def test_checkpointed_blocks_give_the_same_loss_and_gradients(arch, float64):
    run_config = make_run_config(arch, "copy", "quick", model=ARCH_MODELS[arch],
                     task_config=dict(max_len=5), train=dict(batch_size=3, **EAGER))
    batch = make_task(run_config.task_name, run_config.task_dict).batch(3, make_generator(2))
    model = build_model(run_config.arch, run_config.model)

    def loss_and_grads(**train):
        model.checkpoint_blocks = False
        model.zero_grad(set_to_none=True)
        cfg = run_config.replace(train=train).train
        value = backward(step_loss(model, cfg, torch.device("cpu")), batch, cfg.micro_batch)
        assert model.checkpoint_blocks == cfg.checkpoint_blocks
        return value, {n: p.grad.clone() for n, p in model.named_parameters()
                       if p.grad is not None}

    plain_loss, plain = loss_and_grads()
    recomputed = []
    for block in model.blocks:  # count the forward passes of each block (a pre-hook: the
        # recomputation stops early, once it has what the backward pass needs)
        block.register_forward_pre_hook(lambda *_: recomputed.append(1))
    loss, grads = loss_and_grads(checkpoint_blocks=True)
    assert len(recomputed) == 2 * len(model.blocks)  # run again in the backward pass
    assert loss == pytest.approx(plain_loss, abs=1e-12, rel=0)
    assert grads.keys() == plain.keys() and len(grads) > 0
    assert _max_diff(grads, plain) <= 1e-10
    recomputed.clear()
    both_loss, both = loss_and_grads(checkpoint_blocks=True, micro_batch=1, batch_size=3)
    assert len(recomputed) == 2 * 3 * len(model.blocks)
    assert both_loss == pytest.approx(plain_loss, abs=1e-12, rel=0)
    assert _max_diff(both, plain) <= 1e-10


def test_checkpointing_is_off_without_gradients(float64):
    """Evaluation and analyses (no gradients) run each block once, hooks as usual."""
    model = build_model("transformer", TINY)
    model.checkpoint_blocks = True
    calls = []
    model.blocks[0].register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        model(torch.zeros(1, 4, dtype=torch.long))
    assert calls == [1]
