"""markov_holdout (App. E.5, Table 2): the training prior's Bayes predictor, seeds combined,
and the medium claims read on hand-made results (each can say yes and no)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch
from scipy.integrate import quad

from analyses import markov_holdout as mh
from analyses.claims import Undecided
from analyses.markov_holdout.claims import (
    SMALL,
    claim_finding,
    claim_fixed_sequence,
    claim_in_range,
    claim_loss_converges,
    claim_per_state_in,
    claim_per_state_out,
    claim_restricted,
    claim_shrinks,
    claim_to_zero,
    setting_text,
)
from models.checkpoint.write import save_checkpoint
from models.constructions import mambazero_add_beta, mambazero_checkpoint
from models.ssm.mamba2 import MARKOV_PAPER_MODEL
from probes import markov as probes_markov
from seqprobe.errors import InputError
from tasks.add_beta import add_beta_counts


def _posterior_mean(n0: float, n1: float, lo: float, hi: float) -> float:
    def f(p):
        return p**n1 * (1 - p) ** n0  # Beta(1, 1) prior
    return quad(lambda p: p * f(p), lo, hi, epsabs=0)[0] / quad(f, lo, hi, epsabs=0)[0]


@pytest.mark.parametrize("seq, rng", [([0, 1] * 6, (0.0, 0.5)), ([0, 0, 0, 1, 1, 0, 1], (0.0, 0.5)),
                                      ([1, 1, 1, 0, 1, 1], (0.5, 1.0)), ([0, 1] * 40, (0.0, 0.5))])
def test_restricted_probs_is_the_conditioned_posterior_mean(seq, rng):
    x = torch.tensor([seq])
    r = probes_markov.restricted_probs(x, 1, 1.0, rng)[0]
    n = add_beta_counts(x, 2, 1)[0]
    for i in range(len(seq)):
        want = _posterior_mean(float(n[i, 0]), float(n[i, 1]), *rng)
        assert abs(float(r[i]) - want) < 1e-9
    assert float(r.min()) >= rng[0] and float(r.max()) <= rng[1]


def test_restricted_probs_far_outside_the_range_sits_at_its_end():
    # 2000 transitions 0 -> 1 under [0, 0.5]: the conditioned mass underflows; the posterior
    # ∝ p^2000 on [0, 0.5] has mean 0.5 · 2001 / 2002
    x = torch.tensor([[0, 1] * 2001])
    r = float(probes_markov.restricted_probs(x, 1, 1.0, (0.0, 0.5))[0, -2])
    assert abs(r - 0.5 * 2001 / 2002) < 1e-6


def _run(held: list[float], inr: list[float], mr: float, rq: float = 0.27,
         gap: float = 0.002, fixed: list[float] | None = None) -> dict:
    ts = (1, 50, 100, 300)

    def tab(means, mrv, rqv, g):
        dev = [means[-1], means[-1] * 2]
        return {"range": [0, 1], "curve": [0.1, 0.1],
                "by_t": {str(t): {"mean": m, "std": 0.01} for t, m in zip(ts, means, strict=True)},
                "loss": {"model": 0.6 + g, "add_beta": 0.6, "gap": g},
                "per_chain": {"t": 300, "p_hat": [0.55, 0.85], "deviation": dev,
                              "bins": mh.p_hat_bins([0.55, 0.85], dev)},
                "restricted": {"curve": [0.2, 0.2], "loss_gap": 0.1, "by_t": {str(t): {
                    "model_vs_restricted": mrv, "restricted_vs_add_beta": rqv} for t in ts}}}
    fixed = held if fixed is None else fixed
    return {"train_range": [0, 0.5], "order": 1, "beta": 1.0, "seq_len": 300, "n_seqs": 8,
            "seed": 0, "held_out": tab(held, mr, rq, gap), "in_range": tab(inr, 0.01, 0.005, 0.001),
            "fixed": {"range": [0.5, 1], "seed": 2, "tokens": [0, 1, 1], "p_model": [0.5, 0.6, 0.7],
                      "p_beta": [0.5, 0.67, 0.75], "p_hat": {"P(1|0)": 1.0, "P(1|1)": 0.5},
                      "by_t": {str(t): f for t, f in zip(ts, fixed, strict=True)}}}


def test_combine_gives_mean_and_spread_over_seeds():
    d = mh.combine([_run([0.3, 0.2, 0.1, 0.01], [0.2, 0.02, 0.01, 0.01], 0.3),
                    _run([0.3, 0.2, 0.1, 0.03], [0.2, 0.02, 0.01, 0.01], 0.1)])
    row = d["held_out"]["by_t"]["300"]
    assert row["mean"] == pytest.approx(0.02) and row["seeds"] == [0.01, 0.03]
    assert row["seed_sd"] == pytest.approx(np.std([0.01, 0.03], ddof=1))
    assert row["model_vs_restricted"]["mean"] == pytest.approx(0.2)
    assert len(d["runs"]) == 2 and len(d["held_out"]["curves"]) == 2
    assert mh.table(d)[0][2] == "held-out seed sd" and mh.plot(d) is not None


def test_medium_claims_say_yes_and_no():
    # 5 seeds: an exact sign test can reach 0.05 (2^-5); every seed the same (issue 46)
    paper_like = mh.combine([_run([0.38, 0.1, 0.007, 0.001], [0.25, 0.02, 0.01, 0.005], 0.25)
                             for _ in range(5)])
    flat = mh.combine([_run([0.25, 0.28, 0.27, 0.27], [0.25, 0.02, 0.08, 0.01], 0.01)
                       for _ in range(5)])
    for claim, yes_on in ((claim_shrinks, paper_like), (claim_to_zero, paper_like)):
        no_on = flat if yes_on is paper_like else paper_like
        assert claim(yes_on)[1] is True and claim(no_on)[1] is False
        assert "seeds" in claim(yes_on)[0] and "sign test" in claim(yes_on)[0]
        # the same values in 3 seeds: the seed count, not the chains, decides
        v = claim(mh.combine(yes_on["runs"][:3]))[1]
        assert isinstance(v, Undecided) and "3 seeds cannot decide" in v.reason
    assert "Table 2 at t = 300" in claim_to_zero(paper_like)[0]
    assert claim_in_range(paper_like)[1] is True
    assert claim_in_range(flat)[1] is False  # every seed at 0.08 at t = 100
    # our own check has no threshold in the paper: distances with intervals, never a verdict
    for d in (paper_like, flat):
        read = claim_restricted(d)
        assert read[1] is None and "no verdict" in read[0] and "Student-t interval" in read[0]
        assert "does not hold" not in read[0] and read.margin.interval is not None
    # 3 of 5 seeds that do not fall: either side, not a yes
    mixed = mh.combine([_run([0.3, 0.1, 0.01, 0.01], [0.2] * 4, 0.1)] * 2
                       + [_run([0.3, 0.2, 0.3, 0.4], [0.2] * 4, 0.1)] * 3)
    v = claim_shrinks(mixed)[1]
    assert isinstance(v, Undecided) and "either side" in v.reason


def test_fixed_sequence_and_loss_claims_say_yes_and_no():
    shrinks, flat = [0.4, 0.1, 0.01, 0.002], [0.3, 0.3, 0.31, 0.3]
    yes = mh.combine([_run(flat, [0.2] * 4, 0.1, fixed=shrinks, gap=0.004 + i / 1000)
                      for i in range(5)])
    rises = [0.3, 0.3, 0.31, 0.32]
    no = mh.combine([_run(flat, [0.2] * 4, 0.1, fixed=rises, gap=0.05) for _ in range(5)])
    assert claim_fixed_sequence(yes)[1] is True and claim_fixed_sequence(no)[1] is False
    assert "P(1|0) = 1.00" in claim_fixed_sequence(yes)[0]
    assert claim_loss_converges(yes)[1] is True and claim_loss_converges(no)[1] is False
    assert "0.1000" in claim_loss_converges(yes)[0]  # the restricted predictor's gap


def test_p_hat_bins_count_and_average_the_chains_in_each_bin():
    bins = mh.p_hat_bins([0.55, 0.58, 0.95, 1.0, float("nan"), 0.2], [0.1, 0.3, 0.5, 0.7, 9, 0.0])
    by = {(b["lo"], b["hi"]): b for b in bins}
    assert by[(0.5, 0.6)]["n"] == 2 and by[(0.5, 0.6)]["mean"] == pytest.approx(0.2)
    assert by[(0.9, 1.0)]["n"] == 2 and by[(0.9, 1.0)]["mean"] == pytest.approx(0.6)  # 1.0 in
    assert by[(0.0, 0.5)]["n"] == 1 and by[(0.7, 0.8)] == {"lo": 0.7, "hi": 0.8, "n": 0,
                                                          "mean": None}
    assert sum(b["n"] for b in bins) == 5  # the NaN chain (context unseen) is left out


def test_medium_recipes_are_the_papers_model():
    from analyses import zoo
    from analyses.zoo import markov as zoo_markov
    from models.ssm.mamba2 import MARKOV_PAPER_MODEL
    for name in zoo_markov.markov_holdout_medium_recipes():
        model = zoo.recipe(name).parts("medium")["model"]
        assert {k: model[k] for k in MARKOV_PAPER_MODEL} == MARKOV_PAPER_MODEL


def test_medium_claims_are_not_read_from_one_quick_run():
    quick = _run([0.26, 0.31, 0.30, 0.32], [0.25, 0.02, 0.02, 0.02], 0.02)
    assert claim_in_range(quick) is None and claim_to_zero(quick) is None
    assert claim_restricted(quick) is None
    assert claim_shrinks(quick)[1] is False  # the quick reader is unchanged


def _ckpt(path, seed: int, seq_len: int = 60):
    ck = mambazero_checkpoint(mambazero_add_beta(2, 1.0), seq_len)
    ck["train"]["config"] = {"seed": seed}
    ck["task"] = {"name": "markov_holdout", "config": {**ck["task"]["config"], "p_lo": 0.0,
                                                       "p_hi": 0.5}}
    return str(save_checkpoint(ck, path))


def test_medium_compute_averages_seeds_and_refuses_a_seed_twice(tmp_path):
    args = argparse.Namespace(train="medium", level=None, device="cpu", n_seqs=8, seq_len=60,
                              seed=0)
    a, b = _ckpt(tmp_path / "a.pt", 0), _ckpt(tmp_path / "b.pt", 1)
    res = mh._compute(args, [mh.Checkpoint("a", a), mh.Checkpoint("b", b)])
    # Thm 1's construction is add-β itself: zero deviation on both ranges, every seed
    assert res["level"] == "medium" and [r["label"] for r in res["runs"]] == ["a", "b"]
    assert all(r["mean"] < 1e-6 for r in res["held_out"]["by_t"].values())
    rq = res["held_out"]["by_t"]["50"]["restricted_vs_add_beta"]
    assert rq > SMALL  # the training prior's predictor cannot follow held-out chains
    assert claim_restricted(res)[1] is None
    v = claim_to_zero(res)[1]  # 0 off in both seeds, but 2 seeds cannot reach 0.05
    assert isinstance(v, Undecided) and "2 seeds cannot decide" in v.reason
    # the per-state reading on one 512-token sequence, state 0 in range, state 1 out of it:
    # add-β itself is 0 off at every visit of both
    ps = res["per_state"]
    assert ps["p1"]["0"] <= 0.5 <= ps["p1"]["1"] and ps["in_state"] == 0
    assert all(max(v) < 1e-6 for st in ps["states"].values() for v in st["by_visit"].values())
    v = claim_per_state_out(res)[1]  # 2 seeds: a sign test cannot reach 0.05
    assert isinstance(v, Undecided) and "2 seeds cannot decide" in v.reason
    # add-β itself: no loss gap, a zero deviation on the fixed sequence and on every chain
    # (float32 weights: forward's logits are log|v| and their log-softmax rounds the L1
    # normalisation at ~1e-7 a token, so the mean gap is zero only to ~1e-9)
    assert abs(res["held_out"]["loss"]["gap"]["mean"]) < 1e-8
    assert res["held_out"]["restricted"]["loss_gap"] > 0.01  # the training prior pays
    assert isinstance(claim_loss_converges(res)[1], Undecided)  # 2 seeds, as above
    assert max(res["fixed"]["by_t"]["50"]["seeds"]) < 1e-6
    assert max(res["held_out"]["per_chain"]["deviation"]) < 1e-6
    assert min(p for p in res["held_out"]["per_chain"]["p_hat"] if p == p) >= 0.0
    assert len(mh.table(res)) > 5 and mh.plot(res) is not None
    assert "mambazero, not the paper's layers" in claim_shrinks(res)[0]
    with pytest.raises(InputError, match="distinct seeds"):
        mh._compute(args, [mh.Checkpoint("a", a), mh.Checkpoint("a2", a)])
    quick = argparse.Namespace(**{**vars(args), "train": "quick"})
    with pytest.raises(InputError, match="exactly one"):
        mh._compute(quick, [mh.Checkpoint("a", a), mh.Checkpoint("b", b)])


def test_setting_text_names_the_papers_model():
    from models.ssm.mamba2 import MARKOV_PAPER_MODEL
    d = {"setting": {"arch": "mamba2", "model": {"d_model": 16, **MARKOV_PAPER_MODEL},
                     "train_seq_len": 512, "steps": 3200, "batch_size": 16, "lr": 1e-3}}
    assert "the paper's Mamba-2" in setting_text(d) and "3200 steps" in setting_text(d)
    d["setting"]["model"]["norm"] = "rms"
    assert "not the paper's layers" in setting_text(d)
    assert setting_text({}) == ""


def test_empirical_probs_are_the_counts_of_the_current_context():
    from probes.estimators import empirical_probs
    p = empirical_probs(torch.tensor([[0, 1, 1, 0, 1]]), 2, 1)[0, :, 1]
    assert torch.isnan(p[:2]).all()  # contexts 0 and 1 not yet followed by anything
    assert p[2:].tolist() == [1.0, 1.0, 0.5]  # 1→1; 0→1; 1→{1, 0}


def test_a_held_out_no_before_table_7s_steps_is_not_decided():
    """At 2,700 of Table 7's 10,000 steps a held-out deviation that has not fallen is not read
    as "does not hold" (the run is outside the paper's regime); at 10,000 it is; a yes stays
    a yes; what is not matched comes first."""
    flat = [_run([0.25, 0.28, 0.27, 0.27], [0.25, 0.02, 0.08, 0.01], 0.01) for _ in range(5)]
    shrinks = [_run([0.38, 0.1, 0.007, 0.001], [0.25, 0.02, 0.01, 0.005], 0.25)
               for _ in range(5)]

    def at(steps, runs):
        for r in runs:
            r["setting"] = {"arch": "mamba2", "model": dict(MARKOV_PAPER_MODEL),
                            "steps": steps, "batch_size": 16, "lr": 1e-3, "train_seq_len": 512}
        return mh.combine(runs)

    short, full = at(2700, flat), at(10_000, [dict(r) for r in flat])
    for claim in (claim_shrinks, claim_fixed_sequence, claim_to_zero):
        text, v = claim(short)
        assert isinstance(v, Undecided) and "2,700 of Table 7's 10,000" in v.reason
        assert text.startswith("not matched: 2,700 steps (Table 7: 10,000); batch 16")
        assert claim(full)[1] is False
        assert claim(at(2700, shrinks))[1] is True


def _per_state(inside: float, outside: float, seeds: int) -> dict:
    """A medium result's per-state part: every seed has the same deviation (identical
    per-sequence values: only the seed count can move a verdict); state 0 reaches visit 300,
    state 1 visit 100."""
    ps = {"seed": 3, "seq_len": 512, "in_state": 0, "out_state": 1,
          "p1": {"0": 0.3, "1": 0.8},
          "states": {"0": {"visits": 320, "by_visit": {"1": [0.26] * seeds,
                                                       "50": [0.02] * seeds,
                                                       "300": [inside] * seeds}},
                     "1": {"visits": 190, "by_visit": {"1": [0.25] * seeds,
                                                       "100": [outside] * seeds}}}}
    return {"train_range": [0.0, 0.5], "runs": [{}] * seeds, "per_state": ps,
            "held_out": {"by_t": {"1": {"mean": 0.26}, "300": {"mean": 0.21}}}}


def test_per_state_reading_the_seed_count_decides():
    """Table 2 read per state (issue 46): Table 2's value at the visit read (its upper end,
    t = 300: 0.001 + 0.001; t = 100: 0.007 + 0.003) against each seed, a sign test."""
    d = _per_state(0.0015, 0.13, seeds=5)
    read = claim_per_state_in(d)
    assert read[1] is True and "Table 2 at t = 300" in read[0] and "inside" in read[0]
    assert read.margin.threshold == pytest.approx(0.002)
    assert claim_per_state_out(d)[1] is False and "outside" in claim_per_state_out(d)[0]
    assert claim_finding(d)[1] is True  # in-range falls as Table 2, held-out does not
    for claim in (claim_per_state_in, claim_per_state_out, claim_finding):
        v = claim(_per_state(0.0015, 0.13, seeds=3))[1]
        assert isinstance(v, Undecided) and "3 seeds cannot decide" in v.reason
    # the in-range state off Table 2's value in every seed: does not hold, nor the finding
    assert claim_per_state_in(_per_state(0.05, 0.13, seeds=5))[1] is False
    assert claim_finding(_per_state(0.05, 0.13, seeds=5))[1] is False
    # the held-out state reaching Table 2's value too: the finding does not hold
    assert claim_per_state_out(_per_state(0.0015, 0.005, seeds=5))[1] is True
    assert claim_finding(_per_state(0.0015, 0.005, seeds=5))[1] is False
    assert claim_per_state_in({"train_range": [0, 0.5]}) is None  # no per-state part


def test_mixed_kernel_sequence_is_the_tasks_sampler():
    from analyses.markov_holdout.per_state import mixed_kernel_sequence, per_state_deviation
    x, k, task = mixed_kernel_sequence(1.0, (0.0, 0.5), (0.5, 1.0), seed=5, seq_len=4000)
    y, k2, _ = mixed_kernel_sequence(1.0, (0.0, 0.5), (0.5, 1.0), seed=5, seq_len=4000)
    assert torch.equal(x, y) and torch.equal(k, k2) and x.shape == (4000,)
    assert float(k[0, 1]) <= 0.5 <= float(k[1, 1])
    for s in (0, 1):  # the chain follows its kernel
        nxt = x[1:][x[:-1] == s].double()
        assert abs(float(nxt.mean()) - float(k[s, 1])) < 0.06
    dev = per_state_deviation(np.zeros(6), np.array([0.5, 0.1, 0.2, 0.3, 0.4, 0.6]),
                              np.array([0, 1, 1, 0, 1, 0]), visits=(1, 2, 3, 4))
    assert dev["0"] == {"visits": 3, "by_visit": {"1": 0.5, "2": 0.3, "3": 0.6}}
    assert dev["1"]["by_visit"] == {"1": 0.1, "2": 0.2, "3": 0.4}
