"""Reading what the jobs wrote: each analysis' JSON, its claims, the last run's timings, and
the index (``index.md`` / ``index.html``) that shows each figure beside the paper's claim."""

from __future__ import annotations

import html
import json
import math
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from analyses.claims import Margin, Undecided, Verdict, verdict_text
from analyses.reproduce.plan import Job
from seqprobe.atomic import write_atomic
from seqprobe.errors import InputError

MAX_JSON_BYTES = 64 << 20  # an analysis JSON is kilobytes; the index reads no more than this
MAX_CLAIM_CHARS = 2000  # bound on one claim cell the index copies from an analysis' JSON

# Each level's scale against the papers', the index's first lines: a verdict is read at this
# scale, and a claim that needs the papers' says "not decided at this level" with its reason.
# Settings only (what the recipes train), kept beside the levels the plan runs.
PAPERS_SCALE = ("the papers: copy models of ~160M parameters on strings of length <= 300 "
                "(copy Fig. 1a; <= 30 in Fig. 9b), lookup strings <= 30 over 26 letters "
                "trained 15 epochs; Markov models at Table 7's 10,000 steps × batch 64; STU "
                "at T = 256 trained at T^q for q in {1/2, 5/8, 3/4, 7/8}; memorization with "
                "BERT (6 layers) on 14,000 sentences")
LEVEL_SCALE = {
    "quick": "quick (CPU minutes per model): copy transformers of ~0.4M parameters and an "
             "LSTM of ~1M on strings of length <= 20, one seed, the GSSMs far from trained; "
             "prefix lookup fine-tuned from them; the Mamba-2 Markov models at 1,500-2,000 "
             "steps × batch 32; 3 STU seeds at q = 1/2, 3/4; memorization on five dataset "
             "sizes",
    "medium": "medium (a 2-core CPU, about half an hour): parameter-matched copy models of "
              "~100k parameters on strings of length <= 4 and <= 6, 3 seeds; prefix lookup "
              "over 8 letters, strings 5-20, 2 seeds; the paper's Markov model at 2,700 steps "
              "× batch 16 (27 % of Table 7's steps), 3 seeds; STU trained to convergence, 8 "
              "seeds per training length; memorization N = 16...512",
    "large": "large (one 80 GB GPU and 16 CPU cores, about an hour): the smallest settings "
             "that decide each claim — parameter-matched copy models of ~1M parameters on "
             "strings of length <= 10, 20, 30 over 26 letters, 3 seeds; prefix lookup over 26 "
             "letters, strings 5-30 packed to 420, 2 seeds; Table 7 in full for the Markov "
             "hold-out (d = N 8, 16, 32, 5 seeds; batch 16 without a GPU); STU at q = 1/2, "
             "5/8, 3/4, 7/8, 16 seeds, 2 lrs; memorization's largest N per width, 8 widths",
    "paper": "paper: the papers' own settings (GPU-sized; see README 'Scaling up')",
}


def scale_text(level: str) -> str:
    """The index's scale line of ``level`` against the papers' ('' for a level not listed)."""
    own = LEVEL_SCALE.get(level)
    return f"Scale of this level — {own}. Against {PAPERS_SCALE}." if own else ""


@dataclass
class Outcome:
    job: Job
    ok: bool
    seconds: float | None  # None: not known (an --index-only read of a run without timings)
    log_tail: str
    claims: list[tuple[str, str, Verdict]]  # (paper claim, our result, verdict)
    margins: list[Margin | None] = field(default_factory=list)  # each claim's, in order


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
    return [(p, m, h) for p, m, h, _ in read_claim_margins(job, out)]


def read_claim_margins(job: Job, out: Path) -> list[tuple[str, str, Verdict, Margin | None]]:
    """:func:`read_claims` with each claim's :class:`~analyses.claims.Margin` (None where its
    reader gives none)."""
    stems = job.stems
    data = {s: read_json(out / f"{s}.json") for s in stems}
    claims: list[tuple[str, str, Verdict, Margin | None]] = []
    for c in job.figure.claims:
        margin = None
        try:
            read = c.measure(data if len(data) > 1 else data[stems[0]])
            if read is None:
                continue  # a claim of another level (Claim says why)
            measured, holds = read
            margin = getattr(read, "margin", None)
            if not isinstance(holds, Undecided) and holds is not None:
                holds = bool(holds)  # a numpy bool reads as the verdict it is
        except Exception as e:  # noqa: BLE001 - a claim that cannot be read is reported
            measured, holds = f"could not read: {type(e).__name__}: {e}", None
        claims.append((c.paper, _bounded(str(measured)), holds,
                       margin if isinstance(margin, Margin) else None))
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
    seconds = timing.get("seconds")
    seconds = float(seconds) if isinstance(seconds, (int, float)) and math.isfinite(seconds) \
        else None
    read: list[tuple[str, str, Verdict, Margin | None]] = []
    if not missing:
        try:
            read = read_claim_margins(job, out)
        except InputError as e:  # this figure is reported unreadable; the others still index
            ok, log = False, str(e)
    return Outcome(job, ok, seconds, log, [r[:3] for r in read], [r[3] for r in read])


