"""Reading what the jobs wrote: each analysis' JSON, its claims, the last run's timings, and
the index (``index.md`` / ``index.html``) that shows each figure beside the paper's claim."""

from __future__ import annotations

import html
import json
import math
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from analyses.reproduce.plan import Job
from tasks.atomic import write_atomic
from tasks.base import TaskError

MAX_JSON_BYTES = 64 << 20  # an analysis JSON is kilobytes; the index reads no more than this
MAX_CLAIM_CHARS = 2000  # bound on one claim cell the index copies from an analysis' JSON


@dataclass
class Outcome:
    job: Job
    ok: bool
    seconds: float | None  # None: not known (an --index-only read of a run without timings)
    log_tail: str
    claims: list[tuple[str, str, bool | None]]  # (paper claim, our result, holds)


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


def read_claims(job: Job, out: Path) -> list[tuple[str, str, bool | None]]:
    """Each claim of an analysis read from its JSON in ``out``: (paper claim, measured, holds).
    A JSON that cannot be read raises :class:`TaskError` (one line naming the file)."""
    stems = job.stems
    data = {s: read_json(out / f"{s}.json") for s in stems}
    claims: list[tuple[str, str, bool | None]] = []
    for c in job.figure.claims:
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


def index_outcome(job: Job, out: Path, timing: dict) -> Outcome:
    """An outcome read back from ``out`` (for ``--index-only``): ok when every JSON is there
    and the last run did not record a failure."""
    missing = job.missing(out)
    ok = not missing and timing.get("ok", True) is True
    log = f"missing: {', '.join(missing)}" if missing else "" if ok else "failed in the last run"
    seconds = timing.get("seconds")
    seconds = float(seconds) if isinstance(seconds, (int, float)) and math.isfinite(seconds) \
        else None
    claims: list[tuple[str, str, bool | None]] = []
    if not missing:
        try:
            claims = read_claims(job, out)
        except TaskError as e:  # this figure is reported unreadable; the others still index
            ok, log = False, str(e)
    return Outcome(job, ok, seconds, log, claims)


def read_timings(path: Path) -> dict:
    """The last run's timings, or {} (with one line saying why) when the file is unusable."""
    if not path.exists():
        return {}
    try:
        timings = read_json(path)
    except TaskError as e:
        print(f"ignoring {e}", file=sys.stderr)
        return {}
    return {k: v for k, v in timings.items() if isinstance(v, dict) or k == "preset"}


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
        j, fig = o.job, o.job.figure
        took = "" if o.seconds is None else f" in {o.seconds:.0f} s"
        md += [f"## {fig.title}", f"*{fig.paper}* — `python -m analyses.{j.name}` — "
               f"{'ok' if o.ok else '**FAILED**'}{took}", ""]
        for stem in j.stems:
            if (out / f"{stem}.png").exists():
                md.append(f"![{stem}]({stem}.png)")
        if o.claims:
            md += ["", "| paper's claim | measured here | verdict |", "|---|---|---|"]
            md += [f"| {_cell(p)} | {_cell(m)} | {mark[h]} |" for p, m, h in o.claims]
        if not o.ok:
            md += ["", "```", o.log_tail.strip()[-1500:], "```"]
        md.append("")
        imgs = "".join(f'<img src="{stem}.png" style="max-width:100%">'
                       for stem in j.stems if (out / f"{stem}.png").exists())
        claims = "".join(
            f"<tr><td>{html.escape(p)}</td><td>{html.escape(m)}</td>"
            f"<td class='{'ok' if h else 'bad' if h is False else ''}'>{mark[h]}</td></tr>"
            for p, m, h in o.claims)
        rows_html.append(
            f"<section><h2>{html.escape(fig.title)}</h2><p><i>{html.escape(fig.paper)}</i> — "
            f"<code>python -m analyses.{j.name}</code> — {'ok' if o.ok else '<b>FAILED</b>'}"
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
