"""A level in parts that each fit one lent GPU call (``--part K/N``), whose results merge.

A GPU is lent to this project's checks for a few minutes a command. A level whose plan is
longer is split into parts: each part is a set of the plan's analyses with every recipe they
train (a recipe two parts need is trained by both: a lent machine starts with an empty cache),
run as its own ``python -m analyses.reproduce --LEVEL --part K/N``, its results folder brought
back; ``--index-only --merge DIR...`` then gathers the parts' results into one folder and one
index.

The split is the fewest parts whose estimated wall times (the ETA's packing of each part's
jobs on the machine) are each within :data:`PART_BUDGET_S`, found by placing the analyses,
longest first, each in the part it lengthens least. An analysis whose own chain is longer than
the budget fills a part of its own and the listing says so.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from seqprobe.config import check

PART_BUDGET_S = 8 * 60  # of one part: a lent call is 10 minutes, start-up and copying included
MERGED = ("*.json", "*.png", "*.md")  # what a part's folder holds that the index reads / shows
REBUILT = ("index.json", "index.md", "reproduce_timings.json")  # a part's own, not merged


def parse_part(text: str) -> tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``; one line for anything else."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    check(m is not None, f"--part {text!r}: expected K/N, e.g. 1/3")
    k, n = int(m[1]), int(m[2])
    check(1 <= k <= n <= 64, f"--part {text}: K must be in 1..N and N at most 64")
    return k, n


def split(names: Sequence[str], wall: Callable[[Sequence[str]], float],
          budget: float = PART_BUDGET_S, parts: int | None = None) -> list[list[str]]:
    """``names`` (in plan order) split into parts: ``parts`` of them, or the fewest whose
    ``wall(part)`` is at most ``budget`` each (every analysis alone, where no split fits).
    Each analysis goes, longest alone first, to the part whose wall it lengthens least."""
    alone = {n: wall([n]) for n in names}
    order = sorted(names, key=lambda n: -alone[n])
    tries = [parts] if parts else range(1, len(names) + 1)
    best: list[list[str]] = [[n] for n in names]
    for count in tries:
        bins: list[list[str]] = [[] for _ in range(count)]
        for n in order:
            grown = [wall([*b, n]) if b else alone[n] for b in bins]
            bins[min(range(count), key=lambda i: grown[i])].append(n)
        bins = [sorted(b, key=list(names).index) for b in bins if b]
        if parts or all(wall(b) <= budget for b in bins):
            best = bins
            break
    return sorted(best, key=lambda b: list(names).index(b[0]))


def merge(sources: Sequence[Path], out: Path) -> list[str]:
    """Copy each part folder's results (:data:`MERGED`) into ``out``; returns what was copied.
    Two parts holding the same file is refused: one analysis belongs to one part."""
    seen: dict[str, Path] = {}
    for src in sources:
        check(src.is_dir(), f"--merge {src}: not a folder of results")
        for pattern in MERGED:
            for f in sorted(src.glob(pattern)):
                if f.name in REBUILT:
                    continue
                check(f.name not in seen, f"--merge: {f.name} is in both {seen.get(f.name)} "
                      f"and {src}")
                seen[f.name] = src
    out.mkdir(parents=True, exist_ok=True)
    for name, src in seen.items():
        if (src / name).resolve() != (out / name).resolve():
            shutil.copy2(src / name, out / name)
    return sorted(seen)
