"""One command for a lent GPU machine: a preflight, the GPU checks, the ensemble bench, then one
part of the large level, every result streamed into ``$OUT`` as it lands.

    bash scripts/gpu_call.sh --part 1/3                 # the first call: the checks too
    bash scripts/gpu_call.sh --part 2/3 --no-checks     # the other parts
    bash scripts/gpu_call.sh --part 3/3 --no-checks --resume-from .resume/part3

(``python -m analyses.reproduce --level large --list --device cuda --jobs 16`` prints the plan of
calls: which call runs what.) The call is planned to :class:`~analyses.reproduce.parts.CallBudget`:
every stage has a hard wall cap enforced from here — its process group is stopped at the cap
(SIGTERM first where a stage saves on it, then SIGKILL), whatever the stage does:

0. ``preflight``: the pinned wheels of ``.whl/`` (``scripts/gpu_wheels.txt``) installed into a
   scratch folder with ``--no-index --no-deps``, then torch, TransformerLens and the suite's
   dependencies imported in a child, their versions and files printed and written to
   ``$OUT/preflight.json`` within its first :attr:`~CallBudget.preflight_s`; a failed import
   ends the call there, in one line, not minutes later;
1. ``gpu_check`` (``bench.gpu_check``: the GPU tests, the paper copy models each in a process
   of its own with its own timeout, the dry run) -> ``$OUT/gpu_check.json``, written after
   every model;
2. ``ensemble`` (``bench.bench_ensemble``) -> ``$OUT/ensemble.json``, after every sweep;
3. ``large``: ``analyses.reproduce --level large --part K/N`` into a scratch folder; every
   :data:`PACK_EVERY_S` seconds and at its end its results (JSON, figures, index, the tails of
   its logs, the files an analysis resumes from) are packed into ``$OUT/large_partK.tar.gz``,
   and the part's checkpoints, where they are small enough to bring back
   (:data:`CACHE_BYTES`), into ``$OUT/large_partK_cache.tar.gz``. At its cap the run is sent
   SIGTERM: its training jobs save their checkpoints (the next call, given ``--resume-from``
   the folder this call's files were brought back to, continues them) and memorization keeps
   every cell it finished.

``$OUT/gpu_run.json`` (each stage's exit code, seconds, whether it hit its cap) and
``$OUT/gpu_run.log`` (every line of every stage, as it is printed) are rewritten as the call
goes, so a call cut at any second brings back the preflight and every stage finished before
it. At most :data:`MAX_FILES` files land in ``$OUT``, each named in ``[A-Za-z0-9._-]``: what the
device tool brings back. ``python -m bench.rehearse_gpu_call`` runs this exact call here,
without a GPU, in an environment like the lent machine's, and checks what came back.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from analyses.reproduce.parts import BUDGET, CACHE_BYTES, parse_part
from seqprobe import flags
from seqprobe.atomic import open_own, write_atomic
from seqprobe.cli import add_workers_flag, run_cli
from seqprobe.config import check
from seqprobe.errors import InputError, OutputError
from seqprobe.sweep import run_command
from seqprobe.sweep.commands import STOP_GRACE

ROOT = Path(__file__).resolve().parents[1]
PINS = ROOT / "scripts" / "gpu_wheels.txt"
PACKED = ("*.json", "*.png", "*.md", "*.html")
LOG_TAIL = 4000  # characters of each job's log kept in the tarball
PACK_EVERY_S = 15.0
# SIGTERM this long before a stage's cap: the reproduce run then gives its jobs its own grace to
# save their checkpoints (seqprobe.sweep.commands.STOP_GRACE), with time to spare for its own exit
STOP_GRACE_S = STOP_GRACE + 10.0
MAX_FILES = 8  # what the device tool brings back of $OUT
NAME = re.compile(r"[A-Za-z0-9._-]+")
# what the preflight imports (module -> the distribution whose version it reports)
PREFLIGHT_MODULES = {"torch": "torch", "transformer_lens": "transformer-lens",
                     "transformers": "transformers", "datasets": "datasets",
                     "pyarrow": "pyarrow", "numpy": "numpy", "einops": "einops",
                     "jaxtyping": "jaxtyping", "beartype": "beartype", "typeguard": "typeguard",
                     "dill": "dill", "multiprocess": "multiprocess",
                     "fancy_einsum": "fancy-einsum", "scipy": "scipy", "sklearn": "scikit-learn",
                     "matplotlib": "matplotlib"}
_PREFLIGHT = r"""
import importlib, importlib.metadata as md, json, sys, time
t0 = time.time()
mods = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0], "executable": sys.executable, "imports": {}}
for mod, dist in mods.items():
    try:
        m = importlib.import_module(mod)
        out["imports"][mod] = {"version": md.version(dist), "file": getattr(m, "__file__", None)}
    except Exception as e:
        out["imports"][mod] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    print(f"preflight: {mod} {out['imports'][mod]}", flush=True)
