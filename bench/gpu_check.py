"""The GPU check, one command (a lent GPU is short: everything it must show, in one call):
``python -m bench.gpu_check`` -> one JSON.

Three stages, in this order, each given what is left of ``--budget-s`` (a stage that runs past
it is recorded as timed out). The JSON is written after every stage and every model, so a
check killed from outside at any second leaves what it had measured:

1. the GPU tests: ``pytest -m gpu tests/integration/test_gpu.py tests/contract/test_model_contract.py`` as a
   subprocess, under the suite's own type-check hook (tests/conftest.py), with their pass /
   fail / skip counts and the names of the failures;
2. ``bench_cuda``'s paper copy models (transformer with each positional encoding, Mamba,
   Mamba-2, LSTM) at batch 64 x 420 through the training loop with a CUDA run's defaults:
   s/step, tokens/s, MFU against the bf16 peak, peak memory;
3. the dry run of the paper copy recipes on this device (the same rows as
   ``python -m analyses.reproduce --level paper --dry-run --device cuda --only copy_efficiency``).

It writes ``bench/results_gpu_check.json`` with the card, date, torch and CUDA versions, and
``table_rows``: stage 2's rows in the format of the CUDA step-cost table
(``models/train/step_costs_cuda.json``), ready to go under the card's name there. Exit 0 when
every test passed (or was skipped), every model trained and every dry-run row ran; 1 otherwise.

Without CUDA it exits 2 with one line and writes nothing. ``--device cpu --tiny`` runs the same
pipeline on tiny models on the CPU (the pipeline's own test: tests/e2e/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import torch

from analyses.zoo import dryrun
from analyses.zoo.levels import make_run_config
from bench.bench_cuda import COPY_RECIPES, copy_models, paper_copy_run_configs
from bench.common import RESULTS
from models.train import gpu_costs
from models.train.runconfig import RunConfig
from seqprobe import flags
from seqprobe.atomic import check_output_file, write_atomic
from seqprobe.cli import run_cli
from seqprobe.config import check
from seqprobe.device import gpu_facts
from seqprobe.sweep import run_command

ROOT = Path(__file__).resolve().parents[1]
OUT = RESULTS / "results_gpu_check.json"
GPU_TESTS = ("tests/integration/test_gpu.py", "tests/contract/test_model_contract.py")
BUDGET_S = 480.0  # the bound for the whole check on one H100
# tiny models of each architecture, for checking the pipeline on a CPU in seconds
TINY_MODELS = {"transformer": {"d_model": 16, "n_layers": 1, "n_heads": 2},
               "mamba": {"d_model": 16, "n_layers": 1, "d_state": 4},
               "mamba2": {"d_model": 16, "n_layers": 1, "d_state": 4, "n_heads": 2},
               "lstm": {"d_model": 16, "n_layers": 1}}
TINY_TRAIN = {"batch_size": 2, "eval_batch_size": 2, "eval_batches": 1, "steps": 10}


def tiny_run_configs() -> dict[str, RunConfig]:
    """The paper copy models' names, each a tiny model of its architecture on the quick copy
    task (positional encoding kept)."""
    out = {}
    for name, run_config in paper_copy_run_configs().items():
        model = dict(TINY_MODELS[run_config.arch])
        if run_config.arch == "transformer":
            model["pe"] = run_config.model.pe
            if run_config.model.pe == "hard_alibi":
                model["hard_alibi_heads"] = 1
        out[name] = make_run_config(run_config.arch, "copy", "quick", model, {"min_len": 1,
                                                                              "max_len": 5},
                              TINY_TRAIN)
    return out


def run_tests(files: list[str], timeout: float) -> dict[str, Any]:
    """``pytest -m gpu FILES`` in a process of its own (:func:`seqprobe.sweep.run_command`):
    counts from its JUnit XML report."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
               f"--junitxml={xml}", *files]
        t0 = time.time()
        proc = run_command(cmd, cwd=ROOT, timeout=max(timeout, 1.0))
        if proc.stopped_by:
            return {"error": f"timed out after {timeout:.0f} s", "command": " ".join(cmd[1:])}
        out: dict[str, Any] = {"command": " ".join(["python", *cmd[1:-len(files) - 1], *files]),
                               "exit_code": proc.returncode, "wall_s": round(time.time() - t0, 1)}
        if not xml.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines() or ["no output"]
            return {**out, "error": tail[-1][:300]}
        cases = ET.parse(xml).getroot().iter("testcase")
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    modules = {Path(f).stem for f in files}
    for case in cases:
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            counts["failed"] += 1
            failures.append(f"{_test_class(case.get('classname') or '', modules)}::"
                            f"{case.get('name')}")
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {**out, **counts, "failures": failures}


def _test_class(classname: str, modules: set[str]) -> str:
    """A JUnit classname from its test module on (``test_x`` or ``test_x.TestClass``): pytest
    prefixes the module's folders relative to its rootdir, which depend on where the clone and
    the test files live (a clone under /tmp and a test file in /tmp/pytest-of-...)."""
    parts = classname.split(".")
    first = next((i for i, part in enumerate(parts) if part in modules), 0)
    return ".".join(parts[first:])


def table_rows(bench: dict[str, dict[str, Any]], card: str, when: str,
               run_configs: dict[str, RunConfig]) -> list[dict[str, Any]]:
    """The bench's rows in the CUDA step-cost table's format (:mod:`models.train.gpu_costs`)."""
    keep = ("arch", "model", "batch_size", "micro_batch", "seq_len", "precision", "compile",
            "attention", "checkpoint_blocks", "seconds_per_step", "tokens_per_s", "mfu_bf16",
            "peak_memory_bytes")
    return [{"recipe": dryrun_name(name), "level": "paper",
             **{k: row[k] for k in keep if k in row}, "how": "python -m bench.gpu_check: the "
             "training loop's steps, the mean of the timed ones after the warm-up",
             "date": when, "torch": torch.__version__, "source": str(OUT.relative_to(ROOT)),
             "card": card}
            for name, row in bench.items() if "error" not in row and name in run_configs]


