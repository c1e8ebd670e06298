"""One job runner (issue 49, issue 57): every place the suite's source starts a training run or
another process is either inside the runner, the package :mod:`seqprobe.sweep` (``map_jobs``:
local processes, Ray, or a fresh interpreter per job; ``commands.run_commands``: the reproduce
plan's command jobs with their dependencies; ``run_command``: one process that is not a job
of a plan), or one of the few named exceptions in :data:`ALLOWED`, each with the reason it is
not a second runner.

A *start* is a call of the training loop or its cached wrappers (``train``,
``train_run_cached``, ``train_runs_cached``, ``train_ensemble``), a ``subprocess`` call,
``os.fork``, and any use of ``multiprocessing`` / ``torch.multiprocessing`` / joblib / Ray.
Found by reading every module's syntax tree, so a new one fails here naming its file, line
and function, and says to go through ``seqprobe.sweep``. Not starts:

* the training loop calling itself: the loop's own cached wrappers (:data:`LOOP`: the cache
  of one run and of a group of runs) call ``train`` / ``train_ensemble``; they *are* the loop,
  which runs inside whatever job called it;
* a job body: a training call in a function the runner runs — one handed to ``map_jobs`` /
  ``run_fresh`` (or to a function that hands its first argument on to them, found the same
  way), or a function of the same module such a function calls (:func:`job_bodies`);
* a call of a local function that happens to be named ``train`` (a parameter of the
  enclosing function: a caller's callback, not the loop).
"""

from __future__ import annotations

from tests import ROOT_DIR

import ast
from pathlib import Path

ROOT = ROOT_DIR
PACKAGES = ("seqprobe", "tasks", "models", "probes", "analyses", "figures", "bench")
RUNNER = "seqprobe/sweep/"
TRAINING = {"train", "train_run_cached", "train_runs_cached", "train_ensemble"}
SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output"}
POOLS = ("multiprocessing", "torch.multiprocessing", "joblib", "ray", "concurrent.futures")
FIX = ("start it through seqprobe.sweep (map_jobs, run_fresh for a fresh process, run_command "
       "for one command)")
# the training loop's own cached wrappers: their training calls are the loop, not starts
LOOP = ("models/train/cache.py", "models/train/ensemble_cache.py")
ENTRIES = {"map_jobs", "run_fresh"}  # the runner's entry points that take a job body
MAX_ALLOWED = 5  # issue 57's done-when

# (file, function) -> why it starts a run or a process outside the runner
ALLOWED: dict[tuple[str, str], str] = {
    ("models/train/cli.py", "_main"): "`python -m models.train` is one run, in the process "
    "the user started (or each torchrun rank)",
    ("models/train/launch.py", "main"): "torchrun (the DDP launcher): one run on every rank, "
    "started by torch.distributed.elastic",
    ("analyses/zoo/runs.py", "checkpoint"): "one recipe (and the recipes it starts from) "
    "trained where it is asked for (zoo.path, `zoo train --resume`), its errors the caller's",
    ("bench/bench_ensemble.py", "measure"): "times train() against train_ensemble() in one "
    "process: the thing measured",
}


def _starts(tree: ast.AST) -> list[tuple[int, str, str]]:
    """``(line, function, what)`` of every start in a module (``<module>`` at top level)."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, where: str, params: frozenset[str]) -> None:
        for child in ast.iter_child_nodes(node):
            scope, own = where, params
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                scope = child.name if where == "<module>" else f"{where}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    a = child.args
                    own = params | {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
            what = _what(child, params)
            if what:
                found.append((child.lineno, where, what))
            visit(child, scope, own)

    visit(tree, "<module>", frozenset())
    return found


def _what(node: ast.AST, params: frozenset[str] = frozenset()) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id in TRAINING and f.id not in params:
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


def sources() -> dict[str, ast.Module]:
    """Every module of the suite's source: file (relative to the root) -> syntax tree."""
    return {str(path.relative_to(ROOT)): ast.parse(path.read_text())
            for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))}


