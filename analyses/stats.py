"""Claim statistics (issue 46): the tests and intervals the claim readers decide with, one
place for all of them.

Three rules, each a referee's objection to an earlier reading:

- **The unit of replication is the independent replicate** — a seed, a chain, a dataset draw
  — never the evaluations of inputs every replicate shares. The 512 evaluation sequences a
  seed is scored on are the same for every seed; pooled, they make one seed's luck look like
  thousands of trials. The functions here take one value per replicate and say which unit
  they counted (``unit``).
- **An interval or a test states its method and refuses to conclude where the replicates
  cannot support it**: a percentile bootstrap over 3 seeds has 10 distinct resamples, too few
  to place a 2.5 % tail (:func:`bootstrap_interval` refuses); a sign test over n replicates
  cannot reach α = 0.01 unless 2^-n <= α, even if all agree (:func:`sign_test` reads "not
  decided — 3 seeds cannot decide at this level" and says how many would).
- **A verdict reads a pre-registered threshold and says where it came from**
  (:class:`Threshold`): the paper's statement where it gives one (with its section), or the
  suite's convention where the paper gives none (then the source says so).

And the power calculation the seed counts are sized with (:func:`seeds_for_sign_test`,
:func:`seeds_for_t_test`): how many replicates a claim needs, from a measured spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from analyses.claims import Undecided, Verdict
from seqprobe.config import check

TOO_FEW = "too few replicates"
EITHER_SIDE = "the replicates fit either side"
POWER = 0.8  # the power a seed count is sized for (the conventional 80 %)
# a percentile interval needs at least this many distinct resample values in each tail
MIN_TAIL_RESAMPLES = 5


@dataclass(frozen=True)
class Threshold:
    """A pre-registered number a verdict compares with, and where it comes from: the paper's
    statement (quote the section), or the suite's convention where the paper gives none."""

    value: float
    source: str

    def __post_init__(self):
        check(bool(self.source.strip()), "a threshold says where it comes from")
        object.__setattr__(self, "value", float(self.value))

    def __str__(self) -> str:
        return f"{self.value:g} ({self.source})"


# the paper gives no significance level: the suite's conventions, said as such
ALPHA_05 = Threshold(0.05, "no level in the paper: the conventional one-sided 0.05")
ALPHA_01 = Threshold(0.01, "no level in the paper: one-sided 0.01, the suite's level for "
                     "accuracy claims")


def _values(values: Sequence[float]) -> np.ndarray:
    """One value per replicate; ± inf allowed (a lower bound: a seed that never got there
    counts as slower than any that did); a NaN (a run that diverged or measured nothing) is
    no replicate and is left out — :func:`_nan_note` says how many."""
    v = np.asarray([float(x) for x in values], dtype=float)
    return v[~np.isnan(v)]


def _nan_note(values: Sequence[float], unit: str) -> str:
    n = sum(1 for x in values if float(x) != float(x))
    return f" ({n} {unit}{'' if n == 1 else 's'} with no number left out)" if n else ""


def seeds_to_reach(alpha: float) -> int:
    """The fewest replicates whose sign test can reach ``alpha`` at all (all agreeing: p =
    2^-n <= alpha)."""
    return max(1, math.ceil(math.log2(1 / alpha) - 1e-12))


