"""One command for a lent GPU machine: the GPU checks, the ensemble bench, then one part of the
large level, its results packed small enough to bring back.

    python -m bench.gpu_run --out $OUT --part 5/5              # the first call: checks too
    python -m bench.gpu_run --out $OUT --part 1/5 --no-checks  # the other parts

Within ``--budget-s`` (default: a lent command's 10 minutes less start-up and copying):

1. ``bench.gpu_check`` (the GPU tests, the paper copy models' steps, the dry run) with at most
   :data:`CHECK_S` of it -> ``$OUT/gpu_check.json``;
2. ``bench.bench_ensemble --device cuda`` (16 STU seeds and the 12-run copy sweep, one after
   another against one ensemble: the measured CUDA ensemble step) ->
   ``$OUT/results_ensemble_cuda.json``;
3. ``analyses.reproduce --large --part K/N`` with what is left as its job timeout, into a
   scratch folder; its results (JSON, figures, index, the tails of its logs; no checkpoint)
   packed into ``$OUT/large_partK.tar.gz``.

At most 5 files land in ``$OUT`` (``gpu_run.json`` says what ran, for how long, and each
stage's exit code), a few MiB: what the device tool brings back. Bring a part's tarball under
``figures/reference/<date>-cuda/large/partK/`` and merge the parts with
``python -m analyses.reproduce --large --index-only --merge PART_DIR... --out DIR``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from analyses.reproduce.parts import parse_part
from seqprobe import flags
from seqprobe.cli import run_cli
from seqprobe.config import check

BUDGET_S = 540.0  # a lent command is 10 minutes, start-up and bringing back included
CHECK_S = 180.0  # the cap on the checks
PACKED = ("*.json", "*.png", "*.md", "*.html")
LOG_TAIL = 4000  # characters of each job's log kept


def _run(cmd: list[str], timeout: float, log) -> int:
    log(f"$ {' '.join(cmd)}  (timeout {timeout:.0f} s)")
    try:
        return subprocess.run(cmd, timeout=max(timeout, 1.0)).returncode
    except subprocess.TimeoutExpired:
        return 124


def pack(results: Path, tarball: Path) -> int:
    """``results``' JSON, figures, index and log tails into ``tarball``; its size in bytes."""
    with tarfile.open(tarball, "w:gz") as tar:
        for pattern in PACKED:
            for f in sorted(results.glob(pattern)):
                tar.add(f, arcname=f.name)
        for f in sorted((results / "logs").glob("*.log")):
            tail = f.read_text(errors="replace")[-LOG_TAIL:].encode()
            info = tarfile.TarInfo(f"logs/{f.name}")
            info.size = len(tail)
            tar.addfile(info, io.BytesIO(tail))
    return tarball.stat().st_size


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="the folder brought back ($OUT)")
    p.add_argument("--part", required=True, metavar="K/N", help="the large level's part")
    p.add_argument("--no-checks", action="store_true", help="skip stages 1 and 2")
    p.add_argument("--budget-s", type=flags.flag("--budget-s"), default=BUDGET_S)
    p.add_argument("--device", default="cuda", help="cuda (default); cpu for a dry test")
    p.add_argument("--jobs", type=flags.flag("--jobs"), default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    k, n = parse_part(args.part)
    check(args.budget_s > 0, "--budget-s must be > 0")
    args.out.mkdir(parents=True, exist_ok=True)
    check(os.access(args.out, os.W_OK), f"--out {args.out}: cannot write in it")
    t0 = time.time()

    def left() -> float:
        return args.budget_s - (time.time() - t0)

    def log(text: str) -> None:
        print(f"[gpu_run {time.time() - t0:5.0f} s] {text}", file=sys.stderr, flush=True)

    py = sys.executable
    report: dict = {"part": f"{k}/{n}", "device": args.device, "budget_s": args.budget_s,
                    "stages": {}}
    if not args.no_checks:
        t = time.time()
        rc = _run([py, "-m", "bench.gpu_check", "--device", args.device,
                   *(["--tiny"] if args.device == "cpu" else []),
                   "--budget-s", str(min(CHECK_S, left() / 3)),
                   "--out", str(args.out / "gpu_check.json")], left(), log)
        report["stages"]["gpu_check"] = {"rc": rc, "seconds": round(time.time() - t, 1)}
        t = time.time()
        rc = _run([py, "-m", "bench.bench_ensemble", "--device", args.device,
                   "--steps", "40"], min(120.0, left() / 3), log)
        made = Path(__file__).with_name("results_ensemble_cuda.json" if args.device != "cpu"
                                        else "results_ensemble.json")
        if rc == 0 and made.exists():
            (args.out / "results_ensemble_cuda.json").write_text(made.read_text())
        report["stages"]["bench_ensemble"] = {"rc": rc, "seconds": round(time.time() - t, 1)}
    with tempfile.TemporaryDirectory(prefix="seqprobe-large-") as scratch:
        results, cache = Path(scratch) / "out", Path(scratch) / "cache"
        t = time.time()
        rc = _run([py, "-m", "analyses.reproduce", "--large", "--part", f"{k}/{n}",
                   "--out", str(results), "--cache-dir", str(cache), "--jobs", str(args.jobs),
                   *(["--device", "cpu"] if args.device == "cpu" else []),  # a dry test here
                   "--timeout", str(max(30.0, left() - 20))], left() - 10, log)
        report["stages"]["large"] = {"rc": rc, "seconds": round(time.time() - t, 1)}
        if results.is_dir():
            size = pack(results, args.out / f"large_part{k}.tar.gz")
            report["stages"]["large"]["packed_bytes"] = size
    report["wall_s"] = round(time.time() - t0, 1)
    (args.out / "gpu_run.json").write_text(json.dumps(report, indent=1))
    log(json.dumps(report))
    return 0 if all(s["rc"] == 0 for s in report["stages"].values()) else 1


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
