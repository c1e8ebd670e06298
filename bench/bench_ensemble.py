"""Sweeps as ensembles (issue 45): the runs of a sweep trained one after another (each its own
``models.train.loop.train``) against the same runs as one ensemble
(``models.train.ensemble.train_ensemble``), on the zoo's quick recipes:

* ``stu``: 16 seeds of the spectral paper's STU induction recipe (``induction/stu_L16_s0``);
* ``copy``: the copy sweep's 4 learning rates x 3 seeds of the quick Hard-ALiBi copy
  transformer (``copy/hard_alibi``).

    python -m bench.bench_ensemble [--device cuda] [--steps N]   # bench/results_ensemble.json

Each run takes ``--steps`` steps with one evaluation at the end (the recipe's evaluation
settings otherwise); both sides train the same runs to the same weights (tests/test_ensemble.py),
so the ratio of their wall times is the speed-up. ``per_step_s`` is wall seconds per step of
one run alone and of the whole ensemble. Numbers: ``bench/results.json`` (``ensemble``).
"""

from __future__ import annotations

import argparse
import time

import torch

from analyses import zoo
from bench.common import write_results
from models.train.ensemble import train_ensemble
from models.train.loop import train
from models.train.runconfig import RunConfig
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


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(specs: list[RunConfig], device: str, steps: int) -> dict[str, float]:
    one = timed(lambda: [train(s, device=device, progress=False) for s in specs])
    together = timed(lambda: train_ensemble(specs, [None] * len(specs), device=device,
                                            progress=False))
    return {"members": len(specs), "steps": steps, "one_after_another_s": round(one, 2),
            "ensemble_s": round(together, 2), "speedup": round(one / together, 2),
            "per_step_s": {"one_run": round(one / len(specs) / steps, 5),
                           "ensemble": round(together / steps, 5)}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_ensemble", description=__doc__)
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args(argv)
    device = str(resolve_device(args.device))
    out = {"device": device}
    for name, specs in sweeps(args.steps).items():
        out[name] = measure(specs, device, args.steps)
        print(name, out[name], flush=True)
    write_results("ensemble" if device == "cpu" else "ensemble_cuda", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