@dataclass(frozen=True)
class ReplicateTest:
    """One test of replicate values against a threshold: its method, how many replicates
    (``n``, of ``unit``), how many agree with the claim's side (``k``), the one-sided p-values
    for the claim's side (``p``) and against it (``p_against``), the level (``alpha``), and
    whether n replicates can decide at that level at all (``can_decide``: for a sign test,
    2^-n <= α; ``needed``: the fewest that could)."""

    method: str
    unit: str
    n: int
    k: int
    p: float
    p_against: float
    alpha: Threshold
    can_decide: bool
    needed: int
    floor: float = 0.0  # the smallest p the test can give with these replicates
    agree: str = ""  # how many agree with the claim's side, in words ("7/8 seeds")
    # the power calculation from these replicates' spread: the side they point to ("for" the
    # claim or "against" it) and the fewest replicates that decide that side at alpha with
    # POWER (None: no side, or not within 1000); see :func:`sign_power_from`
    power_side: str | None = None
    power_n: int | None = None

    def __post_init__(self):
        if not self.agree:
            object.__setattr__(self, "agree", f"{self.k}/{self.n} {self.unit}s")

    @property
    def holds(self) -> bool:
        return self.can_decide and self.p < self.alpha.value

    @property
    def fails(self) -> bool:
        return self.can_decide and self.p_against < self.alpha.value

    def verdict(self, against: bool = True) -> Verdict:
        """True where the test rejects for the claim at α, False where it rejects against it
        (``against``: the claim's failure is decidable this way), else not decided, with why:
        too few replicates to reach α at all, or the replicates fit either side."""
        if self.holds:
            return True
        if against and self.fails:
            return False
        if not self.can_decide:
            return too_few(self)
        power = f"; {self.power_text()}" if self.power_n else ""
        return Undecided(
            f"{EITHER_SIDE}: {self.agree} on the claim's side, "
            f"{self.method} p = {self.p:.2g} for it, {self.p_against:.2g} against it "
            f"(α = {self.alpha.value:g}){power}")

    def text(self, source: bool = False) -> str:
        """"k/n seeds on the claim's side, METHOD p = … vs α = …" (with where α comes from
        where ``source``: say it once per claim, not per row)."""
        return (f"{self.agree} on the claim's side, {self.method} p = {self.p:.2g} vs α = "
                + (str(self.alpha) if source else f"{self.alpha.value:g}"))

    def power_text(self) -> str:
        """What the power calculation asks for, in words ('' where it has nothing to say)."""
        if self.power_n is None:
            return ""
        side = "the claim" if self.power_side == "for" else "against the claim"
        return (f"{self.power_n} {self.unit}s decide {side} with {100 * POWER:.0f} % power "
                f"at this spread")

    def to_dict(self) -> dict:
        """The test as the reproduce index records it (its ``replicates`` section)."""
        return {"method": self.method, "unit": self.unit, "n": self.n, "k": self.k,
                "p": self.p, "p_against": self.p_against, "alpha": self.alpha.value,
                "alpha_source": self.alpha.source, "can_decide": self.can_decide,
                "power": POWER, "power_side": self.power_side, "power_n": self.power_n}


def too_few(t: ReplicateTest, where: str = "") -> Undecided:
    """"not decided — n seeds cannot decide at this level", with the number that could and
    what the power calculation asks for (``where``: the reader's own account of it, for a
    claim of several tests, in place of this test's)."""
    who = f"{t.n} {t.unit}{'' if t.n == 1 else 's'}" + (" a group" if "pairs" in t.agree else "")
    power = f" ({where})" if where else f"; {t.power_text()}" if t.power_n else ""
    return Undecided(f"{TOO_FEW}: {who} cannot decide at α = {t.alpha.value:g} "
                     f"({t.method}: even all agreeing gives p = {t.floor:.2g}); "
                     f"at least {t.needed} could{power}")


def sign_test(values: Sequence[float], threshold: float, alpha: Threshold = ALPHA_05,
              relation: str = ">", unit: str = "seed") -> ReplicateTest:
    """Exact one-sided sign test (binomial, p = 1/2; scipy.stats.binomtest) of one value per
    replicate against ``threshold``: are the replicates on the ``relation`` side of it more
    often than chance? Ties carry no sign and are dropped (as the test is defined).
    Distribution-free: a seed that lands far above counts as much as one just above."""
    check(relation in (">", "<"), f"relation must be > or <, got {relation!r}")
    v = _values(values)
    d = (v - threshold) if relation == ">" else (threshold - v)
    k, n = int((d > 0).sum()), int((d != 0).sum())
    if n == 0:
        p = p_against = 1.0
    else:
        p = float(stats.binomtest(k, n, 0.5, alternative="greater").pvalue)
        p_against = float(stats.binomtest(k, n, 0.5, alternative="less").pvalue)
    need = seeds_to_reach(alpha.value)
    side, power_n = sign_power_from(d, alpha.value)
    return ReplicateTest("exact one-sided sign test", unit, n, k, p, p_against, alpha, n >= need,
                      need, 0.5 ** n, f"{k}/{n} {unit}s" + _nan_note(values, unit), side,
                      power_n)


