"""One job runner (issue 49): every place the suite's source starts a training run or another
process is listed here, and each is either inside the runner, :mod:`seqprobe.sweep`
(``map_jobs``: local processes, Ray, or a fresh interpreter per job), or on :data:`ALLOWED`
with the reason it is not a second runner.

A *start* is a call of the training loop or its cached wrappers (``train``,
``train_run_cached``, ``train_runs_cached``, ``train_ensemble``), a ``subprocess`` call,
``os.fork``, and any use of ``multiprocessing`` / ``torch.multiprocessing`` / joblib / Ray.
Found by reading every module's syntax tree, so a new one fails here naming its file, line
and function, and says to go through ``seqprobe.sweep``.

The reproduce pool (analyses/reproduce/{pool,runner}.py) starts the plan's *commands* (its
analyses and ``python -m analyses.zoo train``): each command trains through the runner
itself, so the pool is a scheduler of commands, not of training runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("seqprobe", "tasks", "models", "probes", "analyses", "figures", "bench")
RUNNER = "seqprobe/sweep.py"
TRAINING = {"train", "train_run_cached", "train_runs_cached", "train_ensemble"}
SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output"}
POOLS = ("multiprocessing", "torch.multiprocessing", "joblib", "ray", "concurrent.futures")
FIX = "start it through seqprobe.sweep (map_jobs, or run_fresh for a fresh process)"

# (file, function) -> why it starts a run or a process outside the runner
JOB_BODY = "a job body: it runs inside a map_jobs job"
ALLOWED: dict[tuple[str, str], str] = {
    # the training loop's own wrappers, which the runner's tasks call
    ("models/train/cache.py", "train_run_cached"): "the cached training of one run: what a "
    "runner task calls (zoo._train_group through train_runs_cached)",
    ("models/train/cache.py", "train_cached"): "train_run_cached of a run named by task and "
    "arch (a library call for tests and notebooks: one run where it is called)",
    ("models/train/ensemble_cache.py", "train_runs_cached"): "the cached training of a group "
    "of runs (an ensemble or one by one): zoo._train_group, a runner task, calls it",
    ("models/train/ensemble_cache.py", "_train_group"): "train_runs_cached's ensemble (above)",
    ("analyses/zoo/runs.py", "_train_group"): JOB_BODY + " (train_recipes)",
    ("analyses/memorization/cells.py", "train_cell"): JOB_BODY + " (memorization's sweep)",
    ("analyses/copy_efficiency/seeded.py", "compute_large"): "its `train` is the caller's "
    "closure over zoo.train_recipes (analyses/copy_efficiency/__init__.py): the runner",
    ("analyses/zoo/dryrun/measuring.py", "_measure_once"): JOB_BODY + " (run_isolated's "
    "fresh process)",
    ("bench/step_costs.py", "measure"): JOB_BODY + " (run_child's fresh process)",
    ("bench/bench_cuda.py", "train_step_cost"): JOB_BODY + " (in_fresh_process)",
    # a command that is itself one run
    ("models/train/cli.py", "_main"): "`python -m models.train` is one run, in the process "
    "the user started (or each torchrun rank)",
    ("analyses/zoo/runs.py", "checkpoint"): "one recipe (and the recipes it starts from) "
    "trained where it is asked for (zoo.path, `zoo train --resume`), its errors the caller's",
    ("models/train/launch.py", "main"): "torchrun (the DDP launcher): one run on every rank, "
    "started by torch.distributed.elastic",
    # a benchmark that times the loop itself in this process
    ("bench/bench_ensemble.py", "measure"): "times train() against train_ensemble() in one "
    "process: the thing measured",
    # processes that are not training runs
    ("analyses/reproduce/pool.py", "ForkedJob.__init__"): "the reproduce pool forks one "
    "command of the plan (an analysis or `analyses.zoo train`, each training through the "
    "runner)",
    ("analyses/reproduce/runner.py", "_start"): "a command of the plan as a subprocess where "
    "it cannot be forked (see the pool)",
    ("analyses/reproduce/index.py", "_commit"): "git describe for the index's header",
    ("bench/__main__.py", "main"): "runs the bench modules (and the quick reproduce) as "
    "commands",
    ("bench/gpu_run.py", "Call.stage"): "a stage of a lent GPU call (pip, the preflight, "
    "the checks, the reproduce run) in its own process group, capped from outside",
    ("bench/rehearse_gpu_call.py", "_main"): "git clone and the GPU call itself (bash "
    "scripts/gpu_call.sh), rehearsed as the lent machine runs it",
    ("seqprobe/device.py", "_facts_from_child"): "a child interpreter asks torch about the "
    "card, so that the asking process never initialises CUDA (it forks jobs)",
    ("bench/gpu_check.py", "run_tests"): "pytest -m gpu in a subprocess",
}


def _starts(tree: ast.AST) -> list[tuple[int, str, str]]:
    """``(line, function, what)`` of every start in a module (``<module>`` at top level)."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            scope = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                scope = child.name if where == "<module>" else f"{where}.{child.name}"
            what = _what(child)
            if what:
                found.append((child.lineno, where, what))
            visit(child, scope)

    visit(tree, "<module>")
    return found