import seqprobe
out["suite"] = seqprobe.__file__
import torch
out["cuda"] = torch.cuda.is_available()
if out["cuda"]:
    out["card"] = torch.cuda.get_device_name(0)
    out["bf16"] = torch.cuda.is_bf16_supported()
out["torch_cuda"] = torch.version.cuda
out["import_s"] = round(time.time() - t0, 1)
print("PREFLIGHT " + json.dumps(out), flush=True)
import os
os._exit(0)  # no interpreter teardown: what was asked is answered
"""


def read_pins(path: Path = PINS) -> dict[str, str]:
    """``scripts/gpu_wheels.txt``: ``name==version`` per line -> {normalised name: version}."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            check(sep == "==" and version, f"{path}: {line!r} is not pinned as NAME==VERSION")
            pins[_norm(name)] = version.strip()
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_files(wheels: Path, pins: dict[str, str]) -> list[Path]:
    """The wheel of each pin in ``wheels``; one line naming what is missing or unpinned."""
    found = {}
    for f in sorted(wheels.glob("*.whl")):
        name, version = f.name.split("-")[:2]
        found.setdefault(_norm(name), {})[version] = f
    problems = [f"{n}=={v} (no wheel)" for n, v in pins.items() if v not in found.get(n, {})]
    problems += [f"{n} {sorted(vs)} (not in {PINS.name})" for n, vs in found.items()
                 if n not in pins]
    problems += [f"{n}: {len(vs)} versions" for n, vs in found.items() if len(vs) > 1]
    check(not problems, f"{wheels}: the wheels are not the pinned set: {'; '.join(problems)} "
          f"(build them with `bash scripts/gpu_wheels.sh`)")
    return [found[n][v] for n, v in pins.items()]


