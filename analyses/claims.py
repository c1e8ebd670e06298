"""The paper's claims as an analysis states them, and the description of an analysis the
reproduce plan reads: a :class:`Figure` (title, paper, levels, the zoo recipes it trains)
holds :class:`Claim` readers, each turning the analysis' JSON into a :class:`Reading` — what
was measured and its verdict (holds, does not hold, n/a, or :class:`Undecided` with its
reason) — with the :class:`Margin` by which the measured value clears or misses what decides
it (:func:`tightest` of several). :func:`verdict_text` is how the index writes a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seqprobe.config import check

if TYPE_CHECKING:  # annotations only: an analysis' --help reads no training code
    from models.train.runconfig import Builder

# The three reasons a claim reader may leave a claim undecided (Undecided's constructors).
OUTSIDE_REGIME = "outside the paper's regime"
NOT_LEARNT = "no model learnt the task"
EITHER_SHAPE = "the interval fits either shape"
NOT_DECIDED = "not decided at this level"


@dataclass(frozen=True)
class Undecided:
    """The verdict "not decided at this level", with its reason: the run cannot say whether
    the paper's claim holds, because it was measured outside the paper's regime (a length,
    scale or step budget where the paper's own numbers predict no clear effect), because no
    model learnt the task (so how it behaves cannot be read), or because the interval fits
    either answer. Distinct from "does not hold" (``False``: the run contradicts the claim in
    a setting where it should show) and from n/a (``None``: the claim does not apply or is
    vacuous). Make one with :meth:`regime`, :meth:`not_learnt` or :meth:`either_shape`."""

    reason: str

    def __post_init__(self):
        check(isinstance(self.reason, str) and bool(self.reason.strip()),
              "an undecided verdict needs its reason")

    @classmethod
    def regime(cls, why: str) -> Undecided:
        return cls(f"{OUTSIDE_REGIME}: {why}")

    @classmethod
    def not_learnt(cls, why: str) -> Undecided:
        return cls(f"{NOT_LEARNT}: {why}")

    @classmethod
    def either_shape(cls, why: str) -> Undecided:
        return cls(f"{EITHER_SHAPE}: {why}")

    def __str__(self) -> str:
        return f"{NOT_DECIDED} — {self.reason}"


@dataclass(frozen=True)
class OneSeed(Undecided):
    """A verdict read from one seed per model (a quick level): what the single run shows
    (``holds``), said as such — "holds in 1 seed — medium decides" — and counted as not
    decided, since one seed replicates nothing. ``decides``: the level whose seeds decide."""

    holds: bool = False
    decides: str = "medium"

    @classmethod
    def of(cls, holds: bool, decides: str = "medium") -> OneSeed:
        word = "holds" if holds else "does not hold"
        return cls(f"{word} in 1 seed — {decides} decides", bool(holds), decides)

    def __str__(self) -> str:
        return self.reason


# holds, does not hold, n/a (None), or not decided at this level
Verdict = bool | None | Undecided
Measure = Callable[[dict], "tuple[str, Verdict] | None"]

RELATIONS = {"<": float.__lt__, "<=": float.__le__, ">": float.__gt__, ">=": float.__ge__}


@dataclass(frozen=True)
class Margin:
    """How far a claim's measured value sits from what decides it, in the claim's own units:
    ``quantity`` measured ``value``, against ``threshold`` (a cut-off, or the other side of a
    comparison) by ``relation``: the claim's condition is ``value RELATION threshold``.
    :attr:`distance` is signed: > 0 on the side where the condition holds. ``interval``: a
    confidence interval of ``value`` where the reader has one (seeds, a bootstrap)."""

    quantity: str
    value: float
    relation: str
    threshold: float
    unit: str = ""
    interval: tuple[float, float] | None = None

    def __post_init__(self):
        check(self.relation in RELATIONS, f"margin relation must be one of {list(RELATIONS)}, "
              f"got {self.relation!r}")
        object.__setattr__(self, "value", float(self.value))
        object.__setattr__(self, "threshold", float(self.threshold))
        if self.interval is not None:
            object.__setattr__(self, "interval", tuple(float(x) for x in self.interval))

    @property
    def distance(self) -> float:
        """``value − threshold`` for > / >=, ``threshold − value`` for < / <=."""
        d = self.value - self.threshold
        return (d if self.relation.startswith(">") else -d) + 0.0  # + 0.0: never "-0"

    @property
    def holds(self) -> bool:
        """Whether ``value RELATION threshold``."""
        return bool(RELATIONS[self.relation](self.value, self.threshold))

    def to_dict(self) -> dict:
        return {"quantity": self.quantity, "value": self.value, "relation": self.relation,
                "threshold": self.threshold, "unit": self.unit, "distance": self.distance,
                "interval": list(self.interval) if self.interval else None}

    def __str__(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        ci = (f" (95 % CI {self.interval[0]:.3g}–{self.interval[1]:.3g})" if self.interval
              else "")
        return (f"{self.quantity} {self.value:.3g}{ci} vs {self.relation} "
                f"{self.threshold:.3g}{unit}: {self.distance:+.3g}{unit}")


def tightest(*margins: Margin) -> Margin:
    """Of the conditions a claim needs all of, the one closest to failing (smallest distance
    relative to its threshold's size): the claim's margin."""
    return min(margins, key=lambda m: m.distance / max(abs(m.threshold), 1e-12))


class Reading(tuple):
    """What a claim reader returns: the pair ``(measured text, verdict)`` — it unpacks and
    compares as that pair — with the claim's :class:`Margin` as ``.margin`` (None where the
    verdict is not a comparison with a number: n/a, no run to read) and the replicate tests
    it decided with as ``.tests``: (label, :class:`analyses.stats.ReplicateTest`) pairs, each
    test with its power calculation (the index's table of replicates: the seeds each claim
    would need)."""

    margin: Margin | None
    tests: tuple

    def __new__(cls, measured: str, verdict: Verdict, margin: Margin | None = None,
                tests: Sequence = ()):
        if (margin is not None and verdict is not None and not isinstance(verdict, Undecided)
                and (math.isnan(margin.value) or math.isnan(margin.threshold))):
            # NaN compares False with everything: it would read as "does not hold" (an infinite
            # value, "never reached", compares as it should)
            verdict = Undecided(f"{margin.quantity} is {margin.value:g} against "
                                f"{margin.threshold:g}: no number to decide on (a run that "
                                "diverged or measured nothing)")
        self = super().__new__(cls, (measured, verdict))
        self.margin = margin
        self.tests = tuple(tests)
        return self


def verdict_text(verdict: Verdict) -> str:
    """How the index writes a verdict: holds / does not hold / n/a / not decided at this
    level — REASON."""
    if isinstance(verdict, Undecided):
        return str(verdict)
    return {True: "holds", False: "does not hold", None: "n/a"}[
        None if verdict is None else bool(verdict)]


def level_of(d: Mapping[str, Any]) -> Any:
    """The level a result or timings JSON was run at: its ``"level"``, or ``"preset"`` in a file
    written before the level had one name (None when it says neither)."""
    return d.get("level", d.get("preset"))


def with_not_matched(text: str, not_matched: str | None) -> str:
    """A claim's measured text with what differs from the paper's setting first ("not
    matched: …"), so a reader sees the setting before the number."""
    return f"not matched: {not_matched}. {text}" if not_matched else text


@dataclass(frozen=True)
class Claim:
    """A paper's claim and how to read whether it holds from the analysis' JSON:
    ``measure(json) -> (what we measured, verdict)``: ``True`` holds, ``False`` does not hold
    (in a setting where the paper's claim should show), ``None`` not applicable (or vacuous),
    or :class:`Undecided` (not decided at this level, with its reason). The pair is a
    :class:`Reading` carrying the claim's :class:`Margin` (how far the measured value sits
    from what decides it), which the index shows. A reader returns ``None`` instead of the
    pair for a claim measured at another level only (a medium claim read from a quick run):
    the index leaves it out."""

    paper: str
    measure: Measure


@dataclass(frozen=True)
class Figure:
    """What the reproduce plan needs to know about an analysis."""

    title: str
    paper: str  # which paper / figure
    claims: tuple[Claim, ...] = ()
    # the levels it has (``python -m analyses.reproduce --level medium`` runs those with medium)
    levels: tuple[str, ...] = ("quick", "paper")
    # level -> the zoo recipes ``--train LEVEL`` uses (reproduce trains them first)
    recipes: Callable[[str], Sequence[str]] = lambda level: ()
    # level -> extra flags reproduce passes (beyond --LEVEL, --out, and --train/--cache-dir
    # when it has recipes)
    extra_args: Callable[[str], Sequence[str]] = lambda level: ()
    outputs: tuple[str, ...] = ()  # output stems (default: the analysis name)
    # cores its own compute keeps busy: one (one thread) unless it runs processes side by side;
    # a second thread speeds the suite's small models up far less than 2x, and waits on the
    # slower core when other work shares the machine
    slots: int = 1
    trains: bool = True  # takes --train / --cache-dir
    # level -> (label, RunConfig builder) of the models it trains itself, outside the zoo (the
    # memorization grid's cells): what ``--dry-run`` runs beside the recipes
    dry_run_configs: Callable[[str], Sequence[tuple[str, Builder]]] = lambda level: ()
    # level -> the runs it trains itself, as (expected count, RunConfig builder): what its
    # job's ETA is costed from where no run of that level has timed it (a search's cells)
    own_runs: Callable[[str], Sequence[tuple[float, Builder]]] = lambda level: ()
    # glob patterns, under its --out, of the small result files it resumes from (a search's
    # saved cells): a lent GPU call brings them back and the next call starts from them, so
    # an analysis longer than one call runs over several (analyses.reproduce.parts)
    resume_files: tuple[str, ...] = ()
    # level -> one clause: what this analysis trains at that level, in the papers' terms (the
    # index's scale line joins the clauses of the analyses it ran; None or "": nothing to
    # add, e.g. where another analysis of the same models says it), and the paper's own
    # setting that those clauses are read against
    scale: Callable[[str], str | None] = lambda level: None
    paper_scale: str = ""
