"""Sweeps as ensembles (models.train.ensemble): every member of an ensemble is its solo run.

In float64, for every architecture, each member of a 3-member ensemble with different seeds
and learning rates has the weights, the loss history and the early-stop step of its solo run
to 1e-10; a member that reaches ``stop_at`` stops while the others go on; and the checkpoint
a member writes is the one the cache keys for its run (the zoo serves it as the solo recipe's).
"""

import math

import pytest
import torch

from analyses.zoo.levels import make_run_config
from models.checkpoint.io import read_checkpoint
from models.registry import ARCHS
from models.train.cache import cache_path, entry_state
from models.train.ensemble import ensemble_key, group_runs, train_ensemble
from models.train.loop import train
from seqprobe.errors import InputError
from tests.tiny import TINY

RUN_TASKS = {"mamba2": ("markov", {"seq_len": 16}), "mambazero": ("markov", {"seq_len": 16})}
MEMBERS = [dict(seed=0, lr=1e-3), dict(seed=1, lr=3e-3), dict(seed=2, lr=1e-2, weight_decay=0.1)]


def _run_configs(arch: str, members=MEMBERS, **train):
    task, task_cfg = RUN_TASKS.get(arch, ("copy", {"max_len": 5}))
    model = {k: v for k, v in TINY[arch].items() if k != "vocab_size"} | {"n_layers": 1}
    base = {"steps": 6, "batch_size": 4, "eval_batches": 1, "eval_batch_size": 4,
            "eval_every": 3, "warmup_steps": 2, **train}
    return [make_run_config(arch, task, "quick", model, task_cfg, {**base, **m})
            for m in members]


