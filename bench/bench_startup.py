"""How long a command takes to start: ``python -m bench.bench_startup`` ->
``bench/results_startup.json``.

A user meets these before any work: the zoo's ``--list``, a one-line refusal (an unknown zoo
name, to the zoo and to an analysis), an analysis' ``--help``; ``import torch`` alone is the
floor an analysis cannot go under. Each command runs in a fresh interpreter (an empty cache,
a temp folder), ``--repeats`` times, interleaved so that a change of load hits them alike.

Recorded per command: the median and least wall time, and the median CPU time of the child
(user + system). Starting a command is one thread's work, so its CPU time is what its wall
time is on an idle core: ``held`` compares that to the target (``target_s``: a command
a user starts should answer within 2 s on an idle core), and ``load_avg_1m`` says how busy the
machine was.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, write_results
from seqprobe import flags
from seqprobe.sweep import run_command

ROOT = RESULTS.parent
TARGET_S = 2.0
COMMANDS = {  # name -> (argv after `python`, exit code it must give, held to the target)
    "import_torch": (["-c", "import torch"], 0, False),
    "zoo_list": (["-m", "analyses.zoo", "--list"], 0, True),
    "zoo_path_refusal": (["-m", "analyses.zoo", "path", "no/such"], 2, True),
    "ngram_heads_help": (["-m", "analyses.ngram_heads", "--help"], 0, False),
    "ngram_heads_refusal": (["-m", "analyses.ngram_heads", "zoo:no/such"], 2, True),
}


def run_once(argv: list[str], code: int, cwd: Path, env: dict) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of one fresh run of ``python argv`` (through the
    runner's :func:`~seqprobe.sweep.run_command`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = run_command([sys.executable, *argv], cwd=cwd, env={**os.environ, **env})
    got, output = proc.returncode, proc.stdout + proc.stderr
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if got != code:
        raise SystemExit(f"{' '.join(argv)}: exit {got}, expected {code}: "
                         f"{output.strip()[-300:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_startup", description=__doc__)
    p.add_argument("--repeats", type=flags.flag("--repeats"), default=5)
    args = p.parse_args(argv)
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in COMMANDS}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SEQPROBE_CACHE": str(Path(tmp) / "c")}
        env["SEQPROBE_SEED_OFFSET"] = ""  # the recipes as written
        for _ in range(args.repeats):
            for name, (cmd, code, _) in COMMANDS.items():
                cmd = [*cmd, "--out", tmp] if name == "ngram_heads_refusal" else cmd
                times[name].append(run_once(cmd, code, Path(tmp), env))
    results = {}
    for name, runs in times.items():
        cpu = statistics.median(c for _, c in runs)
        results[name] = {"command": "python " + " ".join(COMMANDS[name][0]),
                         "wall_median_s": round(statistics.median(w for w, _ in runs), 3),
                         "wall_min_s": round(min(w for w, _ in runs), 3),
                         "cpu_median_s": round(cpu, 3), "repeats": len(runs),
                         **({"target_s": TARGET_S, "held": cpu <= TARGET_S}
                            if COMMANDS[name][2] else {})}
    write_results("startup", {"commands": results,
                              "load_avg_1m_before_after": [round(load_before, 2),
                                                           round(os.getloadavg()[0], 2)]})
    return 0 if all(r.get("held", True) for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
