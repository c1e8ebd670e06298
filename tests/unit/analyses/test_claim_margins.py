"""Every quick claim reader reports its margin (issue 38): the measured value, what decides the
claim (a threshold, or the other side of a comparison) and the signed distance in the claim's
units, > 0 on the side where it holds; and where the reader can leave a claim undecided at this
level, that case. The readers' verdicts both ways are tested beside each analysis
(tests/unit/analyses/test_copy_claims.py, tests/unit/analyses/test_markov_claims.py, ...); here: their margins."""

from __future__ import annotations

from tests import ROOT_DIR

import ast
import math
from pathlib import Path

import pytest

from analyses import (
    bc_orthogonality,
    copy_bounds,
    duplicated_ngrams,
    length_generalization,
    mamba_decay,
    markov_ablations,
    markov_holdout,
    markov_laplace,
    spectral_lds,
    state_probe,
)
from analyses.claims import Margin, Reading, Undecided, tightest
from analyses.copy_efficiency.claims import claim_fewer_samples, claim_gap_grows
from analyses.markov_holdout import claims as holdout_claims
from analyses.memorization import claims as mem_claims
from analyses.ngram_heads.claims import claim_ablation, claim_match_heads
from analyses.ngram_lookup.claims import (
    LEARNT,
    claim_prefix,
    claim_prefix_length,
    claim_suffix,
)
from analyses.reproduce.plan import PLAN, figure_of
from analyses.stu_induction import claims as stu_claims
from tests.unit.analyses.test_copy_claims import (
    construction_row,
    curves_json,
    dup_json,
    gssm_json,
    heads_json,
    lookup_json,
    reach_json,
)
from tests.unit.analyses.test_markov_claims import _ablation, _bc_row, _laplace, _probe


def margin_of(read: Reading, holds=True) -> Margin:
    """The reading's margin, checked against its verdict: a bool verdict is the margin's
    comparison (the margin is the claim's own reading, not a second one)."""
    assert isinstance(read, Reading)
    m = read.margin
    assert isinstance(m, Margin)
    if isinstance(read[1], bool):
        assert read[1] is holds
        assert m.holds is holds and (m.distance >= 0) is holds or m.distance == 0
    return m


def test_margin_arithmetic_and_text():
    m = Margin("mean a_t", 0.998, ">=", 0.95)
    assert m.holds and m.distance == pytest.approx(0.048)
    low = Margin("deviation", 0.3, "<", 0.25, "nats", interval=(0.28, 0.32))
    assert not low.holds and low.distance == pytest.approx(-0.05)
    assert str(low) == "deviation 0.3 (95 % CI 0.28–0.32) vs < 0.25 nats: -0.05 nats"
    assert str(Margin("error", 0.0, "<=", 0.0)).endswith("+0")  # never "-0"
    assert tightest(Margin("a", 0.99, ">=", 0.9), Margin("b", 0.42, "<", 0.45)).quantity == "b"
    assert Margin("x", 1, ">", 1).to_dict()["distance"] == 0.0
    with pytest.raises(Exception, match="relation"):
        Margin("x", 1, "=", 1)


def test_a_reading_is_the_pair_it_always_was():
    r = Reading("text", True, Margin("x", 1, ">", 0))
    text, holds = r
    assert (text, holds) == ("text", True) and r == ("text", True) and r[1] is True
    assert Reading("no run", False).margin is None


# ---------------------------------------------------------------------------- copy paper
def test_ngram_heads_margins():
    m = margin_of(claim_match_heads(heads_json()))
    assert (m.value, m.relation, m.threshold) == (0.98, ">=", 0.5)
    m = margin_of(claim_ablation(heads_json(drop=0.9, random=0.1)))
    assert m.quantity == "random heads' mean drop" and m.threshold == pytest.approx(0.45)
    m = margin_of(claim_ablation(heads_json(drop=0.3)), holds=False)
    assert m.quantity == "string-accuracy drop" and m.distance == pytest.approx(-0.2)


def test_duplicated_ngrams_margin():
    m = margin_of(duplicated_ngrams.claim_flat_then_falls(dup_json([1.0, 0.98, 0.5, 0.2], 3)))
    assert m.threshold == pytest.approx(0.9) and m.value in (1.0, 0.2)
    m = margin_of(duplicated_ngrams.claim_flat_then_falls(dup_json([1.0, 1.0, 1.0, 0.97],
                                                                   None)), holds=False)
    assert m.quantity == "string accuracy at n = 4" and m.distance == pytest.approx(-0.07)


