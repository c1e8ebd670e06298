"""Claim statistics: the tests and intervals the claim readers decide with, one
place for all of them.

Three rules, each a referee's objection to an earlier reading:

- **The unit of replication is the independent replicate** — a seed, a chain, a dataset draw
  — never the evaluations of inputs every replicate shares. The 512 evaluation sequences a
  seed is scored on are the same for every seed; pooled, they make one seed's luck look like
  thousands of trials. The functions here take one value per replicate and say which unit
  they counted (``unit``).
- **An interval or a test states its method and refuses to conclude where the replicates
  cannot support it**, known before any data: a percentile bootstrap over 3 seeds has at
  most 10 distinct resample means, too few to place a 2.5 % tail (:func:`bootstrap_interval`
  refuses); a test holds at p < α, so one whose smallest possible p (its floor: 2^-n for a
  sign test, 1 / C(n_a + n_b, n_a) for Mann-Whitney) is not below α reads "too few
  replicates: … cannot reach α" and says how many could.
- **A verdict reads a pre-registered threshold and says where it came from**
  (:class:`Threshold`): the paper's statement where it gives one (with its section), or the
  suite's convention where the paper gives none (then the source says so). An "any of"
  claim reads its tests with Holm's correction (:func:`holm`), the suite's one rule.

Seed counts come from a design, never from the replicates' spread taken as known (observed
power): :func:`design_sign`, :func:`design_t`, :func:`design_rank` size a run from a stated
prior updated by the replicates measured so far (a pilot), at the α the verdict uses, for
80 % assurance — the chance of deciding averaged over what the effect may be — or give no
count and say why (the pilot does not fix a side; the effect is not estimable). Each test
keeps its inputs (``to_dict``): a referee can redo it from the index alone. A replicate with
no number (NaN: a run that diverged) is counted and shown in every test's text, never tested
and never dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analyses.claims import Undecided, Verdict
from seqprobe.config import check

# scipy.stats is imported in each function that tests or sizes (a large import): the analyses'
# claims import this module, and their --help and refusals test nothing.

TOO_FEW = "too few replicates"
EITHER_SIDE = "the replicates fit either side"
POWER = 0.8  # the assurance a seed count is sized for (the conventional 80 %)
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
    no replicate: it is left out of the test, and every test counts it (:func:`_nan_count`)
    and shows it in its text."""
    v = np.asarray([float(x) for x in values], dtype=float)
    return v[~np.isnan(v)]


def _nan_count(*groups: Sequence[float]) -> int:
    return sum(1 for g in groups for x in g if float(x) != float(x))


def _nan_note(n: int, unit: str) -> str:
    return (f" (+{n} {unit}{'' if n == 1 else 's'} with no number — diverged or measured "
            "nothing — counted, not tested)") if n else ""


def _plain(values: Sequence[float]) -> list:
    """Replicate values as JSON can hold them: NaN as None, ± inf as the strings JSON lacks
    numbers for (a referee redoes the test from these)."""
    out = []
    for x in values:
        x = float(x)
        out.append(None if x != x else ("inf" if x == math.inf else "-inf") if math.isinf(x)
                   else x)
    return out


def seeds_to_reach(alpha: float) -> int:
    """The fewest replicates whose sign test can reach ``alpha`` at all: all agreeing gives
    p = 2^-n, and a test holds at p < α (strict, as :attr:`ReplicateTest.holds`)."""
    n = max(1, math.ceil(math.log2(1 / alpha) - 1e-12))
    return n + 1 if 0.5 ** n >= alpha else n


# ---------------------------------------------------------------------------- design
@dataclass(frozen=True)
class Design:
    """How many replicates a claim needs, sized before the replicates that decide it: from a
    stated prior effect with its uncertainty, updated by a pilot (the replicates measured
    so far), at the α the verdict uses, for :data:`POWER` assurance — the probability of
    deciding, averaged over what the effect may be (not the power at one plugged-in
    effect). ``side``: "for" the claim or "against" it (the one the pilot points to);
    ``n``: the replicates a run needs (None: the pilot does not fix a side well enough for
    any count to reach the assurance — ``why`` says so); ``how``: the model, in words."""

    side: str | None
    n: int | None
    alpha: float
    how: str
    why: str = ""

    def text(self, unit: str = "seed") -> str:
        if self.n is None:
            return f"no seed count: {self.why}" if self.why else ""
        side = "the claim" if self.side == "for" else "against the claim"
        return (f"{self.n} {unit}s decide {side} at α = {self.alpha:.3g} with "
                f"{100 * POWER:.0f} % power averaged over what the effect may be (assurance; "
                f"{self.how})")

    def to_dict(self) -> dict:
        return {"side": self.side, "n": self.n, "alpha": self.alpha, "how": self.how,
                "why": self.why}


