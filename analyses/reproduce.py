"""Reproduce every figure: ``python -m analyses.reproduce --quick`` (or ``--paper`` on a GPU).

Trains the checkpoints the analyses need (cached by config hash, so a second call only
re-plots), runs every analysis in its own process (a failure is reported and the rest still
run), and writes ``figures/out/index.md`` and ``index.html``: figure by figure, the paper's
claim beside the number measured here and whether it holds. Exit code 1 if any step failed.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from analyses.common import run_main
from figures.style import DEFAULT_OUT
from tasks.base import check


@dataclass(frozen=True)
class Claim:
    """A paper's claim and how to read whether it holds from the analysis' JSON."""

    paper: str  # what the paper says (short)
    measure: Callable[[dict], tuple[str, bool | None]]  # JSON -> (measured, holds? None: n/a)


@dataclass(frozen=True)
class Step:
    name: str  # analysis module under analyses/ and the stem of its outputs
    title: str
    paper: str  # which paper / figure
    args: Callable[[str, Path, Path], list[str]]  # (preset, out_dir, cache_dir) -> argv
    claims: tuple[Claim, ...] = field(default_factory=tuple)
    outputs: tuple[str, ...] = ()  # output stems (default: (name,))
    # steps whose cached checkpoints this one reuses: with --jobs > 1 it starts after them
    # (else both would train the same checkpoint at once)
    after: tuple[str, ...] = ()
    slots: int = 1  # cores it keeps busy (2: copy transformers, memorization's workers)

    @property
    def stems(self) -> tuple[str, ...]:
        return self.outputs or (self.name,)

    def missing(self, out: Path) -> list[str]:
        """The step's JSON files not (yet) in ``out``."""
        return [f"{s}.json" for s in self.stems if not (out / f"{s}.json").exists()]