def test_copy_bounds_margins():
    good = {"construction": [construction_row(3, 1000, 0.4), construction_row(4, 1000, 0.01)]}
    assert margin_of(copy_bounds.claim_no_repeat(good)).distance == 0.0  # exact: error 0
    m = margin_of(copy_bounds.claim_lemma_2_4(good))
    assert m.quantity == "error at n = 3" and m.distance == pytest.approx(0.1)
    vacuous = {"construction": [construction_row(3, 1000, 0.9, bound=4.0)]}
    assert copy_bounds.claim_lemma_2_4(vacuous).margin is None  # a bound >= 1 says nothing
    m = margin_of(copy_bounds.claim_gssm_bound(gssm_json([0.1, 0.2, 1.0], [0.0, 0.5, 1.0])),
                  holds=False)
    assert m.distance == pytest.approx(-0.3)
    # the quick run's case: the bound is 0 at every length: n/a, and no margin
    read = copy_bounds.claim_gssm_bound(gssm_json([0.1, 0.2, 0.3], [0.0, 0.0, 0.0]))
    assert read[1] is None and read.margin is None


def test_length_generalization_margins():
    ok = curves_json({"hard_alibi": [1.0, 1.0, 0.9, 0.6], "nope": [1.0, 1.0, 0.3, 0.0]})
    m = margin_of(length_generalization.claim_beyond(ok))
    assert m.quantity.startswith("the others' best") and m.distance == pytest.approx(0.2)
    m = margin_of(length_generalization.claim_twice(ok))
    assert (m.value, m.threshold) == (0.9, 0.5)


def test_copy_efficiency_margin_and_undecided():
    d = reach_json(20, hard_alibi=3200, lstm=None)
    d["train"]["lstm"]["samples_seen"] = 48000
    m = margin_of(claim_fewer_samples(d))
    assert m.value == 15.0 and m.unit == "×" and "lower bound" in m.quantity
    m = margin_of(claim_fewer_samples(reach_json(hard_alibi=3200, lstm=1600)),
                  holds=False)
    assert m.value == 0.5
    read = claim_fewer_samples(reach_json(6, hard_alibi=3200, mamba=1600))
    assert isinstance(read[1], Undecided) and read.margin.value == 0.5


def test_ngram_lookup_margins_and_undecided():
    d = lookup_json({"hard_alibi": [1.0, 0.9, 0.8], "lstm": [1.0, 0.1, 0.0]}, {})
    m = margin_of(claim_suffix(d))
    assert m.value == pytest.approx(0.8) and m.threshold == 0.1
    learnt = lookup_json({}, {"hard_alibi": [1.0, 0.9, 0.9], "lstm": [0.4, 0.1, 0.0]})
    assert margin_of(claim_prefix(learnt), holds=False).value < -0.1
    # no model learnt the task: undecided, and the margin says how far from learnt
    read = claim_prefix(lookup_json({}, {"hard_alibi": [0.2, 0.1, 0.1],
                                         "lstm": [0.2, 0.1, 0.1]}))
    assert isinstance(read[1], Undecided)
    assert read.margin.threshold == LEARNT and read.margin.distance < 0


# ---------------------------------------------------------------------------- Markov paper
def test_markov_laplace_margins():
    m = margin_of(markov_laplace.claim_l1(_laplace(0.01, (1e-4, 0.05, 0.01))))
    assert (m.value, m.threshold) == (0.01, 0.05)
    m = margin_of(markov_laplace.claim_vs_transformers(_laplace(0.01, (0.02, 0.05, 0.01))),
                  holds=False)
    assert m.unit == "nats" and m.distance == pytest.approx(-0.01)


def test_state_probe_margins():
    m = margin_of(state_probe.claim_counts(_probe(0.99, 0.96, 0.97, 0.4)))
    assert m.threshold in (0.9, 0.97)
    m = margin_of(state_probe.claim_counts(_probe(0.95, 0.96, 0.97, 0.4)), holds=False)
    assert m.threshold == 0.97
    d = _probe(0.99, 0.8, 0.97, 0.36)
    d["random_init_seeds"] = [{"readout_r2_mean": r} for r in (0.3, 0.36)]
    m = margin_of(state_probe.claim_readout(d))
    assert m.value == pytest.approx(0.44) and m.threshold == pytest.approx(0.06)
    d["random_init_seeds"] = [{"readout_r2_mean": r} for r in (0.3, 0.78)]
    d["random_init_max"]["readout_r2_mean"] = 0.78
    read = state_probe.claim_readout(d)  # above every twin, but within their spread
    assert isinstance(read[1], Undecided) and read.margin.distance < 0
    assert state_probe.claim_readout(_probe(0.99, 0.96, None, None)).margin is None


