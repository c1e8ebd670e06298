"""markov_holdout (App. E.5, Table 2): the training prior's Bayes predictor, seeds combined,
and the medium claims read on hand-made results (each can say yes and no)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch
from scipy.integrate import quad

from analyses import markov_holdout as mh
from models.checkpoint import save_checkpoint
from models.constructions import mambazero_add_beta, mambazero_checkpoint
from tasks.add_beta import add_beta_counts
from tasks.base import TaskError


def _posterior_mean(n0: float, n1: float, lo: float, hi: float) -> float:
    def f(p):
        return p**n1 * (1 - p) ** n0  # Beta(1, 1) prior
    return quad(lambda p: p * f(p), lo, hi, epsabs=0)[0] / quad(f, lo, hi, epsabs=0)[0]


@pytest.mark.parametrize("seq, rng", [([0, 1] * 6, (0.0, 0.5)), ([0, 0, 0, 1, 1, 0, 1], (0.0, 0.5)),
                                      ([1, 1, 1, 0, 1, 1], (0.5, 1.0)), ([0, 1] * 40, (0.0, 0.5))])
def test_restricted_probs_is_the_conditioned_posterior_mean(seq, rng):
    x = torch.tensor([seq])
    r = mh.restricted_probs(x, 1, 1.0, rng)[0]
    n = add_beta_counts(x, 2, 1)[0]
    for i in range(len(seq)):
        want = _posterior_mean(float(n[i, 0]), float(n[i, 1]), *rng)
        assert abs(float(r[i]) - want) < 1e-9
    assert float(r.min()) >= rng[0] and float(r.max()) <= rng[1]


def test_restricted_probs_far_outside_the_range_sits_at_its_end():
    # 2000 transitions 0 -> 1 under [0, 0.5]: the conditioned mass underflows; the posterior
    # ∝ p^2000 on [0, 0.5] has mean 0.5 · 2001 / 2002
    x = torch.tensor([[0, 1] * 2001])
    r = float(mh.restricted_probs(x, 1, 1.0, (0.0, 0.5))[0, -2])
    assert abs(r - 0.5 * 2001 / 2002) < 1e-6


def _run(held: list[float], inr: list[float], mr: float, rq: float = 0.27) -> dict:
    ts = (1, 50, 100, 300)

    def tab(means, mrv, rqv):
        return {"range": [0, 1], "curve": [0.1, 0.1],
                "by_t": {str(t): {"mean": m, "std": 0.01} for t, m in zip(ts, means, strict=True)},
                "restricted": {"curve": [0.2, 0.2], "by_t": {str(t): {
                    "model_vs_restricted": mrv, "restricted_vs_add_beta": rqv} for t in ts}}}
    return {"train_range": [0, 0.5], "order": 1, "beta": 1.0, "seq_len": 300, "n_seqs": 8,
            "seed": 0, "held_out": tab(held, mr, rq), "in_range": tab(inr, 0.01, 0.005)}


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
    paper_like = mh.combine([_run([0.38, 0.1, 0.007, 0.001], [0.25, 0.02, 0.01, 0.005], 0.25),
                             _run([0.36, 0.1, 0.005, 0.002], [0.25, 0.02, 0.01, 0.004], 0.26)])
    flat = mh.combine([_run([0.25, 0.28, 0.27, 0.27], [0.25, 0.02, 0.08, 0.01], 0.01),
                       _run([0.25, 0.27, 0.26, 0.28], [0.25, 0.02, 0.01, 0.01], 0.02)])
    for claim, yes_on in ((mh.claim_shrinks, paper_like), (mh.claim_to_zero, paper_like),
                          (mh.claim_restricted, flat)):
        no_on = flat if yes_on is paper_like else paper_like
        assert claim(yes_on)[1] is True and claim(no_on)[1] is False
        assert "seeds" in claim(yes_on)[0]
    assert mh.claim_in_range(paper_like)[1] is True
    assert mh.claim_in_range(flat)[1] is False  # one seed at 0.08 at t = 100
    # one seed that does not halve is a no, even when the mean does
    mixed = mh.combine([_run([0.3, 0.1, 0.01, 0.01], [0.2] * 4, 0.1),
                        _run([0.3, 0.2, 0.2, 0.2], [0.2] * 4, 0.1)])
    assert mh.claim_shrinks(mixed)[1] is False


def test_medium_claims_are_not_read_from_one_quick_run():
    quick = _run([0.26, 0.31, 0.30, 0.32], [0.25, 0.02, 0.02, 0.02], 0.02)
    assert mh.claim_in_range(quick) is None and mh.claim_to_zero(quick) is None
    assert mh.claim_restricted(quick) is None
    assert mh.claim_shrinks(quick)[1] is False  # the quick reader is unchanged


def _ckpt(path, seed: int, seq_len: int = 60):
    ck = mambazero_checkpoint(mambazero_add_beta(2, 1.0), seq_len)
    ck["train"]["config"] = {"seed": seed}
    ck["task"] = {"name": "markov_holdout", "config": {**ck["task"]["config"], "p_lo": 0.0,
                                                       "p_hi": 0.5}}
    return str(save_checkpoint(ck, path))


def test_medium_compute_averages_seeds_and_refuses_a_seed_twice(tmp_path):
    args = argparse.Namespace(train="medium", preset=None, device="cpu", n_seqs=8, seq_len=60,
                              seed=0)
    a, b = _ckpt(tmp_path / "a.pt", 0), _ckpt(tmp_path / "b.pt", 1)
    res = mh._compute(args, [mh.Checkpoint("a", a), mh.Checkpoint("b", b)])
    # Thm 1's construction is add-β itself: zero deviation on both ranges, every seed
    assert res["level"] == "medium" and [r["label"] for r in res["runs"]] == ["a", "b"]
    assert all(r["mean"] < 1e-6 for r in res["held_out"]["by_t"].values())
    rq = res["held_out"]["by_t"]["50"]["restricted_vs_add_beta"]
    assert rq > mh.SMALL  # the training prior's predictor cannot follow held-out chains
    assert mh.claim_restricted(res)[1] is False and mh.claim_to_zero(res)[1] is True
    with pytest.raises(TaskError, match="distinct seeds"):
        mh._compute(args, [mh.Checkpoint("a", a), mh.Checkpoint("a2", a)])
    quick = argparse.Namespace(**{**vars(args), "train": "quick"})
    with pytest.raises(TaskError, match="exactly one"):
        mh._compute(quick, [mh.Checkpoint("a", a), mh.Checkpoint("b", b)])
