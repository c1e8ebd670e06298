"""Reading what the jobs wrote: each analysis' JSON, its claims, the last run's timings, and
the index (``index.md`` / ``index.html``) that shows each figure beside the paper's claim."""

from __future__ import annotations

import html
import json
import math
import os
import platform
import stat
import sys
from collections.abc import Callable, Mapping
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
from seqprobe.sweep import Backend, run_command
from seqprobe.sweep.commands import Ended, run_commands

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


def outcome_of(ended: Ended, out: Path) -> Outcome:
    """A job's :class:`Outcome` from how its process ended: an analysis that exited 0 but
    wrote no JSON, or whose claims cannot be read, failed."""
    job = ended.command
    if ended.status == "not run":
        return Outcome(job, False, 0.0, ended.log, [], status="not run")
    ok, log = ended.ok, ended.log
    missing = job.missing(out)
    if ok and missing:
        ok, log = False, log + f"\n(no {', '.join(missing)} written in {out})"
    read = []
    if ok and job.figure:
        try:
            read = read_claim_margins(job, out)
        except InputError as e:
            ok, log = False, log + f"\n({e})"
    return Outcome(job, ok, ended.seconds, log[-3000:], [c[:3] for c in read],
                   [c.margin for c in read], [c.tests for c in read])


def run_plan(jobs: list[Job], out: Path, workers: int = 1, timeout: float = 3600.0,
             on_start: Callable[[list[str]], None] = lambda names: None,
             on_done: Callable[[Outcome], None] = lambda o: None, poll: float = 0.2,
             expected: Mapping[str, float] | None = None,
             backend: Backend | None = None) -> list[Outcome]:
    """The plan's jobs on the one runner (:func:`seqprobe.sweep.commands.run_commands`), their
    logs in ``out/logs``, each ending as an :class:`Outcome`."""
    return run_commands(jobs, out / "logs", workers, timeout, on_start, on_done, poll,
                        expected, backend, outcome=lambda e: outcome_of(e, out))


def log_path(job: Job, out: Path) -> Path:
    """Where a job's log is (a second run into the same folder while this one holds it writes
    ``NAME.PID.log`` beside it)."""
    return out / "logs" / f"{job.log_name}.log"


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


RELATION_WORDS = {">=": "at least", ">": "more than", "<=": "at most", "<": "less than"}


def margin_text(margin: Margin | None) -> str:
    """How the index writes a claim's margin, in words ('—' where the reader gives none): the
    measured value, what the claim needs, and how far inside (or short of) it the value is —
    "largest error 0; the claim needs at most 0: exactly at the limit", where the symbols
    ("0 vs <= 0: +0") said nothing."""
    if margin is None:
        return "—"
    unit = f" {margin.unit}" if margin.unit else ""
    ci = (f" (95 % CI {margin.interval[0]:.3g}–{margin.interval[1]:.3g})" if margin.interval
          else "")
    d = margin.distance
    side = (f"{d:.3g}{unit} to spare" if d > 0 else "exactly at the limit" if d == 0
            else f"{-d:.3g}{unit} short")
    return (f"{margin.quantity} {margin.value:.3g}{unit}{ci}; the claim needs "
            f"{RELATION_WORDS[margin.relation]} {margin.threshold:.3g}{unit}: {side}")


def number_text(margin: Margin | None) -> str:
    """The summary's one number of a claim: its margin's measured value ('—' without one)."""
    if margin is None:
        return "—"
    return f"{margin.quantity} {margin.value:.3g}" + (f" {margin.unit}" if margin.unit else "")


VERDICT_WORDS = ("holds", "does not hold", "not decided", "n/a")  # the summary's columns


def verdict_word(verdict: Verdict) -> str:
    """A verdict in one of :data:`VERDICT_WORDS` (the reason of "not decided" is the row's)."""
    if isinstance(verdict, Undecided):
        return "not decided"
    return verdict_text(verdict)


def paper_of(figure) -> str:
    """The paper a figure belongs to, as the summary heads it: "Copy paper" of "Copy paper
    Fig. 1b" (the whole reference where it names no "… paper")."""
    ref = figure.paper
    return ref[: ref.index(" paper") + len(" paper")] if " paper" in ref else ref


def anchor(job: Job) -> str:
    """The id of an analysis' section in both indexes (its module name: unique, stable)."""
    return job.name.replace("/", "-")


def shown_claims(o: Outcome) -> list[tuple[str, str, Verdict, Margin | None]]:
    """The claim rows an outcome shows: (claim, measured, verdict, margin), a row that repeats
    one above it (the same claim, measurement and verdict) once. A measurement that is the
    rows' above read together (it holds two or more of their measured texts whole) names them
    instead of repeating them."""
    rows: list[tuple[str, str, Verdict, Margin | None]] = []
    for (p, m, h), g in zip(o.claims, _margins(o), strict=True):
        if any((p, m, verdict_text(h)) == (q, n, verdict_text(k)) for q, n, k, _ in rows):
            continue
        earlier = [n for _, n, _, _ in rows if len(n) > 20 and n in m]
        if len(earlier) >= 2:
            rest = m
            for n in earlier:
                rest = rest.replace(n, "")
            rest = rest.strip(" ;,.")
            m = "the rows above, read together" + (f"; {rest}" if rest else "")
        rows.append((p, m, h, g))
    return rows