def test_markov_ablations_margins():
    m = margin_of(markov_ablations.claim_noconv(_ablation(0.001, 0.07, 0.03)))
    assert m.unit == "×" and m.value == pytest.approx(70)
    m = margin_of(markov_ablations.claim_mambazero(_ablation(0.001, 0.07, 0.05)), holds=False)
    assert m.value == pytest.approx(0.05 / 0.07)


def test_bc_orthogonality_margin():
    ok = {"models": [_bc_row("mambazero d=16 N=8 w=2", 10000, 0.05)]}
    m = margin_of(bc_orthogonality.claim_pinned(ok))
    assert (m.value, m.threshold) == (0.05, 0.1)


def test_mamba_decay_margins_and_undecided():
    m = margin_of(mamba_decay.claim_markov({"models": [{"label": "m", "mean": 0.9}]}),
                  holds=False)
    assert m.distance == pytest.approx(-0.05)
    row = {"label": "s", "mean": 0.9, "p_switch": 0.01, "mean_at_switch": 0.16,
           "mean_elsewhere": 0.97, "switch_ratio": 0.165, "switch_ratio_ci": [0.16, 0.17],
           "n_chains": 64}
    m = margin_of(mamba_decay.claim_switch({"models": [row]}))
    assert m.interval == (0.16, 0.17) and m.distance == pytest.approx(0.335)
    wide = {**row, "switch_ratio": 0.5, "switch_ratio_ci": [0.4, 0.6]}
    read = mamba_decay.claim_switch({"models": [wide]})
    assert isinstance(read[1], Undecided) and read.margin.distance == 0.0
    old = {k: v for k, v in row.items() if not k.startswith("switch_ratio")}
    assert isinstance(mamba_decay.claim_switch({"models": [old]})[1], Undecided)


def _holdout(first: float, last: float) -> dict:
    by_t = {"1": {"mean": first}, "300": {"mean": last}}
    return {"held_out": {"by_t": by_t}, "fixed": {"by_t": {"1": first, "300": last}},
            "setting": {"steps": 1500}}


def test_markov_holdout_margins_and_undecided():
    for claim in (holdout_claims.claim_shrinks, holdout_claims.claim_fixed_sequence):
        read = claim(_holdout(0.26, 0.32))
        # the quick run is outside Table 7's regime: not decided, with the margin beside it
        assert isinstance(read[1], Undecided)
        assert read.margin.distance == pytest.approx(-0.06)
        assert claim(_holdout(0.3, 0.1)).margin.distance == pytest.approx(0.2)
    # the mean over the held-out chains may hold; one sequence of one seed decides neither way
    # at quick (issue 38: it fell in one seed of the quick recipe and not in another)
    assert holdout_claims.claim_shrinks(_holdout(0.3, 0.1))[1] is True
    read = holdout_claims.claim_fixed_sequence(_holdout(0.3, 0.1))
    assert isinstance(read[1], Undecided) and "moves with the seed" in read[1].reason


# ---------------------------------------------------------------------------- memorization
def test_memorization_margins():
    trends = {"trends": {"width_pairs_error_not_rising": 1.0, "n_pairs_error_not_falling": 0.85,
                         "spearman_error_vs_width": -0.9, "spearman_error_vs_n": 0.9}}
    m = margin_of(mem_claims.claim_trends(trends))
    assert m.value == 0.85 and m.threshold == 0.8
    params = {"trends": {"spearman_min_params_vs_n": 0.7, "n_memorized": 5,
                         "min_params_nondecreasing": False},
              "n_examples": [1, 2, 3, 4, 5], "min_params_non_embedding": [1, 3, 2, 4, 5]}
    m = margin_of(mem_claims.claim_params(params), holds=False)
    assert m.distance == pytest.approx(-0.1)


