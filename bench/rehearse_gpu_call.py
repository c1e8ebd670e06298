"""The lent GPU call rehearsed here, without a GPU: ``python -m bench.rehearse_gpu_call``.

It runs the exact call (``bash scripts/gpu_call.sh ARGS``) in a fresh clone of this repository,
in an environment like the lent machine's, and checks what came back:

* a ``PATH`` that holds only ``python3`` (this interpreter), no ``python``, no coreutils;
* the pinned wheels (``scripts/gpu_wheels.txt``) in the clone's ``.whl/``, built for this
  interpreter (the lent machine's are built for its Python 3.12), installed by the call itself
  with ``--no-index --no-deps --target`` into a scratch folder that comes first on its path —
  the preflight must import TransformerLens and its carried dependencies *from there*;
* an empty ``$OUT``, the command's limit (:data:`LIMIT_S`), and ``--device cpu``;
* ``--kill-at S`` (or ``random``): the call's whole process group killed at second S, as the
  device tool kills a command at its limit.

Then ``$OUT`` is checked against what the device tool brings back (:data:`MAX_FILES` files,
16 MiB each, 64 MiB in all, names in ``[A-Za-z0-9._-]``, at most two folders down), and against
the call's own report: the preflight names the versions it imported, every stage that
``gpu_run.json`` says finished left its JSON (and the large stage its tarball, which must open
and hold an index), and the pinned packages were imported from the wheels. Exit 0 when every
check passes; the result is printed and written to ``--report``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from seqprobe import flags
from seqprobe.cli import run_cli
from seqprobe.config import check
from seqprobe.sweep import run_command

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 600  # the device tool's limit on one command
MAX_FILES, MAX_FILE_BYTES, MAX_BYTES = 8, 16 << 20, 64 << 20
NAME_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
STAGE_FILES = {"gpu_check": "gpu_check.json", "ensemble": "ensemble.json",
               "preflight": "preflight.json"}


def check_out(out: Path, carried: set[str], clone: Path,
              expected: Sequence[str] = ()) -> dict:
    """``out`` as the device tool would bring it back, against the call's report;
    ``expected``: the stages a call that was not cut short must have run."""
    problems: list[str] = []
    files = [f for f in out.rglob("*") if f.is_file() or f.is_symlink()]
    for f in files:
        rel = f.relative_to(out)
        if len(rel.parts) > 3:
            problems.append(f"{rel}: more than two folders down")
        if not set(f.name) <= NAME_CHARS:
            problems.append(f"{rel}: a name the device tool does not bring back")
        if f.is_symlink() or not f.is_file():
            problems.append(f"{rel}: not a plain file")
        elif f.stat().st_size > MAX_FILE_BYTES:
            problems.append(f"{rel}: over 16 MiB")
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} files (at most {MAX_FILES} come back)")
    total = sum(f.stat().st_size for f in files if f.is_file())
    if total > MAX_BYTES:
        problems.append(f"{total} bytes (at most 64 MiB come back)")
    result: dict = {"files": sorted(str(f.relative_to(out)) for f in files), "bytes": total}
    try:
        report = json.loads((out / "gpu_run.json").read_text())
    except (OSError, ValueError):
        report = None
        problems.append("no readable gpu_run.json")
    stages = (report or {}).get("stages", {})
    ended = {n for n, s in stages.items() if s.get("rc") is not None}
    try:
        pre = json.loads((out / "preflight.json").read_text())
        if not str(pre.get("suite", "")).startswith(str(clone)):
            problems.append(f"preflight: the suite imported from {pre.get('suite')}, not the "
                            "clone")
        imports = pre.get("imports", {})
        result["versions"] = {m: v.get("version") for m, v in imports.items()}
        if pre.get("failed"):
            problems.append(f"preflight: imports failed: {pre['failed']}")
        for m in carried:
            where = str(imports.get(m, {}).get("file") or "")
            if "seqprobe-gpu-call-" not in where:
                problems.append(f"preflight: {m} imported from {where or 'nowhere'}, not from "
                                "the carried wheels")
    except (OSError, ValueError):
        if "preflight" in ended:
            problems.append("the preflight ended but left no readable preflight.json")
    missing = [s for s in expected if s not in ended]
    if missing:
        problems.append(f"the call ended without running {', '.join(missing)}")
    if report is not None:
        result["stages"] = {n: {k: s.get(k) for k in ("rc", "seconds", "capped")}
                            for n, s in stages.items()}
        for name, row in stages.items():
            if row.get("rc") is None:
                continue
            want = STAGE_FILES.get(name)
            if want and name != "preflight" and not (out / want).is_file():
                problems.append(f"stage {name} ended but left no {want}")
            if name == "large":
                k = str(report.get("part", "")).split("/")[0]
                ball = out / f"large_part{k}.tar.gz"
                try:
                    with tarfile.open(ball) as tar:
                        names = tar.getnames()
                    result["tarball"] = {"members": len(names), "bytes": ball.stat().st_size}
                    if row.get("rc") == 0 and "index.json" not in names:
                        problems.append(f"{ball.name} holds no index.json")
                except (OSError, tarfile.TarError) as e:
                    problems.append(f"{ball.name}: {e}")
    result["problems"] = problems
    return result


def _expected(call_args: Sequence[str]) -> list[str]:
    """The stages a call with these arguments runs when nothing cuts it short."""
    stages = ["preflight"]
    if "--no-checks" not in call_args:
        stages += ["gpu_check", "ensemble"]
    if "--part" in call_args:
        stages.append("large")
    return stages


def _python3_only_path(tmp: Path) -> Path:
    """A folder holding only ``python3``: this interpreter (its real file, so that it finds its
    own packages, as the lent machine's python3 finds torch)."""
    bin_ = tmp / "bin"
    bin_.mkdir()
    (bin_ / "python3").symlink_to(Path(sys.executable).resolve())
    return bin_


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rehearse_gpu_call", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("call", nargs="*", help="the call's arguments (default: --part 1/N of the "
                   "plan, with the checks), e.g. -- --part 2/2 --no-checks")
    p.add_argument("--kill-at", default=None, metavar="S",
                   help="kill the call's process group at second S (or 'random': a second "
                        "drawn in 5..the budget), as the device tool does at its limit")
    p.add_argument("--budget-s", type=flags.flag("--budget-s"), default=None,
                   help="the call's own budget (default: its plan's)")
    p.add_argument("--wheels", type=Path, default=None,
                   help="a folder of the pinned wheels for this interpreter (default: "
                        "built into the clone by scripts/gpu_wheels.sh)")
    p.add_argument("--commit", default="HEAD", help="what to clone (default HEAD)")
    p.add_argument("--report", type=Path, default=None, help="write the result here too")
    p.add_argument("--keep", action="store_true", help="keep the clone and $OUT")
    args = p.parse_args(argv)
    call_args = args.call or ["--part", "1/1"]
    tmp = Path(tempfile.mkdtemp(prefix="seqprobe-rehearsal-"))
    clone, out = tmp / "clone", tmp / "OUT"
    out.mkdir()
    run_command(["git", "clone", "-q", str(ROOT), str(clone)], output="inherit", check_exit=True)
    run_command(["git", "-C", str(clone), "checkout", "-q", args.commit], output="inherit",
                check_exit=True)
    if args.wheels is not None:
        check(args.wheels.is_dir(), f"--wheels {args.wheels}: not a folder")
        shutil.copytree(args.wheels, clone / ".whl")
    else:
        run_command(["bash", "scripts/gpu_wheels.sh"], cwd=clone, check_exit=True,
                    env={**os.environ, "PYTHON_VERSION": "here", "PYTHON": sys.executable},
                    output="discard")
    env = {"PATH": str(_python3_only_path(tmp)), "HOME": str(tmp / "home"), "OUT": str(out),
           "LANG": "C.UTF-8", "TMPDIR": str(tmp)}
    budget = ["--budget-s", str(args.budget_s)] if args.budget_s else []
    cmd = ["/bin/bash", "scripts/gpu_call.sh", *call_args, "--device", "cpu", *budget]
    kill_at = None
    if args.kill_at == "random":
        kill_at = random.uniform(5, args.budget_s or LIMIT_S)
    elif args.kill_at is not None:
        kill_at = float(args.kill_at)
    t0 = time.time()
    # killed at once at the limit (or --kill-at), as the lent machine's own limit kills
    done = run_command(cmd, cwd=clone, env=env, timeout=min(kill_at or LIMIT_S, LIMIT_S),
                       output="inherit")
    rc, killed = done.returncode, done.stopped_by is not None
    wall = time.time() - t0
    carried = {"transformer_lens", "datasets", "beartype", "typeguard", "dill", "multiprocess",
               "fancy_einsum"}
    result = {"command": " ".join(cmd), "rc": rc, "wall_s": round(wall, 1),
              "killed_at_s": round(kill_at, 1) if killed and kill_at else None,
              "limit_s": LIMIT_S,
              **check_out(out, carried, clone, () if killed else _expected(call_args))}
    text = json.dumps(result, indent=1)
    print(text)
    if args.report is not None:
        args.report.write_text(text)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"kept {tmp}", file=sys.stderr)
    return 0 if not result["problems"] else 1


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
