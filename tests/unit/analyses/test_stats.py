"""analyses.stats (issue 46): tests whose unit is the replicate, intervals that refuse where
the replicates cannot support them, thresholds that say where they come from, and the power
calculation the seed counts are sized with."""

from __future__ import annotations

import math

import pytest

from analyses import stats
from analyses.claims import Undecided
from seqprobe.errors import InputError


def test_sign_test_counts_replicates_and_refuses_too_few():
    # identical values: the seed count alone decides (2^-n against alpha)
    for n, decides in ((3, False), (4, False), (5, True)):
        t = stats.sign_test([0.6] * n, 0.5, stats.ALPHA_05)
        assert t.k == t.n == n and t.p == pytest.approx(0.5**n)
        assert t.can_decide is decides and t.needed == 5
        v = t.verdict()
        assert v is True if decides else (isinstance(v, Undecided)
                                          and f"{n} seeds cannot decide at α = 0.05" in v.reason
                                          and "at least 5 could" in v.reason)
    assert stats.seeds_to_reach(0.01) == 7 and stats.seeds_to_reach(0.05) == 5
    # the example: 7 of 8 seeds above gives p = 9/256, not decided at 0.01
    t = stats.sign_test([0.6] * 7 + [0.4], 0.5, stats.ALPHA_01)
    assert t.p == pytest.approx(9 / 256) and isinstance(t.verdict(), Undecided)
    assert stats.EITHER_SIDE in t.verdict().reason
    # the other side: all below, "does not hold" (or not, where the claim forbids it)
    t = stats.sign_test([0.4] * 6, 0.5)
    assert t.verdict() is False and isinstance(t.verdict(against=False), Undecided)
    assert stats.sign_test([0.4] * 6, 0.5, relation="<").verdict() is True
    t = stats.sign_test([0.5] * 6, 0.5)  # ties carry no sign
    assert t.n == 0 and not t.can_decide
    t = stats.sign_test([0.6] * 5 + [float("nan")], 0.5)  # a diverged seed is no replicate
    assert t.n == 5 and t.holds and t.diverged == 1 and "+1 seed with no number" in t.agree
    assert t.to_dict()["inputs"] == [[0.6] * 5 + [None]]  # the NaN shown, as JSON holds it


def test_t_test_and_interval():
    t = stats.t_test([0.61, 0.6, 0.62], 0.5)
    assert t.holds and t.p < 0.01
    assert not stats.t_test([0.6, 0.6], 0.5).can_decide  # no spread: nothing to read
    ci = stats.t_interval([1.0, 2.0, 3.0])
    assert ci.lo == pytest.approx(2 - 4.302653 / math.sqrt(3), rel=1e-5)
    assert "Student-t" in str(ci) and "3 seeds" in str(ci)
    assert stats.t_interval([1.0]).refused and stats.t_interval([1.0]).bounds is None