# ---------------------------------------------------------------------------- spectral paper
def test_spectral_lds_margins(monkeypatch):
    ratios = {"A_alg1_q7/8": 1.05, "B_alg1_q1/2": 2.8, "B_alg2_q1/2": 1.0}
    monkeypatch.setattr(spectral_lds, "_late_ratio", lambda d, key: ratios[key])
    m = margin_of(spectral_lds.claim_region_a({}))
    assert m.distance == pytest.approx(0.05) and m.unit == "×"
    ratios["B_alg1_q1/2"] = 1.4
    m = margin_of(spectral_lds.claim_region_b({}), holds=False)
    assert m.threshold == 1.5


def test_stu_recall_margin_and_undecided():
    row = {"arch": "stu", "train_length": 16, "n_models": 3, "acc_per_model": [[0.9, 0.26]] * 3,
           "longest": {"length": 256, "acc": 0.26, "n": 1536, "seen_lags_acc": 0.29,
                       "p_value_vs_chance": 1e-3}}
    read = stu_claims.claim_recall({"rows": [row], "chance": 0.25, "level": "quick"})
    assert isinstance(read[1], Undecided) and "seeds per training length" in read[1].reason
    assert read.margin.distance == pytest.approx(-0.03)
    above = {**row, "n_models": 8, "acc_per_model": [[0.9, 0.5]] * 8}  # the seed is the unit
    read = stu_claims.claim_recall({"rows": [above], "chance": 0.25, "level": "quick"})
    assert read[1] is True and read.margin.distance == pytest.approx(0.21)