def summary_counts(outcomes: list[Outcome]) -> dict[str, int]:
    """How many shown claim rows of ``outcomes`` have each of :data:`VERDICT_WORDS`."""
    counts = dict.fromkeys(VERDICT_WORDS, 0)
    for o in outcomes:
        for _, _, h, _ in shown_claims(o):
            counts[verdict_word(h)] += 1
    return counts


def counts_text(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return (f"{total} claim{'s' if total != 1 else ''}: " + ", ".join(
        f"{n} {'hold' if w == 'holds' and n != 1 else w}" if w != "does not hold"
        else f"{n} {'do' if n != 1 else 'does'} not hold" for w, n in counts.items()))


def _short(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def summary_groups(outcomes: list[Outcome]) -> list[tuple[str, list[Outcome]]]:
    """The outcomes by paper, papers in the order they first come."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(paper_of(o.job.figure), []).append(o)
    return list(groups.items())


def _md_summary(outcomes: list[Outcome]) -> list[str]:
    counts = summary_counts(outcomes)
    md = ["## Summary", "", f"{counts_text(counts)} (the rows below, each once). "
          + _not_shown(outcomes), ""]
    for paper, part in summary_groups(outcomes):
        md += [f"### {_cell(paper)}", "", "| claim | verdict | number | section |",
               "|---|---|---|---|"]
        for o in part:
            link = f"[{_cell(_short(o.job.figure.title, 50))}](#{anchor(o.job)})"
            rows = shown_claims(o)
            if not rows:
                md.append(f"| — | {_cell(o.state)} | — | {link} |")
            md += [f"| {_cell(_short(p))} | {verdict_word(h)} | {_cell(number_text(g))} | "
                   f"{link} |" for p, _, h, g in rows]
        md.append("")
    return md


def _not_shown(outcomes: list[Outcome]) -> str:
    bad = [o for o in outcomes if o.state != "ok"]
    if not bad:
        return f"All {len(outcomes)} analyses ran."
    return (f"{len(bad)} of {len(outcomes)} analyses have no claims to count: "
            + ", ".join(f"{o.job.name} ({o.state})" for o in bad) + ".")


def _html_summary(outcomes: list[Outcome]) -> str:
    counts = summary_counts(outcomes)
    out = [f"<h2 id='summary'>Summary</h2><p class='counts'>{html.escape(counts_text(counts))}"
           f" (the rows below, each once). {html.escape(_not_shown(outcomes))}</p>"]
    for paper, part in summary_groups(outcomes):
        rows = []
        for o in part:
            link = (f"<a href='#{anchor(o.job)}'>{html.escape(_short(o.job.figure.title, 50))}"
                    "</a>")
            claims = shown_claims(o)
            if not claims:
                rows.append(f"<tr><td>—</td><td>{html.escape(o.state)}</td><td>—</td>"
                            f"<td>{link}</td></tr>")
            rows += [f"<tr><td>{html.escape(_short(p))}</td><td class='{_css_class(h)}'>"
                     f"{verdict_word(h)}</td><td>{html.escape(number_text(g))}</td>"
                     f"<td>{link}</td></tr>" for p, _, h, g in claims]
        out.append(f"<h3>{html.escape(paper)}</h3><table class='summary'><tr><th>claim</th>"
                   "<th>verdict</th><th>number</th><th>section</th></tr>" + "".join(rows)
                   + "</table>")
    return "".join(out)


def _html_contents(sections: list) -> str:
    """The HTML index's table of contents: each section, under its paper."""
    items = ["<li><a href='#summary'>Summary</a></li>"]
    for header, part in sections:
        if header:
            items.append(f"<li><a href='#other'>{html.escape(header)}</a></li>")
        for paper, group in summary_groups([o for o, _ in part]):
            links = "".join(f"<li><a href='#{anchor(o.job)}'>{html.escape(o.job.figure.title)}"
                            "</a></li>" for o in group)
            items.append(f"<li>{html.escape(paper)}<ul>{links}</ul></li>")
    return f"<nav><h2>Contents</h2><ul>{''.join(items)}</ul></nav>"


FOLD_CHARS = 240  # an HTML cell longer than this is folded (<details>) after its start


def _fold(text: str) -> str:
    """``text`` escaped for HTML, folded into ``<details>`` when longer than
    :data:`FOLD_CHARS`: its start shown, the rest one click away."""
    if len(text) <= FOLD_CHARS:
        return html.escape(text)
    return (f"<details><summary>{html.escape(_short(text, 160))}</summary>"
            f"{html.escape(text)}</details>")


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


def shown_replicates(r: dict) -> list[dict]:
    """The replicate rows the index tables: tests of two or more replicates (one replicate
    decides nothing and says so in its claim's verdict; index.json keeps every test)."""
    return [x for x in r["replicates"] if isinstance(x.get("n"), int) and x["n"] >= 2]


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
        done = run_command(["git", "-C", str(REPO), "describe", "--always", "--dirty",
                            "--abbrev=12"], timeout=10)
    except OSError:
        return "unknown (no git)"
    if done.stopped_by:
        return "unknown (git timed out)"
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
                        "margin": margin_text(g),
                        "margin_values": None if g is None else g.to_dict()}
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
          "level cannot decide a claim; the margin gives the measured value, what the claim needs "
          "and how far inside it (to spare) or outside it (short) the value is, in the "
          "claim's units."
          + (f" {note}" if note else ""), ""]
    if scale:
        md += [_cell(scale), ""]
    md += _md_summary([o for o, _ in own])
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
            rows_html.append(f"<h1 id='other'>{html.escape(header)}</h1>")
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
        "padding:4px;vertical-align:top}table{border-collapse:collapse}.ok{color:green}"
        ".bad{color:#b00}.und{color:#a60}summary{cursor:pointer}</style>"
        f"<h1>Reproduced figures ({level} level)</h1><p class='made'>{html.escape(stamp)}</p>"
        f"<p>{html.escape(note)}</p>"
        + (f"<p class='scale'>{html.escape(scale)}</p>" if scale else "")
        + _html_contents(sections) + _html_summary([o for o, _ in own])
        + f"{''.join(rows_html)}")


