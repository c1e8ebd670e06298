"""TrainConfig.stop_at: training "until convergence" stops at the first evaluation whose string
accuracy reaches the level; the checkpoint records where; the default leaves cache keys as
they were before the field existed."""

import hashlib
import json

import pytest

from analyses.zoo.levels import make_run_config
from models.train.loop import train
from models.train_config import TrainConfig
from seqprobe.config import config_to_dict
from seqprobe.errors import InputError

STU = dict(d_model=8, filter_len=32, num_filters=4, d_mlp=16)


def _run_config(**train_kw):
    cfg = dict(steps=20, batch_size=4, eval_every=2, eval_batches=1, eval_batch_size=4,
               warmup_steps=1, seed=0)
    return make_run_config("stu", "induction", "quick", model=STU, task_config=dict(length=8),
                     train={**cfg, **train_kw})


def _rising(model, task, cfg, device):
    """An evaluator whose string accuracy rises by 0.3 an evaluation: 0.3, 0.6, 0.9, ..."""
    _rising.calls += 1
    return {"eval_loss": 1.0, "string_acc": min(1.0, 0.3 * _rising.calls)}


def test_stops_at_the_first_evaluation_that_reaches_the_level(tmp_path):
    _rising.calls = 0
    ck = train(_run_config(stop_at=0.5), out=tmp_path / "a.pt", progress=False, evaluator=_rising)
    # evaluations at steps 2 (0.3) and 4 (0.6 >= 0.5): stopped there, not at step 20
    assert ck["train"]["step"] == 4 and [h["step"] for h in ck["history"]] == [2, 4]
    assert ck["train"]["stop"].startswith("stop_at: string_acc 0.6 >= 0.5 at step 4")
    _rising.calls = 0  # without stop_at the same run goes the whole way
    ck = train(_run_config(), progress=False, evaluator=_rising)
    assert ck["train"]["step"] == 20 and "stop" not in ck["train"]


def test_a_real_run_stops_early_and_deterministically(tmp_path):
    # the untrained model recalls some of the 4 evaluation tokens (chance 1/4), so the real
    # evaluation at step 2 reaches a tiny level; twice the same run, twice the same stop
    runs = [train(_run_config(stop_at=1e-9), progress=False) for _ in range(2)]
    assert [r["train"]["step"] for r in runs] == [2, 2]
    assert [r["train"]["stop"] for r in runs][0] == runs[1]["train"]["stop"]
    assert [{k: v for k, v in r["history"][0].items() if k != "time_s"} for r in runs][0] == {
        k: v for k, v in runs[1]["history"][0].items() if k != "time_s"}


def test_stop_at_is_checked():
    with pytest.raises(InputError, match="eval_every"):
        TrainConfig(stop_at=0.9, eval_every=0)
    with pytest.raises(InputError, match="stop_at"):
        TrainConfig(stop_at=1.5)


def test_default_stop_at_keeps_the_cache_key():
    run_config = _run_config()
    train_dict = config_to_dict(run_config.train)
    for name in ("init_from", "device_type", "precision", "compile", "stop_at",  # left out
                 "checkpoint_blocks", "micro_batch"):
        del train_dict[name]
    blob = json.dumps({"arch": run_config.arch, "task": run_config.task_name,
                       "model": run_config.model_dict,
                       "task_config": run_config.task_dict, "train": train_dict},
                      sort_keys=True, default=list)
    assert run_config.hash() == hashlib.sha256(blob.encode()).hexdigest()[:12]
    assert _run_config(stop_at=0.99).hash() != run_config.hash()
