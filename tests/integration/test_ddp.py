"""Data-parallel training under torchrun (issue 20): CPU, gloo, 2 processes, a tiny model.

Real ``torchrun`` jobs (``python -m torch.distributed.run``), not simulated ranks: a DDP job's
weights equal the single-process run with the same global batch and seed; a job stopped by a
signal on one rank (every rank agrees to stop, rank 0 saves) and resumed under torchrun through
the CLI ends bit-identical to an uninterrupted job; the checkpoint records ``world_size`` 2 and
loads and scores with ``models.load`` like a single-process one. Also the ``--precision bf16``
and ``--compile`` flags.
"""

from __future__ import annotations

from tests import ROOT_DIR

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import models
from models.train.build import make_run_config
from models.checkpoint.io import read_checkpoint
from models.generation import evaluate_prompts
from models.train.cli import main
from models.train.distributed import World, shard_bounds
from models.train.loop import train
from seqprobe.errors import InputError
from tasks.base import make_generator
from tasks.registry import make_task
from tests.tiny import TINY_RUN, TINY_RUN_FLAGS

ROOT = ROOT_DIR
# the explicit attention path: PyTorch's fused CPU attention kernel rounds a batch of 5 rows
# differently from slices of 3 and 2, and AdamW turns that rounding in the near-zero query and
# key gradients of a fresh model into weight differences near 1e-6 within a few steps, in a
# single process as much as under DDP; the explicit path leaves DDP only its summation order
TINY = {**TINY_RUN, "use_sdpa": False}
# 5 rows: the two ranks take 3 and 2 (uneven slices), with different target counts (copy
# strings of random length), which a plain mean of the ranks' mean losses would get wrong
TRAIN = dict(steps=6, batch_size=5, eval_every=3, eval_batches=3, eval_batch_size=8,
             warmup_steps=2, seed=7)
# epochs over 7 examples in batches of 3: every third batch has one row, and rank 1 none
MEM_TASK = dict(n_examples=7)
MEM_TRAIN = dict(steps=6, batch_size=3, eval_every=0, eval_batches=1, eval_batch_size=4, seed=3)
# gradient accumulation under DDP: 6 rows in micro-batches of 2 (one row per rank each), the
# gradient sync skipped for all but the last (no_sync)
MICRO_TRAIN = {**TRAIN, "batch_size": 6, "micro_batch": 2}
FLAGS = [*TINY_RUN_FLAGS, "--max-len", "6", "--steps", "6", "--batch-size", "5",
         "--eval-every", "3", "--eval-batches", "3", "--eval-batch-size", "8",
         "--warmup-steps", "2", "--seed", "7", "--use-sdpa", "false", "--device", "cpu",
         "--no-progress"]

# the worker of a torchrun job: the CLI's run (the command, tiny), then train() on the
# same RunConfig stopped by a SIGTERM that only rank 1 receives (after its step 3)
WORKER = textwrap.dedent("""
    import json, os, signal, sys
    from models.train.cli import main
    from models.train.callbacks import Callback
    from models.train.loop import TrainingInterrupted, train
    from models.train.build import make_run_config

    a = json.loads(sys.argv[1])
    rank = int(os.environ["RANK"])

    class SigtermOnRank1(Callback):
        def on_step(self, run):
            if run.step == 3 and rank == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    assert main([*a["flags"], "--out", a["full"]]) == 0
    train(make_run_config("transformer", "memorization", "quick", model=a["model"],
                    task_config=a["mem_task"], train=a["mem_train"]),
          out=a["mem"], device="cpu", progress=False)
    train(make_run_config("transformer", "copy", "quick", model=a["model"],
                    task_config={"max_len": 6}, train=a["micro_train"]),
          out=a["micro"], device="cpu", progress=False)
    run_config = make_run_config("transformer", "copy", "quick", model=a["model"],
                                 task_config={"max_len": 6}, train=a["train"])
    try:
        train(run_config, out=a["part"], device="cpu", progress=False, callbacks=[SigtermOnRank1()])
    except TrainingInterrupted:
        print(f"rank {rank} interrupted", file=sys.stderr)
        sys.exit(130)
""")


def run_config(**train_kw):
    return make_run_config("transformer", "copy", "quick", model=TINY, task_config=dict(max_len=6),
                     train={**TRAIN, **train_kw})


def torchrun(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    # --standalone: a rendezvous on a free local port, so tests side by side never collide
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           *args]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM, not SIGKILL: torchrun then ends its workers (their own sessions) too
        p.terminate()
        out, err = p.communicate(timeout=60)
        raise AssertionError(f"torchrun {' '.join(args)} timed out: {err[-3000:]}") from None
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory):
    """One torchrun job of the worker (an uninterrupted and an interrupted run), then the
    interrupted one resumed by ``torchrun -m models.train --resume``."""
    d = tmp_path_factory.mktemp("ddp")
    script = d / "worker.py"
    script.write_text(WORKER)
    a = {"model": TINY, "train": TRAIN, "flags": ["--task", "copy", "--arch", "transformer",
                                                  "--pe", "hard_alibi", *FLAGS],
         "full": str(d / "full.pt"), "part": str(d / "part.pt"), "mem": str(d / "mem.pt"),
         "mem_task": MEM_TASK, "mem_train": MEM_TRAIN, "micro": str(d / "micro.pt"),
         "micro_train": MICRO_TRAIN}
    first = torchrun(str(script), json.dumps(a))
    assert (d / "part.pt").exists(), first.stderr[-3000:]
    part = read_checkpoint(d / "part.pt")  # as the interrupted job left it
    resumed = torchrun("-m", "models.train", "--resume", str(d / "part.pt"), "--no-progress",
                       "--device", "cpu")
    return d, first, part, resumed


