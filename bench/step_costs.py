"""Measure the step-cost table training's ETA and the reproduce plan's read
(:mod:`models.train.costs`), and copy analyses' seconds into the plan's own table.

    python -m bench.step_costs --level quick                # every quick zoo recipe
    python -m bench.step_costs --level quick copy/rope markov/mamba2  # these rows only
    python -m bench.step_costs --level medium --analyses-from figures/out/medium/reproduce_timings.json

Each zoo recipe at the level, once per :func:`~models.train.costs.cost_key` (seeds share a
row), runs in one fresh process on one thread: one warm-up step, ``--steps`` timed optimizer
steps at the real batch through the one training loop, and one evaluation. Each is kept in
reference steps (:func:`~models.train.costs.reference_step`, timed just before and after the
row in the same process): on a machine shared with other work every CPU second does less, and
the step and the reference slow down alike, so the ratio holds where seconds do not. The raw
CPU and wall seconds and the load average are kept beside them. Start-up is the CPU time a
fresh process spends before its first run (interpreter, imports).

``--analyses-from`` copies each analysis' seconds (an ``ok`` entry that is not a ``train:``
job) from a ``reproduce_timings.json`` into the plan's table
(``analyses/reproduce/costs/analysis_seconds.json``,
:class:`analyses.reproduce.eta.AnalysisSeconds`): an analysis' own process is timed by the
run that ran it, not here, and training does not cost analyses. Writes
``models/train/step_costs.json``; rows not measured by this call are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

from analyses import zoo
from analyses.claims import level_of
from analyses.reproduce.eta import ANALYSIS_FORMAT, ANALYSIS_TABLE
from analyses.zoo.dryrun import recipe_run_config
from bench.common import machine
from models.train.callbacks import Callback, Run
from models.train.costs import FORMAT, TABLE, cost_key, reference_seconds
from models.train.evaluation import evaluate
from models.train.loop import train
from models.train.plan import plan_row
from models.train.runconfig import RunConfig
from seqprobe import flags
from seqprobe.atomic import read_table, write_atomic
from seqprobe.cli import OneLineParser, add_level_flag, run_cli
from seqprobe.errors import InputError
from seqprobe.sweep import ProcessFailed, run_fresh

WARM_STEPS = 1  # the first step pays one-off allocations and lazy imports: not timed
COSTED_LEVELS = ("quick", "medium", "paper")  # the levels whose step costs are measured


class _Clock(Callback):
    """CPU and wall time at the end of every step; stops the run after ``steps`` steps and
    keeps the model and task for the evaluation timed after it."""

    def __init__(self, steps: int):
        self.steps = steps
        self.cpu: list[float] = []
        self.wall: list[float] = []
        self.run: Run | None = None

    def on_step(self, run: Run) -> bool:
        self.cpu.append(time.thread_time())
        self.wall.append(time.perf_counter())
        self.run = run
        return run.step >= self.steps


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(run_config: RunConfig, steps: int) -> dict[str, Any]:
    """In this process, on one thread: CPU seconds of a step and of an evaluation, and of the
    reference step timed just before and just after (the unit the table keeps them in)."""
    ref_before = reference_seconds(time.thread_time)
    clock = _Clock(WARM_STEPS + steps)
    train(run_config, out=None, device="cpu", progress=False, callbacks=[clock])
    timed = len(clock.cpu) - WARM_STEPS
    if timed < 1:
        raise InputError(f"the run stopped after {len(clock.cpu)} step(s)")
    run = clock.run
    e_cpu, e_wall = time.thread_time(), time.perf_counter()
    evaluate(run.model, run.task, run_config.train, torch.device("cpu"))
    e_cpu, e_wall = time.thread_time() - e_cpu, time.perf_counter() - e_wall
    ref = (ref_before + reference_seconds(time.thread_time)) / 2
    step_cpu = (clock.cpu[-1] - clock.cpu[WARM_STEPS - 1]) / timed
    step_wall = (clock.wall[-1] - clock.wall[WARM_STEPS - 1]) / timed
    return {"step": step_cpu / ref, "eval": e_cpu / ref, "ref_s": ref, "step_s": step_cpu,
            "eval_s": e_cpu, "step_wall_s": step_wall, "eval_wall_s": e_wall,
            "timed_steps": timed}


def measure_runs(runs: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """:func:`measure` of each run (:meth:`RunConfig.to_dict`), on one thread: a result (or
    ``{"error": ...}``) per run. ``start`` is the CPU time the process spent before its
    first run (interpreter and imports, as a job's process spends), in reference steps: run
    as the first task of a fresh process (:func:`run_child`)."""
    torch.set_num_threads(1)
    start = _cpu() / reference_seconds(time.thread_time)
    results = []
    for d in runs:
        try:
            results.append({**measure(RunConfig.from_dict(d), steps), "start": start})
        except Exception as e:  # noqa: BLE001 - one row's failure is reported, the others still run
            first = str(e).splitlines()[0][:300] if str(e) else ""
            results.append({"error": f"{type(e).__name__}: {first}"})
    return results


def run_child(run_configs: list[RunConfig], steps: int) -> list[dict[str, Any]]:
    """:func:`measure` of each RunConfig in one fresh process (the one job runner's,
    :func:`seqprobe.sweep.run_fresh`), on one thread."""
    runs = json.loads(json.dumps([s.to_dict() for s in run_configs], default=list))
    try:
        return run_fresh(measure_runs, runs, steps,
                         env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    except ProcessFailed as e:
        return [{"error": str(e)}] * len(run_configs)


def analysis_seconds(timings: Path) -> tuple[str, dict[str, float]]:
    """``(level, {analysis: seconds})`` of a reproduce run's ``ok`` analyses."""
    d = json.loads(timings.read_text())
    return level_of(d) or "", {k: float(v["seconds"]) for k, v in d.items()
                                 if isinstance(v, dict) and v.get("ok") is True
                               and "seconds" in v and not k.startswith("train:")}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m bench.step_costs", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    add_level_flag(p, levels=COSTED_LEVELS)
    p.add_argument("recipes", nargs="*", help="default: every zoo recipe at the level")
    p.add_argument("--steps", type=flags.flag("--steps"), default=5, help="timed steps per row")
    p.add_argument("--analyses-from", type=Path, action="append", default=[],
                   metavar="TIMINGS_JSON")
    p.add_argument("--out", type=Path, default=TABLE)
    p.add_argument("--analyses-out", type=Path, default=ANALYSIS_TABLE,
                   help="where --analyses-from's seconds go (default: the plan's table)")
    p.add_argument("--note", default="", help="kept in the table's meta: how the machine was "
                   "shared, where --analyses-from's times were taken")
    args = p.parse_args(argv)
    level = args.level
    names = args.recipes or [n for n, r in zoo.RECIPES.items() if r.available(level)]
    doc = read_table(args.out, FORMAT) or {"format": FORMAT, "rows": {}, "meta": {}}
    t0, load0 = time.time(), os.getloadavg()[0]
    rows: dict[str, tuple[str, RunConfig]] = {}  # key -> (first recipe, RunConfig)
    for name in names:
        run_config = recipe_run_config(name, level)
        rows.setdefault(cost_key(run_config), (name, run_config))
    print(f"{len(rows)} models of {len(names)} recipes...", flush=True)
    results = run_child([run_config for _, run_config in rows.values()], args.steps)
    for (key, (name, run_config)), result in zip(rows.items(), results, strict=True):
        if "error" in result:
            print(f"{name}: FAILED {result['error']}", file=sys.stderr)
            continue
        plan = plan_row(name, run_config)
        doc["rows"][key] = row = {
            "recipe": name, "level": level, "arch": run_config.arch, "params": plan["params"],
            "batch_size": run_config.train.batch_size, "seq_len": plan["seq_len"],
            "flops_per_step": plan["flops_per_token"] * plan["tokens_per_step"], **result}
        print(f"{name}: step {row['step']:.2f}, eval {row['eval']:.2f} reference steps "
              f"({row['step_s']:.4f} / {row['eval_s']:.3f} CPU s; reference "
              f"{row['ref_s'] * 1000:.1f} ms)", flush=True)
    measured = set(rows)
    if args.analyses_from:
        table = read_table(args.analyses_out, ANALYSIS_FORMAT) or {
            "format": ANALYSIS_FORMAT, "analysis_s": {}, "meta": {}}
        for timings in args.analyses_from:
            timed, seconds = analysis_seconds(timings)
            table["analysis_s"].setdefault(timed, {}).update(seconds)
            # where they came from in words: the run's folder and file, no path of this machine
            table["meta"].setdefault("from", {}).setdefault(timed, []).append(
                f"{timings.name} of the run in {timings.resolve().parent.name}"
                + (f" ({args.note})" if args.note else ""))
        write_atomic(args.analyses_out, json.dumps(table, indent=1, sort_keys=True))
        print(f"wrote {args.analyses_out}")
    doc["meta"].setdefault("levels", {})[level] = {
        "machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "rows": len(measured), "wall_s": round(time.time() - t0, 1),
        "load_avg_1m_at_start": round(load0, 2),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2), "timed_steps": args.steps,
        "unit": "reference steps (models.train.costs.reference_step) of one thread's CPU time",
        **({"note": args.note} if args.note else {})}
    write_atomic(args.out, json.dumps(doc, indent=1, sort_keys=True))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