def _module(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _called(node: ast.AST) -> str | None:
    f = node.func if isinstance(node, ast.Call) else None
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def entries(trees: dict[str, ast.Module]) -> set[str]:
    """:data:`ENTRIES`, and every function that hands one of its parameters on to one as the
    job body (a wrapper such as ``bench.common.in_fresh_process``), to a fixed point."""
    found = set(ENTRIES)
    while True:
        more = {name for tree in trees.values() for name, fn in _functions(tree).items()
                if name not in found and any(
                    _called(c) in found and c.args and isinstance(c.args[0], ast.Name)
                    and c.args[0].id in {a.arg for a in fn.args.args}
                    for c in ast.walk(fn) if isinstance(c, ast.Call))}
        if not more:
            return found
        found |= more


def _imported_names(rel: str, tree: ast.Module) -> dict[str, str]:
    """Each name a module imports -> the dotted name it stands for."""
    here = _module(rel)
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = (a.name if a.asname
                                                           else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of this module
                pkg = here.split(".") if rel.endswith("__init__.py") else here.split(".")[:-1]
                base = ".".join([*pkg[:len(pkg) - node.level + 1], *filter(None, [base])])
            for a in node.names:
                names[a.asname or a.name] = f"{base}.{a.name}"
    return names


def _resolve(e: ast.AST, rel: str, own: dict, names: dict[str, str],
             files: dict[str, str]) -> tuple[str, str] | None:
    """``(file, function)`` that expression ``e`` of module ``rel`` names, if the suite's."""
    if isinstance(e, ast.Call) and _called(e) == "partial" and e.args:
        return _resolve(e.args[0], rel, own, names, files)
    if isinstance(e, ast.Name):
        if e.id in own:
            return rel, e.id
        mod, _, name = names.get(e.id, "").rpartition(".")
        return (files[mod], name) if mod in files else None
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
        mod = names.get(e.value.id, "")
        return (files[mod], e.attr) if mod in files else None
    return None


def job_bodies(trees: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """``(file, function)`` of every function the runner runs as a job: the first argument of
    a call of an entry (:func:`entries`) — a function of the module, one imported from another
    (``from M import f``, ``M.f``), or ``functools.partial(f, ...)`` — and every function of
    the same module that one calls, transitively."""
    files = {_module(rel): rel for rel in trees}
    calls_to = entries(trees)
    bodies: set[tuple[str, str]] = set()
    for rel, tree in trees.items():
        names = _imported_names(rel, tree)
        for c in ast.walk(tree):
            if isinstance(c, ast.Call) and _called(c) in calls_to and c.args:
                body = _resolve(c.args[0], rel, _functions(tree), names, files)
                if body is not None:
                    bodies.add(body)
    todo = list(bodies)
    while todo:  # what a job body calls in its own module runs in the job too
        rel, name = todo.pop()
        fn = _functions(trees[rel]).get(name)
        for c in ast.walk(fn) if fn is not None else ():
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name):
                callee = (rel, c.func.id)
                if c.func.id in _functions(trees[rel]) and callee not in bodies:
                    bodies.add(callee)
                    todo.append(callee)
    return bodies


def starts(trees: dict[str, ast.Module] | None = None) -> dict[tuple[str, str], list[str]]:
    """``(file, function) -> ["file:line what", ...]`` over the suite's source: the runner, the
    training loop calling itself and the training of job bodies left out."""
    trees = sources() if trees is None else trees
    bodies = job_bodies(trees)
    out: dict[tuple[str, str], list[str]] = {}
    for rel, tree in trees.items():
        if rel.startswith(RUNNER):
            continue
        for line, where, what in _starts(tree):
            training = not what.startswith(("subprocess", "os.", "import", "torchrun"))
            if training and (rel in LOOP or (rel, where.split(".")[0]) in bodies):
                continue
            out.setdefault((rel, where), []).append(f"{rel}:{line} {what} (in {where})")
    return out


def outside_the_runner(found: dict[tuple[str, str], list[str]]) -> list[str]:
    return [f"{s}: {FIX}, or add ({key[0]!r}, {key[1]!r}) to ALLOWED in "
            f"tests/contract/test_one_job_runner.py with the reason" for key, sites in sorted(found.items())
            if key not in ALLOWED for s in sites]


def test_every_run_and_process_is_started_by_the_runner_or_listed_with_its_reason():
    found = starts()
    bad = outside_the_runner(found)
    assert not bad, "started outside the one job runner:\n" + "\n".join(bad)
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED entries that start nothing any more (remove them): {stale}"
    # the list the done-when asks for: what starts what, beside the runner
    assert all(why.strip() for why in ALLOWED.values())
    assert len(ALLOWED) <= MAX_ALLOWED, f"{len(ALLOWED)} exceptions; at most {MAX_ALLOWED}"


def test_the_runner_check_can_fail():
    tree = ast.parse("import subprocess\ndef f(run_config):\n    subprocess.run(['x'])\n"
                     "    train(run_config)\n    import multiprocessing\n"
                     "def g(train):\n    train(['a'])\n")  # a callback named train: no start
    assert [(line, where) for line, where, _ in _starts(tree)] == [(3, "f"), (4, "f"), (5, "f")]
    bad = outside_the_runner({("x.py", "f"): ["x.py:3 subprocess.run() (in f)"]})
    assert bad and "x.py:3" in bad[0] and "seqprobe.sweep" in bad[0] and "ALLOWED" in bad[0]


def test_the_runner_starts_its_fresh_processes_itself():
    """The dry run's and the step-cost table's fresh processes are the runner's
    (seqprobe.sweep.run_fresh), not processes of their own."""
    for rel in ("analyses/zoo/dryrun/measuring.py", "bench/step_costs.py", "bench/common.py"):
        text = (ROOT / rel).read_text()
        assert "run_fresh" in text and "subprocess" not in text and "multiprocessing" not in text


def test_a_job_body_is_told_from_a_run_outside_the_runner():
    """Training in a function handed to the runner (directly, through a wrapper that hands its
    parameter on, or called by such a function in its module) is inside it; the same call in a
    function nobody hands over is a start."""
    trees = {
        "analyses/a.py": ast.parse(
            "from seqprobe.sweep import map_jobs\nfrom bench.w import wrap\n"
            "def body(x):\n    return helper(x)\ndef helper(x):\n    train(x)\n"
            "def alone(x):\n    train(x)\ndef go(xs):\n    map_jobs(body, xs, None)\n"
            "    wrap(other)\ndef other():\n    train_ensemble([])\n"),
        "bench/w.py": ast.parse("from seqprobe.sweep import run_fresh\n"
                                "def wrap(fn, *args):\n    return run_fresh(fn, *args)\n"),
    }
    assert "wrap" in entries(trees)
    assert {("analyses/a.py", n) for n in ("body", "helper", "other")} <= job_bodies(trees)
    assert set(starts(trees)) == {("analyses/a.py", "alone")}