def test_ddp_weights_equal_the_single_process_run(ddp_job):
    d, first, _, _ = ddp_job
    assert first.returncode != 0, first.stderr  # the second run was interrupted: exit 130
    full = read_checkpoint(d / "full.pt")
    single = train(run_config(), device="cpu", progress=False)
    assert full["train"]["world_size"] == 2 and single["train"]["world_size"] == 1
    assert full["train"]["step"] == 6
    assert full["train"]["samples_seen"] == single["train"]["samples_seen"] == 30
    diff = {k: (full["state_dict"][k] - v).abs().max().item()
            for k, v in single["state_dict"].items()}
    # the key bias's true gradient is exactly zero (it adds one score to every key of a query,
    # which the softmax ignores): what moves it in both runs is rounding noise that AdamW
    # normalises to full-size steps, so it is held to the noise's scale, not to 1e-6
    noise = diff.pop("blocks.0.attn.b_K")
    assert max(diff.values()) < 1e-6, diff
    assert noise < 1e-5
    # the same examples: the logged losses and the gathered evaluation agree with one process
    for h_ddp, h_one in zip(full["history"], single["history"], strict=True):
        for k in ("loss", "eval_loss", "string_acc", "char_acc"):
            assert h_ddp[k] == pytest.approx(h_one[k], abs=1e-5), (h_ddp["step"], k)
    # the rng state rank 0 saved is the single-process one (every rank drew the global batch)
    assert torch.equal(full["train"]["rng"]["data"], single["train"]["rng"]["data"])


def test_a_rank_without_rows_in_a_short_epoch_batch_still_agrees(ddp_job):
    d = ddp_job[0]
    ddp = read_checkpoint(d / "mem.pt")
    single = train(make_run_config("transformer", "memorization", "quick", model=TINY,
                             task_config=MEM_TASK, train=MEM_TRAIN), device="cpu", progress=False)
    assert ddp["train"]["samples_seen"] == single["train"]["samples_seen"] == 14  # 3+3+1, twice
    for k, v in single["state_dict"].items():
        assert (ddp["state_dict"][k] - v).abs().max().item() < 1e-6, k


def test_micro_batches_under_ddp_equal_the_whole_batch_in_one_process(ddp_job):
    d = ddp_job[0]
    ddp = read_checkpoint(d / "micro.pt")
    single = train(run_config(batch_size=6), device="cpu", progress=False)  # no micro-batches
    assert ddp["train"]["samples_seen"] == single["train"]["samples_seen"] == 36
    diff = {k: (ddp["state_dict"][k] - v).abs().max().item()
            for k, v in single["state_dict"].items()}
    noise = diff.pop("blocks.0.attn.b_K")  # zero true gradient: see the test above
    assert max(diff.values()) < 1e-6, diff
    assert noise < 1e-5
    for h_ddp, h_one in zip(ddp["history"], single["history"], strict=True):
        assert h_ddp["loss"] == pytest.approx(h_one["loss"], abs=1e-5)


def test_a_signal_on_one_rank_stops_every_rank_and_rank_0_saves(ddp_job):
    _, first, part, _ = ddp_job
    assert first.returncode != 0
    assert "rank 0 interrupted" in first.stderr and "rank 1 interrupted" in first.stderr
    assert "SIGTERM: interrupted at step 3/6" in first.stderr
    assert first.stderr.count("interrupted at step 3/6; checkpoint saved") == 1  # rank 0 only
    assert part["train"]["step"] == 3 and part["train"]["world_size"] == 2


def test_killed_and_resumed_under_torchrun_equals_uninterrupted(ddp_job):
    d, _, _, resumed = ddp_job
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("done: step 6, samples 30") == 1
    full, res = read_checkpoint(d / "full.pt"), read_checkpoint(d / "part.pt")
    assert res["train"]["step"] == 6 and res["train"]["world_size"] == 2
    for k, v in full["state_dict"].items():
        assert torch.equal(v, res["state_dict"][k]), k  # bit-identical, as on one process
    for i, state in full["optimizer"]["state"].items():
        for k, v in state.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(res["optimizer"]["state"][i][k]))
    assert [h["loss"] for h in full["history"]] == [h["loss"] for h in res["history"]]
    assert not list(d.glob(".*.tmp"))  # no rank left a temp file behind