NO_DESIGN = Design(None, None, 0.0, "", "")
MOST = 1000  # the largest replicate count a design searches (vectorised: one pass)


def _sign_crit(ns: np.ndarray, alpha: float) -> np.ndarray:
    """Per n: the fewest agreeing replicates whose exact sign test gives p < alpha
    (n + 1 where none does)."""
    from scipy import stats

    j = stats.binom.ppf(1 - alpha, ns, 0.5)  # smallest j with cdf(j) >= 1 - alpha
    j = np.where(stats.binom.cdf(j, ns, 0.5) <= 1 - alpha, j + 1, j)  # p = sf(j) < alpha
    return j + 1


def sign_assurance(ns: np.ndarray, a: float, b: float, alpha: float) -> np.ndarray:
    """Probability that an exact one-sided sign test over n replicates decides at ``alpha``
    when the rate q at which a replicate lands on the tested side is Beta(a, b): the
    beta-binomial tail at the test's critical count (exact, no plug-in)."""
    from scipy import stats

    ns = np.asarray(ns)
    return stats.betabinom.sf(_sign_crit(ns, alpha) - 1, ns, a, b)


def design_sign(k: int, n: int, alpha: float, prior: tuple[float, float] = (1.0, 1.0),
                power: float = POWER, most: int = MOST) -> Design:
    """The sign test's seed count from a pilot of ``k`` replicates on the claim's side of
    ``n`` with a sign (ties carry none): the rate q at which a new replicate lands on the
    claim's side is ``prior`` (uniform: nothing assumed) updated by the pilot, Beta(a + k,
    b + n − k); the count is the fewest replicates whose test decides the pilot's side at
    ``alpha`` with ``power`` assurance. It depends on the counts only, so it cannot grow
    as the evidence grows (more replicates agreeing, or agreeing by more, never ask for
    more), and it is None where even infinitely many replicates would decide with less
    than ``power`` probability: the chance the pilot's side is the true one is below it."""
    from scipy import stats

    a0, b0 = prior
    if 2 * k == n:
        return Design(None, None, alpha, "", f"{k} of {n} on each side: no side to size for")
    side = "for" if 2 * k > n else "against"
    a, b = (a0 + k, b0 + n - k) if side == "for" else (a0 + n - k, b0 + k)
    how = (f"exact sign test; the rate a seed lands on that side ~ Beta({a:g}, {b:g}): "
           f"a uniform prior and {max(k, n - k)} of {n} seeds")
    limit = float(stats.beta.sf(0.5, a, b))  # the assurance of infinitely many replicates
    if limit < power:
        return Design(side, None, alpha, how, (
            f"{max(k, n - k)} of {n} seeds on one side leave a {100 * (1 - limit):.0f} % "
            f"chance the other side is the true one: no count reaches {100 * power:.0f} % "
            "assurance"))
    ns = np.arange(seeds_to_reach(alpha), most + 1)
    ok = np.nonzero(sign_assurance(ns, a, b, alpha) >= power)[0]
    if not len(ok):
        return Design(side, None, alpha, how, f"more than {most} seeds")
    return Design(side, int(ns[ok[0]]), alpha, how)


_DRAWS = 4000  # posterior draws of a t design (seeded: the count is reproducible)


def design_t(d: np.ndarray, alpha: float, power: float = POWER, most: int = 200,
             seed: int = 0) -> Design:
    """The one-sample t test's count from a pilot of distances ``d`` (> 0 on the claim's
    side; all finite): the mean and sd are not plugged in as known — they are drawn from
    their posterior under the reference prior (σ² ~ (n−1)s²/χ²(n−1), μ | σ ~ N(mean, σ²/n))
    and the count is the fewest replicates whose t test decides the pilot's side with
    ``power`` assurance. None where the pilot cannot estimate the effect (fewer than 2
    replicates, or no spread: equal values say nothing of the sd) or fixes no side."""
    from scipy import stats

    d = np.asarray(d, dtype=float)
    n = len(d)
    if n < 2 or not np.all(np.isfinite(d)):
        return Design(None, None, alpha, "", "a t design needs 2 or more finite values")
    m, s = float(d.mean()), float(d.std(ddof=1))
    if s == 0:
        return Design(None, None, alpha, "", (
            f"{n} equal values: no spread, so the effect in sd units is not estimable — a "
            "sign test (counts only) is the design that can size this"))
    side = "for" if m > 0 else "against"
    m = abs(m)
    how = f"one-sided t test; effect from a pilot of {n}, its mean and sd drawn from the posterior"
    limit = float(stats.t.cdf(m / (s / math.sqrt(n)), n - 1))  # P(the pilot's side is true)
    if limit < power:
        return Design(side, None, alpha, how, (
            f"the pilot of {n} leaves a {100 * (1 - limit):.0f} % chance the other side is the "
            f"true one: no count reaches {100 * power:.0f} % assurance"))
    rng = np.random.default_rng(seed)
    sigma = s * np.sqrt((n - 1) / rng.chisquare(n - 1, _DRAWS))
    effect = (m + sigma / math.sqrt(n) * rng.standard_normal(_DRAWS)) / sigma
    for N in range(2, most + 1):
        crit = stats.t.ppf(1 - alpha, N - 1)
        if float(stats.nct.sf(crit, N - 1, effect * math.sqrt(N)).mean()) >= power:
            return Design(side, N, alpha, how)
    return Design(side, None, alpha, how, f"more than {most} seeds")


