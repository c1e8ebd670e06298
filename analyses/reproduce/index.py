"""Reading what the jobs wrote: each analysis' JSON, its claims, the last run's timings, and
the index (``index.md`` / ``index.html``) that shows each figure beside the paper's claim."""

from __future__ import annotations

import html
import json
import math
import os
import platform
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import torch

from analyses.claims import Margin, Undecided, Verdict, level_of, verdict_text
from analyses.reproduce.plan import Job
from seqprobe.atomic import write_atomic
from seqprobe.device import gpu_name
from seqprobe.errors import InputError

REPO = Path(__file__).resolve().parents[2]  # the checkout whose commit the index names
MAX_JSON_BYTES = 64 << 20  # an analysis JSON is kilobytes; the index reads no more than this
MAX_CLAIM_CHARS = 2000  # bound on one claim cell the index copies from an analysis' JSON

def scale_text(level: str, figures) -> str:
    """The index's scale line of ``level`` against the papers', built from what the ``figures``
    run declare (each :class:`~analyses.claims.Figure`'s ``scale(level)`` clause and its
    ``paper_scale``, each said once, in the run's order): a verdict is read at this scale, and
    a claim that needs the papers' says "not decided at this level" with its reason. A new
    paper's analysis brings its own clauses; '' where no figure says anything."""
    own = list(dict.fromkeys(c for f in figures if f is not None and (c := f.scale(level))))
    papers = list(dict.fromkeys(f.paper_scale for f in figures
                                if f is not None and f.paper_scale))
    if not own and not papers:
        return ""
    if not own and level == "paper":
        own = ["the papers' own settings"]
    text = f"Scale of this level — {level}" + (": " + "; ".join(own) if own else "") + "."
    return text + (f" Against the papers: {'; '.join(papers)}." if papers else "")


@dataclass
class Outcome:
    job: Job
    ok: bool
    seconds: float | None  # None: not known (an --index-only read of a run without timings)
    log_tail: str
    claims: list[tuple[str, str, Verdict]]  # (paper claim, our result, verdict)
    margins: list[Margin | None] = field(default_factory=list)  # each claim's, in order
    # each claim's replicate tests, in order: (label, analyses.stats.ReplicateTest) pairs
    tests: list[tuple] = field(default_factory=list)
    # "ok", "FAILED", or "not run" (--index-only: its JSON is absent and no run recorded a
    # failure); "" : from ``ok``
    status: str = ""

    @property
    def state(self) -> str:
        return self.status or ("ok" if self.ok else "FAILED")


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> dict:
    """An analysis' JSON output as a dict, or one :class:`InputError` line: never a hang on a
    FIFO, a traceback on a truncated, binary or absurdly nested file, or an unbounded read."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InputError(f"{path}: is {kind}, not a JSON file")
    if st.st_size > limit:
        raise InputError(f"{path}: {st.st_size:,} bytes, more than an analysis writes "
                        f"({limit:,} at most)")
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(limit + 1).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise InputError(f"{path}: not valid JSON ({type(e).__name__})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


def read_claims(job: Job, out: Path) -> list[tuple[str, str, Verdict]]:
    """Each claim of an analysis read from its JSON in ``out``: (paper claim, measured,
    verdict: True / False / None / :class:`~analyses.claims.Undecided`). A JSON that cannot be
    read raises :class:`InputError` (one line naming the file)."""
    return [c[:3] for c in read_claim_margins(job, out)]


class ClaimRead(NamedTuple):
    """One claim as its reader read it: the paper's claim, what was measured, the verdict, the
    :class:`~analyses.claims.Margin` (None where the reader gives none) and the replicate
    tests it decided with ((label, :class:`~analyses.stats.ReplicateTest`) pairs)."""

    paper: str
    measured: str
    verdict: Verdict
    margin: Margin | None
    tests: tuple = ()


def read_claim_margins(job: Job, out: Path) -> list[ClaimRead]:
    """:func:`read_claims` with each claim's :class:`~analyses.claims.Margin` and replicate
    tests (:class:`ClaimRead`)."""
    stems = job.stems
    data = {s: read_json(out / f"{s}.json") for s in stems}
    claims: list[ClaimRead] = []
    for c in job.figure.claims:
        margin, tests = None, ()
        try:
            read = c.measure(data if len(data) > 1 else data[stems[0]])
            if read is None:
                continue  # a claim of another level (Claim says why)
            measured, holds = read
            margin = getattr(read, "margin", None)
            tests = tuple(getattr(read, "tests", ()))
            if not isinstance(holds, Undecided) and holds is not None:
                holds = bool(holds)  # a numpy bool reads as the verdict it is
        except Exception as e:  # noqa: BLE001 - a claim that cannot be read is reported
            measured, holds = f"could not read: {type(e).__name__}: {e}", None
        claims.append(ClaimRead(c.paper, _bounded(str(measured)), holds,
                                margin if isinstance(margin, Margin) else None, tests))
    return claims


def margin_text(margin: Margin | None) -> str:
    """How the index writes a claim's margin ('—' where the reader gives none)."""
    return "—" if margin is None else str(margin)