def test_bootstrap_refuses_what_three_seeds_cannot_resample():
    assert [stats.distinct_resamples(n) for n in (3, 5, 6)] == [10, 126, 462]
    ci = stats.bootstrap_interval([0.1, 0.2, 0.3])
    assert ci.bounds is None and "7 distinct resample means, 0 in a 2.5 % tail" in ci.refused
    assert "6 seeds with distinct values would" in ci.refused and str(ci).startswith("no interval")
    ci = stats.bootstrap_interval([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    assert 0.1 < ci.lo < 0.4 < ci.hi < 0.7 and "percentile bootstrap" in str(ci)
    seeded = [0.13, 0.2, 0.37, 0.41, 0.55, 0.6]
    assert stats.bootstrap_interval(seeded).bounds == stats.bootstrap_interval(seeded).bounds
    assert stats.bootstrap_interval(seeded).bounds is not None
    assert stats.bootstrap_interval([0.1] * 7 + [0.3]).refused  # 9 means, none in a tail


def test_rank_test_and_rate():
    t = stats.rank_test([0.3] * 4, [1.0] * 4)
    assert t.fails and t.verdict() is False and t.floor == pytest.approx(1 / 70)
    v = stats.rank_test([0.3] * 2, [1.0] * 2).verdict()
    assert isinstance(v, Undecided) and "2 seeds a group cannot decide" in v.reason
    assert stats.rank_test([0.9] * 4, [0.3] * 4).holds
    r = stats.rate_interval(0, 8)
    assert r.lo == 0 and r.hi == pytest.approx(1 - 0.025 ** (1 / 8))


def test_power_calculation():
    # all replicates certain to agree: the sign test's floor; a t test needs 2
    assert stats.seeds_for_sign_test(1.0, 0.0, 0.05) == 5
    assert stats.seeds_for_sign_test(1.0, 0.0, 0.01) == 7
    assert stats.seeds_for_sign_test(-1.0, 0.5) is None  # on the other side
    n = stats.seeds_for_sign_test(0.5, 1.0, 0.05)  # P(agree) = Φ(0.5) = 0.69
    assert stats.sign_power(n, stats.p_agree_of(0.5, 1.0), 0.05) >= 0.8
    assert stats.sign_power(n - 1, stats.p_agree_of(0.5, 1.0), 0.05) < 0.8 or n == 5
    # the t test at effect size 1: the textbook n (one-sided 0.05, 80 %) is 8
    assert stats.seeds_for_t_test(1.0, 1.0, 0.05) == 8
    assert stats.t_power(8, 1.0, 1.0, 0.05) >= 0.8 > stats.t_power(7, 1.0, 1.0, 0.05)
    assert stats.spread([1.0, 3.0]) == (2.0, pytest.approx(math.sqrt(2)))


def test_threshold_says_where_it_comes_from():
    th = stats.Threshold(0.002, "Table 2 at t = 300")
    assert str(th) == "0.002 (Table 2 at t = 300)"
    with pytest.raises(InputError):
        stats.Threshold(0.1, " ")
    assert "no level in the paper" in stats.ALPHA_05.source


def test_sign_test_carries_its_design():
    """Each sign test says which side its replicates point to and how many replicates a run
    needs to decide it with 80 % assurance (from the counts: a uniform prior updated by the
    pilot); a reader's "too few" verdict repeats it."""
    up = stats.sign_test([0.4, 0.5, 0.45], 0.0)
    a, b = 4, 1  # Beta(1 + 3, 1 + 0)
    assert up.power_side == "for" and up.power_n > 5
    assert stats.sign_assurance([up.power_n], a, b, 0.05)[0] >= stats.POWER
    assert stats.sign_assurance([up.power_n - 1], a, b, 0.05)[0] < stats.POWER
    assert f"{up.power_n} seeds decide the claim" in stats.too_few(up).reason
    down = stats.sign_test([-0.4, -0.5, -0.45], 0.0)
    assert down.power_side == "against" and "against the claim" in down.power_text()
    assert down.power_n == up.power_n  # the same evidence, the other side
    # 2 of 3: a 31 % chance the other side is true — no count reaches 80 % assurance
    noisy = stats.sign_test([0.3, -0.1, 0.2], 0.0)
    assert noisy.power_n is None and "no seed count" in noisy.power_text()
    bound = stats.sign_test([1.2, float("inf"), 2.0], 1.0)
    assert bound.power_n == up.power_n  # a bound counts as its side, like any other
    assert stats.sign_test([1.0, -1.0], 0.0).power_n is None  # no side
    assert up.to_dict()["power_n"] == up.power_n and up.to_dict()["unit"] == "seed"


def test_seed_counts_do_not_grow_with_the_evidence():
    """Issue 54: the count from [2, 3, 4], [2, 3, 10] and [2, 3, 100] against 1 was 5, 13
    and 30 (observed power from the seeds' own spread): more evidence asked for more seeds.
    A design from the counts gives one number for all three, and more agreeing seeds never
    ask for more."""
    counts = [stats.sign_test(v, 1).power_n for v in ([2, 3, 4], [2, 3, 10], [2, 3, 100])]
    assert counts[0] is not None and counts == [counts[0]] * 3
    by_k = [stats.design_sign(k, 8, 0.05).n for k in range(5, 9)]
    assert all(x is None or y is not None and y <= x for x, y in zip(by_k, by_k[1:], strict=False))
    assert stats.design_sign(8, 8, 0.05).n < counts[0]  # 8 of 8 ask fewer than 3 of 3
    # sized at the level the verdict uses: a Bonferroni/Holm level asks for more
    assert stats.design_sign(3, 3, 0.05 / 6).n > stats.design_sign(3, 3, 0.05).n
    t = stats.sign_test([2, 3, 4], 1, stats.Threshold(0.05 / 6, "Bonferroni over 6"))
    assert t.design.alpha == pytest.approx(0.05 / 6) and f"α = {0.05 / 6:.3g}" in t.power_text()


def test_design_is_fast():
    """Issue 56 item 7: a sign test on 6 seeds took 9.6 s (its power search scanned to 1000
    seeds one by one); the search is one vectorised pass."""
    import time

    t0 = time.perf_counter()
    for v in ([1, 2, -1, 3, 4, 5], [1, -1, 2, -2, 3, 4]):
        stats.sign_test(v, 0)
    assert stats.seeds_for_sign_test(0.05, 1.0) is None  # beyond 1000: searched, not scanned
    assert time.perf_counter() - t0 < 2.0


def test_seeds_needed_says_what_a_pilot_cannot_estimate():
    """Issue 56 item 7: seeds_needed([0, 0, 0], 0.9) answered 5 seeds each way. Every seed
    is below 0.9: the sign test sizes a run against the claim and none for it; the three
    equal values have no spread, so the t test's effect is not estimable — it says so."""
    need = stats.seeds_needed([0, 0, 0], 0.9)
    assert need["sign"] is None and need["sign_against"] is not None
    assert need["t"] is None and need["t_against"] is None
    assert "not estimable" in need["why"]["t"]
    assert stats.seeds_for_sign_test(-0.9, 0.0) is None  # no spread is no certainty for it


def test_rank_test_floor_known_before_data():
    """Issue 54: 3 against 3 seeds give at best p = 1/20 = 0.05, and a test holds at p < α:
    at α = 0.05 it cannot decide, whatever the data (it read "either side")."""
    t = stats.rank_test([4, 5, 6], [1, 2, 3])
    assert t.floor == pytest.approx(0.05) and t.p == pytest.approx(0.05)
    assert not t.can_decide and not t.holds
    v = t.verdict()
    assert isinstance(v, Undecided) and "cannot reach it" in v.reason
    assert stats.EITHER_SIDE not in v.reason
    assert stats.rank_test([4, 5, 6], [1, 2, 3], stats.Threshold(0.051, "x")).holds
    # 8 against 3 already reach 1/165: decided, no "at least 5 could"
    t = stats.rank_test(list(range(10, 18)), [1, 2, 3])
    assert t.can_decide and t.holds and t.floor == pytest.approx(1 / 165)
    # 3 against 2 cannot reach 0.05 (1/10); one more in the smaller group can (1/20 is not
    # below 0.05, so the count holds the larger group fixed: 3 + 3 → 1/20, not enough)
    t = stats.rank_test([4, 5, 6], [1, 2])
    assert not t.can_decide and t.needed == 4 and "at least 4 in the smaller group" in \
        stats.too_few(t).reason and "groups of 3 and 2 seeds" in stats.too_few(t).reason


def test_rank_test_bookkeeping():
    """Pairs counted over all pairs (it read "3/2 on the claim's side"), a side where 16/16
    pairs agree (it read "no side"), NaN counted and shown, no NaN p at 600 vs 600."""
    t = stats.rank_test([0.9, 0.5, 0.95], [0.3, 0.6])
    assert (t.k, t.pairs) == (5, 6) and t.agree.startswith("5/6 pairs of 3 and 2 seeds")
    t = stats.rank_test([0.9] * 4, [0.3] * 4)
    assert t.agree.startswith("16/16 pairs") and t.power_side == "for" and t.power_n
    t = stats.rank_test([0.9, 0.8, float("nan")], [0.3, 0.2])
    assert t.diverged == 1 and "+1 seed with no number" in t.agree
    import numpy as np

    r = np.random.default_rng(0)
    t = stats.rank_test(r.normal(size=600) + 0.3, r.normal(size=600))
    assert math.isfinite(t.p) and t.holds and "normal-approximation" in t.method
    t = stats.rank_test([1, 2, 3, 4], [2, 0, 0, 0])  # ties between groups: the approximation
    assert math.isfinite(t.p) and t.k == 14.5 and "normal-approximation" in t.method


def test_bootstrap_counts_distinct_means():
    """[0, 0, 0, 1, 1, 1] has 462 resample multisets but 7 distinct means: refused."""
    assert stats.distinct_means([0, 0, 0, 1, 1, 1]) == 7
    assert stats.distinct_means([0.1, 0.2, 0.3]) == 7  # equally spaced: sums coincide
    assert stats.distinct_means([0.1, 0.25, 0.3]) == 10
    ci = stats.bootstrap_interval([0, 0, 0, 1, 1, 1])
    assert ci.bounds is None and "7 distinct resample means, 1 in a 2.5 % tail" in ci.refused


def test_log_t_test_on_ratios():
    """A positive, skewed ratio is tested on the log scale: 2× and ½× weigh the same."""
    t = stats.log_t_test([2.0, 0.5, 2.0, 0.5], 1.0)
    assert t.p == pytest.approx(0.5) and "log" in t.method
    t = stats.log_t_test([1.5, 2.2, 1.8], 1.0)
    assert t.holds and t.to_dict()["inputs"] == [[1.5, 2.2, 1.8]] and t.threshold == 1.0
    assert not stats.log_t_test([1.5, float("inf"), 1.8]).can_decide  # a bound has no log
    with pytest.raises(InputError):
        stats.log_t_test([1.0, -1.0])


def test_holm_is_one_rule_for_any_of():
    """Holm's step-down: the smallest p at α/m, the next at α/(m − 1), …; after the first
    that does not reject, none does."""
    ts = [stats.sign_test([1.0] * n, 0.0) for n in (8, 6, 3)]  # p = 1/256, 1/64, 1/8
    out = stats.holm(ts)
    assert [round(t.alpha.value, 4) for t in out] == [round(0.05 / 3, 4), 0.025, 0.05]
    assert [t.holds for t in out] == [True, True, False]
    assert "Holm over 3" in out[0].alpha.source
    out = stats.holm([stats.sign_test([1.0] * 5, 0.0)] * 2)  # 1/32 is not below 0.05/2
    assert not any(t.holds for t in out) and {t.alpha.value for t in out} == {0.025}
    assert not out[0].can_decide  # 5 seeds cannot reach 0.025: the floor is checked there
    # three after a stop: read at the stop's level, none rejects
    ts = [stats.sign_test([1.0] * 5, 0.0)] * 3
    assert not any(t.holds for t in stats.holm(ts))
    assert stats.holm(ts[:1]) == ts[:1]
