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

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from seqprobe.atomic import NOFOLLOW, write_atomic
from seqprobe.config import check
from seqprobe.errors import InputError, OutputError

PART_BUDGET_S = 8 * 60  # of one part: a lent call is 10 minutes, start-up and copying included
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
