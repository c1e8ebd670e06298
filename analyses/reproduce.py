"""Reproduce every figure: ``python -m analyses.reproduce --quick`` (or ``--paper`` on a GPU).

``--medium`` runs the analyses that have a medium level (``FIGURE.presets``): CPU-sized still,
but large enough that both sides of each headline comparison learn; its outputs and index go
to ``figures/out/medium`` unless ``--out`` says otherwise.

The plan is the ordered list :data:`PLAN` of analysis names; each analysis module says what
it needs in its ``FIGURE`` (title, paper, claims, the zoo recipes it trains). The runner turns
the plan into tasks — one per zoo recipe not yet cached (``python -m models.zoo train NAME``),
one per analysis, each analysis after the recipes it reads, each recipe after the one it is
fine-tuned from — and runs them on a small scheduler, each in its own process (a failure is
reported, the rest still run). It writes ``figures/out/index.md`` and ``index.html``: figure
by figure, the paper's claim beside the number measured here and whether it holds. Exit code 1
if any analysis failed.

``--dry-run`` trains nothing and runs no analysis: every model the plan would train (the zoo
recipes of its analyses and the models they train themselves) is built at its real size and
takes two optimizer steps (:mod:`models.train.dryrun`); a table of sizes, step times and
projected H100 hours is printed and written to ``OUT/dry_run.json``. Exit code 1 if any model
cannot run.
"""

from __future__ import annotations

import html
import importlib
import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm.auto import tqdm

from analyses.common import Figure, check_output_dir, get
from figures.style import DEFAULT_OUT
from models import zoo
from models.cli import OneLineParser, add_device_argument, add_scale_arguments, run_cli
from models.sweep import Backend, RayCommand, add_backend_arguments, backend_of
from models.train import dryrun
from models.train.cache import check_cache_dir
from tasks.atomic import write_atomic
from tasks.base import TaskError, check

PLAN: tuple[str, ...] = (
    "ngram_heads", "duplicated_ngrams", "copy_bounds", "length_generalization",
    "copy_efficiency", "ngram_lookup",
    "markov_laplace", "state_probe", "bc_orthogonality", "mamba_decay", "markov_ablations",
    "markov_holdout",
    "memorization",
    "spectral_lds", "stu_induction",
)
TRAIN = "train:"  # prefix of the tasks that train a zoo recipe
MAX_JSON_BYTES = 64 << 20  # an analysis JSON is kilobytes; the index reads no more than this
MAX_CLAIM_CHARS = 2000  # longest 'measured here' cell the index copies from a JSON


def figure_of(name: str) -> Figure:
    return importlib.import_module(f"analyses.{name}").FIGURE


@dataclass(frozen=True)
class Task:
    """One process of the run: training a zoo recipe, or one analysis."""

    name: str  # the analysis name, or "train:" + recipe name
    argv: tuple[str, ...]
    slots: int = 1  # cores it keeps busy
    after: tuple[str, ...] = ()  # tasks that must have succeeded first
    figure: Figure | None = None  # analyses only

    @property
    def stems(self) -> tuple[str, ...]:
        if self.figure is None:
            return ()
        return self.figure.outputs or (self.name,)

    def missing(self, out: Path) -> list[str]:
        """The analysis' JSON files not (yet) in ``out``."""
        return [f"{s}.json" for s in self.stems if not (out / f"{s}.json").exists()]


def analysis_argv(name: str, fig: Figure, preset: str, out: Path, cache: Path) -> list[str]:
    train = ["--train", preset, "--cache-dir", str(cache)] if fig.trains else []
    return [sys.executable, "-m", f"analyses.{name}", f"--{preset}", "--out", str(out), *train,
            *fig.extra_args(preset)]