def design_rank(x: np.ndarray, y: np.ndarray, alpha: float, power: float = POWER,
                most: int = MOST) -> Design:
    """The Mann-Whitney test's count per group from a pilot: θ = P(a seed of ``x`` lands
    above one of ``y``) ~ Beta(1 + θ̂·m, 1 + (1 − θ̂)·m) with m the smaller group (the pairs
    share their seeds: they carry no more than the smaller group's worth of evidence), power
    per group size by Noether's normal approximation (zero where complete separation cannot
    reach ``alpha``), averaged over θ."""
    from scipy import stats

    nx, ny = len(x), len(y)
    m = min(nx, ny)
    if m == 0:
        return Design(None, None, alpha, "", "a group has no seed")
    theta = float(stats.mannwhitneyu(x, y).statistic) / (nx * ny)  # a tie counts half
    if theta == 0.5:
        return Design(None, None, alpha, "", "the pairs are balanced: no side to size for")
    side = "for" if theta > 0.5 else "against"
    t = max(theta, 1 - theta)
    a, b = 1 + t * m, 1 + (1 - t) * m
    how = (f"exact Mann-Whitney per group of equal size; P(a seed lands on that side of the "
           f"other group's) ~ Beta({a:.3g}, {b:.3g}) from {t * nx * ny:g} of {nx * ny} pairs, "
           f"Noether's approximation")
    limit = float(stats.beta.sf(0.5, a, b))
    if limit < power:
        return Design(side, None, alpha, how, (
            f"the pilot leaves a {100 * (1 - limit):.0f} % chance the other side is the true "
            f"one: no count reaches {100 * power:.0f} % assurance"))
    nodes, weights = np.polynomial.legendre.leggauss(200)
    q = (nodes + 1) / 2
    w = weights / 2 * stats.beta.pdf(q, a, b)
    z = stats.norm.isf(alpha)
    for g in range(2, most + 1):
        if 1 / math.comb(2 * g, g) >= alpha:
            continue
        pw = stats.norm.cdf((q - 0.5) * g * math.sqrt(12 / (2 * g + 1)) - z)
        if float((pw * w).sum()) >= power:
            return Design(side, g, alpha, how)
    return Design(side, None, alpha, how, f"more than {most} seeds a group")


# ---------------------------------------------------------------------------- tests
@dataclass(frozen=True)
class ReplicateTest:
    """One test of replicate values against a threshold: its method, how many replicates
    (``n``, of ``unit``; for two groups the smaller, which limits the test), how many agree
    with the claim's side (``k``: replicates, or for two groups pairs out of ``pairs``), the
    one-sided p-values for the claim's side (``p``) and against it (``p_against``), the level
    (``alpha``: the one the verdict uses, corrected where the reader corrects), and whether
    these replicates can decide at that level at all (``can_decide``: the smallest p the
    design can give, ``floor``, is < α; ``needed``: the fewest that could). ``diverged``:
    replicates with no number (NaN), counted and shown, never tested. ``design``: the seed
    count a run needs (:class:`Design`). ``inputs``: the values tested, so a referee can
    redo the test from the index alone."""

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
    design: Design = NO_DESIGN
    diverged: int = 0
    pairs: int = 0  # for two groups: all pairs (k counts those on the claim's side)
    inputs: tuple = ()  # the values tested, as JSON holds them (see to_dict)
    threshold: float | None = None
    relation: str = ">"

    def __post_init__(self):
        if not self.agree:
            object.__setattr__(self, "agree", f"{self.k}/{self.n} {self.unit}s")

    # the design's side and count, under the names the index reads
    @property
    def power_side(self) -> str | None:
        return self.design.side if self.design.n is not None else None

    @property
    def power_n(self) -> int | None:
        return self.design.n

    @property
    def holds(self) -> bool:
        return self.can_decide and self.p < self.alpha.value

    @property
    def fails(self) -> bool:
        return self.can_decide and self.p_against < self.alpha.value

    def at(self, alpha: Threshold) -> ReplicateTest:
        """The same test at another level (a corrected one): its floor check and its
        design sized there."""
        return _relevel(self, alpha)

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
        power = f"; {self.power_text()}" if self.power_text() else ""
        return Undecided(
            f"{EITHER_SIDE}: {self.agree} on the claim's side, "
            f"{self.method} p = {self.p:.2g} for it, {self.p_against:.2g} against it "
            f"(α = {self.alpha.value:.3g}){power}")

    def text(self, source: bool = False) -> str:
        """"k/n seeds on the claim's side, METHOD p = … vs α = …" (with where α comes from
        where ``source``: say it once per claim, not per row)."""
        return (f"{self.agree} on the claim's side, {self.method} p = {self.p:.2g} vs α = "
                + (str(self.alpha) if source else f"{self.alpha.value:.3g}"))

    def power_text(self) -> str:
        """What the design asks for, in words ('' where it has nothing to say)."""
        return self.design.text(self.unit)

    def to_dict(self) -> dict:
        """The test as the reproduce index records it (its ``replicates`` section), with its
        inputs: a referee can redo it."""
        return {"method": self.method, "unit": self.unit, "n": self.n, "k": self.k,
                "pairs": self.pairs, "agree": self.agree, "diverged": self.diverged,
                "p": self.p, "p_against": self.p_against, "alpha": self.alpha.value,
                "alpha_source": self.alpha.source, "can_decide": self.can_decide,
                "floor": self.floor, "needed": self.needed, "power": POWER,
                "power_side": self.power_side, "power_n": self.power_n,
                "design": self.design.to_dict(), "threshold": self.threshold,
                "relation": self.relation, "inputs": [list(g) for g in self.inputs]}