def t_test(values: Sequence[float], threshold: float, alpha: Threshold = ALPHA_05,
           relation: str = ">", unit: str = "seed") -> ReplicateTest:
    """One-sample one-sided t test (scipy.stats.ttest_1samp) of one value per replicate
    against ``threshold``: the replicates' mean on the ``relation`` side. Assumes roughly
    normal replicate values; needs n >= 2 (and a spread: equal values decide nothing)."""
    check(relation in (">", "<"), f"relation must be > or <, got {relation!r}")
    v = _values(values)
    d = (v - threshold) if relation == ">" else (threshold - v)
    n, k = len(d), int((d > 0).sum())
    if n < 2 or float(np.std(d)) == 0.0:
        return ReplicateTest("one-sided t test", unit, n, k, 1.0, 1.0, alpha, False, max(n, 2) + 1,
                          1.0)
    p = float(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    p_against = float(stats.ttest_1samp(d, 0.0, alternative="less").pvalue)
    return ReplicateTest("one-sided t test", unit, n, k, p, p_against, alpha, True, 2)


@dataclass(frozen=True)
class Interval:
    """An interval of a replicate statistic with its method and replicate count; ``refused``
    (with why) where the replicates cannot support one, then ``lo``/``hi`` are None."""

    method: str
    n: int
    unit: str
    level: float
    lo: float | None = None
    hi: float | None = None
    refused: str | None = None

    @property
    def bounds(self) -> tuple[float, float] | None:
        return None if self.refused else (self.lo, self.hi)

    def __str__(self) -> str:
        if self.refused:
            return f"no interval ({self.refused})"
        sign = "+" if self.lo < 0 else ""  # signs where the interval spans them
        return (f"{100 * self.level:.0f} % CI [{self.lo:{sign}.3g}, {self.hi:{sign}.3g}] "
                f"({self.method}, {self.n} {self.unit}s)")


def t_interval(values: Sequence[float], level: float = 0.95, unit: str = "seed") -> Interval:
    """Two-sided Student-t interval of the mean over replicates (scipy.stats.t); refused
    for fewer than 2."""
    v = _values(values)
    n = len(v)
    method = "Student-t interval of the mean"
    if not np.all(np.isfinite(v)):
        return Interval(method, n, unit, level, refused="a value is only a bound")
    if n < 2:
        return Interval(method, n, unit, level, refused=f"{n} {unit}: no spread to read")
    half = float(stats.t.ppf((1 + level) / 2, n - 1) * v.std(ddof=1) / math.sqrt(n))
    return Interval(method, n, unit, level, float(v.mean()) - half, float(v.mean()) + half)


def distinct_resamples(n: int) -> int:
    """Distinct bootstrap resamples (multisets) of n values: C(2n − 1, n)."""
    return math.comb(2 * n - 1, n)


def bootstrap_interval(values: Sequence[float], level: float = 0.95, draws: int = 10_000,
                       seed: int = 0, unit: str = "seed") -> Interval:
    """Percentile bootstrap interval of the mean over replicates (scipy.stats.bootstrap,
    seeded). Refused where the replicates have too few distinct resamples to place each tail
    (fewer than :data:`MIN_TAIL_RESAMPLES` in a (1 − level)/2 tail): 3 seeds have 10."""
    v = _values(values)
    n = len(v)
    method = "percentile bootstrap of the mean"
    distinct = distinct_resamples(n) if n else 0
    need = math.ceil(MIN_TAIL_RESAMPLES / ((1 - level) / 2))
    if distinct < need:
        more = next(m for m in range(max(n, 1), 64) if distinct_resamples(m) >= need)
        return Interval(method, n, unit, level, refused=(
            f"{n} {unit}s have {distinct} distinct resamples, a {100 * level:.0f} % "
            f"percentile interval needs {need}: {more} {unit}s would"))
    r = stats.bootstrap((v,), np.mean, confidence_level=level, n_resamples=draws,
                        method="percentile", rng=np.random.default_rng(seed))
    return Interval(method, n, unit, level, float(r.confidence_interval.low),
                    float(r.confidence_interval.high))


# ---------------------------------------------------------------------------- power
def sign_power(n: int, p_agree: float, alpha: float) -> float:
    """Power of the exact one-sided sign test over n replicates at level ``alpha`` when each
    replicate lands on the claim's side with probability ``p_agree``."""
    crit = next((k for k in range(n + 1) if stats.binom.sf(k - 1, n, 0.5) <= alpha), None)
    return 0.0 if crit is None else float(stats.binom.sf(crit - 1, n, p_agree))


def p_agree_of(mean: float, sd: float) -> float:
    """The probability a replicate lands on the claim's side of the threshold, for replicate
    values normal with this ``mean`` distance from the threshold (on the claim's side: > 0)
    and spread ``sd``."""
    return 1.0 if sd == 0 else float(stats.norm.cdf(mean / sd))


def seeds_for_sign_test(mean: float, sd: float, alpha: float = 0.05, power: float = POWER,
                        most: int = 1000) -> int | None:
    """The fewest replicates for which the sign test reaches ``alpha`` with ``power``, from
    the measured distance ``mean`` of the replicate values from the threshold (claim's side
    > 0) and their spread ``sd``; None if not within ``most`` (the effect is on the other
    side, or too small)."""
    return _fewest_for(p_agree_of(mean, sd), alpha, power, most)


def _fewest_for(q: float, alpha: float, power: float = POWER, most: int = 1000) -> int | None:
    """The fewest replicates whose sign test reaches ``alpha`` with ``power`` when each lands
    on the tested side with probability ``q`` (None at q <= 1/2 or beyond ``most``)."""
    if q <= 0.5:
        return None
    return next((n for n in range(seeds_to_reach(alpha), most + 1)
                 if sign_power(n, q, alpha) >= power), None)


def t_power(n: int, mean: float, sd: float, alpha: float) -> float:
    """Power of the one-sided one-sample t test over n replicates (noncentral t)."""
    if n < 2:
        return 0.0
    if sd == 0:
        return 1.0 if mean > 0 else 0.0
    crit = stats.t.ppf(1 - alpha, n - 1)
    return float(stats.nct.sf(crit, n - 1, mean / sd * math.sqrt(n)))


def seeds_for_t_test(mean: float, sd: float, alpha: float = 0.05, power: float = POWER,
                     most: int = 1000) -> int | None:
    """The fewest replicates for which the one-sided t test reaches ``alpha`` with
    ``power``, from the measured ``mean`` distance (claim's side > 0) and spread ``sd``."""
    if mean <= 0:
        return None
    return next((n for n in range(2, most + 1) if t_power(n, mean, sd, alpha) >= power), None)


def sign_power_from(distances: np.ndarray, alpha: float,
                    power: float = POWER) -> tuple[str | None, int | None]:
    """The power calculation of a sign test from its replicates: ``distances`` (one per
    replicate, > 0 on the claim's side; ± inf allowed) say which side they point to and how
    often a new replicate lands there — from their mean and spread where every one is finite
    (:func:`p_agree_of`), else from their count on that side, shrunk to 1/2 by one
    half-replicate each way (a lower bound that never reads as certainty). Returns the side
    ("for" / "against") and the fewest replicates that decide it with ``power`` at ``alpha``
    (None, None with fewer than 2 replicates or no side)."""
    d = distances[distances != 0]
    if len(d) < 2:
        return None, None
    if np.all(np.isfinite(d)):
        mean, sd = float(d.mean()), float(d.std(ddof=1))
        if mean == 0:
            return None, None
        q = p_agree_of(abs(mean), sd)
        side = "for" if mean > 0 else "against"
    else:
        k = int((d > 0).sum())
        if 2 * k == len(d):
            return None, None
        side = "for" if 2 * k > len(d) else "against"
        q = (max(k, len(d) - k) + 0.5) / (len(d) + 1)
    n = _fewest_for(q, alpha, power)
    return (side, n) if n is not None else (None, None)


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sd with ddof 1) of replicate values: what the power calculation reads."""
    v = _values(values)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def rank_test(a: Sequence[float], b: Sequence[float], alpha: Threshold = ALPHA_05,
              relation: str = ">", unit: str = "seed") -> ReplicateTest:
    """Exact one-sided Mann-Whitney U test (scipy.stats.mannwhitneyu) of two groups of
    independent replicates: ``a`` tends to lie on the ``relation`` side of ``b``. ``k``
    counts the pairs on the claim's side; n is the smaller group (what limits the test):
    even complete separation gives p = 1 / C(n_a + n_b, n_a)."""
    check(relation in (">", "<"), f"relation must be > or <, got {relation!r}")
    x, y = _values(a), _values(b)
    if relation == "<":
        x, y = -x, -y
    n = min(len(x), len(y))
    floor = 1 / math.comb(len(x) + len(y), len(x)) if n else 1.0
    need = next(m for m in range(1, 64) if 1 / math.comb(2 * m, m) <= alpha.value)
    if n == 0:
        return ReplicateTest("exact one-sided Mann-Whitney U test", unit, 0, 0, 1.0, 1.0, alpha,
                          False, need, 1.0)
    k = int(sum((xi > yj) for xi in x for yj in y))
    p = float(stats.mannwhitneyu(x, y, alternative="greater", method="exact").pvalue)
    p_against = float(stats.mannwhitneyu(x, y, alternative="less", method="exact").pvalue)
    return ReplicateTest("exact one-sided Mann-Whitney U test", unit, n, k, p, p_against, alpha,
                      floor <= alpha.value, need, floor,
                      f"{k}/{len(x) * len(y)} pairs of {len(x)} and {len(y)} {unit}s")


def rate_interval(k: int, n: int, level: float = 0.95, unit: str = "seed") -> Interval:
    """Clopper-Pearson (exact) interval of the rate of replicates that show something, from
    ``k`` of ``n`` (scipy.stats.binomtest): what "occasionally" can be, given n seeds."""
    method = "Clopper-Pearson interval of the rate"
    if n < 1:
        return Interval(method, n, unit, level, refused=f"no {unit}")
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return Interval(method, n, unit, level, float(ci.low), float(ci.high))


def seeds_needed(values: Sequence[float], threshold: float, relation: str = ">",
                 alpha: float = 0.05, power: float = POWER) -> dict[str, int | None]:
    """From measured replicate values (one per seed) and the claim's threshold: how many seeds
    a sign test and a t test need to decide the claim's side at ``alpha`` with ``power``
    (``sign``, ``t``), and to decide the other side (``sign_against``, ``t_against``); None
    where the measured effect points the other way (or is too small within 1000)."""
    mean, sd = spread(values)
    d = mean - threshold if relation == ">" else threshold - mean
    return {"sign": seeds_for_sign_test(d, sd, alpha, power),
            "t": seeds_for_t_test(d, sd, alpha, power),
            "sign_against": seeds_for_sign_test(-d, sd, alpha, power),
            "t_against": seeds_for_t_test(-d, sd, alpha, power)}