def margin_tested(tests_dir: Path = ROOT_DIR / "tests") -> dict[str, set[str]]:
    """Each name a test function in ``tests_dir`` (and its folders) refers to, where that test reads a margin
    (``margin_of`` or ``.margin``): name -> the test files. A claim reader's name among them
    has a margin test, here or beside its analysis."""
    found: dict[str, set[str]] = {}
    for path in sorted(tests_dir.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
                if names & {"margin", "margin_of"}:
                    for name in names:
                        found.setdefault(name, set()).add(path.name)
    return found


def without_margin_test(plan, tested: dict[str, set[str]]) -> list[str]:
    """One line per analysis of ``plan`` none of whose claim readers has a margin test."""
    bad = []
    for name in plan:
        readers = [getattr(c.measure, "__name__", "?") for c in figure_of(name).claims]
        if not any(r in tested for r in readers):
            bad.append(f"{name} (in PLAN, analyses/reproduce/plan.py): no test reads the margin "
                       f"of any of its claims ({', '.join(readers) or 'none'}); add one beside "
                       "the analysis or here (margin_of(reader(json)))")
    return bad


def test_every_planned_analysis_has_its_claims_margins_tested():
    """The plan's analyses (PLAN: the one list) each have a reader whose margin a test reads,
    found by the reader's name in the tests, so a new paper adds its analysis to PLAN and its
    margin tests beside it, and no list here."""
    tested = margin_tested()
    assert not without_margin_test(PLAN, tested), "\n".join(without_margin_test(PLAN, tested))
    assert {"claim_match_heads", "claim_recall", "claim_trends"} <= set(tested)
    # the check can fail: with no test found, every planned analysis is named, beside PLAN
    bad = without_margin_test(PLAN[:2], {})
    assert len(bad) == 2 and all("PLAN" in b for b in bad) and PLAN[0] in bad[0]


# ---------------------------------------------------------------------------- medium readers
def test_medium_readers_margins():
    """The readers of the levels above quick give their margins too (and their undecided
    cases keep theirs): hand-made results as their own tests build them."""
    import numpy as np

    from tests.unit.analyses.test_copy_efficiency_medium import medium_json as copy_medium
    from tests.unit.analyses.test_markov_holdout import _run
    from tests.integration.test_memorization import search_json
    from tests.integration.test_ngram_lookup_medium import prefix_json
    from tests.integration.test_stu_analysis import medium_json as stu_medium

    # Markov hold-out (medium: several seeds, Table 7's steps not reached -> undecided)
    d = markov_holdout.combine([_run([0.38, 0.1, 0.007, 0.001], [0.25, 0.02, 0.01, 0.005], 0.25),
                                _run([0.36, 0.1, 0.006, 0.002], [0.25, 0.02, 0.01, 0.006], 0.25)])
    for claim in (holdout_claims.claim_in_range, holdout_claims.claim_to_zero,
                  holdout_claims.claim_loss_converges, holdout_claims.claim_restricted):
        read = claim(d)
        assert isinstance(read.margin, Margin), claim.__name__
        if isinstance(read[1], bool):
            assert read.margin.holds is read[1]
    m = holdout_claims.claim_to_zero(d).margin  # the seeds' mean, its interval, Table 2's 0.002
    assert m.value == pytest.approx(0.0015) and m.threshold == pytest.approx(0.002)
    assert m.interval[0] < 0.0015 < m.interval[1]
    # copy efficiency: the smallest mean log ratio in the regime; the smallest mean slope
    fewer = claim_fewer_samples(copy_medium({5: {"mamba": [2.0, 3.0],
                                                 "lstm": [1.5, None]}}))
    assert fewer.margin.value == pytest.approx(math.log(1.5)) and fewer.margin.threshold == 0
    growing = {L: {"mamba": [L / 2 * (1 + 0.1 * s) for s in range(5)]} for L in (4, 6, 8, 10)}
    grows = claim_gap_grows(copy_medium(growing))
    assert grows[1] is True and grows.margin.value > 0 and grows.margin.threshold == 0
    # prefix lookup length generalisation (medium)
    d = {**prefix_json({"hard_alibi": [1.0, 0.5, 0.2], "lstm": [1.0, 0.95, 0.92]}),
         "level": "medium"}
    m = margin_of(claim_prefix_length(d))
    assert m.value == pytest.approx(0.92) and m.threshold == 0.9
    unlearnt = {**prefix_json({"hard_alibi": [0.5, 0.2, 0.2], "lstm": [0.6, 0.2, 0.1]}),
                "level": "medium"}
    read = claim_prefix_length(unlearnt)
    assert isinstance(read[1], Undecided) and read.margin.value == pytest.approx(0.6)
    # memorization's shape claims: the exponent with its interval
    linear = search_json((1e4, 9e4, (0.85, 1.1)))
    m = mem_claims.claim_linear(linear).margin
    assert m.interval == (0.85, 1.1) and m.threshold == 0.5 and m.holds
    read = mem_claims.claim_concave_small(search_json((1e4, 9e4, (0.85, 1.1)),
                                                      small=(0.9, (0.6, 1.2))))
    assert isinstance(read[1], Undecided) and read.margin.interval == (0.6, 1.2)
    # STU at medium
    d = stu_medium({"stu": [0.3, 0.95, 0.4, 0.35], "transformer (hard_alibi)": [0.3, 0.3],
                    "mamba2": [0.2, 0.2], "stu (no norm, <BLANK> = 0)": [0.3, 0.3],
                    "stu (shared mixture)": [0.3, 0.3]},
                   at_L={"stu (shared mixture)": [0.5, 0.55]})
    assert margin_of(stu_claims.claim_generalise(d)).value == 0.95
    assert margin_of(stu_claims.claim_vs_baselines(d)).value == pytest.approx(
        float(np.median([0.3, 0.95, 0.4, 0.35])) - 0.3)
    assert stu_claims.claim_padding(d).margin.threshold == 0  # padded − as is, over seeds
    assert stu_claims.claim_padding(d).margin.value == pytest.approx(0.45)
    assert stu_claims.claim_blank_zero(d).margin.value == pytest.approx(-0.45)
    assert stu_claims.claim_shared_mixture(d).margin.value == pytest.approx(0.525)  # seeds' mean


def test_the_seeds_table_marks_a_verdict_that_flips(tmp_path):
    """analyses.reproduce.seeds: claim x seed -> value and verdict, and whether the verdict
    is the same in every seed."""
    import json

    from analyses.reproduce import seeds

    def run(name, mean):
        out = tmp_path / name
        out.mkdir()
        (out / "mamba_decay.json").write_text(json.dumps({"models": [
            {"label": "markov/mamba2", "mean": mean}]}))
        return out

    outs = [run("s0", 0.99), run("s1", 0.97), run("s2", 0.9)]
    text = seeds.table(outs, ["0", "1", "2"])
    row = next(line for line in text.splitlines() if "a_t ≈ 1 on Markov data" in line)
    assert "| 0.99 (holds) | 0.97 (holds) | 0.9 (does not hold) | NO |" in row
    assert "-0.05 (mean a_t >= 0.95)" in row
    md = tmp_path / "t.md"
    assert seeds.main([*map(str, outs[:2]), "--md", str(md)]) == 0
    assert "| yes |" in md.read_text()
    assert seeds.main([str(tmp_path / "nowhere")]) != 0