def test_torchrun_cli_checkpoint_loads_and_scores_like_a_single_process_one(ddp_job, tmp_path,
                                                                            capsys):
    d, first, _, _ = ddp_job
    assert first.stdout.count("done: step 6, samples 30") == 1  # rank 0 speaks for the job
    assert first.stderr.count("(DDP over 2 processes)") == 1
    assert main([*FLAGS, "--pe", "hard_alibi", "--out", str(tmp_path / "one.pt")]) == 0
    ddp, one = read_checkpoint(d / "full.pt"), read_checkpoint(tmp_path / "one.pt")
    assert ddp["train"]["world_size"] == 2 and one["train"]["world_size"] == 1
    assert ddp["train"]["config"] == one["train"]["config"]
    assert ddp["model"] == one["model"] and ddp["task"] == one["task"]
    scores = []
    for path in (d / "full.pt", tmp_path / "one.pt"):
        model = models.load(path)
        task = make_task("copy", model.checkpoint["task"]["config"])
        prompts = task.eval_batch(16, make_generator(0))
        logp = model.log_probs(prompts.prompts)
        scores.append((logp, evaluate_prompts(model, prompts)))
    assert torch.allclose(scores[0][0], scores[1][0], atol=1e-4)
    assert scores[0][1] == scores[1][1]


def test_shards_cover_the_batch_once():
    for n in (1, 2, 5, 8):
        for size in (1, 2, 3):
            parts = [shard_bounds(n, World(r, size)) for r in range(size)]
            assert parts[0][0] == 0 and parts[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
            assert max(h - lo for lo, h in parts) - min(h - lo for lo, h in parts) <= 1


def test_bf16_runs_and_is_recorded(tmp_path, capsys):
    out = tmp_path / "bf16.pt"
    assert main([*FLAGS, "--precision", "bf16", "--out", str(out)]) == 0
    ck = read_checkpoint(out)
    assert ck["train"]["config"]["precision"] == "bf16"
    fp32 = train(run_config(), device="cpu", progress=False)
    assert fp32["train"]["config"]["precision"] == "fp32"
    # autocast changed the numbers (bfloat16 matmuls), and the run still learned something
    assert ck["history"][-1]["loss"] != fp32["history"][-1]["loss"]
    assert ck["history"][-1]["loss"] == pytest.approx(fp32["history"][-1]["loss"], rel=0.05)
    assert all(v.dtype == torch.float32 for v in ck["state_dict"].values())
    # a different run: its own cache entry; the default leaves the old hashes alone
    assert run_config(precision="bf16").hash() != run_config().hash()


def test_bad_precision_is_one_line(tmp_path, capsys):
    assert main([*FLAGS, "--precision", "fp8", "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: precision must be auto, fp32 or bf16, got 'fp8'"]


def test_batch_smaller_than_the_job_is_refused(tmp_path, monkeypatch):
    # rank 0 of a 2-process torchrun job, as its environment says: refused before any work
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    with pytest.raises(InputError, match="batch_size 1 is smaller than the 2 processes"):
        train(run_config(batch_size=1), out=tmp_path / "x.pt", device="cpu", progress=False)
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.slow  # inductor compiles C++ kernels on the CPU: a minute on a small machine
def test_compile_flag_trains_like_eager(tmp_path):
    # in a process of its own: conftest's runtime type checks wrap the model code, and dynamo
    # cannot trace through beartype's wrappers (a user's process has none)
    out = tmp_path / "compiled.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "models.train", *FLAGS, "--compile", "--out",
                        str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ck = read_checkpoint(out)
    assert ck["train"]["config"]["compile"] is True
    assert run_config(compile=True).hash() != run_config().hash()
    eager = train(run_config(), device="cpu", progress=False)
    for k, v in eager["state_dict"].items():
        if k != "blocks.0.attn.b_K":  # rounding noise (test_ddp_weights_equal_…)
            assert torch.allclose(v, ck["state_dict"][k], atol=1e-5), k


def test_a_zoo_recipe_trains_once_under_torchrun_and_is_reused(tmp_path):
    """Only rank 0 holds the cache lock and looks at the cache; both ranks train (DDP), rank 0
    writes; a second job finds the entry and trains nothing (every rank locking would
    deadlock: rank 1 waiting on the lock while rank 0 waits on rank 1 in training)."""
    args = ("-m", "analyses.zoo", "train", "induction/stu_L16_s0", "--cache-dir", str(tmp_path))
    first = torchrun(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    (path,) = tmp_path.glob("stu-induction-*.pt")
    ck = read_checkpoint(path)
    assert ck["train"]["world_size"] == 2 and ck["train"]["step"] == 400
    mtime = path.stat().st_mtime_ns
    again = torchrun(*args)
    assert again.returncode == 0 and path.stat().st_mtime_ns == mtime  # reused, not retrained


def test_an_analysis_under_torchrun_is_one_line(tmp_path, monkeypatch, capsys):
    import analyses.mamba_decay as md

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert md.main(["--train", "quick", "--out", str(tmp_path / "o")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "torchrun -m analyses.zoo train" in err[0]
    assert not (tmp_path / "o").exists()