def build_tasks(names: Sequence[str], preset: str, out: Path, cache: Path) -> list[Task]:
    """Training tasks for the recipes the analyses need that are not cached yet (each after
    its ``init_from`` recipe), then one task per analysis, after its recipes' training."""
    tasks: dict[str, Task] = {}

    def need(recipe: str) -> str:
        name = TRAIN + recipe
        if name not in tasks:
            parent = zoo.dependencies(recipe, preset)[-1:]
            after = tuple(need(p) for p in parent if zoo.status(p, preset, cache) != "cached")
            tasks[name] = Task(name, (sys.executable, "-m", "models.zoo", "train", recipe,
                                      f"--{preset}", "--cache-dir", str(cache), "--no-progress"),
                               zoo.recipe(recipe).slots, after)
        return name

    analyses = []
    for n in names:
        fig = figure_of(n)
        recipes = list(fig.recipes(preset)) if fig.trains else []
        after = []
        for r in recipes:
            if zoo.status(r, preset, cache) != "cached":
                after.append(need(r))
        analyses.append(Task(n, tuple(analysis_argv(n, fig, preset, out, cache)), fig.slots,
                             tuple(dict.fromkeys(after)), fig))
    return [*tasks.values(), *analyses]


def plan_models(names: Sequence[str], preset: str) -> list[tuple[str, dryrun.Builder]]:
    """Every model the analyses ``names`` train at ``preset``, each once, in plan order:
    ``(label, spec builder)``."""
    items: dict[str, dryrun.Builder] = {}
    for n in names:
        fig = figure_of(n)
        if not fig.trains:
            continue
        for label, build in dryrun.recipe_builders(fig.recipes(preset), preset):
            items.setdefault(label, build)
        for label, build in fig.dry_run_specs(preset):
            items.setdefault(label, build)
    return list(items.items())


def default_jobs(preset: str) -> int:
    """Quick and medium: two cores' worth at once (most models are too small to use a second
    thread, the copy models take both). Paper: one at a time, each with the whole GPU."""
    return 1 if preset == "paper" else min(2, os.cpu_count() or 1)


@dataclass
class Outcome:
    task: Task
    ok: bool
    seconds: float | None  # None: not known (an --index-only read of a run without timings)
    log_tail: str
    claims: list[tuple[str, str, bool | None]]  # (paper claim, measured, holds)


def read_claims(task: Task, out: Path) -> list[tuple[str, str, bool | None]]:
    """Each claim of an analysis read from its JSON in ``out``: (paper claim, measured, holds).
    A JSON that cannot be read raises :class:`TaskError` (one line naming the file)."""
    stems = task.stems
    data = {s: read_json(out / f"{s}.json") for s in stems}
    claims: list[tuple[str, str, bool | None]] = []
    for c in task.figure.claims:
        try:
            read = c.measure(data if len(data) > 1 else data[stems[0]])
            if read is None:
                continue  # a claim of another level (Claim says why)
            measured, holds = read
        except Exception as e:  # noqa: BLE001 - a claim that cannot be read is reported
            measured, holds = f"could not read: {type(e).__name__}: {e}", None
        claims.append((c.paper, _bounded(str(measured)), holds))
    return claims


