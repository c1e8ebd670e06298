"""``python -m analyses.reproduce``: flags, the run's progress line and its exit code."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from analyses import zoo
from analyses.claims import verdict_text
from analyses.common import check_output_dir
from analyses.reproduce.eta import JOB_START_S, plan_eta, sources
from analyses.reproduce.index import (
    Outcome,
    index_outcome,
    log_path,
    read_timings,
    run_plan,
    write_index,
)
from analyses.reproduce.parts import (
    BUDGET,
    CACHE_BYTES,
    CHECKPOINT_BYTES_PER_PARAM,
    merge,
    parse_part,
    plan_calls,
    split,
)
from analyses.reproduce.plan import (
    PLAN,
    Job,
    build_jobs,
    default_workers,
    figure_of,
    placement,
    plan_models,
    seed_ranges,
)
from analyses.zoo import dryrun
from figures.style import DEFAULT_OUT
from models.train.cache import check_cache_dir
from models.train.costs import StepCosts
from models.train.ensemble_cache import ENSEMBLES
from models.train.gpu_costs import (
    COMPILE_S,
    REFERENCE_CARD,
    UTILISATION,
    device_kind,
)
from models.train.plan import plan_row
from seqprobe import flags
from seqprobe.atomic import write_atomic
from seqprobe.cli import (
    OneLineParser,
    add_backend_arguments,
    add_device_argument,
    add_level_flag,
    add_workers_flag,
    run_cli,
)
from seqprobe.config import check
from seqprobe.errors import OutputError
from seqprobe.paths import default_cache_dir
from seqprobe.sweep import backend_of
from seqprobe.sweep.eta import Eta, makespan

# the first line of the package's docstring, as --help has always shown it
DESCRIPTION = ("Reproduce every figure: ``python -m analyses.reproduce --level quick`` (or ``--level paper`` "
               "on a GPU).")


GPU_LEVELS = ("large", "paper")  # seqprobe.cli.LEVEL_HELP: one GPU machine; for a GPU


def _parser() -> OneLineParser:
    p = OneLineParser(prog="python -m analyses.reproduce", description=DESCRIPTION)
    add_level_flag(p)
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these")
    p.add_argument("--skip", action="append", default=[], metavar="NAME", help="skip these")
    p.add_argument("--out", default=None,
                   help=f"default: {DEFAULT_OUT} ({DEFAULT_OUT / 'medium'} for --level medium, "
                   f"{DEFAULT_OUT / 'large'} for --level large)")
    p.add_argument("--cache-dir", default=str(default_cache_dir()),
                   help="the checkpoint cache (default: $SEQPROBE_CACHE, else "
                   "$XDG_CACHE_HOME/seqprobe, else ~/.cache/seqprobe; now %(default)s)")
    p.add_argument("--timeout", type=flags.flag("--timeout"),
                   default=3600.0, help="seconds per job")
    add_workers_flag(p, help="cores' worth of jobs at once: the workers (default: every core, as "
                        "many as the free memory holds; 1 for --level paper: one GPU)")
    p.add_argument("--seed-offset", type=flags.flag("--seed-offset"), default=0,
                   help="shift every recipe's training seed (and each analysis' --seed) by K: "
                        "the same plan over other seeds of its models, cached apart (default 0: "
                        "the recipes as written)")
    p.add_argument("--list", action="store_true",
                   help="print the plan and its estimated wall time, and exit")
    add_backend_arguments(p)
    p.add_argument("--index-only", action="store_true",
                   help="run nothing: rebuild the index (claims re-read) from the JSON in --out")
    p.add_argument("--part", default=None, metavar="K/N",
                   help="run part K of the level split in N (each part's analyses with every "
                        "recipe they train; --list shows the split, each part sized for one "
                        "lent GPU call at the same --jobs)")
    p.add_argument("--ensembles", choices=ENSEMBLES, default="auto",
                   help="train runs of one model as one ensemble (auto: on a GPU, where it is "
                        "faster; on: on CPU cores too, one per core; off: never)")
    p.add_argument("--merge", nargs="+", default=[], metavar="DIR", type=Path,
                   help="with --index-only: copy these parts' results into --out first")
    p.add_argument("--dry-run", action="store_true",
                   help="train nothing: two optimizer steps of every model the plan trains, "
                        "at its real size; prints sizes, step times and projected H100 hours, "
                        "writes OUT/dry_run.json; exit 1 if any cannot run")
    add_device_argument(p, default="auto")  # --dry-run: batch 1 on a CPU, the real one on a GPU
    return p


def _check_dirs(out: Path, cache: Path) -> None:
    """Both must be (or become) directories: checked before any job starts."""
    check_output_dir(out)
    for p in (cache, *cache.parents):
        if p.exists():
            check(p.is_dir(), f"--cache-dir {cache}: {p} is a file, not a directory")
            break
    check_cache_dir(cache)


def _timings(out: Path, level: str) -> dict:
    """The last run's timings of this level in ``out`` (those of another scale are not this
    run's), marked with the level."""
    timings = read_timings(out / "reproduce_timings.json")
    if timings.get("level", level) != level:
        timings = {}
    timings["level"] = level
    timings["seed_offset"] = zoo.seed_offset()  # which seeds the folder holds (reproduce.seeds)
    return timings


