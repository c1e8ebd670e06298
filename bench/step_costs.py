"""Measure the step-cost table the reproduce ETA reads (:mod:`models.train.costs`).

    python -m bench.step_costs --quick                      # every quick zoo recipe
    python -m bench.step_costs --quick copy/rope markov/mamba2   # these rows only (others kept)
    python -m bench.step_costs --medium --analyses-from figures/out/medium/reproduce_timings.json

Each zoo recipe at the level, once per :func:`~models.train.costs.cost_key` (seeds share a
row), runs in a fresh process with the threads the reproduce plan gives it (its ``slots``): one
warm-up step, ``--steps`` timed optimizer steps at the real batch through the one training
loop, and one evaluation. Times are CPU seconds per thread (``time.process_time`` over the
threads), the cost on idle cores even when the machine is shared; the wall seconds and the
load average are kept beside them, so a reader sees how busy the machine was. Start-up is the
child's CPU time outside the steps and the evaluation (interpreter, imports, building the run).

``--analyses-from`` copies each analysis' seconds (an ``ok`` entry that is not a ``train:``
job) from a ``reproduce_timings.json`` into the table: an analysis' own process is timed by
the run that ran it, not here. Writes ``models/train/step_costs.json``; rows not measured by
this call are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import machine
from models import zoo
from models.train.config import TrainConfig
from models.train.costs import FORMAT, TABLE, cost_key
from models.train.dryrun import plan_row, recipe_spec
from models.train.loop import Callback, Run, evaluate, train
from models.train.spec import RunSpec
from tasks.atomic import write_atomic
from tasks.base import TaskError, config_from_dict, config_to_dict

WARM_STEPS = 1  # the first step pays one-off allocations and lazy imports: not timed
LEVELS = ("quick", "medium", "paper")


class _Clock(Callback):
    """CPU and wall time at the end of every step; stops the run after ``steps`` steps and
    keeps the model and task for the evaluation timed after it."""

    def __init__(self, steps: int):
        self.steps = steps
        self.cpu: list[float] = []
        self.wall: list[float] = []
        self.run: Run | None = None

    def on_step(self, run: Run) -> bool:
        self.cpu.append(time.process_time())
        self.wall.append(time.perf_counter())
        self.run = run
        return run.step >= self.steps


def measure(spec: RunSpec, steps: int) -> dict[str, Any]:
    """In this (fresh) process: per-step and per-evaluation CPU seconds per thread, and the
    process's CPU seconds outside them."""
    threads = torch.get_num_threads()
    clock = _Clock(WARM_STEPS + steps)
    train(spec, out=None, device="cpu", progress=False, callbacks=[clock])
    check_steps = len(clock.cpu) - WARM_STEPS
    if check_steps < 1:
        raise TaskError(f"the run stopped after {len(clock.cpu)} step(s)")
    run = clock.run
    e_cpu, e_wall = time.process_time(), time.perf_counter()
    evaluate(run.model, run.task, spec.train, torch.device("cpu"))
    e_cpu, e_wall = time.process_time() - e_cpu, time.perf_counter() - e_wall
    step_cpu = (clock.cpu[-1] - clock.cpu[WARM_STEPS - 1]) / check_steps
    step_wall = (clock.wall[-1] - clock.wall[WARM_STEPS - 1]) / check_steps
    usage = resource.getrusage(resource.RUSAGE_SELF)
    total_cpu = usage.ru_utime + usage.ru_stime
    return {"threads": threads, "step_s": step_cpu / threads, "eval_s": e_cpu / threads,
            "start_s": max(total_cpu - step_cpu * check_steps - e_cpu, 0.0),
            "step_wall_s": step_wall, "eval_wall_s": e_wall, "timed_steps": check_steps}


