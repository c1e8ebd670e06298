"""All speed and memory benchmarks in one run: ``python -m bench`` -> ``bench/results.json``.

Runs every ``bench/bench_*.py`` module (each measures its contenders side by side, medians and
ratios, and writes ``bench/results_NAME.json``), then merges them with the wall time of each
quick figure from the last ``python -m analyses.reproduce --level quick`` run
(``figures/out/reproduce_timings.json``; ``--figures`` runs the reproduce plan first).

``BENCH_CLOCK=cpu python -m bench ...`` times on one thread by its CPU time (steadier on a
machine shared with other jobs; see bench/common.py); the default is wall time on every core.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.common import RESULTS, machine
from figures.style import DEFAULT_OUT
from seqprobe.sweep import run_command


def modules() -> list[str]:
    return sorted(p.stem for p in RESULTS.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--only", action="append", default=[], help="run only these bench modules")
    p.add_argument("--figures", action="store_true",
                   help="run `python -m analyses.reproduce --level quick` first and time every "
                   "figure")
    args = p.parse_args(argv)
    names = [m for m in modules() if not args.only or m in args.only]
    failed = []
    if args.figures:
        run_command([sys.executable, "-m", "analyses.reproduce", "--level", "quick"], output="inherit")
    out = RESULTS / "results.json"
    # --only updates those entries of the last results and keeps the others
    merged: dict = json.loads(out.read_text()) if args.only and out.exists() else {}
    # the top-level machine is the full run's; an --only run's entries carry their own
    if not args.only or "machine" not in merged:
        merged["machine"] = machine()
    merged["when"] = time.strftime("%Y-%m-%d %H:%M:%S")
    for name in names:
        print(f"== {name}", flush=True)
        t0 = time.time()
        proc = run_command([sys.executable, "-m", f"bench.{name}"], output="inherit")
        result = RESULTS / f"results_{name.removeprefix('bench_')}.json"
        # keyed as its results file is: bench_ensemble -> "ensemble" (ensemble.stu.speedup)
        key = name.removeprefix("bench_")
        merged.pop(name, None)  # the older key of the same entry
        if proc.returncode != 0 or not result.exists():
            failed.append(name)
            merged[key] = {"error": f"exit code {proc.returncode}"}
            continue
        # each entry keeps its own machine description: an --only run may time on another
        # clock or thread count than the entries it leaves in place
        data = json.loads(result.read_text())
        merged[key] = {**data, "bench_wall_s": round(time.time() - t0, 1)}
    timings = DEFAULT_OUT / "reproduce_timings.json"
    if timings.exists():
        merged["figures_wall_s"] = json.loads(timings.read_text())
    out.write_text(json.dumps(merged, indent=1))
    print(f"wrote {out}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