def _eta_line(eta: Eta, workers: int) -> str:
    if not eta.estimates:
        return (f"{len(eta.jobs)} jobs; no estimate of their time (no step-cost table, no "
                "earlier run's times)")
    minutes = eta.remaining({}) / 60
    return (f"{len(eta.jobs)} jobs, estimated {minutes:.0f} min wall at --jobs {workers} "
            f"({sources(eta)})")


def level_parts(names: list[str], level: str, workers: int, device: str,
                parts: int | None = None
                ) -> tuple[list[list[str]], Callable[[Sequence[str]], float]]:
    """The plan's analyses split into parts (:func:`analyses.reproduce.parts.split`), each
    costed with an empty cache (a lent machine's) on ``device``'s kind at ``workers``: the same
    split on every machine that asks with the same ``--jobs``. Returns the parts and the
    estimated wall seconds of a part."""
    kind = device_kind(device)
    empty = Path("/nonexistent/seqprobe-empty-cache")
    jobs = build_jobs(names, level, Path("/nonexistent/out"), empty, workers, auto=kind)
    eta = plan_eta(jobs, workers, level, StepCosts.load(device=kind).timed(), {})
    cost, by_name = eta.costs(), {j.name: j for j in jobs}

    def closure(part: Sequence[str]) -> list[Job]:
        todo, seen = list(part), {}
        while todo:
            j = by_name[todo.pop()]
            if j.name not in seen:
                seen[j.name] = j
                todo += [a for a in j.after if a in by_name]
        return list(seen.values())

    memo: dict[tuple, float] = {}

    def wall(part: Sequence[str]) -> float:
        key = tuple(sorted(part))
        if key not in memo:
            memo[key] = makespan(closure(part), cost, workers)
        return memo[key]

    return split(names, wall, BUDGET.part_s(False), parts, first=BUDGET.part_s(True)), wall


def _list(names: list[str], level: str, out: Path, cache: Path, workers: int,
          device: str = "cpu", show_parts: bool = False, ensembles: str = "auto") -> int:
    """The plan and its estimated wall time; ``device`` ``cuda`` (given, or ``auto`` on a GPU
    machine) estimates it for one GPU from the CUDA step-cost table, on any machine.
    ``show_parts``: also the split into parts of one lent GPU call each (``--part``)."""
    kind = device_kind(device)
    for n in names:
        fig = figure_of(n)
        recipes = ", ".join(seed_ranges(fig.recipes(level))) if fig.trains else ""
        device, own = placement(n, level, workers)
        where = (f"  (on {device}, {own or fig.slots} core{'s' * ((own or fig.slots) > 1)})"
                 if device else "")
        print(f"{n:24s} {fig.paper}{where}" + (f"  [{recipes}]" if recipes else ""))
    jobs = build_jobs(names, level, out, cache, workers, ensembles, auto=kind)
    # an earlier run's times here are of this machine's device, not a GPU's: not used for one
    timings = _timings_if_any(out, level) if kind != "cuda" else {}
    eta = plan_eta(jobs, workers, level, StepCosts.load(device=kind).timed(), timings)
    print(f"\n{_eta_line(eta, workers)}; cache {cache}")
    if show_parts:
        parts, wall = level_parts(names, level, workers, kind)
        calls = plan_calls(parts, wall, lambda n: resumes(n, level))
        b = BUDGET
        print(f"\nin {len(calls)} lent GPU call{'s' * (len(calls) > 1)} of at most "
              f"{b.call_s / 60:.1f} min each, {len(parts)} part{'s' * (len(parts) > 1)} "
              f"(an empty cache, --jobs {workers}; each call counts {b.start_s:.0f} s of "
              f"start-up, {b.preflight_s:.0f} s of preflight and {b.pack_s:.0f} s of packing; "
              f"the first also {b.checks_s + b.ensemble_s:.0f} s of GPU checks):")
        for c in calls:
            over = "  (OVER: one analysis that cannot resume)" if c.seconds > b.call_s else ""
            rounds = (f" ({c.round} of {c.rounds}, resuming)" if c.round > 1 else
                      f" (1 of {c.rounds}: resumes in the next call)" if c.rounds > 1 else "")
            what = (f"{'checks + ' if c.checks else ''}part {c.part}/{c.parts}{rounds}: "
                    f"{', '.join(c.analyses)}" if c.part else "the GPU checks alone")
            print(f"  call {c.index}: {c.seconds / 60:.1f} min  {what}{over}\n"
                  f"      {c.command()}")
        print(f"{len(calls)} calls; ensemble jobs costed: {_ensemble_sources(eta)}")
    if kind == "cuda":
        print(f"GPU estimate: training jobs on one {REFERENCE_CARD}: their steps (measured "
              "where the CUDA table has the run, else its FLOPs at "
              f"{UTILISATION:.0%} of the peak of its precision, never below the table's "
              f"fastest step), evaluations, {COMPILE_S:.0f} s of torch.compile per compiled "
              f"run and {JOB_START_S:.0f} s of process start-up per job; analyses at their "
              "CPU seconds or their own runs'")
    return 0