def _bounded(text: str, limit: int = MAX_CLAIM_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def index_outcome(job: Job, out: Path, timing: dict) -> Outcome:
    """An outcome read back from ``out`` (for ``--index-only``): ok when every JSON is there
    and the last run did not record a failure."""
    missing = job.missing(out)
    ok = not missing and timing.get("ok", True) is True
    log = f"missing: {', '.join(missing)}" if missing else "" if ok else "failed in the last run"
    # none of its JSON here and no failure recorded: never run into this folder
    if missing and len(missing) == len(job.stems) and timing.get("ok") is not False:
        return Outcome(job, False, None, f"not run: no {', '.join(missing)} in {out}", [],
                       status="not run")
    seconds = timing.get("seconds")
    seconds = float(seconds) if isinstance(seconds, (int, float)) and math.isfinite(seconds) \
        else None
    read: list[ClaimRead] = []
    if not missing:
        try:
            read = read_claim_margins(job, out)
        except InputError as e:  # this figure is reported unreadable; the others still index
            ok, log = False, str(e)
    return Outcome(job, ok, seconds, log, [r[:3] for r in read], [r.margin for r in read],
                   [r.tests for r in read])


def read_timings(path: Path) -> dict:
    """The last run's timings, or {} (with one line saying why) when the file is unusable."""
    if not path.exists():
        return {}
    try:
        timings = read_json(path)
    except InputError as e:
        print(f"ignoring {e}", file=sys.stderr)
        return {}
    kept = {k: v for k, v in timings.items() if isinstance(v, dict) or k == "seed_offset"}
    return kept if level_of(timings) is None else {**kept, "level": level_of(timings)}


def _cell(text: str) -> str:
    """A Markdown table cell shown as text: a literal | (as in |b·c|) would split the cell, and
    HTML or a link in a claim's text (which the JSON supplies) must not become markup."""
    text = html.escape(text, quote=False)
    for ch in "|[]()`*_":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def _css_class(verdict: Verdict) -> str:
    if isinstance(verdict, Undecided):
        return "und"
    return "ok" if verdict else "bad" if verdict is False else ""


def _margins(o: Outcome) -> list[Margin | None]:
    """An outcome's margins, one per claim (None for each where it carries none)."""
    return list(o.margins) if len(o.margins) == len(o.claims) else [None] * len(o.claims)


def _tests(o: Outcome) -> list[tuple]:
    """An outcome's replicate tests, one tuple per claim (empty where it carries none)."""
    return list(o.tests) if len(o.tests) == len(o.claims) else [()] * len(o.claims)


def replicate_rows(o: Outcome) -> list[dict]:
    """Every replicate test of an outcome's claims, as index.json's ``replicates`` holds
    them: the claim, the test's label, and the test (method, unit, n, p, α and where it comes
    from, the design: the side the replicates point to and the count a run needs to decide it
    with 80 % assurance — analyses.stats.Design — and the test's inputs, to redo it)."""
    return [{"claim": p, "label": label, **t.to_dict()}
            for (p, _, _), tests in zip(o.claims, _tests(o), strict=True)
            for label, t in tests]


REPLICATE_HEAD = ("claim", "test", "unit", "n", "on the claim's side", "p (for / against)",
                  "α", "seeds a design asks for")


def _replicate_cells(r: dict) -> tuple[str, ...]:
    side = {"for": "for the claim", "against": "against it"}.get(r["power_side"] or "", "")
    why = (r.get("design") or {}).get("why") or "no side, or one replicate"
    need = f"{r['power_n']} ({side})" if r["power_n"] else f"— ({why})"
    return (r["label"], r["method"], r["unit"], str(r["n"]), r.get("agree") or f"{r['k']}/{r['n']}",
            f"{r['p']:.2g} / {r['p_against']:.2g}", f"{r['alpha']:.3g}", need)


def made_by() -> dict[str, str]:
    """What an index was made with: the date (UTC), the commit of this checkout ("-dirty":
    with changes not committed), the torch version and the machine (CPU, cores, GPU), so a
    reader can tell two indexes apart and what a figure's numbers depend on."""
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": _commit(), "torch": torch.__version__, "machine": _machine()}


def _commit() -> str:
    try:
        done = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty",
                               "--abbrev=12"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return done.stdout.strip() if done.returncode == 0 else "unknown (not a git checkout)"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    name = gpu_name()  # asked without initialising CUDA: this process forks the run's jobs
    gpu = f", GPU {name}" if name else ""
    return f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores{gpu}"


def models_of(job: Job, out: Path) -> list[dict] | None:
    """The checkpoints an analysis' JSON says it read (``models_used``, written by
    :func:`analyses.common.run_analysis`), over all its JSON files; None where a JSON does
    not record them (written before it did, or by hand) or cannot be read."""
    used: list[dict] = []
    for stem in job.stems:
        if not (out / f"{stem}.json").exists():
            continue  # not written: nothing of it is shown
        try:
            rec = read_json(out / f"{stem}.json").get("models_used")
        except InputError:
            return None
        if not isinstance(rec, list) or not all(isinstance(r, dict) for r in rec):
            return None
        used += [r for r in rec if r not in used]
    return used


def is_level_own(used: list[dict] | None, level: str) -> bool:
    """Whether every checkpoint of a result is one of ``level``'s own recipes: served by the
    zoo by recipe name at that level (``--train LEVEL``, ``zoo:NAME@LEVEL``), not a model given
    by path nor another level's. A result that records no checkpoints cannot show that."""
    return used is not None and all(isinstance(u.get("recipe"), str) and u.get("level") == level
                                    for u in used)


def model_text(used: list[dict] | None) -> str:
    """The checkpoints of a row, as the index names them: recipe (or path) and short hash."""
    if used is None:
        return "checkpoints not recorded (its JSON predates the record: rerun it)"
    if not used:
        return "no checkpoint (built in code or trained inside the analysis)"
    return ", ".join(f"{u.get('recipe') or u.get('path')}"
                     + (f"@{u['level']}" if u.get("recipe") and u.get("level") else "")
                     + f" (sha256 {u.get('sha256') or 'unknown'})" for u in used)


def _row(o: Outcome, out: Path, level: str) -> dict:
    """One analysis of the index, as index.json holds it. One that wrote no JSON here (not
    run, or failed before writing) is the plan's, under the level's header: it shows no
    result."""
    wrote = len(o.job.missing(out)) < len(o.job.stems)
    used = models_of(o.job, out) if wrote else []
    return {"analysis": o.job.name, "title": o.job.figure.title, "paper": o.job.figure.paper,
            "status": o.state, "seconds": o.seconds, "wrote": wrote, "checkpoints": used,
            "level_own": not wrote or is_level_own(used, level),
            "claims": [{"paper": p, "measured": m, "verdict": verdict_text(h),
                        "margin": margin_text(g)}
                       for (p, m, h), g in zip(o.claims, _margins(o), strict=True)],
            "replicates": replicate_rows(o)}


def write_index(outcomes: list[Outcome], out: Path, level: str, note: str = "",
                made: dict[str, str] | None = None) -> None:
    """``index.md``, ``index.html`` and ``index.json`` in ``out``: what made them
    (:func:`made_by`), then each analysis under the level's header when every checkpoint it
    read is the level's own recipe (:func:`is_level_own`), else under a header of its own
    that says so: a user's model in the folder is never shown as the level's result."""
    made = made or made_by()
    rows = [_row(o, out, level) for o in outcomes]
    own = [(o, r) for o, r in zip(outcomes, rows, strict=True) if r["level_own"]]
    other = [(o, r) for o, r in zip(outcomes, rows, strict=True) if not r["level_own"]]
    stamp = (f"Made {made['date']} from commit {made['commit']} with torch {made['torch']} on "
             f"{made['machine']}.")
    scale = scale_text(level, [o.job.figure for o in outcomes])
    md = [f"# Reproduced figures ({level} level)", "", _cell(stamp), "",
          "Each figure comes from a real run of the analysis named; the claim column is the "
          "paper's, the measured column is ours; \"not decided at this level\" says why this "
          "level cannot decide a claim; the margin is how far the measured value sits from what "
          "decides the claim (> 0: on the side where it holds), in the claim's units."
          + (f" {note}" if note else ""), ""]
    if scale:
        md += [_cell(scale), ""]
    sections = [(None, own)]
    if other:
        sections.append((f"Other results in this folder: not the {level} level's recipes",
                         other))
    rows_html = []
    for header, part in sections:
        if header:
            md += [f"# {header}", "", "Each was computed from a checkpoint the plan does not "
                   f"train at {level} (a model given by path, another level's, or one not "
                   "recorded): shown for what it is, never as the level's result.", ""]
            rows_html.append(f"<h1>{html.escape(header)}</h1>")
        for o, r in part:
            md += _md_section(o, r, out)
            rows_html.append(_html_section(o, r, out))
    write_atomic(out / "index.md", "\n".join(md))
    write_atomic(out / "index.json", json.dumps(
        {"level": level, "made": made, "note": note, "scale": scale,
         "results": [r for _, r in own], "other": [r for _, r in other]}, indent=1))
    write_atomic(out / "index.html",
        "<!doctype html><meta charset='utf-8'><title>seqprobe figures</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:auto}td,th{border:1px solid #ccc;"
        "padding:4px}table{border-collapse:collapse}.ok{color:green}.bad{color:#b00}"
        ".und{color:#a60}</style>"
        f"<h1>Reproduced figures ({level} level)</h1><p class='made'>{html.escape(stamp)}</p>"
        f"<p>{html.escape(note)}</p>"
        + (f"<p class='scale'>{html.escape(scale)}</p>" if scale else "") +
        f"{''.join(rows_html)}")


def _status(o: Outcome, html_: bool = False) -> str:
    if o.state == "FAILED":
        return "<b>FAILED</b>" if html_ else "**FAILED**"
    return o.state


def _md_section(o: Outcome, r: dict, out: Path) -> list[str]:
    j, fig = o.job, o.job.figure
    took = "" if o.seconds is None else f" in {o.seconds:.0f} s"
    md = [f"## {fig.title}", f"*{fig.paper}* — `python -m analyses.{j.name}` — "
          f"{_status(o)}{took}", ""]
    if r["wrote"]:
        md += [f"Checkpoints: {_cell(model_text(r['checkpoints']))}", ""]
    for stem in j.stems:
        if (out / f"{stem}.png").exists() and o.state != "not run":
            md.append(f"![{stem}]({stem}.png)")
    if o.claims:
        md += ["", "| paper's claim | measured here | verdict | margin |", "|---|---|---|---|"]
        md += [f"| {_cell(p)} | {_cell(m)} | {_cell(verdict_text(h))} | "
               f"{_cell(margin_text(g))} |"
               for (p, m, h), g in zip(o.claims, _margins(o), strict=True)]
    if r["replicates"]:
        md += ["", "Replicates: each test counts independent replicates (the unit), never "
               "pooled evaluations of shared inputs; the last column is a design's count (80 % "
               "assurance over what the effect may be, at the α the verdict uses), never "
               "power from the replicates' own spread taken as known.", "",
               "| " + " | ".join(REPLICATE_HEAD) + " |", "|" + "---|" * len(REPLICATE_HEAD)]
        md += ["| " + " | ".join(_cell(c) for c in _replicate_cells(x)) + " |"
               for x in r["replicates"]]
    if o.state == "FAILED":
        md += ["", "```", o.log_tail.strip()[-1500:], "```"]
    md.append("")
    return md


def _html_section(o: Outcome, r: dict, out: Path) -> str:
    j, fig = o.job, o.job.figure
    took = "" if o.seconds is None else f" in {o.seconds:.0f} s"
    imgs = "".join(f'<img src="{stem}.png" style="max-width:100%">' for stem in j.stems
                   if (out / f"{stem}.png").exists() and o.state != "not run")
    claims = "".join(
        f"<tr><td>{html.escape(p)}</td><td>{html.escape(m)}</td>"
        f"<td class='{_css_class(h)}'>{html.escape(verdict_text(h))}</td>"
        f"<td>{html.escape(margin_text(g))}</td></tr>"
        for (p, m, h), g in zip(o.claims, _margins(o), strict=True))
    reps = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _replicate_cells(x))
                   + "</tr>" for x in r["replicates"])
    models = ("" if not r["wrote"] else
              f"<p class='models'>Checkpoints: {html.escape(model_text(r['checkpoints']))}</p>")
    return (f"<section><h2>{html.escape(fig.title)}</h2><p><i>{html.escape(fig.paper)}</i> — "
            f"<code>python -m analyses.{j.name}</code> — {_status(o, True)}{took}</p>{models}"
            f"{imgs}"
            + ("<table><tr><th>paper's claim</th><th>measured here</th><th>verdict</th>"
               f"<th>margin</th></tr>{claims}</table>" if claims else "")
            + ("<table class='replicates'><tr>" + "".join(f"<th>{html.escape(h)}</th>"
               for h in REPLICATE_HEAD) + f"</tr>{reps}</table>" if reps else "")
            + (f"<pre>{html.escape(o.log_tail[-1500:])}</pre>" if o.state == "FAILED" else "")
            + "</section>")