def dryrun_name(name: str) -> str:
    """The zoo recipe a bench model is (Mamba-2 has none: the copy paper trained none)."""
    return COPY_RECIPES.get(name, f"({name}: no zoo recipe)")


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu with --tiny")
    p.add_argument("--tiny", action="store_true",
                   help="tiny models of each architecture (checks the pipeline, e.g. on a CPU)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--budget-s", type=flags.flag("--budget-s"), default=BUDGET_S,
                   help="seconds for the whole check; each stage gets what is left")
    p.add_argument("--tests", nargs="*", default=list(GPU_TESTS),
                   help="test files of stage 1 (none: skip it)")
    p.add_argument("--only", action="append", default=[], metavar="MODEL",
                   help="only these models of stages 2 and 3 (transformer_rope, mamba2, ...)")
    p.add_argument("--model-timeout-s", type=flags.flag("--model-timeout-s"), default=None,
                   help="seconds each model of stage 2 may take in its own process (default: "
                   "what is left of the budget)")
    p.add_argument("--warm-steps", type=flags.flag("--warm-steps"), default=None)
    p.add_argument("--timed-steps", type=flags.flag("--timed-steps"), default=None)
    args = p.parse_args(argv)
    kind = gpu_costs.device_kind(args.device)  # an unknown device: one line (run_cli)
    check(kind in ("cuda", "cpu"), f"bench.gpu_check: --device {args.device}: a {kind} device; "
          "this check runs on cuda, cuda:N, or cpu with --tiny")
    if kind == "cuda" and not torch.cuda.is_available():
        print("bench.gpu_check: no CUDA device here (torch.cuda.is_available() is False); "
              "nothing run or written (a CPU check of the pipeline: --device cpu --tiny)",
              file=sys.stderr)
        return 2
    if kind != "cuda" and not args.tiny:
        print(f"bench.gpu_check: --device {args.device} runs only with --tiny (the paper models "
              "are a GPU's work); nothing run or written", file=sys.stderr)
        return 2
    unknown = sorted(set(args.only) - {*COPY_RECIPES, "mamba2"})
    if unknown:
        print(f"bench.gpu_check: unknown --only {', '.join(unknown)}; the models: "
              f"{', '.join([*COPY_RECIPES, 'mamba2'])}", file=sys.stderr)
        return 2
    if args.budget_s <= 0 or min(args.warm_steps or 1, args.timed_steps or 1) < 1:
        print("bench.gpu_check: --budget-s must be > 0 and the step counts >= 1",
              file=sys.stderr)
        return 2
    check_output_file(args.out)  # before the run: its results are never lost to a bad --out
    t0 = time.time()

    def left() -> float:
        return args.budget_s - (time.time() - t0)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    card = gpu_facts(torch.device(args.device).index or 0)["name"] if kind == "cuda" else "cpu"
    when = time.strftime("%Y-%m-%d", time.gmtime())
    doc: dict[str, Any] = {
        "card": card, "date": when, "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": args.device, "tiny": args.tiny, "budget_s": args.budget_s,
        "bf16_peak_flops": gpu_costs.PEAK_FLOPS["bf16"]}
    def save() -> None:  # after every stage and model: a check cut short keeps what it had
        doc["wall_s"] = round(time.time() - t0, 1)
        write_atomic(args.out, json.dumps(doc, indent=1, default=str))

    save()
    log("== 1/3 GPU tests")
    # the tests take at most 40 % of the budget: the models' steps are the check's product
    doc["tests"] = (run_tests(args.tests, min(left(), 0.4 * args.budget_s)) if args.tests
                    else {"skipped": "no --tests"})
    log(f"   {doc['tests']}")
    save()

    log("== 2/3 bench_cuda: the paper copy models")
    run_configs = tiny_run_configs() if args.tiny else paper_copy_run_configs()
    run_configs = {n: s for n, s in run_configs.items() if not args.only or n in args.only}
    steps = {"warm": args.warm_steps or (1 if args.tiny else None),
             "timed": args.timed_steps or (1 if args.tiny else None)}
    doc["bench"] = {}
    for name, run_config in run_configs.items():
        if left() <= 0:
            doc["bench"][name] = {"error": "not run: the budget was spent"}
            continue
        doc["bench"].update(copy_models(
            {name: run_config}, args.device, log=log,
            timeout=max(1.0, min(args.model_timeout_s or left(), left())),
            **{k: v for k, v in (("warm", steps["warm"]), ("timed", steps["timed"])) if v}))
        doc["table_rows"] = table_rows(doc["bench"], card, when, run_configs)
        save()

    log("== 3/3 the dry run of the copy models")
    items = [(COPY_RECIPES.get(n, n), (lambda s=s: s)) for n, s in run_configs.items()]
    if left() > 0:
        rows = dryrun.dry_run(items, args.device, timeout=max(left(), 1.0), log=log)
        doc["dry_run"] = dryrun.summary(rows, args.device, 0.0)
    else:
        doc["dry_run"] = {"error": "not run: the budget was spent", "failed": []}
    save()
    print(f"wrote {args.out} ({doc['wall_s']:.0f} s)")
    tests = doc["tests"]
    ok = (tests.get("failed", 0) == 0 and "error" not in tests
          and all("error" not in r for r in doc["bench"].values())
          and "error" not in doc["dry_run"] and not doc["dry_run"]["failed"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