def resumes(name: str, level: str) -> bool:
    """Whether analysis ``name`` at ``level`` can continue in a later lent call from what one
    call brings back: it keeps its progress in small result files (``Figure.resume_files``),
    or every checkpoint it trains fits together in :data:`~analyses.reproduce.parts.CACHE_BYTES`
    (an interrupted run resumes from its checkpoint)."""
    fig = figure_of(name)
    if fig.resume_files:
        return True
    if not fig.trains:
        return False
    params = 0
    for r in fig.recipes(level):
        run_config = dryrun.recipe_run_config(r, level)
        params += plan_row(run_config.arch, run_config)["params"]
    return params * CHECKPOINT_BYTES_PER_PARAM <= CACHE_BYTES


def _ensemble_sources(eta: Eta) -> str:
    """Which training jobs' estimates are measured and which projected, in words."""
    counts: dict[str, int] = {}
    for j in eta.jobs:
        if j.recipes and eta.estimates.get(j.name) is not None:
            src = eta.estimates[j.name].source
            counts[src] = counts.get(src, 0) + 1
    return ", ".join(f"{n} {src}" for src, n in sorted(counts.items())) or "none"


def _timings_if_any(out: Path, level: str) -> dict:
    return _timings(out, level) if out.is_dir() else {}


def body(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    for n in args.only + args.skip:
        check(n in PLAN, f"unknown analysis {n!r}; the plan has: {', '.join(PLAN)}")
    for n in args.only:
        check(args.level in figure_of(n).levels, f"{n} has no {args.level} level (it has "
              f"{', '.join(figure_of(n).levels)})")
    names = [n for n in PLAN if (not args.only or n in args.only) and n not in args.skip
             and args.level in figure_of(n).levels]
    check(bool(names), f"no analysis of the plan (after --only / --skip) has a {args.level} "
          "level")
    if args.out is None:
        args.out = str(DEFAULT_OUT / args.level if args.level in ("medium", "large")
                       else DEFAULT_OUT)
    out, cache = Path(args.out), Path(args.cache_dir)
    if args.seed_offset:  # read by the zoo here (the plan's cache states) and in every job
        os.environ[zoo.SEED_OFFSET_ENV] = str(args.seed_offset)
    check(not args.merge or args.index_only, "--merge goes with --index-only (it runs nothing)")
    workers = args.workers or default_workers(args.level)
    if args.part is not None:
        k, n = parse_part(args.part)
        parts, _ = level_parts(names, args.level, workers, args.device, n)
        check(k <= len(parts), f"--part {args.part}: the plan has {len(names)} analyses, so "
              f"at most {len(parts)} parts")
        names = parts[k - 1]
    if args.list:
        return _list(names, args.level, out, cache, workers, args.device,
                     show_parts=args.part is None and args.level == "large",
                     ensembles=args.ensembles)
    if args.dry_run:
        check_output_dir(out)
        return dryrun.report(plan_models(names, args.level), args.device, out)
    # a GPU level on a machine without one ran for days at CPU speed: refused unless asked
    # for by name (--device cpu) or sent elsewhere (--ray); --list and --dry-run estimate it
    check(args.level not in GPU_LEVELS or args.index_only or args.ray is not None
          or args.device == "cpu" or device_kind("auto") == "cuda",
          f"--{args.level} is a GPU machine's work and this machine has no CUDA device; "
          "--list or --dry-run estimate it here, --ray ADDRESS sends it to a cluster, "
          "--device cpu runs it here anyway (days)")
    if args.merge:
        print(f"merged {len(merge(args.merge, out, args.level))} result files into {out}")
    if args.index_only:  # rebuilds an index from results: a folder without any is refused
        check(out.is_dir() and any(not Job(n, (), figure=figure_of(n)).missing(out)
                                   for n in names),
              f"--index-only: {out} holds no analysis results to index (run the plan into "
              "it first, or give the --out of a run)")
        check_output_dir(out)
    else:
        _check_dirs(out, cache)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # /proc/x, /sys/x: what the checks above cannot see
        raise OutputError(f"--out {out}: cannot create it ({e.strerror})") from None
    timings = _timings(out, args.level)
    if args.index_only:
        outcomes = [index_outcome(Job(n, (), figure=figure_of(n)), out, timings.get(n, {}))
                    for n in names]
        write_index(outcomes, out, args.level)
        print(f"index: {out / 'index.html'}")
        return 0
    jobs = build_jobs(names, args.level, out, cache, workers, args.ensembles)
    backend = backend_of(args, workers, "cuda" if args.level == "paper" else "cpu")
    if backend.ray and not args.workers:  # every ready job goes to Ray, which queues them
        workers = sum(j.slots for j in jobs)
    eta = plan_eta(jobs, workers, args.level, StepCosts.load().timed(), timings)
    print(_eta_line(eta, workers), flush=True)
    progress = _Progress(jobs, names, eta, workers, out, args.level, timings)
    with interrupt_on_sigterm():
        outcomes = run_plan(jobs, out, workers, args.timeout, progress.on_start,
                            progress.on_done, expected=eta.costs(), backend=backend)
    progress.close()
    figures = [o for o in outcomes if o.job.figure is not None]
    failed = [o.job.name for o in outcomes if not o.ok]
    n_ok = sum(o.ok for o in figures)
    print(f"\n{n_ok}/{len(figures)} analyses ok in {(time.time() - progress.t0) / 60:.1f} min; "
          f"index: {out / 'index.html'}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


class _Progress:
    """The progress bar (running jobs, ETA), a line per finished job, and after each: the
    timings file and the index so far."""

    def __init__(self, jobs: list[Job], names: list[str], eta: Eta, workers: int, out: Path,
                 level: str, timings: dict):
        self.names, self.eta, self.workers, self.out = names, eta, workers, out
        self.level, self.timings = level, timings
        self.bar = tqdm(total=len(jobs), desc="reproduce", unit="job", dynamic_ncols=True)
        self.t0 = time.time()
        self.started: dict[str, float] = {}  # running job -> its start
        self.finished: list[Outcome] = []
        self.first_eta = eta.remaining({})  # kept in the timings: how honest the start was
        self.show()

    def show(self) -> None:
        left = self.eta.remaining(self.started)
        running = "running " + ", ".join(self.started) if self.started else ""
        self.bar.set_postfix_str(running + (f", ETA {left / 60:.0f} min" if left else ""))

    def on_start(self, names: list[str]) -> None:
        now = time.time()
        self.started = {n: self.started.get(n, now) for n in names}
        self.show()

    def on_done(self, o: Outcome) -> None:
        self.finished.append(o)
        self.started.pop(o.job.name, None)
        self.eta.done(o.job.name, o.seconds, o.ok)
        self.bar.update(1)
        self.show()
        margins = o.margins if len(o.margins) == len(o.claims) else [None] * len(o.claims)
        tqdm.write(f"{o.job.name}: {'ok' if o.ok else 'FAILED'} ({o.seconds:.0f} s)"
                   + "".join(f"\n   {p} | {m} | {verdict_text(h)}"
                             + (f" | margin: {g}" if g is not None else "")
                             for (p, m, h), g in zip(o.claims, margins, strict=True)))
        if not o.ok and o.log_tail.strip():
            tqdm.write("   " + o.log_tail.strip().splitlines()[-1]
                       + f"  (log: {log_path(o.job, self.out)})")
        wall = time.time() - self.t0
        self.timings[o.job.name] = {"ok": o.ok, "seconds": round(o.seconds, 1)}
        self.timings["last_run"] = {"tasks": [f.job.name for f in self.finished],
                                    "jobs": self.workers, "wall_s": round(wall, 1),
                                    "first_eta_s": round(self.first_eta, 1)}
        write_atomic(self.out / "reproduce_timings.json", json.dumps(self.timings, indent=1))
        shown = [f for f in self.finished if f.job.figure is not None]
        shown.sort(key=lambda f: self.names.index(f.job.name))  # the index grows in plan order
        write_index(shown, self.out, self.level, self.summary(shown, wall))

    def summary(self, shown: list[Outcome], wall: float) -> str:
        """The index's line on this run, counted as the closing line on stdout counts: ok
        analyses of the plan's (a failed or timed-out one is not 'finished')."""
        ok = sum(f.ok for f in shown)
        failed = len(shown) - ok
        return (f"This run: {ok} of {len(self.names)} analyses ok"
                + (f", {failed} failed" if failed else "")
                + f" in {wall / 60:.1f} min wall, {self.workers} cores' worth at a time.")

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def interrupt_on_sigterm():
    """SIGTERM stops a run as Ctrl-C does (its jobs stopped, exit 130), not by killing this
    process alone, which left the jobs training as orphans and exited 0."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    return run_cli(body, argv)