def too_few(t: ReplicateTest, where: str = "") -> Undecided:
    """"not decided — too few replicates: n seeds cannot decide at α — they cannot reach it
    …", with the number that could and what the design asks for (``where``: the reader's
    own account of it, for a claim of several tests, in place of this test's)."""
    if t.pairs:
        sizes = [len(g) - sum(x is None for x in g) for g in t.inputs] if t.inputs else [t.n]
        who = (f"{t.n} {t.unit}{'' if t.n == 1 else 's'} a group" if len(set(sizes)) == 1
               else f"groups of {sizes[0]} and {sizes[1]} {t.unit}s")
        could = f"at least {t.needed} in the smaller group could"
    else:
        who, could = f"{t.n} {t.unit}{'' if t.n == 1 else 's'}", f"at least {t.needed} could"
    power = f" ({where})" if where else f"; {t.power_text()}" if t.power_text() else ""
    return Undecided(f"{TOO_FEW}: {who} cannot decide at α = {t.alpha.value:.3g} — they "
                     f"cannot reach it ({t.method}: even all agreeing gives p = {t.floor:.2g}, "
                     f"and a test holds at p < α); {could}{power}")


def _sign(v: np.ndarray, values, threshold, alpha, relation, unit) -> ReplicateTest:
    from scipy import stats

    d = (v - threshold) if relation == ">" else (threshold - v)
    k, n = int((d > 0).sum()), int((d != 0).sum())
    ties = len(d) - n
    if n == 0:
        p = p_against = 1.0
    else:
        p = float(stats.binomtest(k, n, 0.5, alternative="greater").pvalue)
        p_against = float(stats.binomtest(k, n, 0.5, alternative="less").pvalue)
    need = seeds_to_reach(alpha.value)
    nan = _nan_count(values)
    tie = f", {ties} tied with the threshold (no sign)" if ties else ""
    return ReplicateTest(
        "exact one-sided sign test", unit, n, k, p, p_against, alpha, n >= need, need,
        0.5 ** n, f"{k}/{n} {unit}s{tie}" + _nan_note(nan, unit),
        design_sign(k, n, alpha.value) if n else NO_DESIGN, nan,
        inputs=(tuple(_plain(values)),), threshold=float(threshold), relation=relation)


def sign_test(values: Sequence[float], threshold: float, alpha: Threshold = ALPHA_05,
              relation: str = ">", unit: str = "seed") -> ReplicateTest:
    """Exact one-sided sign test (binomial, p = 1/2; scipy.stats.binomtest) of one value per
    replicate against ``threshold``: are the replicates on the ``relation`` side of it more
    often than chance? Ties carry no sign and are dropped (as the test is defined) and
    shown. Distribution-free: a seed that lands far above counts as much as one just above
    — for a positive, skewed outcome with a spread to read, :func:`log_t_test` uses more of
    what the seeds measured. Its seed count (:func:`design_sign`) reads the counts only."""
    check(relation in (">", "<"), f"relation must be > or <, got {relation!r}")
    return _sign(_values(values), values, threshold, alpha, relation, unit)


