"""Copy Fig. 1a / 9b decided in the paper's regime (where its own trend predicts a clear
gap): per seed, the log of a GSSM's
samples to 90 % over the fastest transformer's, with runs that never got there handled as
censored, and the tests the two copy claims decide with.

**Censoring.** A run stopped at its step cap without reaching 90 % did not measure its samples
to 90 %: they exceed the samples it saw (its budget), a lower bound. A GSSM seed that never got
there gives a ratio that is a lower bound (:data:`LOWER`); a transformer seed that never got
there (the reference needs every seed, so only in hand-made data) an upper bound
(:data:`UPPER`); both, no number (:data:`NONE`).

**The test** (:func:`bounded_t_test`): a one-sided one-sample t test of the log ratios against 0
with each censored value replaced by its bound. That replacement moves every censored value
toward "no gap" (a lower bound sits below the value it stands for), so the test may conclude
"slower" (ratio > 1) only from values that are exact or lower bounds, and "faster" only from
values that are exact or upper bounds: the verdict claims only what the bounds allow
(:attr:`BoundedTest.can_hold`, :attr:`BoundedTest.can_fail`). This is the substitution t test,
not a censored-likelihood one; it is conservative for the claimed side in the mean, and the
sd of bounds can differ from the sd of the values they stand for, which is why the side the
bounds cannot support is never claimed.

**Several rows** (Fig. 1a: one row per GSSM and length where the paper's trend predicts a
clear gap; "the gap grows": one per GSSM): Holm's step-down rule over the rows' p-values
(:func:`holm`), the one multiple-comparison rule of both claims.

**The gap grows** (:func:`seed_slopes`): each seed's least-squares slope of its log ratio on
log L over the lengths it has (a seed shares its initial weights across L, so the seed is the
unit), from at least :data:`MIN_LENGTHS` lengths. A censored point moves the slope one way: a
lower bound at a length above the mean log L makes the slope a lower bound, one below it an
upper bound; a seed with both has no slope to test (:data:`NONE`).

**Seed counts** (:func:`design_seeds`): from a stated prior effect and spread (the paper's
trend and the design's prior sd, :data:`PRIOR_LOG_SD`), at the α the verdict uses (the Holm
rule's most stringent step, α / rows) and 80 % power; never from the verdict's own replicates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from analyses.stats import holm_adjusted
from probes.sample_efficiency import EXACT, LOWER, NONE, UPPER

MIN_LENGTHS = 4  # the fewest lengths a seed's slope is fitted on


@dataclass(frozen=True)
class BoundedTest:
    """A one-sided t test of per-seed values against 0 (> 0: the claim's side), censored values
    at their bounds (module docstring). ``p`` / ``p_against``: the one-sided p-values (None:
    no test: under two values, or no spread); ``can_hold`` / ``can_fail``: whether the bounds
    allow concluding each side."""

    label: str
    values: tuple[float, ...]
    kinds: tuple[str, ...]
    seeds: tuple = ()
    p: float | None = None
    p_against: float | None = None
    mean: float = math.nan
    sd: float = math.nan
    interval: tuple[float, float] | None = None  # 95 % Student-t interval of the mean
    dropped: int = 0  # seeds with no number (NONE), left out and counted

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def censored(self) -> int:
        return sum(k != EXACT for k in self.kinds)

    @property
    def can_hold(self) -> bool:
        return self.p is not None and all(k in (EXACT, LOWER) for k in self.kinds)

    @property
    def can_fail(self) -> bool:
        return self.p is not None and all(k in (EXACT, UPPER) for k in self.kinds)

    def to_dict(self) -> dict:
        return {"label": self.label, "values": list(self.values), "kinds": list(self.kinds),
                "seeds": list(self.seeds), "n": self.n, "p": self.p,
                "p_against": self.p_against, "mean": self.mean, "sd": self.sd,
                "interval": list(self.interval) if self.interval else None,
                "censored": self.censored, "dropped": self.dropped,
                "can_hold": self.can_hold, "can_fail": self.can_fail}


def bounded_t_test(label: str, values: Sequence[float], kinds: Sequence[str],
                   seeds: Sequence = ()) -> BoundedTest:
    """:class:`BoundedTest` of ``values`` (one per seed; ``kinds`` says which are bounds; a
    NaN or :data:`NONE` value is no replicate: left out and counted in ``dropped``)."""
    keep = [i for i, (v, k) in enumerate(zip(values, kinds, strict=True))
            if k != NONE and not math.isnan(v)]
    v = np.array([values[i] for i in keep], dtype=float)
    ks = tuple(kinds[i] for i in keep)
    sd_ = tuple(seeds[i] for i in keep) if seeds else ()
    base = {"label": label, "values": tuple(float(x) for x in v), "kinds": ks, "seeds": sd_,
            "dropped": len(values) - len(keep)}
    if len(v) < 2:
        return BoundedTest(**base, mean=float(v.mean()) if len(v) else math.nan)
    mean, sd = float(v.mean()), float(v.std(ddof=1))
    if sd == 0.0:
        return BoundedTest(**base, mean=mean, sd=sd)
    from scipy import stats as sps  # a large import, where a test runs

    p = float(sps.ttest_1samp(v, 0.0, alternative="greater").pvalue)
    q = float(sps.ttest_1samp(v, 0.0, alternative="less").pvalue)
    half = float(sps.t.ppf(0.975, len(v) - 1)) * sd / math.sqrt(len(v))
    return BoundedTest(**base, p=p, p_against=q, mean=mean, sd=sd,
                       interval=(mean - half, mean + half))


@dataclass(frozen=True)
class Decision:
    """Several rows tested at α with Holm over them: ``held`` / ``failed`` the rows decided
    each way (after Holm, and only where the bounds allow that side), ``open`` the rest with
    why (``why[label]``)."""

    tests: tuple[BoundedTest, ...]
    alpha: float
    adjusted: tuple[float | None, ...]
    adjusted_against: tuple[float | None, ...]
    held: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    why: dict = field(default_factory=dict)

    @property
    def all_hold(self) -> bool:
        return bool(self.tests) and len(self.held) == len(self.tests)


def decide(tests: Sequence[BoundedTest], alpha: float) -> Decision:
    """Holm over ``tests`` each way; a row holds where its adjusted p < α and its bounds allow
    "> 0", fails where its adjusted p against < α and they allow "< 0"."""
    adj = holm_adjusted([t.p for t in tests])
    adj_a = holm_adjusted([t.p_against for t in tests])
    held, failed, why = [], [], {}
    for t, a, b in zip(tests, adj, adj_a, strict=True):
        if a is not None and a < alpha and t.can_hold:
            held.append(t.label)
        elif b is not None and b < alpha and t.can_fail:
            failed.append(t.label)
        elif t.p is None:
            why[t.label] = ("one seed" if t.n == 1 else "no seed" if t.n == 0
                            else "no spread over seeds") + ": no test"
        elif a is not None and a < alpha:
            why[t.label] = "the bounds allow no conclusion on this side"
        elif b is not None and b < alpha:
            why[t.label] = ("points below 0, but censored seeds are lower bounds: no "
                            "conclusion against")
        else:
            why[t.label] = f"the seeds fit either side (Holm p = {a:.2g} for, {b:.2g} against)"
    return Decision(tuple(tests), alpha, tuple(adj), tuple(adj_a), tuple(held), tuple(failed),
                    why)


def seed_slopes(points: dict, min_lengths: int = MIN_LENGTHS) -> tuple[list, list, list, int]:
    """Per-seed slopes of log ratio on log L: ``points`` {seed: {L: (log ratio, kind)}}.
    Returns ``(seeds, slopes, kinds, dropped)``: a seed with fewer than ``min_lengths``
    lengths with a number is dropped (counted)."""
    seeds, slopes, kinds, dropped = [], [], [], 0
    for s, at in sorted(points.items()):
        have = sorted((L, v, k) for L, (v, k) in at.items() if k != NONE and not math.isnan(v))
        if len(have) < min_lengths:
            dropped += 1
            continue
        x = np.log([L for L, _, _ in have])
        y = np.array([v for _, v, _ in have])
        w = (x - x.mean()) / float(((x - x.mean()) ** 2).sum())
        slope = float(w @ y)
        # which way the true slope can lie from this one: a lower-bounded y with weight > 0
        # raises it, with weight < 0 lowers it; an upper-bounded y the other way
        up = any((k == LOWER and wi > 0) or (k == UPPER and wi < 0)
                 for (_, _, k), wi in zip(have, w, strict=True))
        down = any((k == LOWER and wi < 0) or (k == UPPER and wi > 0)
                   for (_, _, k), wi in zip(have, w, strict=True))
        seeds.append(s)
        slopes.append(slope)
        kinds.append(NONE if up and down else LOWER if up else UPPER if down else EXACT)
    return seeds, slopes, kinds, dropped


def log_ratios(r: dict) -> tuple[list[float], list[str]]:
    """A ratio entry's (``by_length[L]["ratio_to_reference"][gssm]``) per-seed log ratios and
    kinds; a result written before per-seed log ratios were recorded (no ``log_ratio``): log
    of its per-seed ratios, a seed that never got there left with no number (its budget was
    not recorded)."""
    if "log_ratio" in r:
        return [math.nan if v is None else float(v) for v in r["log_ratio"]], list(r["kind"])
    return ([math.nan if x is None else math.log(x) for x in r["per_seed"]],
            [NONE if x is None else EXACT for x in r["per_seed"]])


def slope_points(by_length: dict, gssm: str) -> dict:
    """{seed: {L: (log ratio, kind)}} of one GSSM over ``by_length`` ({L: a length's
    result}), the input of :func:`seed_slopes`."""
    points: dict = {}
    for L, m in by_length.items():
        r = m["ratio_to_reference"].get(gssm)
        if not r:
            continue
        logs, kinds = log_ratios(r)
        seeds = r.get("seeds") or range(len(logs))
        for s, v, k in zip(seeds, logs, kinds, strict=False):
            points.setdefault(s, {})[int(L)] = (v, k)
    return points


def slopes_of(by_length: dict) -> dict:
    """{gssm: {seeds, slopes, kinds, dropped}}: each seed's slope of log ratio on log L over
    the lengths with a reference (what the results JSON stores for a referee)."""
    learnt = {L: m for L, m in by_length.items() if m.get("reference") is not None}
    gssms = dict.fromkeys(g for m in learnt.values() for g in m["ratio_to_reference"])
    out = {}
    for g in gssms:
        seeds, slopes, kinds, dropped = seed_slopes(slope_points(learnt, g))
        out[g] = {"seeds": seeds, "slopes": slopes, "kinds": kinds, "dropped": dropped,
                  "lengths": sorted(int(L) for L in learnt)}
    return out


# ---------------------------------------------------------------------------- design
# The prior spread of one seed's log ratio used to size the seed count: the spread of
# log(GSSM / transformer samples to 90 %) in a pilot on other seeds (at L = 6), rounded
# up. A prior, stated; the verdict's own seeds never size their count.
PRIOR_LOG_SD = 0.4
# The design sizes for this fraction of the paper's trend on the log scale (the trend is
# extrapolated from a ~160M-parameter model; a ~100k one may show less of it).
PRIOR_EFFECT_FRACTION = 0.5
POWER = 0.8


def t_power(n: int, effect: float, sd: float, alpha: float) -> float:
    """Power of the one-sided one-sample t test of n values with mean ``effect`` and sd
    ``sd`` at ``alpha`` (noncentral t)."""
    from scipy import stats as sps

    if n < 2 or sd <= 0:
        return 0.0
    crit = float(sps.t.ppf(1 - alpha, n - 1))
    return float(sps.nct.sf(crit, n - 1, effect / sd * math.sqrt(n)))


def design_seeds(effect: float, sd: float, alpha: float, power: float = POWER,
                 most: int = 200) -> int | None:
    """The fewest seeds whose one-sided t test reaches ``alpha`` with ``power`` for a prior
    ``effect`` (> 0) and spread ``sd``; None where the effect is not positive or needs more
    than ``most``. Monotone: a larger prior effect never asks for more seeds."""
    if not effect > 0:
        return None
    return next((n for n in range(2, most + 1) if t_power(n, effect, sd, alpha) >= power), None)


def slope_sd(sd: float, lengths: Sequence[int]) -> float:
    """The sd of one seed's least-squares slope on log L when each log ratio has sd ``sd``
    (independent across lengths)."""
    x = np.log(np.asarray(lengths, dtype=float))
    return sd / math.sqrt(float(((x - x.mean()) ** 2).sum()))


# ---------------------------------------------------------------------------- reading a result
@dataclass(frozen=True)
class RowTest:
    """One row's test as a claim reader hands it to the index (``Reading.tests``): the
    :class:`BoundedTest`, its Holm-adjusted p-values, the α it is read at and the design's
    seed count (``design_n``: a prior, not these seeds' spread)."""

    test: BoundedTest
    p_holm: float | None
    p_holm_against: float | None
    alpha: float
    rows: int  # the Holm family's size
    design_n: int | None = None
    what: str = "log ratio"

    @property
    def method(self) -> str:
        return (f"one-sided t test on {self.what}s (censored seeds at their bounds), Holm over "
                f"{self.rows} row{'' if self.rows == 1 else 's'}")

    def text(self) -> str:
        t = self.test
        if t.p is None:
            return f"{t.n} seed{'' if t.n == 1 else 's'}, no test"
        ci = (f", 95 % CI [{t.interval[0]:+.2f}, {t.interval[1]:+.2f}]" if t.interval else "")
        cens = f", {t.censored} censored" if t.censored else ""
        drop = f", {t.dropped} with no number" if t.dropped else ""
        return (f"mean {self.what} {t.mean:+.2f}{ci} over {t.n} seeds{cens}{drop}; "
                f"p = {t.p:.2g} (Holm {self.p_holm:.2g}) vs α = {self.alpha:g}")

    def to_dict(self) -> dict:
        t = self.test
        return {"method": self.method, "unit": "seed", "n": t.n,
                "k": sum(v > 0 for v in t.values),
                "p": 1.0 if self.p_holm is None else self.p_holm,
                "p_against": 1.0 if self.p_holm_against is None else self.p_holm_against,
                "p_raw": t.p, "p_raw_against": t.p_against, "alpha": self.alpha,
                "alpha_source": "no level in the paper: the conventional one-sided 0.05, Holm "
                                f"over {self.rows} rows",
                "can_decide": t.p is not None, "power": POWER,
                "power_side": "for" if self.design_n else None, "power_n": self.design_n,
                # the shape of analyses.stats.Design.to_dict: the index reads it as any test's
                "design": {"side": "for" if self.design_n else None, "n": self.design_n,
                           "alpha": self.alpha,
                           "how": "a priori: the paper's trend as the effect, prior sd "
                                  f"{PRIOR_LOG_SD:g} of a seed's log ratio",
                           "why": None if self.design_n else "the prior puts no gap here"},
                **{k: v for k, v in t.to_dict().items()
                   if k not in ("label", "n", "p", "p_against")}}


def row_tests(tests: Sequence[BoundedTest], alpha: float, design: Sequence[int | None],
              what: str = "log ratio") -> tuple[Decision, list[RowTest]]:
    """:func:`decide` over ``tests`` and each as a :class:`RowTest`."""
    d = decide(tests, alpha)
    return d, [RowTest(t, a, b, alpha, len(tests), n, what)
               for t, a, b, n in zip(tests, d.adjusted, d.adjusted_against, design,
                                     strict=True)]


def row_design(gap: float | None, rows: int, alpha: float, sd: float = PRIOR_LOG_SD) -> int | None:
    """Seeds a Fig. 1a row needs: the paper's predicted gap as the prior effect (log scale), at
    Holm's most stringent step (α / rows)."""
    if gap is None or gap <= 1:
        return None
    return design_seeds(math.log(gap), sd, alpha / max(rows, 1))


def slope_design(lengths: Sequence[int], rows: int, alpha: float,
                 sd: float = PRIOR_LOG_SD, slope: float = 1.0) -> int | None:
    """Seeds the slope test needs: the paper's trend (gap ∝ L: slope 1 on log-log) as the prior
    effect, a seed's slope sd from the prior sd of a log ratio over ``lengths``, at α / rows."""
    if len(lengths) < 2:
        return None
    return design_seeds(slope, slope_sd(sd, lengths), alpha / max(rows, 1))