def _status(o: Outcome, html_: bool = False) -> str:
    if o.state == "FAILED":
        return "<b>FAILED</b>" if html_ else "**FAILED**"
    return o.state


def _md_section(o: Outcome, r: dict, out: Path) -> list[str]:
    j, fig = o.job, o.job.figure
    took = "" if o.seconds is None else f" in {o.seconds:.0f} s"
    md = [f'<a id="{anchor(j)}"></a>', "", f"## {fig.title}",
          f"*{fig.paper}* — `python -m analyses.{j.name}` — {_status(o)}{took}", ""]
    if r["wrote"]:
        md += [f"Checkpoints: {_cell(model_text(r['checkpoints']))}", ""]
    for stem in j.stems:
        if (out / f"{stem}.png").exists() and o.state != "not run":
            md.append(f"![{stem}]({stem}.png)")
    if o.claims:
        md += ["", "| paper's claim | measured here | verdict | margin |", "|---|---|---|---|"]
        md += [f"| {_cell(p)} | {_cell(m)} | {_cell(verdict_text(h))} | "
               f"{_cell(margin_text(g))} |" for p, m, h, g in shown_claims(o)]
    replicates = shown_replicates(r)
    if replicates:
        md += ["", "Replicates: each test counts independent replicates (the unit), never "
               "pooled evaluations of shared inputs; the last column is a design's count (80 % "
               "assurance over what the effect may be, at the α the verdict uses), never "
               "power from the replicates' own spread taken as known.", "",
               "| " + " | ".join(REPLICATE_HEAD) + " |", "|" + "---|" * len(REPLICATE_HEAD)]
        md += ["| " + " | ".join(_cell(c) for c in _replicate_cells(x)) + " |"
               for x in replicates]
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
        f"<tr><td>{_fold(p)}</td><td>{_fold(m)}</td>"
        f"<td class='{_css_class(h)}'>{_fold(verdict_text(h))}</td>"
        f"<td>{_fold(margin_text(g))}</td></tr>" for p, m, h, g in shown_claims(o))
    reps = "".join("<tr>" + "".join(f"<td>{_fold(c)}</td>" for c in _replicate_cells(x))
                   + "</tr>" for x in shown_replicates(r))
    models = ("" if not r["wrote"] else
              f"<p class='models'>Checkpoints: {html.escape(model_text(r['checkpoints']))}</p>")
    return (f"<section id='{anchor(j)}'><h2>{html.escape(fig.title)}</h2>"
            f"<p><i>{html.escape(fig.paper)}</i> — "
            f"<code>python -m analyses.{j.name}</code> — {_status(o, True)}{took}</p>{models}"
            f"{imgs}"
            + ("<table><tr><th>paper's claim</th><th>measured here</th><th>verdict</th>"
               f"<th>margin</th></tr>{claims}</table>" if claims else "")
            + ("<table class='replicates'><tr>" + "".join(f"<th>{html.escape(h)}</th>"
               for h in REPLICATE_HEAD) + f"</tr>{reps}</table>" if reps else "")
            + (f"<details open><summary>log</summary><pre>{html.escape(o.log_tail[-1500:])}"
               "</pre></details>" if o.state == "FAILED" else "")
            + "</section>")
