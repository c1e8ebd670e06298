"""Transition counts (probes/counts.py) against brute force; linear probes (probes/linear.py)."""

import numpy as np
import pytest
import torch

from probes.counts import (
    add_beta_from_counts,
    context_counts,
    count_names,
    current_counts,
    transition_counts,
)
from probes.linear import fit_probe, r2_by_bucket, r2_per_target, split_groups
from seqprobe.errors import InputError
from tasks.add_beta import context_index


def brute_counts(seq, S, k, reset=None):
    """n[t][c][j] by direct enumeration, restarting after ``reset``."""
    T = len(seq)
    out = np.zeros((T, S**k, S))
    for t in range(T):
        start = 0
        if reset is not None:
            hits = [i for i in range(t + 1) if seq[i] == reset]
            start = hits[-1] + 1 if hits else 0
        for i in range(max(start + k, k), t + 1):
            win = seq[i - k : i]
            if any(not (0 <= s < S) for s in win) or not (0 <= seq[i] < S):
                continue
            c = 0
            for s in win:
                c = c * S + s
            out[t, c, seq[i]] += 1
    return out


@pytest.mark.parametrize("S,k", [(2, 1), (3, 1), (2, 2), (3, 3)])
def test_transition_counts_match_brute_force(S, k):
    g = torch.Generator().manual_seed(S * 10 + k)
    x = torch.randint(0, S, (3, 17), generator=g)
    n = transition_counts(x, S, k)
    assert n.shape == (3, 17, S**k, S)
    for b in range(3):
        assert np.array_equal(n[b].numpy(), brute_counts(x[b].tolist(), S, k))
    assert torch.equal(context_counts(x, S, k), n.sum(-1))


def test_reset_token_and_non_symbols():
    S, reset = 2, 2
    x = torch.tensor([[0, 1, 1, 0, 2, 1, 1, 0, 2, 0, 0], [1, 1, 2, 2, 0, 1, 0, 1, 1, 1, 1]])
    n = transition_counts(x, S, 1, reset_token=reset)
    for b in range(2):
        assert np.array_equal(n[b].numpy(), brute_counts(x[b].tolist(), S, 1, reset=reset))
    # without reset: windows through the switch token are skipped, counts keep accumulating
    n2 = transition_counts(x, S, 1)
    for b in range(2):
        assert np.array_equal(n2[b].numpy(), brute_counts(x[b].tolist(), S, 1))
    assert n2[0, -1].sum() > n[0, -1].sum()


def test_context_index_and_current_counts():
    x = torch.tensor([[1, 0, 1, 1, 0]])
    assert context_index(x, 2, 2).tolist() == [[-1, 2, 1, 3, 2]]
    cur = current_counts(x, 2, 1)  # counts of the current symbol's row
    # transitions of 1,0,1,1,0: 1->0, 0->1, 1->1, 1->0
    assert cur[0, 4].tolist() == [0.0, 1.0]  # x_4 = 0: row 0 holds 0->1 once
    assert cur[0, 3].tolist() == [1.0, 1.0]  # x_3 = 1: by t = 3, 1->0 once and 1->1 once
    n = transition_counts(x, 2, 1)
    assert cur[0, 3].tolist() == n[0, 3, 1].tolist()
    assert current_counts(x, 2, 2)[0, 0].tolist() == [0.0, 0.0]  # no full context yet


def test_add_beta_from_counts_is_the_laplace_rule():
    p = add_beta_from_counts(torch.tensor([[3.0, 1.0]]), beta=1.0)
    assert torch.allclose(p, torch.tensor([[4 / 6, 2 / 6]]))
    assert torch.allclose(add_beta_from_counts(torch.zeros(4, 3), 0.5).sum(-1), torch.ones(4))
    with pytest.raises(InputError):
        add_beta_from_counts(torch.zeros(2), 0.0)


def test_count_names():
    assert count_names(2, 1) == ["0->0", "0->1", "1->0", "1->1"]
    assert count_names(2, 2)[:3] == ["00->0", "00->1", "01->0"]


def test_probe_recovers_linear_targets_and_shuffle_control_fails():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 12))
    Y = X @ rng.normal(size=(12, 3)) + 0.5
    groups = np.repeat(np.arange(60), 10)
    res = fit_probe(X, Y, groups, alpha=1e-6)
    assert res.r2.shape == (3,) and res.r2.min() > 0.9999
    assert res.n_train + res.n_test == 600 and res.n_test == 150
    ctl = fit_probe(X, Y, groups, alpha=1e-6, shuffle_targets=True)
    assert ctl.r2_mean < 0.2
    # a target the features cannot see
    noise = fit_probe(X, rng.normal(size=600), groups)
    assert noise.r2_mean < 0.1


def test_split_is_by_group_and_constant_targets_are_nan():
    groups = np.repeat(np.arange(8), 5)
    tr, te = split_groups(groups, 0.25, seed=1)
    assert not set(groups[tr]) & set(groups[te]) and te.sum() == 10
    r2, pooled = r2_per_target(np.c_[np.arange(6.0), np.ones(6)], np.c_[np.arange(6.0), np.ones(6)])
    assert r2[0] == 1.0 and np.isnan(r2[1]) and pooled == 1.0
    with pytest.raises(InputError):
        split_groups(np.zeros(5), 0.5, 0)


def test_r2_by_bucket():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 4))
    pos = np.tile(np.arange(20), 20)
    res = fit_probe(X, X[:, :2], np.repeat(np.arange(20), 20))
    rows = r2_by_bucket(res, pos, [0, 10, 20])
    assert [r["n"] for r in rows] == [50, 50] and all(r["r2_mean"] > 0.999 for r in rows)


def test_r2_within_positions_ignores_the_trend():
    from probes.linear import r2_within

    rng = np.random.default_rng(2)
    pos = np.tile(np.arange(30), 40).astype(float)
    y = pos * 0.5 + rng.normal(size=len(pos))  # a count-like target: trend plus per-sequence part
    groups = np.repeat(np.arange(40), 30)
    only_pos = fit_probe(pos[:, None], y, groups)
    assert only_pos.r2_mean > 0.9 and r2_within(only_pos, pos) < 0.1
    full = fit_probe(np.c_[pos, y], y, groups, alpha=1e-6)
    assert r2_within(full, pos) > 0.999


def test_count_targets_bundle_the_counts_a_probe_reads():
    from probes.counts import count_targets

    x = torch.tensor([[0, 1, 1, 2, 0, 0, 1], [1, 1, 0, 1, 2, 1, 0]])
    got = count_targets(x, 2, 1, reset_token=2)
    n = transition_counts(x, 2, 1, reset_token=2)
    assert np.array_equal(got["transitions"], n.flatten(2).numpy())
    assert np.array_equal(got["contexts"], context_counts(x, 2, 1, reset_token=2).numpy())
    assert np.array_equal(got["current"], current_counts(x, 2, 1, reset_token=2).numpy())
    assert got["names"] == count_names(2, 1) and got["context_names"] == ["n(0)", "n(1)"]
    # after the reset 0, 0, 1: at the second 0 its row holds 0->0 once; 1 has no row yet
    assert got["current"][0, -2].tolist() == [1.0, 0.0]
    assert got["current"][0, -1].tolist() == [0.0, 0.0]
