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

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from seqprobe.atomic import NOFOLLOW, write_atomic
from seqprobe.config import check
from seqprobe.errors import InputError, OutputError


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
REBUILT = ("index.json", "index.md", "reproduce_timings.json")  # a part's own, not copied
TIMINGS = "reproduce_timings.json"  # carried: which of a part's analyses failed
MAX_FILE_BYTES = 64 << 20  # a result is kilobytes (a figure a few megabytes)


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


def merge(sources: Sequence[Path], out: Path, level: str | None = None) -> list[str]:
    """Copy each part folder's results (:data:`MERGED`) into ``out``; returns what was copied.

    Trusts no part: a result that is a symbolic link (to ``/dev/zero``, to a secret), a FIFO,
    a directory or a file over :data:`MAX_FILE_BYTES` is refused in one line before anything is
    written, as is a name in ``out`` that is a link or no regular file, and an ``out`` that is
    a file; each result is written by rename (:func:`~seqprobe.atomic.write_atomic`), never
    through what is there. Two parts holding the same file is refused: one analysis belongs
    to one part. Each part's ``reproduce_timings.json`` is carried into ``out``'s (an analysis
    a part records as failed stays failed in the merged index); parts of another level than
    ``level``, or of different levels or seed offsets, are refused."""
    check(not out.exists() or out.is_dir(), f"--out {out}: is a file; give the folder to "
          "merge the parts into")
    seen: dict[str, Path] = {}
    data: dict[str, bytes] = {}
    timings: list[tuple[Path, dict]] = []
    for src in sources:
        check(src.is_dir(), f"--merge {src}: not a folder of results")
        for pattern in MERGED:
            for f in sorted(src.glob(pattern)):
                if f.name in REBUILT:
                    continue
                check(f.name not in seen, f"--merge: {f.name} is in both {seen.get(f.name)} "
                      f"and {src}")
                seen[f.name] = src
                data[f.name] = _read_result(f)
        if os.path.lexists(src / TIMINGS):
            timings.append((src, _part_timings(src / TIMINGS)))
    for name in seen:
        target = out / name
        if os.path.lexists(target) and (target.is_symlink() or not target.is_file()):
            what = "a symbolic link" if target.is_symlink() else "not a regular file"
            raise InputError(f"--out {target}: is {what}; a merge writes only files it can "
                             "replace whole: remove it")
    merged = _merge_timings(timings, out, level)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"--out {out}: cannot create it ({e.strerror})") from None
    for name, src in seen.items():
        if (src / name).resolve() != (out / name).resolve():
            write_atomic(out / name, data[name])
    if merged is not None:
        write_atomic(out / TIMINGS, json.dumps(merged, indent=1))
    return sorted(seen)


def _read_result(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """A part's result file, read without following a link or waiting on a FIFO; one line
    for anything but a regular file of at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if path.is_symlink():
            raise InputError(f"--merge {path}: is a symbolic link; a part's results are files, "
                             "and a merge copies no link") from None
        raise InputError(f"--merge {path}: cannot read it ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InputError(f"--merge {path}: is {kind}, not a result file")
    with os.fdopen(fd, "rb") as f:
        check(st.st_size <= limit, f"--merge {path}: {st.st_size:,} bytes, more than an "
              f"analysis writes ({limit:,} at most)")
        return f.read(limit + 1)[:limit]


def _part_timings(path: Path) -> dict:
    """A part's timings, every entry kept; one line when they cannot be read (a part whose
    failures cannot be known is not merged as though nothing failed)."""
    try:
        timings = json.loads(_read_result(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise InputError(f"--merge {path}: not valid JSON ({type(e).__name__}); a part's "
                         "timings say which analyses failed") from None
    check(isinstance(timings, dict), f"--merge {path}: not a JSON object")
    return timings


def _merge_timings(parts: list[tuple[Path, dict]], out: Path, level: str | None) -> dict | None:
    """``out``'s timings with each part's analyses in them (a part's entry replaces ``out``'s;
    where two parts time one job, a failure wins). None when no part has timings."""
    if not parts:
        return None
    for key, what in (("level", "level"), ("seed_offset", "seed offset")):
        values = {json.dumps(t.get(key)) for _, t in parts}
        check(len(values) == 1, f"--merge: the parts are of different {what}s "
              f"({', '.join(f'{p}: {t.get(key)}' for p, t in parts)})")
    part_level = parts[0][1].get("level")
    check(level is None or part_level in (None, level), f"--merge: the parts are of the "
          f"{part_level} level, not {level}")
    merged: dict = {}
    if (out / TIMINGS).is_file() and not (out / TIMINGS).is_symlink():
        with contextlib.suppress(InputError):
            old = _part_timings(out / TIMINGS)
            if old.get("level") == part_level:
                merged = {k: v for k, v in old.items() if k != "last_run"}
    from_parts: dict = {}
    for _, t in parts:
        for k, v in t.items():
            if not isinstance(v, dict) or k == "last_run":
                continue
            prev = from_parts.get(k)
            if prev is None or (prev.get("ok") is True and v.get("ok") is not True):
                from_parts[k] = v
    merged.update(from_parts)
    for key in ("level", "seed_offset"):
        if key in parts[0][1]:
            merged[key] = parts[0][1][key]
    return merged