class Call:
    """The call's shared state: ``$OUT``, its report and log, written as the call goes."""

    def __init__(self, out: Path, report: dict):
        self.out, self.report, self.t0 = out, report, time.time()
        try:  # never through a link someone left in --out (seqprobe.atomic.open_own)
            fd = open_own(out / "gpu_run.log", os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            raise OutputError(f"--out {out}: cannot write gpu_run.log ({e.strerror})") from None
        self.log_file = os.fdopen(fd, "a", buffering=1)
        self.lock = threading.Lock()

    def log(self, text: str) -> None:
        line = f"[gpu_run {time.time() - self.t0:5.0f} s] {text}"
        with self.lock:
            print(line, file=sys.stderr, flush=True)
            self.log_file.write(line + "\n")

    def write(self, name: str, data: str | bytes) -> None:
        check(NAME.fullmatch(name) is not None, f"$OUT file name {name!r}")
        write_atomic(self.out / name, data)

    def save_report(self) -> None:
        self.report["wall_s"] = round(time.time() - self.t0, 1)
        self.write("gpu_run.json", json.dumps(self.report, indent=1))

    def stage(self, name: str, cmd: Sequence[str], cap: float, env: dict[str, str],
              grace: float = 0.0, on_line=None) -> dict:
        """Run one stage through the runner (:func:`seqprobe.sweep.run_command`: its own
        process group), every output line into the call's log (``on_line(line)`` sees it too),
        stopped at ``cap`` seconds from outside: SIGTERM ``grace`` seconds before the cap
        where ``grace``, SIGKILL at it. Its row of the report is saved when it ends."""
        t = time.time()
        self.log(f"== {name} (cap {cap:.0f} s): {' '.join(cmd)}")
        row: dict = {"cap_s": round(cap, 1)}
        if cap <= 1:
            row.update(rc=None, seconds=0.0, skipped="no time left in the call")
            self.report["stages"][name] = row
            self.save_report()
            return row

        def line(text: str) -> None:
            with self.lock:
                self.log_file.write(f"  {name}| {text}\n")
                print(f"  {name}| {text}", file=sys.stderr, flush=True)
            if on_line is not None:
                on_line(text)

        done = run_command(cmd, env=env, timeout=cap, grace=grace, output="lines", on_line=line)
        stopped = done.stopped_by
        row.update(rc=done.returncode, seconds=round(time.time() - t, 1),
                   capped=stopped is not None, **({"stopped_by": stopped} if stopped else {}))
        self.report["stages"][name] = row
        self.save_report()
        self.log(f"== {name}: {row}")
        return row


def pack(results: Path, tarball: Path, resume_globs: Sequence[str] = ()) -> int:
    """``results``' JSON, figures, index, log tails and the files its analyses resume from
    into ``tarball`` (written whole, then renamed: a call cut while packing keeps the last
    one); its size in bytes. Only regular files that are no links are packed."""
    tmp = tarball.with_name(f".{tarball.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for pattern in (*PACKED, *resume_globs):
            for f in sorted(results.glob(pattern)):
                if f.is_file() and not f.is_symlink():
                    tar.add(f, arcname=str(f.relative_to(results)))
        for f in sorted((results / "logs").glob("*.log")):
            if f.is_file() and not f.is_symlink():
                tail = f.read_text(errors="replace")[-LOG_TAIL:].encode()
                info = tarfile.TarInfo(f"logs/{f.name}")
                info.size = len(tail)
                tar.addfile(info, io.BytesIO(tail))
    os.replace(tmp, tarball)
    return tarball.stat().st_size


def pack_cache(cache: Path, tarball: Path, limit: int = CACHE_BYTES) -> dict:
    """The part's checkpoints (``cache``'s ``*.pt``, done or interrupted) into ``tarball``
    when together they fit in ``limit`` bytes: what the next call resumes from. Returns what
    it did."""
    files = sorted(f for f in cache.glob("*.pt") if f.is_file() and not f.is_symlink())
    size = sum(f.stat().st_size for f in files)
    if not files or size > limit:
        return {"checkpoints": len(files), "bytes": size,
                "packed": False, **({"why": f"over {limit} bytes"} if files else {})}
    tmp = tarball.with_name(f".{tarball.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in files:
            tar.add(f, arcname=f.name)
    os.replace(tmp, tarball)
    return {"checkpoints": len(files), "bytes": size, "packed": True}


def restore(tarball: Path, into: Path, allowed: Sequence[str]) -> list[str]:
    """Members of ``tarball`` (a file an earlier call brought back) that match ``allowed`` glob
    patterns, as regular files under ``into``; refuses links, devices, absolute paths and
    ``..``. Returns what was restored."""
    check(tarball.is_file() and not tarball.is_symlink(),
          f"--resume-from: {tarball} is not a regular file")
    done = []
    with tarfile.open(tarball, "r:gz") as tar:
        for m in tar.getmembers():
            path = Path(m.name)
            check(m.isfile() and not path.is_absolute() and ".." not in path.parts,
                  f"--resume-from {tarball}: {m.name!r} is not a plain file inside it")
            if not any(path.match(p) for p in allowed):
                continue
            dest = into / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(m)
            assert src is not None
            write_atomic(dest, src.read())
            done.append(m.name)
    return done


def _resume_globs(names: Sequence[str]) -> list[str]:
    from analyses.reproduce.plan import figure_of  # the part's analyses, imported when packing
    return [g for n in names for g in figure_of(n).resume_files]


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="the folder brought back ($OUT)")
    p.add_argument("--part", default=None, metavar="K/N",
                   help="the large level's part (none: the checks alone)")
    p.add_argument("--no-checks", action="store_true", help="skip stages 1 and 2")
    p.add_argument("--resume-from", type=Path, default=None, metavar="DIR",
                   help="the files an earlier call of this part brought back (its tarballs): "
                        "its checkpoints and its analyses' saved cells are continued")
    p.add_argument("--budget-s", type=flags.flag("--budget-s"), default=BUDGET.command_s,
                   help="the whole command's seconds (default: a lent call less its start-up)")
    p.add_argument("--device", default="cuda", help="cuda (default); cpu for a rehearsal")
    add_workers_flag(p, default=os.cpu_count() or 1)
    p.add_argument("--wheels", type=Path, default=ROOT / ".whl",
                   help="the pinned wheels to install first (default .whl/; a missing folder: "
                        "none, the packages must be importable already)")
    args = p.parse_args(argv)
    k, n = parse_part(args.part) if args.part is not None else (None, None)
    check(args.part is not None or not args.no_checks, "--no-checks without --part runs nothing")
    check(args.resume_from is None or args.part is not None, "--resume-from goes with --part")
    if args.resume_from is not None:
        check(args.resume_from.is_dir(), f"--resume-from {args.resume_from}: not a folder")
    pins = read_pins()
    wheels = wheel_files(args.wheels, pins) if args.wheels.is_dir() else []
    out = args.out
    check(not out.is_symlink() and (not out.exists() or out.is_dir()),
          f"--out {out}: not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot create it ({e.strerror})") from None
    check(os.access(out, os.W_OK), f"--out {out}: cannot write in it")
    budget = args.budget_s
    report: dict = {"part": args.part, "device": args.device, "budget_s": budget,
                    "pins": pins, "stages": {}}
    call = Call(out, report)

    def left() -> float:
        return budget - (time.time() - call.t0)

    scratch = Path(tempfile.mkdtemp(prefix="seqprobe-gpu-call-"))
    site = scratch / "site"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
        [str(site), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    py = sys.executable
    call.save_report()

    # 0. preflight: the wheels, then the imports, within the first seconds of the call
    pre_cap = min(BUDGET.preflight_s, left())
    if wheels:
        row = call.stage("wheels", [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                    "--no-compile", "--no-cache-dir", "--target", str(site),
                                    *map(str, wheels)], pre_cap, env)
        if row["rc"] != 0:
            call.log("the pinned wheels did not install: the call stops here")
            return 1
    found: dict = {}

    def read(line: str) -> None:
        if line.startswith("PREFLIGHT "):
            found.update(json.loads(line[len("PREFLIGHT "):]))

    row = call.stage("preflight", [py, "-c", _PREFLIGHT, json.dumps(PREFLIGHT_MODULES)],
                     max(BUDGET.preflight_s - (time.time() - call.t0), 5.0), env, on_line=read)
    failed = sorted(m for m, v in found.get("imports", {}).items() if "error" in v)
    carried = {m: v for m, v in found.get("imports", {}).items()
               if _norm(PREFLIGHT_MODULES[m]) in pins}
    wrong = sorted(m for m, v in carried.items()
                   if "version" in v and v["version"] != pins[_norm(PREFLIGHT_MODULES[m])])
    call.write("preflight.json", json.dumps({**found, "rc": row["rc"], "failed": failed,
                                             "not_pinned_version": wrong,
                                             "seconds": row["seconds"]}, indent=1))
    if not found or failed or wrong:  # its answer, not its exit, decides
        call.log(f"preflight failed (imports failed: {failed or 'none'}; versions other than "
                 f"pinned: {wrong or 'none'}): the call stops here")
        return 1
    call.log(f"preflight: torch {found['imports']['torch']['version']}, transformer_lens "
             f"{found['imports']['transformer_lens']['version']}, cuda {found.get('cuda')}"
             f"{', ' + found['card'] if found.get('card') else ''}")

    rc_ok = True
    if not args.no_checks:
        reserve = 0.0 if k is None else BUDGET.pack_s
        cap = min(BUDGET.checks_s, left() - reserve)
        row = call.stage("gpu_check", [
            py, "-m", "bench.gpu_check", "--device", args.device,
            *(["--tiny"] if args.device == "cpu" else []),
            "--budget-s", str(max(cap - 10, 1.0)), "--model-timeout-s", str(max(cap / 6, 10)),
            "--out", str(out / "gpu_check.json")], cap, env)
        rc_ok &= row["rc"] == 0
        cap = min(BUDGET.ensemble_s, left() - reserve)
        row = call.stage("ensemble", [py, "-m", "bench.bench_ensemble", "--device", args.device,
                                      "--steps", "40" if args.device != "cpu" else "4",
                                      "--out", str(out / "ensemble.json")], cap, env)
        rc_ok &= row["rc"] == 0
    if k is not None:
        rc_ok &= _large(call, args, k, n, scratch, env, left)
    call.save_report()
    call.log(json.dumps(report))
    return 0 if rc_ok else 1


def _large(call: Call, args, k: int, n: int, scratch: Path, env: dict, left) -> bool:
    """Stage 3: the part, its results packed as they land; True when it ran to success."""
    results, cache = scratch / "out", scratch / "cache"
    results.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    from analyses.reproduce.cli import level_parts  # the plan: only this stage needs it
    from analyses.reproduce.plan import PLAN, figure_of

    names = [a for a in PLAN if "large" in figure_of(a).levels]
    parts, _ = level_parts(names, "large", args.workers, args.device, n)
    check(k <= len(parts), f"--part {k}/{n}: the large level has {len(parts)} parts")
    globs = _resume_globs(parts[k - 1])
    if args.resume_from is not None:
        restored = []
        for f in sorted(args.resume_from.glob(f"large_part{k}.tar.gz")):
            restored += restore(f, results, globs)
        for f in sorted(args.resume_from.glob(f"large_part{k}_cache.tar.gz")):
            restored += restore(f, cache, ["*.pt"])
        call.report["resumed"] = {"from": str(args.resume_from), "files": len(restored)}
        call.log(f"resumed {len(restored)} files from {args.resume_from}")
    tarball = call.out / f"large_part{k}.tar.gz"
    cache_ball = call.out / f"large_part{k}_cache.tar.gz"
    done = threading.Event()

    def packer() -> None:
        while not done.wait(PACK_EVERY_S):
            pack(results, tarball, globs)

    thread = threading.Thread(target=packer, daemon=True)
    thread.start()
    cap = left() - BUDGET.pack_s
    row = call.stage("large", [
        sys.executable, "-m", "analyses.reproduce", "--level", "large", "--part", f"{k}/{n}",
        "--out", str(results), "--cache-dir", str(cache), "--jobs", str(args.workers),
        *(["--device", "cpu"] if args.device == "cpu" else []),
        "--timeout", str(max(cap, 30.0))], cap, env, grace=min(STOP_GRACE_S, cap / 3))
    done.set()
    thread.join()
    row["packed_bytes"] = pack(results, tarball, globs)
    row["cache"] = pack_cache(cache, cache_ball)
    call.save_report()
    return row["rc"] == 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