def _child() -> int:
    """``python -m bench.step_costs --child STEPS`` with a spec's JSON on stdin: one JSON line."""
    try:
        d = json.loads(sys.stdin.read())
        spec = RunSpec(d["arch"], d["task"], d["model"], d["task_config"],
                       config_from_dict(TrainConfig, d["train"]))
        result = measure(spec, int(sys.argv[2]))
    except Exception as e:  # noqa: BLE001 - one row's failure is reported, the rest measured
        result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
    print(json.dumps(result))
    return 0


def run_child(spec: RunSpec, threads: int, steps: int) -> dict[str, Any]:
    """:func:`measure` in a fresh process with ``threads`` threads (as the plan starts it)."""
    blob = json.dumps({"arch": spec.arch, "task": spec.task, "model": spec.model,
                       "task_config": spec.task_config, "train": config_to_dict(spec.train)},
                      default=list)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "bench.step_costs", "--child", str(steps)],
                          input=blob, capture_output=True, text=True, env=env)
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit code {proc.returncode}: {tail[:300]}"}


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("format") == FORMAT else {}


def analysis_seconds(timings: Path) -> tuple[str, dict[str, float]]:
    """``(preset, {analysis: seconds})`` of a reproduce run's ``ok`` analyses."""
    d = json.loads(timings.read_text())
    return d.get("preset", ""), {k: float(v["seconds"]) for k, v in d.items()
                                 if isinstance(v, dict) and v.get("ok") is True
                                 and "seconds" in v and not k.startswith("train:")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.step_costs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    level = p.add_mutually_exclusive_group()
    for lv in LEVELS:
        level.add_argument(f"--{lv}", dest="level", action="store_const", const=lv)
    p.add_argument("recipes", nargs="*", help="default: every zoo recipe at the level")
    p.add_argument("--steps", type=int, default=3, help="timed steps per row")
    p.add_argument("--analyses-from", type=Path, action="append", default=[],
                   metavar="TIMINGS_JSON")
    p.add_argument("--out", type=Path, default=TABLE)
    args = p.parse_args(argv)
    level = args.level or "quick"
    names = args.recipes or [n for n, r in zoo.RECIPES.items() if r.available(level)]
    doc = _read(args.out) or {"format": FORMAT, "rows": {}, "analysis_s": {}, "meta": {}}
    measured: set[str] = set()
    t0, load0 = time.time(), os.getloadavg()[0]
    for i, name in enumerate(names, 1):
        spec = recipe_spec(name, level)
        key = cost_key(spec)
        if key in measured:
            continue
        measured.add(key)
        plan = plan_row(name, spec)
        result = run_child(spec, zoo.recipe(name).slots, args.steps)
        row = {"recipe": name, "level": level, "arch": spec.arch, "params": plan["params"],
               "batch_size": spec.train.batch_size, "seq_len": plan["seq_len"],
               "flops_per_step": plan["flops_per_token"] * plan["tokens_per_step"], **result,
               "load_avg_1m": round(os.getloadavg()[0], 2)}
        if "error" in row:
            print(f"{i}/{len(names)} {name}: FAILED {row['error']}", file=sys.stderr)
            continue
        doc["rows"][key] = row
        print(f"{i}/{len(names)} {name}: step {row['step_s']:.4f} s, eval {row['eval_s']:.3f} s,"
              f" start {row['start_s']:.1f} s (CPU per thread; wall step "
              f"{row['step_wall_s']:.4f} s, load {row['load_avg_1m']})", flush=True)
    for timings in args.analyses_from:
        preset, seconds = analysis_seconds(timings)
        doc["analysis_s"].setdefault(preset, {}).update(seconds)
        doc["meta"].setdefault("analyses_from", {})[preset] = str(timings)
    doc["meta"].setdefault("levels", {})[level] = {
        "machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "rows": len(measured), "wall_s": round(time.time() - t0, 1),
        "load_avg_1m_at_start": round(load0, 2), "timed_steps": args.steps,
        "clock": "CPU seconds per thread (step_s, eval_s); wall beside them"}
    write_atomic(args.out, json.dumps(doc, indent=1, sort_keys=True))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(_child() if sys.argv[1:2] == ["--child"] else main())
