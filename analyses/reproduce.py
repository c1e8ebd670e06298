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
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from analyses.common import run_main
from figures.style import DEFAULT_OUT


@dataclass(frozen=True)
class Claim:
    """A paper's claim and how to read whether it holds from the analysis' JSON."""

    paper: str  # what the paper says (short)
    measure: Callable[[dict], tuple[str, bool]]  # JSON -> (what we measured, holds?)


@dataclass(frozen=True)
class Step:
    name: str  # analysis module under analyses/ and the stem of its outputs
    title: str
    paper: str  # which paper / figure
    args: Callable[[str, Path, Path], list[str]]  # (preset, out_dir, cache_dir) -> argv
    claims: tuple[Claim, ...] = field(default_factory=tuple)
    outputs: tuple[str, ...] = ()  # output stems (default: (name,))

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


def run_step(step: Step, preset: str, out: Path, cache: Path, timeout: float) -> Outcome:
    argv = [sys.executable, "-m", f"analyses.{step.name}", *step.args(preset, out, cache)]
    t0 = time.time()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        ok, log = proc.returncode == 0, (proc.stdout + proc.stderr)
        if not ok:
            log += f"\n(exit code {proc.returncode})"
    except subprocess.TimeoutExpired as e:
        ok, log = False, f"{(e.stdout or '')}{(e.stderr or '')}\n(timed out after {timeout:.0f} s)"
        if isinstance(log, bytes):
            log = log.decode(errors="replace")
    seconds = time.time() - t0
    missing = step.missing(out)
    if ok and missing:
        ok, log = False, log + f"\n(no {', '.join(missing)} written in {out})"
    claims = read_claims(step, out) if ok else []
    return Outcome(step, ok, seconds, log[-3000:], claims)


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


def write_index(outcomes: list[Outcome], out: Path, preset: str) -> None:
    mark = {True: "holds", False: "does not hold", None: "n/a"}
    md = [f"# Reproduced figures ({preset} preset)", "",
          "Each figure comes from a real run of the analysis named; the claim column is the "
          "paper's, the measured column is ours.", ""]
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
        f"<h1>Reproduced figures ({preset} preset)</h1>{''.join(rows_html)}")


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
    outcomes: list[Outcome] = []
    bar = tqdm(steps, desc="reproduce", unit="figure", dynamic_ncols=True)
    t_start = time.time()
    for i, s in enumerate(bar):
        # ETA: the previous run's timings where known, else the mean of this run's steps
        done_s = time.time() - t_start
        left = [float(_get(timings, r.name, "seconds", default=0) or 0) for r in steps[i:]]
        mean = done_s / i if i else 0.0
        eta = sum(v or mean for v in left)  # 0 on a first run's first step: not shown
        bar.set_postfix_str(s.name + (f", ETA {eta / 60:.0f} min" if eta else ""))
        o = run_step(s, args.preset, out, cache, args.timeout)
        outcomes.append(o)
        status = "ok" if o.ok else "FAILED"
        tqdm.write(f"{s.name}: {status} ({o.seconds:.0f} s)"
                   + "".join(f"\n   {p} | {m} | {h}" for p, m, h in o.claims))
        if not o.ok:
            tqdm.write("   " + o.log_tail.strip().splitlines()[-1] if o.log_tail.strip() else "")
        timings[s.name] = {"ok": o.ok, "seconds": round(o.seconds, 1)}
        timings_path.write_text(json.dumps(timings, indent=1))
        write_index(outcomes, out, args.preset)  # the index grows as steps finish
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