def read_timings(path: Path) -> dict:
    """The last run's timings, or {} (with one line saying why) when the file is unusable."""
    if not path.exists():
        return {}
    try:
        timings = read_json(path)
    except InputError as e:
        print(f"ignoring {e}", file=sys.stderr)
        return {}
    return {k: v for k, v in timings.items()
            if isinstance(v, dict) or k in ("preset", "seed_offset")}


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


def write_index(outcomes: list[Outcome], out: Path, preset: str, note: str = "") -> None:
    scale = scale_text(preset)
    md = [f"# Reproduced figures ({preset} preset)", "",
          "Each figure comes from a real run of the analysis named; the claim column is the "
          "paper's, the measured column is ours; \"not decided at this level\" says why this "
          "level cannot decide a claim; the margin is how far the measured value sits from what "
          "decides the claim (> 0: on the side where it holds), in the claim's units."
          + (f" {note}" if note else ""), ""]
    if scale:
        md += [_cell(scale), ""]
    rows_html = []
    for o in outcomes:
        j, fig = o.job, o.job.figure
        took = "" if o.seconds is None else f" in {o.seconds:.0f} s"
        md += [f"## {fig.title}", f"*{fig.paper}* — `python -m analyses.{j.name}` — "
               f"{'ok' if o.ok else '**FAILED**'}{took}", ""]
        for stem in j.stems:
            if (out / f"{stem}.png").exists():
                md.append(f"![{stem}]({stem}.png)")
        margins = _margins(o)
        if o.claims:
            md += ["", "| paper's claim | measured here | verdict | margin |",
                   "|---|---|---|---|"]
            md += [f"| {_cell(p)} | {_cell(m)} | {_cell(verdict_text(h))} | "
                   f"{_cell(margin_text(g))} |" for (p, m, h), g in zip(o.claims, margins,
                                                                           strict=True)]
        if not o.ok:
            md += ["", "```", o.log_tail.strip()[-1500:], "```"]
        md.append("")
        imgs = "".join(f'<img src="{stem}.png" style="max-width:100%">'
                       for stem in j.stems if (out / f"{stem}.png").exists())
        claims = "".join(
            f"<tr><td>{html.escape(p)}</td><td>{html.escape(m)}</td>"
            f"<td class='{_css_class(h)}'>{html.escape(verdict_text(h))}</td>"
            f"<td>{html.escape(margin_text(g))}</td></tr>"
            for (p, m, h), g in zip(o.claims, margins, strict=True))
        rows_html.append(
            f"<section><h2>{html.escape(fig.title)}</h2><p><i>{html.escape(fig.paper)}</i> — "
            f"<code>python -m analyses.{j.name}</code> — {'ok' if o.ok else '<b>FAILED</b>'}"
            f"{took}</p>{imgs}"
            + ("<table><tr><th>paper's claim</th><th>measured here</th><th>verdict</th>"
               f"<th>margin</th></tr>"
               f"{claims}</table>" if claims else "")
            + ("" if o.ok else f"<pre>{html.escape(o.log_tail[-1500:])}</pre>") + "</section>")
    write_atomic(out / "index.md", "\n".join(md))
    write_atomic(out / "index.html",
        "<!doctype html><meta charset='utf-8'><title>seqprobe figures</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:auto}td,th{border:1px solid #ccc;"
        "padding:4px}table{border-collapse:collapse}.ok{color:green}.bad{color:#b00}"
        ".und{color:#a60}</style>"
        f"<h1>Reproduced figures ({preset} preset)</h1><p>{html.escape(note)}</p>"
        + (f"<p class='scale'>{html.escape(scale)}</p>" if scale else "") +
        f"{''.join(rows_html)}")
