"""Sweeps as ensembles (does training a sweep as one batched model pay off?): the runs of a
sweep trained one after another (each its own
``models.train.loop.train``) against the same runs as one ensemble
(``models.train.ensemble.train_ensemble``), on the zoo's quick recipes:

* ``stu``: 16 seeds of the spectral paper's STU induction recipe (``induction/stu_L16_s0``);
* ``copy``: the copy sweep's 4 learning rates x 3 seeds of the quick Hard-ALiBi copy
  transformer (``copy/hard_alibi``).

    python -m bench.bench_ensemble [--device cuda] [--steps N]   # bench/results_ensemble.json

Each run takes ``--steps`` steps with one evaluation at the end (the recipe's evaluation
settings otherwise); both sides train the same runs to the same weights (tests/unit/models/test_ensemble.py),
so the ratio of their times is the speed-up. On a CPU the headline ``speedup`` is of the work,
one thread's CPU time (each side's fastest of two, interleaved); ``wall`` beside it is the wall
time with every thread on the machine as it is. ``per_step_s`` is seconds per step of one run
alone and of the whole ensemble. Numbers: ``bench/results.json`` (``ensemble``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from analyses import zoo
from bench.common import machine, write_results
from models.train.ensemble import train_ensemble
from models.train.loop import train
from models.train.runconfig import RunConfig
from seqprobe import flags
from seqprobe.atomic import check_output_file, write_atomic
from seqprobe.cli import run_cli
from seqprobe.device import resolve_device

LRS = (3e-4, 1e-3, 3e-3, 1e-2)  # the copy sweep's grid (analyses/zoo/copy.py)


def sweeps(steps: int) -> dict[str, list[RunConfig]]:
    """The two sweeps, each run cut to ``steps`` steps with one evaluation, at the end."""
    short = {"steps": steps, "eval_every": steps, "warmup_steps": min(steps // 4, 10),
             "stop_at": 0.0}
    stu = [zoo.run_config("induction/stu_L16_s0", "quick", train={**short, "seed": s})
           for s in range(16)]
    copy = [zoo.run_config("copy/hard_alibi", "quick", train={**short, "seed": s, "lr": lr})
            for lr in LRS for s in range(3)]
    return {"stu": stu, "copy": copy}


def timed(fn, clock=time.perf_counter) -> float:
    t0 = clock()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return clock() - t0


def measure(run_configs: list[RunConfig], device: str, steps: int, one_thread_cpu: bool,
            repeats: int = 2) -> dict[str, float]:
    """The two sides interleaved ``repeats`` times, the fastest of each. ``one_thread_cpu``:
    on one thread, by this process's CPU time — the work each side does, which other jobs on
    the machine do not change; else wall time with torch's default threads — what a user
    waits, which a loaded machine changes (small ops on two threads spin and wait on each
    other: the side with the smaller ops suffers most)."""
    threads = torch.get_num_threads()
    clock = time.process_time if one_thread_cpu else time.perf_counter
    if one_thread_cpu:
        torch.set_num_threads(1)
    try:
        ones, togethers = [], []
        for _ in range(repeats):
            ones.append(timed(lambda: [train(s, device=device, progress=False)
                                       for s in run_configs],
                              clock))
            togethers.append(timed(lambda: train_ensemble(run_configs, [None] * len(run_configs),
                                                          device=device, progress=False), clock))
    finally:
        torch.set_num_threads(threads)
    one, together = min(ones), min(togethers)
    return {"clock": "cpu, 1 thread" if one_thread_cpu else f"wall, {threads} threads",
            "members": len(run_configs), "steps": steps, "one_after_another_s": round(one, 2),
            "ensemble_s": round(together, 2), "speedup": round(one / together, 2),
            "per_step_s": {"one_run": round(one / len(run_configs) / steps, 5),
                           "ensemble": round(together / steps, 5)},
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_ensemble", description=__doc__)
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=flags.flag("--steps"), default=40)
    p.add_argument("--out", type=Path, default=None,
                   help="write the results here (default: bench/results_ensemble.json, or "
                        "results_ensemble_cuda.json on a GPU; the GPU call writes into $OUT)")
    args = p.parse_args(argv)
    if args.out is not None:
        check_output_file(args.out)  # before any work: the results are never lost to it
    device = str(resolve_device(args.device))
    out = {"device": device}
    if args.out is not None:  # at once: a stage stopped before its first sweep still says so
        write_atomic(args.out, json.dumps({"machine": machine(), **out}, indent=1))
    for name, run_configs in sweeps(args.steps).items():
        # the headline: the work on one thread (steady on a shared machine); beside it, the
        # wall time with every thread, as a user sees it (on a GPU: wall time only)
        out[name] = measure(run_configs, device, args.steps, one_thread_cpu=device == "cpu")
        out[name]["wall"] = measure(run_configs, device, args.steps, one_thread_cpu=False,
                                    repeats=1)
        print(name, out[name], flush=True)
        if args.out is not None:  # each sweep as it is measured: a stage cut short keeps it
            write_atomic(args.out, json.dumps({"machine": machine(), **out}, indent=1))
    if args.out is None:
        write_results("ensemble" if device == "cpu" else "ensemble_cuda", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
