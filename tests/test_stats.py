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
    assert t.n == 5 and t.holds and "1 seed with no number left out" in t.agree


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
    assert ci.bounds is None and "10 distinct resamples" in ci.refused
    assert "6 seeds would" in ci.refused and str(ci).startswith("no interval")
    ci = stats.bootstrap_interval([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    assert 0.1 < ci.lo < 0.4 < ci.hi < 0.7 and "percentile bootstrap" in str(ci)
    assert stats.bootstrap_interval([0.1] * 7 + [0.3]).bounds == \
        stats.bootstrap_interval([0.1] * 7 + [0.3]).bounds  # seeded


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


def test_gap_grows_decides_with_the_seeds_the_power_calculation_asks_for():
    """Issue 46's done-when: 3 seeds read "not decided"; the power calculation from their
    spread names a count at which the same per-seed change decides."""
    from analyses.copy_efficiency.claims import claim_gap_grows

    def medium(change: list[float]):
        n = len(change)
        return {"level": "medium", "by_length": {str(L): {"ratio_to_reference": {"mamba": {
            "ratio": 1.0, "per_seed": r, "min": min(r), "max": max(r), "all_reached": True}}}
            for L, r in ((10, [2.0] * n), (20, [2.0 + c for c in change]))}}

    measured = [0.11, 0.01, 0.20]  # a per-seed change of the ratio, 3 seeds
    v = claim_gap_grows(medium(measured))[1]
    assert isinstance(v, Undecided) and "3 seeds cannot decide" in v.reason
    need = stats.seeds_needed(measured, 0.0)
    assert need["sign"] >= 5 and need["t"] >= 2 and need["sign_against"] is None
    assert claim_gap_grows(medium([sum(measured) / 3] * need["sign"]))[1] is True


def test_sign_test_carries_its_power_calculation():
    """Each sign test says which side its replicates point to and how many replicates would
    decide that side with 80 % power; a reader's "too few" verdict repeats it."""
    up = stats.sign_test([0.4, 0.5, 0.45], 0.0)
    assert (up.power_side, up.power_n) == ("for", 5)  # certain agreement: the test's floor
    assert "5 seeds decide the claim with 80 % power" in stats.too_few(up).reason
    noisy = stats.sign_test([0.3, -0.1, 0.2], 0.0)
    assert noisy.power_side == "for" and noisy.power_n > 5
    assert stats.sign_power(noisy.power_n, stats.p_agree_of(*stats.spread([0.3, -0.1, 0.2])),
                            0.05) >= stats.POWER
    down = stats.sign_test([-0.4, -0.5, -0.45], 0.0)
    assert down.power_side == "against" and "against the claim" in down.power_text()
    # a bound (a seed that never got there) has no spread: read from the count, never certain
    bound = stats.sign_test([1.2, float("inf"), 2.0], 1.0)
    assert bound.power_side == "for" and bound.power_n > 5
    assert stats.sign_test([1.0], 0.0).power_n is None  # one replicate: no spread to read
    assert stats.sign_test([1.0, -1.0], 0.0).power_n is None  # no side
    assert up.to_dict()["power_n"] == 5 and up.to_dict()["unit"] == "seed"


def test_seeded_readers_hand_their_tests_to_the_index():
    """A seeded claim's Reading carries the (label, test) pairs it decided with."""
    from analyses.copy_efficiency.claims import claim_gap_grows

    d = {"level": "medium", "by_length": {str(L): {"ratio_to_reference": {"mamba": {
        "ratio": 1.0, "per_seed": r, "min": min(r), "max": max(r), "all_reached": True}}}
        for L, r in ((10, [2.0] * 3), (20, [2.1, 2.2, 2.3]))}}
    r = claim_gap_grows(d)
    (label, t), = r.tests
    assert "mamba L=10→20" in label and t.n == 3 and t.power_n == 5