def _bounded(text: str, limit: int = MAX_CLAIM_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Running:
    task: Task
    proc: subprocess.Popen
    log: Path
    t0: float
    slots: int


def _log_name(task: Task) -> str:
    return task.name.replace(TRAIN, "train-").replace("/", "_")


def _start(task: Task, out: Path, slots: int, threads_per_slot: int,
           backend: Backend | None = None) -> _Running:
    """Start a task in its own process (and process group, so a timeout also stops its
    workers); its output goes to ``out/logs/NAME.log``."""
    log = out / "logs" / f"{_log_name(task)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # torch, MKL and OpenMP read these at start-up: each process gets its share of the cores
    n = str(slots * threads_per_slot)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
           "TQDM_MININTERVAL": "30"}  # a progress line every half minute in the log
    if backend is not None and backend.ray:  # a Ray task with the task's cores (and a GPU)
        own = {k: env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TQDM_MININTERVAL")}
        cmd = RayCommand(task.argv, replace(backend, num_cpus=slots), env=own)
        return _Running(task, cmd, log, time.time(), slots)
    with open(log, "w") as f:
        proc = subprocess.Popen(list(task.argv), stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    return _Running(task, proc, log, time.time(), slots)


def _finish(r: _Running, out: Path, timed_out: float | None = None) -> Outcome:
    seconds = time.time() - r.t0
    if isinstance(r.proc, RayCommand):  # its output came back with the result
        r.log.write_text(r.proc.output)
    log = r.log.read_text(errors="replace")
    if timed_out is not None:
        ok, log = False, log + f"\n(timed out after {timed_out:.0f} s)"
    else:
        ok = r.proc.returncode == 0
        if not ok:
            log += f"\n(exit code {r.proc.returncode})"
    missing = r.task.missing(out)
    if ok and missing:
        ok, log = False, log + f"\n(no {', '.join(missing)} written in {out})"
    claims: list[tuple[str, str, bool | None]] = []
    if ok and r.task.figure:
        try:
            claims = read_claims(r.task, out)
        except TaskError as e:
            ok, log = False, log + f"\n({e})"
    return Outcome(r.task, ok, seconds, log[-3000:], claims)


def _kill(r: _Running) -> None:
    if isinstance(r.proc, RayCommand):
        r.proc.kill()
        return
    try:
        os.killpg(r.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    r.proc.wait()


def run_tasks(tasks: list[Task], out: Path, jobs: int = 1, timeout: float = 3600.0,
              on_start: Callable[[list[str]], None] = lambda names: None,
              on_done: Callable[[Outcome], None] = lambda o: None, poll: float = 0.2,
              expected: dict[str, float] | None = None,
              backend: Backend | None = None) -> list[Outcome]:
    """Run every task, at most ``jobs`` cores' worth at once, each after the tasks it names in
    ``after``. Of the tasks ready to start, the one with the longest ``expected`` time (the
    last run's) together with everything that waits on it goes first, so that no long chain is
    left to run alone at the end; list order breaks ties. A task that fails or times out is
    reported through ``on_done``, and so are the tasks that needed it (not run); the rest
    still run. Outcomes come back in list order."""
    check(jobs >= 1, f"--jobs must be >= 1, got {jobs}")
    threads = max(1, (os.cpu_count() or 1) // jobs)
    expected = expected or {}
    by_name = {t.name: t for t in tasks}
    waiting_on: dict[str, list[str]] = {t.name: [] for t in tasks}
    for t in tasks:
        for a in t.after:
            if a in waiting_on:
                waiting_on[a].append(t.name)

    def chain(name: str) -> float:  # its own time plus the longest chain that waits on it
        return expected.get(name, 0.0) + max((chain(n) for n in waiting_on[name]), default=0.0)

    priority = {t.name: chain(t.name) for t in tasks}
    pending, running, done = list(tasks), [], {}

    def fail_dependents(name: str) -> None:
        for n in waiting_on[name]:
            t = by_name[n]
            if t in pending:
                pending.remove(t)
                done[n] = o = Outcome(t, False, 0.0, f"not run: {name} failed", [])
                on_done(o)
                fail_dependents(n)

    try:
        while pending or running:
            free = jobs - sum(r.slots for r in running)
            started = False
            for t in sorted(pending, key=lambda t: -priority[t.name]):
                need = min(t.slots, jobs)
                ready = all(a not in by_name or (a in done and done[a].ok) for a in t.after)
                if need <= free and ready:
                    running.append(_start(t, out, need, threads, backend))
                    pending.remove(t)
                    free -= need
                    started = True
            if started:
                on_start([r.task.name for r in running])
            if not running and pending:  # nothing can start: a bug in the task graph
                raise TaskError(f"tasks wait on nothing that runs: "
                                f"{', '.join(t.name for t in pending)}")
            time.sleep(poll)
            for r in list(running):
                if r.proc.poll() is None:
                    timed_out = time.time() - r.t0 > timeout
                    if not timed_out:
                        continue
                    _kill(r)
                else:  # finished, even if the poll came after the deadline
                    timed_out = False
                running.remove(r)
                done[r.task.name] = o = _finish(r, out, timeout if timed_out else None)
                on_done(o)
                if not o.ok:
                    fail_dependents(r.task.name)
    finally:  # Ctrl-C: no orphaned processes left training in the background
        for r in running:
            _kill(r)
    return [done[t.name] for t in tasks]


def index_outcome(task: Task, out: Path, timing: dict) -> Outcome:
    """An outcome read back from ``out`` (for ``--index-only``): ok when every JSON is there
    and the last run did not record a failure."""
    missing = task.missing(out)
    ok = not missing and timing.get("ok", True) is True
    log = f"missing: {', '.join(missing)}" if missing else "" if ok else "failed in the last run"
    seconds = timing.get("seconds")
    seconds = float(seconds) if isinstance(seconds, (int, float)) and math.isfinite(seconds) \
        else None
    claims: list[tuple[str, str, bool | None]] = []
    if not missing:
        try:
            claims = read_claims(task, out)
        except TaskError as e:  # this figure is reported unreadable; the others still index
            ok, log = False, str(e)
    return Outcome(task, ok, seconds, log, claims)


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> dict:
    """An analysis' JSON output as a dict, or one :class:`TaskError` line: never a hang on a
    FIFO, a traceback on a truncated, binary or absurdly nested file, or an unbounded read."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise TaskError(f"{path}: cannot read it ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise TaskError(f"{path}: is {kind}, not a JSON file")
    if st.st_size > limit:
        raise TaskError(f"{path}: {st.st_size:,} bytes, more than an analysis writes "
                        f"({limit:,} at most)")
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(limit + 1).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TaskError(f"{path}: not valid JSON ({type(e).__name__})") from None
    except OSError as e:
        raise TaskError(f"{path}: cannot read it ({e.strerror})") from None
    if not isinstance(data, dict):
        raise TaskError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


def _cell(text: str) -> str:
    """A Markdown table cell shown as text: a literal | (as in |b·c|) would split the cell, and
    HTML or a link in a claim's text (which the JSON supplies) must not become markup."""
    text = html.escape(text, quote=False)
    for ch in "|[]()`*_":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def write_index(outcomes: list[Outcome], out: Path, preset: str, note: str = "") -> None:
    mark = {True: "holds", False: "does not hold", None: "n/a"}
    md = [f"# Reproduced figures ({preset} preset)", "",
          "Each figure comes from a real run of the analysis named; the claim column is the "
          "paper's, the measured column is ours." + (f" {note}" if note else ""), ""]
    rows_html = []
    for o in outcomes:
        t, fig = o.task, o.task.figure
        took = "" if o.seconds is None else f" in {o.seconds:.0f} s"
        md += [f"## {fig.title}", f"*{fig.paper}* — `python -m analyses.{t.name}` — "
               f"{'ok' if o.ok else '**FAILED**'}{took}", ""]
        for stem in t.stems:
            if (out / f"{stem}.png").exists():
                md.append(f"![{stem}]({stem}.png)")
        if o.claims:
            md += ["", "| paper's claim | measured here | verdict |", "|---|---|---|"]
            md += [f"| {_cell(p)} | {_cell(m)} | {mark[h]} |" for p, m, h in o.claims]
        if not o.ok:
            md += ["", "```", o.log_tail.strip()[-1500:], "```"]
        md.append("")
        imgs = "".join(f'<img src="{stem}.png" style="max-width:100%">'
                       for stem in t.stems if (out / f"{stem}.png").exists())
        claims = "".join(
            f"<tr><td>{html.escape(p)}</td><td>{html.escape(m)}</td>"
            f"<td class='{'ok' if h else 'bad' if h is False else ''}'>{mark[h]}</td></tr>"
            for p, m, h in o.claims)
        rows_html.append(
            f"<section><h2>{html.escape(fig.title)}</h2><p><i>{html.escape(fig.paper)}</i> — "
            f"<code>python -m analyses.{t.name}</code> — {'ok' if o.ok else '<b>FAILED</b>'}"
            f"{took}</p>{imgs}"
            + (f"<table><tr><th>paper's claim</th><th>measured here</th><th>verdict</th></tr>"
               f"{claims}</table>" if claims else "")
            + ("" if o.ok else f"<pre>{html.escape(o.log_tail[-1500:])}</pre>") + "</section>")
    write_atomic(out / "index.md", "\n".join(md))
    write_atomic(out / "index.html",
        "<!doctype html><meta charset='utf-8'><title>seqprobe figures</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:auto}td,th{border:1px solid #ccc;"
        "padding:4px}table{border-collapse:collapse}.ok{color:green}.bad{color:#b00}</style>"
        f"<h1>Reproduced figures ({preset} preset)</h1><p>{html.escape(note)}</p>"
        f"{''.join(rows_html)}")


def _read_timings(path: Path) -> dict:
    """The last run's timings, or {} (with one line saying why) when the file is unusable."""
    if not path.exists():
        return {}
    try:
        timings = read_json(path)
    except TaskError as e:
        print(f"ignoring {e}", file=sys.stderr)
        return {}
    return {k: v for k, v in timings.items() if isinstance(v, dict) or k == "preset"}


def seed_ranges(recipes: Sequence[str]) -> list[str]:
    """Recipe names with runs of consecutive seeds folded, for a plan that fits a screen:
    ``a_s0, a_s1, a_s2, b`` -> ``a_s0-2, b`` (order kept, by each group's first name)."""
    seeds: dict[str, list[int]] = {}
    for name in recipes:
        m = re.fullmatch(r"(.*_s)(\d+)", name)
        stem, seed = (m[1], int(m[2])) if m else (name, None)
        seeds.setdefault(stem, []).append(seed)
    out = []
    for stem, ss in seeds.items():
        if ss == [None]:
            out.append(stem)
        elif ss == list(range(ss[0], ss[0] + len(ss))) and len(ss) > 1:
            out.append(f"{stem}{ss[0]}-{ss[-1]}")
        else:
            out.extend(f"{stem}{x}" for x in ss)
    return out


def _parser() -> OneLineParser:
    p = OneLineParser(prog="python -m analyses.reproduce", description=__doc__.splitlines()[0])
    add_scale_arguments(p)
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these")
    p.add_argument("--skip", action="append", default=[], metavar="NAME", help="skip these")
    p.add_argument("--out", default=None,
                   help=f"default: {DEFAULT_OUT} ({DEFAULT_OUT / 'medium'} for --medium)")
    p.add_argument("--cache-dir", default="checkpoints")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per task")
    p.add_argument("--jobs", type=int, default=None,
                   help="cores' worth of tasks at once (default: 2 on a machine with >= 2 "
                        "cores for --quick / --medium, 1 for --paper: one GPU)")
    p.add_argument("--list", action="store_true", help="print the plan and exit")
    add_backend_arguments(p)
    p.add_argument("--index-only", action="store_true",
                   help="run nothing: rebuild the index (claims re-read) from the JSON in --out")
    p.add_argument("--dry-run", action="store_true",
                   help="train nothing: two optimizer steps of every model the plan trains, "
                        "at its real size; prints sizes, step times and projected H100 hours, "
                        "writes OUT/dry_run.json; exit 1 if any cannot run")
    add_device_argument(p, default="auto")  # --dry-run: batch 1 on a CPU, the real one on a GPU
    return p


def _check_dirs(out: Path, cache: Path) -> None:
    """Both must be (or become) directories: checked before any task starts."""
    check_output_dir(out)
    for p in (cache, *cache.parents):
        if p.exists():
            check(p.is_dir(), f"--cache-dir {cache}: {p} is a file, not a directory")
            break
    check_cache_dir(cache)


def body(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    for n in args.only + args.skip:
        check(n in PLAN, f"unknown analysis {n!r}; the plan has: {', '.join(PLAN)}")
    for n in args.only:
        check(args.preset in figure_of(n).presets, f"{n} has no {args.preset} level (it has "
              f"{', '.join(figure_of(n).presets)})")
    names = [n for n in PLAN if (not args.only or n in args.only) and n not in args.skip
             and args.preset in figure_of(n).presets]
    check(bool(names), f"no analysis of the plan (after --only / --skip) has a {args.preset} "
          "level")
    if args.out is None:
        args.out = str(DEFAULT_OUT / "medium" if args.preset == "medium" else DEFAULT_OUT)
    if args.list:
        for n in names:
            fig = figure_of(n)
            recipes = ", ".join(seed_ranges(fig.recipes(args.preset))) if fig.trains else ""
            print(f"{n:24s} {fig.paper}" + (f"  [{recipes}]" if recipes else ""))
        return 0
    out, cache = Path(args.out), Path(args.cache_dir)
    if args.dry_run:
        check_output_dir(out)
        return dryrun.report(plan_models(names, args.preset), args.device, out)
    _check_dirs(out, cache)
    out.mkdir(parents=True, exist_ok=True)
    timings_path = out / "reproduce_timings.json"
    timings = _read_timings(timings_path)
    if timings.get("preset", args.preset) != args.preset:
        timings = {}  # timings of the other scale are not this run's
    timings["preset"] = args.preset
    if args.index_only:
        outcomes = [index_outcome(Task(n, (), figure=figure_of(n)), out, timings.get(n, {}))
                    for n in names]
        write_index(outcomes, out, args.preset)
        print(f"index: {out / 'index.html'}")
        return 0
    tasks = build_tasks(names, args.preset, out, cache)
    jobs = args.jobs or default_jobs(args.preset)
    backend = backend_of(args, jobs, "cuda" if args.preset == "paper" else "cpu")
    if backend.ray and not args.jobs:  # every ready task goes to Ray, which queues them
        jobs = sum(t.slots for t in tasks)
    last = {t.name: float(get(timings, t.name, "seconds", default=0) or 0) for t in tasks}
    bar = tqdm(total=len(tasks), desc="reproduce", unit="task", dynamic_ncols=True)
    t_start, finished = time.time(), []

    def eta() -> str:
        # the previous run's per-task times where known, else this run's mean; / jobs: rough
        done = {o.task.name for o in finished}
        left = [t for t in tasks if t.name not in done]
        mean = (time.time() - t_start) * jobs / len(finished) if finished else 0.0
        total = sum(last[t.name] or mean for t in left) / jobs
        return f", ETA {total / 60:.0f} min" if total else ""

    running: list[str] = []

    def show() -> None:
        bar.set_postfix_str(("running " + ", ".join(running) if running else "") + eta())

    def on_start(names: list[str]) -> None:
        running[:] = names
        show()

    def on_done(o: Outcome) -> None:
        finished.append(o)
        if o.task.name in running:
            running.remove(o.task.name)
        bar.update(1)
        show()
        tqdm.write(f"{o.task.name}: {'ok' if o.ok else 'FAILED'} ({o.seconds:.0f} s)"
                   + "".join(f"\n   {p} | {m} | {h}" for p, m, h in o.claims))
        if not o.ok and o.log_tail.strip():
            tqdm.write("   " + o.log_tail.strip().splitlines()[-1]
                       + f"  (log: {out / 'logs' / (_log_name(o.task) + '.log')})")
        timings[o.task.name] = {"ok": o.ok, "seconds": round(o.seconds, 1)}
        timings["last_run"] = {"tasks": [f.task.name for f in finished], "jobs": jobs,
                               "wall_s": round(time.time() - t_start, 1)}
        write_atomic(timings_path, json.dumps(timings, indent=1))
        shown = [f for f in finished if f.task.figure is not None]
        shown.sort(key=lambda f: names.index(f.task.name))  # the index grows in plan order
        write_index(shown, out, args.preset,
                    f"This run: {len(shown)} of {len(names)} analyses finished in "
                    f"{(time.time() - t_start) / 60:.1f} min wall, {jobs} cores' worth at a "
                    "time.")

    outcomes = run_tasks(tasks, out, jobs, args.timeout, on_start, on_done, expected=last,
                         backend=backend)
    bar.close()
    figures = [o for o in outcomes if o.task.figure is not None]
    failed = [o.task.name for o in outcomes if not o.ok]
    n_ok = sum(o.ok for o in figures)
    print(f"\n{n_ok}/{len(figures)} analyses ok in {(time.time() - t_start) / 60:.1f} min; "
          f"index: {out / 'index.html'}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(body, argv)


if __name__ == "__main__":
    sys.exit(main())