def _what(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id in TRAINING:
            return f"{f.id}()"
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.attr in TRAINING - {"train"}:
                return f"{f.value.id}.{f.attr}()"
            if f.value.id == "subprocess" and f.attr in SUBPROCESS:
                return f"subprocess.{f.attr}()"
            if f.value.id == "os" and f.attr in ("fork", "forkpty", "spawnv", "posix_spawn"):
                return f"os.{f.attr}()"
            if f.value.id == "torchrun":
                return f"torchrun.{f.attr}()"
    names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
             [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
    for name in names:
        if any(name == p or name.startswith(p + ".") or name.endswith("." + p) for p in POOLS):
            return f"import {name}"
    return None


def starts() -> dict[tuple[str, str], list[str]]:
    """``(file, function) -> ["file:line what", ...]`` over the suite's source, the runner
    left out."""
    out: dict[tuple[str, str], list[str]] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel == RUNNER:
                continue
            for line, where, what in _starts(ast.parse(path.read_text())):
                out.setdefault((rel, where), []).append(f"{rel}:{line} {what} (in {where})")
    return out


def outside_the_runner(found: dict[tuple[str, str], list[str]]) -> list[str]:
    return [f"{s}: {FIX}, or add ({key[0]!r}, {key[1]!r}) to ALLOWED in "
            f"tests/test_one_job_runner.py with the reason" for key, sites in sorted(found.items())
            if key not in ALLOWED for s in sites]


def test_every_run_and_process_is_started_by_the_runner_or_listed_with_its_reason():
    found = starts()
    bad = outside_the_runner(found)
    assert not bad, "started outside the one job runner:\n" + "\n".join(bad)
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED entries that start nothing any more (remove them): {stale}"
    # the list the done-when asks for: what starts what, beside the runner
    assert all(why.strip() for why in ALLOWED.values())


def test_the_runner_check_can_fail():
    tree = ast.parse("import subprocess\ndef f(run_config):\n    subprocess.run(['x'])\n"
                     "    train(run_config)\n    import multiprocessing\n")
    assert [(line, where) for line, where, _ in _starts(tree)] == [(3, "f"), (4, "f"), (5, "f")]
    bad = outside_the_runner({("x.py", "f"): ["x.py:3 subprocess.run() (in f)"]})
    assert bad and "x.py:3" in bad[0] and "seqprobe.sweep" in bad[0] and "ALLOWED" in bad[0]


def test_the_runner_starts_its_fresh_processes_itself():
    """The dry run's and the step-cost table's fresh processes are the runner's
    (seqprobe.sweep.run_fresh), not processes of their own."""
    for rel in ("analyses/zoo/dryrun/measuring.py", "bench/step_costs.py", "bench/common.py"):
        text = (ROOT / rel).read_text()
        assert "run_fresh" in text and "subprocess" not in text and "multiprocessing" not in text
