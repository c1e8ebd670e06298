"""A level in parts that each fit one lent GPU call (``--part K/N``), whose results merge.

A GPU machine is lent for minutes: about :attr:`CallBudget.start_s` of start-up, then a
command of at most ten minutes, everything counted. A level whose plan is longer is split into
parts: each part is a set of the plan's analyses with every recipe they train (a recipe two
parts need is trained by both: a lent machine starts with an empty cache), run as its own
``python -m analyses.reproduce --LEVEL --part K/N`` inside one call
(``bash scripts/gpu_call.sh --part K/N``, :mod:`bench.gpu_run`), its results folder brought
back; ``--index-only --merge DIR...`` then gathers the parts' results into one folder and one
index.

Every call is planned to at most :attr:`CallBudget.call_s` *including* the machine's start-up,
the preflight and the packing of the results (:class:`CallBudget`); the first call also runs
the GPU checks. :func:`split` packs the analyses, longest first, into the fewest parts whose
estimated wall times (the ETA's packing of each part's jobs on the machine, start-up,
compilation and evaluations included) fit those budgets. An analysis whose own chain is
longer than a whole call's part (memorization's large search) gets a part of its own that
*resumes*: it runs over several calls, each carrying the cells the last one returned
(``--resume-from``), so no call is over its budget. :func:`plan_calls` says which call runs
what.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from seqprobe.config import check


@dataclass(frozen=True)
class CallBudget:
    """Seconds of one lent GPU call, start-up included: what each stage of
    :mod:`bench.gpu_run` may take and what is left for a part of the level."""

    call_s: float = 540.0  # a whole call: 9 of the lent command's 10 minutes plus start-up
    start_s: float = 90.0  # a fresh machine started and the working tree copied
    # wheels installed, torch, TransformerLens and the suite's dependencies imported: its cap
    preflight_s: float = 45.0
    pack_s: float = 10.0  # the results packed into $OUT at the end
    checks_s: float = 150.0  # the first call's GPU checks (tests, paper models, dry run)
    ensemble_s: float = 60.0  # the first call's ensemble bench

    @property
    def command_s(self) -> float:
        """The lent command's own budget: the call less the machine's start-up."""
        return self.call_s - self.start_s

    def part_s(self, checks: bool) -> float:
        """What a call leaves for its part of the level (``checks``: the first call's)."""
        left = self.command_s - self.preflight_s - self.pack_s
        return left - (self.checks_s + self.ensemble_s if checks else 0.0)


BUDGET = CallBudget()
# a part's checkpoints come back with its results when together they fit in this: then a part
# cut at a call's end continues in the next (training resumes from an interrupted checkpoint)
CACHE_BYTES = 12 << 20
# a checkpoint's bytes per parameter: fp32 weights and AdamW's two moments
CHECKPOINT_BYTES_PER_PARAM = 12
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
          budget: float = BUDGET.part_s(False), parts: int | None = None,
          first: float | None = None) -> list[list[str]]:
    """``names`` (in plan order) split into the fewest parts whose ``wall(part)`` is at most
    ``budget`` each; an analysis longer than ``budget`` alone gets a part of its own, after
    the others (it resumes over calls: :func:`plan_calls`). ``first``: the room of the first
    call, which also runs the checks: the smallest part that fits it goes first. ``parts``:
    that many parts instead — the same split when it is the fewest's count (so ``--part K/N``
    runs what ``--list`` planned), else every analysis packed into ``parts``. Each analysis
    goes, longest alone first, to the part it leaves the most room in."""
    alone = {n: wall([n]) for n in names}
    order = list(names).index

    def pack(items: Sequence[str], count: int) -> list[list[str]]:
        bins: list[list[str]] = [[] for _ in range(count)]
        for n in sorted(items, key=lambda n: -alone[n]):
            room = [budget - (wall([*b, n]) if b else alone[n]) for b in bins]
            bins[max(range(count), key=lambda i: room[i])].append(n)
        return sorted((sorted(b, key=order) for b in bins if b), key=lambda b: order(b[0]))

    resuming = [n for n in names if alone[n] > budget]
    rest = [n for n in names if n not in resuming]
    bins: list[list[str]] = []
    for count in range(1, len(rest) + 1):
        bins = pack(rest, count)
        if all(wall(b) <= budget for b in bins):
            break
    if first is not None:
        fits = [b for b in bins if wall(b) <= first]
        if fits:
            head = min(fits, key=wall)
            bins = [head, *[b for b in bins if b is not head]]
    planned = [*bins, *[[n] for n in resuming]]
    if parts is None or parts == len(planned):
        return planned
    return pack(names, parts)


@dataclass(frozen=True)
class Call:
    """One lent GPU call of a level's plan: part ``part`` of ``parts`` (its ``round``-th call
    of ``rounds``, for a part that resumes), the checks too for the first."""

    index: int
    part: int
    parts: int
    analyses: tuple[str, ...]
    seconds: float  # the whole call, start-up, preflight and packing included
    checks: bool = False
    round: int = 1
    rounds: int = 1

    def command(self, resume_dir: str = ".resume") -> str:
        """The command the lent machine runs for this call."""
        if self.part == 0:  # the checks alone
            return "bash scripts/gpu_call.sh"
        words = ["bash scripts/gpu_call.sh", f"--part {self.part}/{self.parts}"]
        if not self.checks:
            words.append("--no-checks")
        if self.round > 1:
            words.append(f"--resume-from {resume_dir}/part{self.part}")
        return " ".join(words)


def plan_calls(parts: Sequence[Sequence[str]], wall: Callable[[Sequence[str]], float],
               resumes: Callable[[str], bool] = lambda name: False,
               budget: CallBudget = BUDGET) -> list[Call]:
    """The lent calls that run ``parts`` (:func:`split`): one per part, the first with the
    checks (a call of the checks alone first, where part 1 does not fit beside them); a part
    longer than one call's room whose analyses all ``resumes`` (their progress is kept in files
    a call brings back: saved cells, small checkpoints) runs over as many calls as it needs,
    each resuming from the last. Each call's seconds include start-up, preflight and packing;
    a call over :attr:`CallBudget.call_s` is a part that cannot resume."""
    fixed = budget.start_s + budget.preflight_s + budget.pack_s
    checks = budget.checks_s + budget.ensemble_s
    calls: list[Call] = []
    alone = not parts or wall(parts[0]) > budget.part_s(True)
    if alone:
        calls.append(Call(1, 0, len(parts), (), fixed + checks, checks=True))
    for k, part in enumerate(parts, 1):
        left = wall(part)
        can_resume = all(resumes(n) for n in part)
        shares: list[float] = []
        while not shares or (left > 0 and can_resume):
            room = budget.part_s(k == 1 and not alone and not shares)
            share = min(left, room) if can_resume else left
            shares.append(share)
            left -= share
        for r, share in enumerate(shares, 1):
            with_checks = k == 1 and r == 1 and not alone
            calls.append(Call(len(calls) + 1, k, len(parts), tuple(part),
                              fixed + (checks if with_checks else 0.0) + share, with_checks,
                              r, len(shares)))
    return calls


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
