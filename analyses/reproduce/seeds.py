"""Each claim across seeds: ``python -m analyses.reproduce.seeds OUT_0 OUT_1 OUT_2 ...``.

Reads the claims (with their margins) of every analysis of the plan from the output folders of
runs of one level with different seeds (``reproduce --seed-offset K --out OUT_K``) and writes
one table, claim × seed → measured value and verdict, with whether the verdict is the same in
every seed and the smallest margin (``--md FILE``, else stdout). The values are those of the
claims' own margins, so a claim reads the same here as in each run's index.

Each folder is one seed: a folder named twice (by any spelling), two folders of the same seed
offset, folders of different levels, or a folder with no analysis results are refused in one
line (each run records its level and seed offset in ``reproduce_timings.json``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from analyses.claims import Undecided, verdict_text
from analyses.reproduce.index import read_claim_margins, read_timings
from analyses.reproduce.plan import PLAN, Job, figure_of
from seqprobe.atomic import check_output_file, write_atomic
from seqprobe.cli import OneLineParser, run_cli
from seqprobe.config import check
from seqprobe.errors import InputError


def short_verdict(verdict) -> str:
    if isinstance(verdict, Undecided):
        return "not decided"
    return verdict_text(verdict)


def seed_rows(outs: list[Path]) -> list[dict]:
    """One row per claim read in any of ``outs``: its analysis, claim, and per folder
    ``(margin or None, verdict)`` (absent where that run has no readable JSON for it)."""
    rows: dict[tuple[str, str], dict] = {}
    for i, out in enumerate(outs):
        for name in PLAN:
            job = Job(name, (), figure=figure_of(name))
            if job.missing(out):
                continue
            try:
                read = read_claim_margins(job, out)
            except InputError:
                continue
            for paper, _, verdict, margin, _ in read:
                row = rows.setdefault((name, paper), {"analysis": name, "claim": paper,
                                                      "runs": {}})
                row["runs"][i] = (margin, verdict)
    return list(rows.values())


def table(outs: list[Path], labels: list[str]) -> str:
    """The Markdown table of :func:`seed_rows`."""
    head = ["analysis", "claim", *labels, "same verdict in every seed?", "smallest margin"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in seed_rows(outs):
        cells, verdicts, distances = [], [], []
        for i in range(len(outs)):
            if i not in row["runs"]:
                cells.append("—")
                continue
            margin, verdict = row["runs"][i]
            verdicts.append(short_verdict(verdict))
            if margin is None:
                cells.append(short_verdict(verdict))
            else:
                distances.append(margin)
                cells.append(f"{margin.value:.3g} ({short_verdict(verdict)})")
        same = ("yes" if len(set(verdicts)) == 1 and len(verdicts) == len(outs)
                else "NO" if len(set(verdicts)) > 1 else "not in every run")
        low = min(distances, key=lambda m: m.distance, default=None)
        smallest = ("—" if low is None else
                    f"{low.distance:+.3g}{' ' + low.unit if low.unit else ''} "
                    f"({low.quantity} {low.relation} {low.threshold:.3g})")
        claim = row["claim"].replace("|", "\\|")
        lines.append("| " + " | ".join([row["analysis"], claim, *cells, same,
                                         smallest.replace("|", "\\|")]) + " |")
    return "\n".join(lines) + "\n"


def check_runs(outs: list[Path]) -> list[int | None]:
    """Each folder a distinct run of one level with results, or one line; their seed offsets
    (None where a folder's run did not record one)."""
    seen: dict[Path, Path] = {}
    for o in outs:
        check(o.is_dir(), f"{o}: not a folder of a reproduce run")
        real = o.resolve()
        check(real not in seen, f"{o} and {seen.get(real)} are the same folder: one run, "
              "not two seeds")
        seen[real] = o
        check(any(not Job(n, (), figure=figure_of(n)).missing(o) for n in PLAN),
              f"{o}: no analysis results in it (not a reproduce run's output folder)")
    records = [read_timings(o / "reproduce_timings.json") for o in outs]
    levels = {r["level"]: o for r, o in zip(records, outs, strict=True) if "level" in r}
    check(len(levels) <= 1, "folders of different levels: " + ", ".join(
        f"{o} ({lv})" for lv, o in levels.items()) + "; compare seeds of one level")
    offsets = [r.get("seed_offset") if isinstance(r.get("seed_offset"), int) else None
               for r in records]
    for i, k in enumerate(offsets):
        twin = next((outs[j] for j in range(i) if k is not None and offsets[j] == k), None)
        check(twin is None, f"{twin} and {outs[i]} are both runs of seed offset {k}: the "
              "same seeds, not two (reproduce --seed-offset K --out OUT_K)")
    return offsets


def body(argv: list[str] | None) -> int:
    p = OneLineParser(prog="python -m analyses.reproduce.seeds",
                      description=__doc__.strip().splitlines()[0])
    p.add_argument("outs", nargs="+", help="output folders of runs of one level, one per seed")
    p.add_argument("--labels", default=None,
                   help="column names, comma-separated (default: seed offset 0, 1, ...)")
    p.add_argument("--md", default=None, help="write the table here (default: stdout)")
    args = p.parse_args(argv)
    if args.md:  # before any reading: the table is never lost to a bad --md
        check_output_file(args.md, "--md")
    outs = [Path(o) for o in args.outs]
    offsets = check_runs(outs)
    labels = (args.labels.split(",") if args.labels
              else [f"seed offset {k if k is not None else '?'}" for k in offsets])
    check(len(labels) == len(outs), f"--labels names {len(labels)} columns for {len(outs)} "
          "folders")
    text = table(outs, labels)
    if args.md:
        write_atomic(Path(args.md), text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(body, argv)


if __name__ == "__main__":
    sys.exit(main())