def _close(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def _history_gap(h1: list, h2: list) -> float:
    assert [r["step"] for r in h1] == [r["step"] for r in h2]
    gap = 0.0
    for r1, r2 in zip(h1, h2, strict=True):
        for k, v in r1.items():
            if isinstance(v, float) and k != "time_s" and math.isfinite(v):
                gap = max(gap, abs(v - r2[k]))
    return gap


@pytest.mark.parametrize("arch", list(ARCHS))
def test_each_member_is_its_solo_run(arch, tmp_path, float64):
    run_configs = _run_configs(arch)
    assert len(group_runs(run_configs)) == 1
    outs = [tmp_path / f"e{i}.pt" for i in range(3)]
    ens = train_ensemble(run_configs, outs, device="cpu", progress=False)
    for i, run_config in enumerate(run_configs):
        solo = train(run_config, out=tmp_path / f"s{i}.pt", device="cpu", progress=False)
        assert _close(ens[i]["state_dict"], solo["state_dict"]) <= 1e-10
        assert _history_gap(ens[i]["history"], solo["history"]) <= 1e-10
        assert ens[i]["train"]["step"] == solo["train"]["step"] == 6
        on_disk = read_checkpoint(outs[i])
        assert on_disk["train"]["config"] == solo["train"]["config"]
        # the optimiser state too: a member resumes as its solo run would
        s1, s2 = on_disk["optimizer"]["state"], solo["optimizer"]["state"]
        assert max((s1[k]["exp_avg"] - s2[k]["exp_avg"]).abs().max().item() for k in s1) <= 1e-10


def test_a_member_that_reaches_stop_at_stops_and_the_others_go_on(tmp_path):
    # an untrained STU recalls some of the 4 evaluation tokens of induction (chance 1/4), so
    # a tiny level is reached at the first evaluation (tests/unit/models/test_early_stop.py)
    base = dict(steps=8, batch_size=4, eval_every=2, eval_batches=1, eval_batch_size=4,
                warmup_steps=1)
    run_configs = [make_run_config("stu", "induction", "quick",
                                   model=dict(d_model=8, filter_len=32, num_filters=4, d_mlp=16),
                                   task_config=dict(length=8), train={**base, **m})
                   for m in (dict(seed=0, stop_at=1e-9), dict(seed=1, lr=3e-3), dict(seed=2))]
    ens = train_ensemble(run_configs, [tmp_path / f"e{i}.pt" for i in range(3)], device="cpu",
                         progress=False)
    assert ens[0]["train"]["step"] == 2 and "stop_at" in ens[0]["train"]["stop"]
    assert [e["train"]["step"] for e in ens[1:]] == [8, 8]
    for i in range(3):
        solo = train(run_configs[i], out=tmp_path / f"s{i}.pt", device="cpu", progress=False)
        assert solo["train"]["step"] == ens[i]["train"]["step"]
        assert solo["train"].get("stop") == ens[i]["train"].get("stop")
        # float32 (the early stop of tests/unit/models/test_early_stop.py): equal up to float32 rounding
        assert _close(ens[i]["state_dict"], solo["state_dict"]) <= 1e-5


def test_members_are_cached_under_their_solo_keys(tmp_path):
    run_configs = _run_configs("stu")
    paths = [cache_path(s.resolved(torch.device("cpu")), tmp_path) for s in run_configs]
    train_ensemble(run_configs, paths, device="cpu", progress=False)
    assert [entry_state(p, s.resolved(torch.device("cpu"))) for p, s in
            zip(paths, run_configs, strict=True)] == ["done"] * 3


def test_grouping_and_refusals(tmp_path):
    stu, lstm = _run_configs("stu"), _run_configs("lstm")
    assert group_runs([stu[0], lstm[0], stu[1], lstm[1]]) == [[0, 2], [1, 3]]
    assert group_runs(stu, max_members=2) == [[0, 1], [2]]
    micro = _run_configs("stu", [dict(seed=0, micro_batch=2)])[0]
    assert ensemble_key(micro) is None and group_runs([micro, stu[0]]) == [[0], [1]]
    with pytest.raises(InputError, match="cannot train as one ensemble"):
        train_ensemble([stu[0], lstm[0]], [None, None], device="cpu", progress=False)
    with pytest.raises(InputError, match="same file"):
        train_ensemble(stu[:2], [tmp_path / "a.pt"] * 2, device="cpu", progress=False)


def test_the_zoo_trains_a_sweep_as_ensembles_served_as_solo_recipes(tmp_path, monkeypatch):
    from analyses import zoo
    from models.train import ensemble_cache

    sizes = []
    real = ensemble_cache.train_ensemble

    def counting(run_configs, *a, **kw):
        sizes.append(len(run_configs))
        return real(run_configs, *a, **kw)

    monkeypatch.setattr(ensemble_cache, "train_ensemble", counting)
    names = [f"induction/stu_L16_s{i}" for i in range(3)]
    short = {"steps": 3, "eval_every": 3, "eval_batches": 1}
    auto = zoo.train_recipes(names, "quick", tmp_path / "auto", "cpu", train=short,
                             progress=False)
    assert sizes == []  # "auto" forms ensembles on a GPU only (models.train.ensemble.pays_off)
    done = zoo.train_recipes(names, "quick", tmp_path, "cpu", train=short, progress=False,
                             ensembles="on")
    assert sizes == [3]  # one ensemble of the three seeds
    assert [p.name for p in auto.values()] == [p.name for p in done.values()]
    for n in names:  # each served under its solo run's key
        assert done[n] == zoo._cached(n, "quick", tmp_path, short, "cpu") is not None
    done_off = zoo.train_recipes(names, "quick", tmp_path / "off", "cpu", train=short,
                                 progress=False, ensembles="off")
    assert sizes == [3] and [p.name for p in done_off.values()] == [
        p.name for p in done.values()]


def test_a_stopped_ensemble_saves_every_member_and_resumes_to_the_same_weights(
        tmp_path, monkeypatch, float64):
    from models.train import loop
    from models.train.loop import TrainingInterrupted
    from tests.tiny import sigint_during_step

    run_configs = _run_configs("mamba")
    whole = train_ensemble(run_configs, [None] * 3, device="cpu", progress=False)
    outs = [tmp_path / f"e{i}.pt" for i in range(3)]
    real = sigint_during_step(monkeypatch, step=2)  # SIGINT while step 2 begins
    with pytest.raises(TrainingInterrupted):
        train_ensemble(run_configs, outs, device="cpu", progress=False)
    monkeypatch.setattr(loop, "lr_at", real)
    steps = [read_checkpoint(o)["train"]["step"] for o in outs]
    assert steps == [3, 3, 3]  # every member finished the step it was in, then saved
    assert [entry_state(o, s.resolved(torch.device("cpu"))) for o, s in
            zip(outs, run_configs, strict=True)] == ["interrupted"] * 3
    resumed = train_ensemble(run_configs, outs, device="cpu", resumes=outs, progress=False)
    for a, b in zip(resumed, whole, strict=True):
        assert _close(a["state_dict"], b["state_dict"]) <= 1e-10
        assert _history_gap(a["history"], b["history"]) <= 1e-10