def _get(d: dict, *path, default=None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def _train_args(preset: str, out: Path, cache: Path) -> list[str]:
    return ["--train", preset, f"--{preset}", "--cache-dir", str(cache), "--out", str(out)]


def _no_train_args(preset: str, out: Path, cache: Path) -> list[str]:
    return [f"--{preset}", "--out", str(out)]




def default_jobs(preset: str) -> int:
    """Quick: two cores' worth at once. The Markov, STU and spectral analyses train tiny
    single-threaded models, so alone they leave the second core idle; they run two at a time,
    while the copy transformers (``slots=2``) get both cores. Paper: one at a time, each with
    the whole GPU."""
    return min(2, os.cpu_count() or 1) if preset == "quick" else 1


def load_plan() -> list[Step]:
    from analyses.reproduce_plan import plan

    return plan()


@dataclass
class Outcome:
    step: Step
    ok: bool
    seconds: float
    log_tail: str
    claims: list[tuple[str, str, bool | None]]  # (paper claim, measured, holds)


def read_claims(step: Step, out: Path) -> list[tuple[str, str, bool | None]]:
    """Each claim of ``step`` read from its JSON in ``out``: (paper claim, measured, holds)."""
    stems = step.stems
    data = {s: json.loads((out / f"{s}.json").read_text()) for s in stems}
    claims: list[tuple[str, str, bool | None]] = []
    for c in step.claims:
        try:
            measured, holds = c.measure(data if len(data) > 1 else data[stems[0]])
        except Exception as e:  # a claim that cannot be read is reported, not fatal
            measured, holds = f"could not read: {type(e).__name__}: {e}", None
        claims.append((c.paper, measured, holds))
    return claims


def step_argv(step: Step, preset: str, out: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", f"analyses.{step.name}", *step.args(preset, out, cache)]


@dataclass
class _Running:
    step: Step
    proc: subprocess.Popen
    log: Path
    t0: float
    slots: int


def _start(step: Step, preset: str, out: Path, cache: Path, slots: int,
           threads_per_slot: int) -> _Running:
    """Start the step's analysis in its own process (and process group, so a timeout also
    stops its workers); its output goes to ``out/logs/NAME.log``."""
    log = out / "logs" / f"{step.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # torch, MKL and OpenMP read these at start-up: each process gets its share of the cores
    n = str(slots * threads_per_slot)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
           "TQDM_MININTERVAL": "30"}  # a progress line every 30 s in the log, not every 0.1 s
    with open(log, "w") as f:
        proc = subprocess.Popen(step_argv(step, preset, out, cache), stdout=f,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return _Running(step, proc, log, time.time(), slots)


def _finish(r: _Running, out: Path, timed_out: float | None = None) -> Outcome:
    seconds = time.time() - r.t0
    log = r.log.read_text(errors="replace")
    if timed_out is not None:
        ok, log = False, log + f"\n(timed out after {timed_out:.0f} s)"
    else:
        ok = r.proc.returncode == 0
        if not ok:
            log += f"\n(exit code {r.proc.returncode})"
    missing = r.step.missing(out)
    if ok and missing:
        ok, log = False, log + f"\n(no {', '.join(missing)} written in {out})"
    claims = read_claims(r.step, out) if ok else []
    return Outcome(r.step, ok, seconds, log[-3000:], claims)


def _kill(r: _Running) -> None:
    try:
        os.killpg(r.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    r.proc.wait()


def run_plan(steps: list[Step], preset: str, out: Path, cache: Path, jobs: int = 1,
             timeout: float = 3600.0, on_start: Callable[[list[str]], None] = lambda names: None,
             on_done: Callable[[Outcome], None] = lambda o: None, poll: float = 0.2,
             expected: dict[str, float] | None = None) -> list[Outcome]:
    """Run every step, at most ``jobs`` cores' worth at once, each after the steps it names in
    ``after`` (those in this run). Of the steps ready to start, the longest ``expected``
    (seconds, e.g. the last run's) goes first, so that no long step is left to run alone at
    the end; plan order breaks ties. A step that fails or times out is reported through
    ``on_done`` like any other; the rest still run. Outcomes come back in plan order."""
    check(jobs >= 1, f"--jobs must be >= 1, got {jobs}")
    threads = max(1, (os.cpu_count() or 1) // jobs)
    names = {s.name for s in steps}
    pending, running, done = list(steps), [], {}
    try:
        while pending or running:
            free = jobs - sum(r.slots for r in running)
            started = False
            # longest first; a shorter step may fill cores a longer one cannot use
            for s in sorted(pending, key=lambda s: -(expected or {}).get(s.name, 0.0)):
                need = min(s.slots, jobs)
                if need <= free and all(a not in names or a in done for a in s.after):
                    running.append(_start(s, preset, out, cache, need, threads))
                    pending.remove(s)
                    free -= need
                    started = True
            if started:
                on_start([r.step.name for r in running])
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
                done[r.step.name] = o = _finish(r, out, timeout if timed_out else None)
                on_done(o)
    finally:  # Ctrl-C: no orphaned analyses left training in the background
        for r in running:
            _kill(r)
    return [done[s.name] for s in steps]


def index_outcome(step: Step, out: Path, timing: dict) -> Outcome:
    """An outcome read back from ``out`` (for ``--index-only``): ok when every JSON is there
    and the last run did not record a failure."""
    missing = step.missing(out)
    ok = not missing and timing.get("ok", True)
    log = f"missing: {', '.join(missing)}" if missing else "" if ok else "failed in the last run"
    return Outcome(step, ok, float(timing.get("seconds", 0.0)), log,
                   read_claims(step, out) if not missing else [])


def _cell(text: str) -> str:
    """A Markdown table cell: a literal | (as in |b·c|) would split the cell."""
    return text.replace("|", "\\|")


def write_index(outcomes: list[Outcome], out: Path, preset: str, note: str = "") -> None:
    mark = {True: "holds", False: "does not hold", None: "n/a"}
    md = [f"# Reproduced figures ({preset} preset)", "",
          "Each figure comes from a real run of the analysis named; the claim column is the "
          "paper's, the measured column is ours." + (f" {note}" if note else ""), ""]
    rows_html = []
    for o in outcomes:
        s = o.step
        md += [f"## {s.title}", f"*{s.paper}* — `python -m analyses.{s.name}` — "
               f"{'ok' if o.ok else '**FAILED**'} in {o.seconds:.0f} s", ""]
        for stem in s.stems:
            if (out / f"{stem}.png").exists():
                md.append(f"![{stem}]({stem}.png)")
        if o.claims:
            md += ["", "| paper's claim | measured here | verdict |", "|---|---|---|"]
            md += [f"| {_cell(p)} | {_cell(m)} | {mark[h]} |" for p, m, h in o.claims]
        if not o.ok:
            md += ["", "```", o.log_tail.strip()[-1500:], "```"]
        md.append("")
        imgs = "".join(f'<img src="{stem}.png" style="max-width:100%">'
                       for stem in s.stems if (out / f"{stem}.png").exists())
        claims = "".join(
            f"<tr><td>{html.escape(p)}</td><td>{html.escape(m)}</td>"
            f"<td class='{'ok' if h else 'bad' if h is False else ''}'>{mark[h]}</td></tr>"
            for p, m, h in o.claims)
        rows_html.append(
            f"<section><h2>{html.escape(s.title)}</h2><p><i>{html.escape(s.paper)}</i> — "
            f"<code>python -m analyses.{s.name}</code> — {'ok' if o.ok else '<b>FAILED</b>'} in "
            f"{o.seconds:.0f} s</p>{imgs}"
            + (f"<table><tr><th>paper's claim</th><th>measured here</th><th>verdict</th></tr>"
               f"{claims}</table>" if claims else "")
            + ("" if o.ok else f"<pre>{html.escape(o.log_tail[-1500:])}</pre>") + "</section>")
    (out / "index.md").write_text("\n".join(md))
    (out / "index.html").write_text(
        "<!doctype html><meta charset='utf-8'><title>seqprobe figures</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:auto}td,th{border:1px solid #ccc;"
        "padding:4px}table{border-collapse:collapse}.ok{color:green}.bad{color:#b00}</style>"
        f"<h1>Reproduced figures ({preset} preset)</h1><p>{html.escape(note)}</p>"
        f"{''.join(rows_html)}")


def body(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m analyses.reproduce", description=__doc__)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="preset", action="store_const", const="quick")
    g.add_argument("--paper", dest="preset", action="store_const", const="paper")
    p.set_defaults(preset="quick")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these")
    p.add_argument("--skip", action="append", default=[], metavar="NAME", help="skip these")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--cache-dir", default="checkpoints")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per analysis")
    p.add_argument("--jobs", type=int, default=None,
                   help="analyses run at once, the cores shared between them (default: 2 on a "
                        "machine with >= 2 cores for --quick, 1 for --paper: one GPU)")
    p.add_argument("--list", action="store_true", help="print the plan and exit")
    p.add_argument("--index-only", action="store_true",
                   help="run nothing: rebuild the index (claims re-read) from the JSON in --out")
    args = p.parse_args(argv)
    plan = load_plan()
    names = [s.name for s in plan]
    for n in args.only + args.skip:
        if n not in names:
            p.error(f"unknown analysis {n!r}; the plan has: {', '.join(names)}")
    steps = [s for s in plan if (not args.only or s.name in args.only) and s.name not in args.skip]
    if args.list:
        for s in steps:
            print(f"{s.name:24s} {s.paper}")
        return 0
    out, cache = Path(args.out), Path(args.cache_dir)
    out.mkdir(parents=True, exist_ok=True)
    timings_path = out / "reproduce_timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    if timings.get("preset", args.preset) != args.preset:
        timings = {}  # timings of the other scale are not this run's
    timings["preset"] = args.preset
    if args.index_only:
        outcomes = [index_outcome(s, out, timings.get(s.name, {})) for s in steps]
        write_index(outcomes, out, args.preset)
        print(f"index: {out / 'index.html'}")
        return 0
    jobs = args.jobs or default_jobs(args.preset)
    last = {s.name: float(_get(timings, s.name, "seconds", default=0) or 0) for s in steps}
    bar = tqdm(total=len(steps), desc="reproduce", unit="figure", dynamic_ncols=True)
    t_start, finished = time.time(), []

    def eta() -> str:
        # the previous run's per-step times where known, else this run's mean; / jobs: rough
        done = {o.step.name for o in finished}
        left = [s for s in steps if s.name not in done]
        mean = (time.time() - t_start) * jobs / len(finished) if finished else 0.0
        total = sum(last[s.name] or mean for s in left) / jobs
        return f", ETA {total / 60:.0f} min" if total else ""

    running: list[str] = []

    def show() -> None:
        bar.set_postfix_str(("running " + ", ".join(running) if running else "") + eta())

    def on_start(names: list[str]) -> None:
        running[:] = names
        show()

    def on_done(o: Outcome) -> None:
        finished.append(o)
        running.remove(o.step.name)
        bar.update(1)
        show()
        tqdm.write(f"{o.step.name}: {'ok' if o.ok else 'FAILED'} ({o.seconds:.0f} s)"
                   + "".join(f"\n   {p} | {m} | {h}" for p, m, h in o.claims))
        if not o.ok and o.log_tail.strip():
            tqdm.write("   " + o.log_tail.strip().splitlines()[-1]
                       + f"  (log: {out / 'logs' / (o.step.name + '.log')})")
        timings[o.step.name] = {"ok": o.ok, "seconds": round(o.seconds, 1)}
        timings["last_run"] = {"steps": [f.step.name for f in finished], "jobs": jobs,
                               "wall_s": round(time.time() - t_start, 1)}
        timings_path.write_text(json.dumps(timings, indent=1))
        order = [s.name for s in steps]  # the index grows as steps finish, in plan order
        wall = time.time() - t_start
        write_index(sorted(finished, key=lambda f: order.index(f.step.name)), out, args.preset,
                    f"This run: {len(finished)} of {len(steps)} analyses finished in "
                    f"{wall / 60:.1f} min wall, {jobs} at a time.")

    outcomes = run_plan(steps, args.preset, out, cache, jobs, args.timeout, on_start, on_done,
                        expected=last)
    bar.close()
    failed = [o.step.name for o in outcomes if not o.ok]
    n_ok = len(outcomes) - len(failed)
    print(f"\n{n_ok}/{len(outcomes)} analyses ok; index: {out / 'index.html'}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(body, argv)


if __name__ == "__main__":
    sys.exit(main())