def t_test(values: Sequence[float], threshold: float, alpha: Threshold = ALPHA_05,
           relation: str = ">", unit: str = "seed", method: str = "one-sided t test"
           ) -> ReplicateTest:
    """One-sample one-sided t test (scipy.stats.ttest_1samp) of one value per replicate
    against ``threshold``: the replicates' mean on the ``relation`` side. Assumes roughly
    normal replicate values; needs n >= 2 finite values (and a spread: equal values decide
    nothing)."""
    from scipy import stats

    check(relation in (">", "<"), f"relation must be > or <, got {relation!r}")
    v = _values(values)
    d = (v - threshold) if relation == ">" else (threshold - v)
    n, k = len(d), int((d > 0).sum())
    nan = _nan_count(values)
    extra = dict(inputs=(tuple(_plain(values)),), threshold=float(threshold),
                 relation=relation, diverged=nan)
    agree = f"{k}/{n} {unit}s" + _nan_note(nan, unit)
    if n < 2 or not np.all(np.isfinite(d)) or float(np.std(d)) == 0.0:
        return ReplicateTest(method, unit, n, k, 1.0, 1.0, alpha, False, max(n, 2) + 1, 1.0,
                             agree, design_t(d, alpha.value), **extra)
    p = float(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    p_against = float(stats.ttest_1samp(d, 0.0, alternative="less").pvalue)
    return ReplicateTest(method, unit, n, k, p, p_against, alpha, True, 2, 0.0, agree,
                         design_t(d, alpha.value), **extra)


def log_t_test(ratios: Sequence[float], threshold: float = 1.0, alpha: Threshold = ALPHA_05,
               relation: str = ">", unit: str = "seed") -> ReplicateTest:
    """The t test for a positive, skewed outcome (a ratio, a sample count): on log values
    against log ``threshold``, where a ratio's spread is symmetric and a 2× and a ½× weigh
    the same. A value that is only a bound (± inf, never reached) has no log to average:
    the test refuses (can_decide False) and a censoring-aware test is the reader's choice."""
    v = np.asarray([float(x) for x in ratios], dtype=float)
    check(bool(np.all((v > 0) | np.isnan(v))), "a log t test needs positive values")
    t = t_test(np.log(v), math.log(threshold), alpha, relation, unit,
               "one-sided t test on log values")
    return ReplicateTest(**{**t.__dict__, "inputs": (tuple(_plain(ratios)),),
                            "threshold": float(threshold)})


def binomial_test(k: int, n: int, p0: float, alpha: Threshold = ALPHA_05, relation: str = ">",
                  unit: str = "sequence") -> ReplicateTest:
    """Exact one-sided binomial test (scipy.stats.binomtest) of ``k`` successes in ``n``
    independent trials against the rate ``p0``: for a claim about one replicate (one seed's
    recall, its population of fresh sequences the unit), never about the seeds as a group."""
    from scipy import stats

    check(relation in (">", "<") and 0 <= k <= n and n >= 1 and 0 < p0 < 1,
          f"need 0 <= k <= n, n >= 1, 0 < p0 < 1 and relation > or <, got {k}, {n}, {p0}, "
          f"{relation!r}")
    up = float(stats.binomtest(k, n, p0, alternative="greater").pvalue)
    down = float(stats.binomtest(k, n, p0, alternative="less").pvalue)
    p, p_against = (up, down) if relation == ">" else (down, up)
    floor = float(p0 ** n if relation == ">" else (1 - p0) ** n)
    return ReplicateTest("exact one-sided binomial test", unit, n, k, p, p_against, alpha,
                         floor < alpha.value, n, floor, f"{k}/{n} {unit}s right ({k / n:.3f} "
                         f"vs {p0:.3f})", inputs=((k, n),), threshold=float(p0),
                         relation=relation)


def _relevel(t: ReplicateTest, alpha: Threshold) -> ReplicateTest:
    if t.method == "exact one-sided binomial test":
        (k, n), = t.inputs
        return binomial_test(int(k), int(n), t.threshold, alpha, t.relation, t.unit)
    v = [np.asarray([np.nan if x is None else float(x) for x in g]) for g in t.inputs]
    if t.pairs:
        return rank_test(v[0], v[1], alpha, t.relation, t.unit)
    if t.method.startswith("exact one-sided sign"):
        return sign_test(v[0], t.threshold, alpha, t.relation, t.unit)
    if "log" in t.method:
        return log_t_test(v[0], t.threshold, alpha, t.relation, t.unit)
    return t_test(v[0], t.threshold, alpha, t.relation, t.unit, t.method)


def holm(tests: Sequence[ReplicateTest], against: bool = False) -> list[ReplicateTest]:
    """Holm's step-down correction over a family of tests (the suite's one rule for every
    "any of" claim): the test with the r-th smallest p (r from 0) is read at α / (m − r)
    until one does not reject; it and every test after it are read at that step's level,
    where none can reject (their p is no smaller). Each test comes back at its level, its
    floor check and design sized there. ``against``: order by the p against the claim (the
    family for "every one fails")."""
    m = len(tests)
    if m <= 1:
        return list(tests)
    order = sorted(range(m), key=lambda i: tests[i].p_against if against else tests[i].p)
    out: list = [None] * m
    stop = None
    for r, i in enumerate(order):
        step = r if stop is None else stop
        base = tests[i].alpha
        out[i] = tests[i].at(Threshold(base.value / (m - step),
                                       f"{base.source}; Holm over {m}, step {step + 1}"))
        if stop is None and not (out[i].fails if against else out[i].holds):
            stop = r
    return out


def holm_adjusted(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and does not count as a test),
    for readers that hold p-values rather than :class:`ReplicateTest` (:func:`holm` reads the
    same rule as each test's level):
    sort the m p-values, multiply the i-th smallest by m - i + 1, make them non-decreasing,
    cap at 1. A row is rejected at α when its adjusted p is below α."""
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out


@dataclass(frozen=True)
class Interval:
    """An interval of a replicate statistic with its method and replicate count; ``refused``
    (with why) where the replicates cannot support one, then ``lo``/``hi`` are None."""

    method: str
    n: int
    unit: str
    confidence: float
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
        return (f"{100 * self.confidence:.0f} % CI [{self.lo:{sign}.3g}, {self.hi:{sign}.3g}] "
                f"({self.method}, {self.n} {self.unit}s)")


def t_interval(values: Sequence[float], confidence: float = 0.95, unit: str = "seed") -> Interval:
    """Two-sided Student-t interval of the mean over replicates (scipy.stats.t); refused
    for fewer than 2."""
    from scipy import stats

    v = _values(values)
    n = len(v)
    method = "Student-t interval of the mean"
    if not np.all(np.isfinite(v)):
        return Interval(method, n, unit, confidence, refused="a value is only a bound")
    if n < 2:
        return Interval(method, n, unit, confidence, refused=f"{n} {unit}: no spread to read")
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1) * v.std(ddof=1) / math.sqrt(n))
    return Interval(method, n, unit, confidence, float(v.mean()) - half, float(v.mean()) + half)


def distinct_resamples(n: int) -> int:
    """Distinct bootstrap resamples (multisets) of n distinct values: C(2n − 1, n) — an
    upper bound on the distinct means (:func:`distinct_means`)."""
    return math.comb(2 * n - 1, n)


def _resample_means(v: np.ndarray, cap: int) -> dict[float, float] | None:
    """The exact distribution of a bootstrap resample's mean (value: probability), by n-fold
    convolution of the values' empirical distribution; None once its support passes ``cap``
    (then it has plenty of distinct values: the support only grows draw by draw)."""
    n = len(v)
    u, c = np.unique(v, return_counts=True)
    step = {float(x): k / n for x, k in zip(u, c, strict=True)}
    scale = max(1.0, float(np.abs(u).max()))
    dist = {0.0: 1.0}
    for _ in range(n):
        nxt: dict[float, float] = {}
        for s, p in dist.items():
            for x, q in step.items():
                key = round((s + x) / scale, 11) * scale
                nxt[key] = nxt.get(key, 0.0) + p * q
        if len(nxt) > cap:
            return None
        dist = nxt
    return {s / n: p for s, p in dist.items()}


def distinct_means(values: Sequence[float], cap: int = 5000) -> int:
    """How many distinct means the bootstrap resamples of ``values`` can take (what a
    percentile interval reads: sums that coincide give one mean however many multisets give
    it); ``cap`` + 1 where more than ``cap``."""
    d = _resample_means(np.asarray(values, dtype=float), cap) if len(values) else {}
    return cap + 1 if d is None else len(d)


def _tail_points(values: np.ndarray, confidence: float) -> int:
    """The fewer, over the two (1 − confidence)/2 tails, of the distinct resample means lying in
    the tail (exact distribution; plenty where the support is large)."""
    d = _resample_means(values, 5000)
    if d is None:
        return MIN_TAIL_RESAMPLES
    xs = sorted(d)
    cdf = np.cumsum([d[x] for x in xs])
    tail = (1 - confidence) / 2
    lo = int((cdf <= tail + 1e-12).sum())
    hi = int((1 - np.concatenate([[0.0], cdf[:-1]]) <= tail + 1e-12).sum())
    return min(lo, hi)


def bootstrap_interval(values: Sequence[float], confidence: float = 0.95, draws: int = 10_000,
                       seed: int = 0, unit: str = "seed") -> Interval:
    """Percentile bootstrap interval of the mean over replicates (scipy.stats.bootstrap,
    seeded). Refused where a (1 − confidence)/2 tail of the resample means' exact distribution
    holds fewer than :data:`MIN_TAIL_RESAMPLES` distinct values (distinct means, not
    multisets): 3 seeds have 10 means and none inside a 2.5 % tail; [0, 0, 0, 1, 1, 1] has
    462 multisets but 7 means, one in each tail."""
    from scipy import stats

    v = _values(values)
    n = len(v)
    method = "percentile bootstrap of the mean"
    if not np.all(np.isfinite(v)):
        return Interval(method, n, unit, confidence, refused="a value is only a bound")
    inside = _tail_points(v, confidence) if n else 0
    if inside < MIN_TAIL_RESAMPLES:
        need = math.ceil(MIN_TAIL_RESAMPLES / ((1 - confidence) / 2))
        more = next((m for m in range(max(n, 1), 64) if distinct_resamples(m) >= need), 64)
        return Interval(method, n, unit, confidence, refused=(
            f"{n} {unit}s{_nan_note(_nan_count(values), unit)} give {distinct_means(v)} "
            f"distinct resample means, {inside} in a {100 * (1 - confidence) / 2:g} % tail; a "
            f"percentile interval needs {MIN_TAIL_RESAMPLES} there: "
            + (f"{more} {unit}s with distinct values would" if n < more
               else "the values are too few distinct ones")))
    r = stats.bootstrap((v,), np.mean, confidence_level=confidence, n_resamples=draws,
                        method="percentile", rng=np.random.default_rng(seed))
    return Interval(method, n, unit, confidence, float(r.confidence_interval.low),
                    float(r.confidence_interval.high))


# ---------------------------------------------------------------------------- power
def sign_power(n: int, p_agree: float, alpha: float) -> float:
    """Power of the exact one-sided sign test over n replicates at level ``alpha`` (holding
    at p < α) when each replicate lands on the claim's side with probability ``p_agree``."""
    from scipy import stats

    crit = int(_sign_crit(np.asarray([n]), alpha)[0])
    return 0.0 if crit > n else float(stats.binom.sf(crit - 1, n, p_agree))


def p_agree_of(mean: float, sd: float) -> float:
    """The probability a replicate lands on the claim's side of the threshold, for replicate
    values normal with this ``mean`` distance from the threshold (on the claim's side: > 0)
    and spread ``sd`` (no spread: certain, on the side the mean is on)."""
    from scipy import stats

    if sd == 0:
        return 1.0 if mean > 0 else 0.0 if mean < 0 else 0.5
    return float(stats.norm.cdf(mean / sd))


def seeds_for_sign_test(mean: float, sd: float, alpha: float = 0.05, power: float = POWER,
                        most: int = MOST) -> int | None:
    """A-priori: the fewest replicates for which the sign test reaches ``alpha`` with
    ``power`` at a STATED effect — replicate values normal at distance ``mean`` from the
    threshold (claim's side > 0) with spread ``sd``; None where that effect is on the other
    side or too small within ``most``. Not for the replicates' own mean and sd: that is
    observed power, which treats a guess as known (:func:`design_sign` sizes from a pilot)."""
    return _fewest_for(p_agree_of(mean, sd), alpha, power, most)


def _fewest_for(q: float, alpha: float, power: float = POWER, most: int = MOST) -> int | None:
    """The fewest replicates whose sign test reaches ``alpha`` with ``power`` when each lands
    on the tested side with probability ``q`` (None at q <= 1/2 or beyond ``most``): one
    vectorised pass, no loop over counts."""
    from scipy import stats

    if q <= 0.5:
        return None
    ns = np.arange(seeds_to_reach(alpha), most + 1)
    ok = np.nonzero(stats.binom.sf(_sign_crit(ns, alpha) - 1, ns, q) >= power)[0]
    return int(ns[ok[0]]) if len(ok) else None


def t_power(n: int, mean: float, sd: float, alpha: float) -> float:
    """Power of the one-sided one-sample t test over n replicates (noncentral t)."""
    from scipy import stats

    if n < 2:
        return 0.0
    if sd == 0:
        return 1.0 if mean > 0 else 0.0
    crit = stats.t.ppf(1 - alpha, n - 1)
    return float(stats.nct.sf(crit, n - 1, mean / sd * math.sqrt(n)))


def seeds_for_t_test(mean: float, sd: float, alpha: float = 0.05, power: float = POWER,
                     most: int = MOST) -> int | None:
    """A-priori: the fewest replicates for which the one-sided t test reaches ``alpha`` with
    ``power`` at a STATED effect (``mean`` distance, claim's side > 0, and ``sd``; sd > 0).
    From a pilot's own values use :func:`design_t`, which carries their uncertainty."""
    from scipy import stats

    if mean <= 0 or sd <= 0:
        return None
    ns = np.arange(2, most + 1)
    pw = stats.nct.sf(stats.t.ppf(1 - alpha, ns - 1), ns - 1, mean / sd * np.sqrt(ns))
    ok = np.nonzero(pw >= power)[0]
    return int(ns[ok[0]]) if len(ok) else None


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sd with ddof 1) of replicate values."""
    v = _values(values)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


EXACT_MOST = 30  # the largest group an exact Mann-Whitney is computed for (scipy's exact
# distribution overflows to NaN for large groups; the normal approximation is exact enough)


def rank_test(a: Sequence[float], b: Sequence[float], alpha: Threshold = ALPHA_05,
              relation: str = ">", unit: str = "seed") -> ReplicateTest:
    """One-sided Mann-Whitney U test (scipy.stats.mannwhitneyu) of two groups of independent
    replicates: ``a`` tends to lie on the ``relation`` side of ``b``. Exact for groups up to
    :data:`EXACT_MOST` without ties between them, else the normal approximation with the
    tie correction (never NaN). ``k`` counts the pairs on the claim's side (a tie counts
    half) of all ``pairs``; n is the smaller group (what limits the test). Whether the test
    can reach α is known before any data: even complete separation gives p = 1 / C(n_a +
    n_b, n_a), and a test holds at p < α, so a floor of exactly α cannot decide
    (``needed``: the fewest in the smaller group that could, the larger as it is)."""
    from scipy import stats

    check(relation in (">", "<"), f"relation must be > or <, got {relation!r}")
    x, y = _values(a), _values(b)
    if relation == "<":
        x, y = -x, -y
    nx, ny = len(x), len(y)
    n, big = min(nx, ny), max(nx, ny, 1)
    floor = 1 / math.comb(nx + ny, nx) if n else 1.0
    need = next(m for m in range(1, 64) if 1 / math.comb(big + m, m) < alpha.value)
    nan = _nan_count(a, b)
    extra = dict(inputs=(tuple(_plain(a)), tuple(_plain(b))), relation=relation, diverged=nan,
                 pairs=nx * ny)
    if n == 0:
        return ReplicateTest("one-sided Mann-Whitney U test", unit, 0, 0, 1.0, 1.0, alpha,
                             False, need, 1.0, f"no pairs of {nx} and {ny} {unit}s", **extra)
    ties = len(np.intersect1d(x, y)) > 0
    exact = max(nx, ny) <= EXACT_MOST and not ties
    how = "exact" if exact else "asymptotic"
    p = float(stats.mannwhitneyu(x, y, alternative="greater", method=how).pvalue)
    p_against = float(stats.mannwhitneyu(x, y, alternative="less", method=how).pvalue)
    k = float(stats.mannwhitneyu(x, y).statistic)  # pairs x > y, a tie half
    kk = int(k) if k == int(k) else k
    method = ("exact" if exact else "normal-approximation") + " one-sided Mann-Whitney U test"
    return ReplicateTest(method, unit, n, kk, p, p_against, alpha, floor < alpha.value, need,
                         floor, f"{kk:g}/{nx * ny} pairs of {nx} and {ny} {unit}s"
                         + _nan_note(nan, unit), design_rank(x, y, alpha.value), **extra)


def rate_interval(k: int, n: int, confidence: float = 0.95, unit: str = "seed") -> Interval:
    """Clopper-Pearson (exact) interval of the rate of replicates that show something, from
    ``k`` of ``n`` (scipy.stats.binomtest): what "occasionally" can be, given n seeds."""
    from scipy import stats

    method = "Clopper-Pearson interval of the rate"
    if n < 1:
        return Interval(method, n, unit, confidence, refused=f"no {unit}")
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return Interval(method, n, unit, confidence, float(ci.low), float(ci.high))


def seeds_needed(values: Sequence[float], threshold: float, relation: str = ">",
                 alpha: float = 0.05, power: float = POWER) -> dict:
    """From pilot replicate values (one per seed) and the claim's threshold: how many seeds a
    run needs to decide the claim's side (``sign``, ``t``) or the other side
    (``sign_against``, ``t_against``) at ``alpha`` (the level the verdict uses: pass the
    corrected one) with ``power`` assurance — :func:`design_sign` from the counts on each
    side, :func:`design_t` from the values with their uncertainty. None where the pilot
    sizes nothing on that side; ``why`` says what each None means (e.g. [0, 0, 0] against
    0.9: every seed below, so the sign test sizes a run against the claim; no spread, so the
    t test's effect is not estimable)."""
    v = _values(values)
    d = (v - threshold) if relation == ">" else (threshold - v)
    k, n = int((d > 0).sum()), int((d != 0).sum())
    s = design_sign(k, n, alpha, power=power) if n else Design(
        None, None, alpha, "", "every seed ties with the threshold: no sign to count")
    t = design_t(d, alpha, power)
    out = {"sign": None, "sign_against": None, "t": None, "t_against": None}
    for name, dz in (("sign", s), ("t", t)):
        if dz.n is not None:
            out[name if dz.side == "for" else f"{name}_against"] = dz.n
    out["why"] = {"sign": s.text() or s.why, "t": t.text() or t.why}
    return out
