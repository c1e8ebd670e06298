"""Task generators of the spectral-filtering paper: random LDS (§4.1, Fig. 1) and induction
heads (§4.2)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqprobe.errors import InputError
from tasks.base import IGNORE, make_generator
from tasks.lds import (
    LDSConfig,
    region_bounds,
    region_intervals,
    sample_inputs,
    sample_lds,
    sample_sequence,
)
from tasks.registry import make_task, packed_batch

# ---------------------------------------------------------------------------- LDS


def test_region_bounds_follow_fig1():
    T = 2**14
    lo, hi = region_bounds(T, 7 / 8)
    assert lo == pytest.approx(1 - math.log(T) / (8 * T ** (7 / 8)))
    assert hi == pytest.approx(1 - 1 / (2 * T**1.25))
    a = region_intervals(LDSConfig(T=T, region="A"))
    assert a[0] == pytest.approx((0.9 * lo, lo)) and a[1] == pytest.approx((hi, 1.0))
    assert region_intervals(LDSConfig(T=T, region="B")) == [(lo, hi)]


@pytest.mark.parametrize("region", ["A", "B"])
def test_eigenvalues_in_region_and_A_symmetric_psd(region):
    cfg = LDSConfig(T=4096, d_hidden=64, d_in=2, d_out=3, region=region)
    system = sample_lds(cfg, make_generator(0))
    lo, hi = region_bounds(cfg.T, cfg.q_boundary)
    lam = system.lam
    if region == "B":
        assert ((lam > lo) & (lam < hi)).all()
    else:
        left = (lam >= 0.9 * lo) & (lam <= lo)
        right = (lam >= hi) & (lam <= 1.0)
        assert (left | right).all() and left.sum() == 32 and right.sum() == 32
    A = system.A
    torch.testing.assert_close(A, A.T)
    ev = torch.linalg.eigvalsh(A)
    torch.testing.assert_close(ev.sort().values, lam.sort().values, atol=1e-12, rtol=0)
    torch.testing.assert_close(system.V.T @ system.V, torch.eye(64, dtype=torch.float64))
    assert system.B.shape == (64, 2) and system.C.shape == (3, 64)


def test_simulation_matches_impulse_response_and_recursion():
    cfg = LDSConfig(T=64, d_hidden=8, d_in=2, d_out=3, region="A")
    system, u, y = sample_sequence(cfg, make_generator(1))
    h = system.impulse_response(cfg.T)
    for t in (0, 1, 5, 63):
        ref = torch.zeros(3, dtype=torch.float64)
        for j in range(1, t + 1):
            ref = ref + h[j - 1] @ u[t - j]
        torch.testing.assert_close(y[t], ref, atol=1e-12, rtol=0)
    x = torch.zeros(8, dtype=torch.float64)
    for t in range(10):  # x_{t+1} = A x_t + B u_t, y_t = C x_t
        torch.testing.assert_close(y[t], system.C @ x, atol=1e-12, rtol=0)
        x = system.A @ x + system.B @ u[t]
    # batched inputs simulate row by row
    ub = sample_inputs(cfg, make_generator(2), batch=(3,))
    yb = system.simulate(ub)
    torch.testing.assert_close(yb[1], system.simulate(ub[1]))


def test_lds_is_seeded():
    cfg = LDSConfig(T=32, d_hidden=6, region="B")
    a = sample_sequence(cfg, make_generator(4))
    b = sample_sequence(cfg, make_generator(4))
    c = sample_sequence(cfg, make_generator(5))
    assert torch.equal(a[2], b[2]) and torch.equal(a[0].lam, b[0].lam)
    assert not torch.equal(a[2], c[2])


@pytest.mark.parametrize("bad", [dict(region="C"), dict(d_hidden=0), dict(q_boundary=0.0),
                                 dict(T=2), dict(left_factor=1.5), dict(input_scale=0.0)])
def test_lds_config_checks(bad):
    with pytest.raises(InputError):
        LDSConfig(**bad)


# ---------------------------------------------------------------------------- induction heads

def check_induction_rows(task, tokens: torch.Tensor, x: torch.Tensor) -> None:
    """One flag + recalled token, blanks elsewhere, query flag last; x = token after the flag."""
    v = task.vocab
    blank, flag = v.id("BLANK"), v.id("FLAG")
    for row, ans in zip(tokens.tolist(), x.tolist(), strict=True):
        assert row[-1] == flag and row.count(flag) == 2
        p = row.index(flag)
        assert p <= len(row) - 3
        assert row[p + 1] == ans and 0 <= ans < task.cfg.D
        rest = row[:p] + row[p + 2 : -1]
        assert all(t == blank for t in rest)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(D=st.integers(2, 10), length=st.integers(3, 40), seed=st.integers(0, 2**31 - 1),
       eval_len=st.integers(3, 80))
def test_induction_invariants(D, length, seed, eval_len):
    task = make_task("induction", D=D, length=length)
    assert task.vocab.size == D + 2 and task.pad_id == task.vocab.id("BLANK")
    g = make_generator(seed)
    b = task.batch(5, g)
    assert b.tokens.shape == (5, length)
    kept = b.targets != IGNORE
    assert kept[:, -1].all() and kept.sum() == 5  # the loss is at the query position only
    check_induction_rows(task, b.tokens, b.targets[:, -1])
    pb = task.eval_batch(4, g, length=eval_len)
    assert pb.prompts.shape == (4, eval_len) and pb.answers.shape == (4, 1)
    check_induction_rows(task, pb.prompts, pb.answers[:, 0])
    assert task.eval_batch(2, g).prompts.shape == (2, length)  # default: the training length
    tokens, targets = task.example(g)
    assert tokens.shape == (length,) and (targets != IGNORE).sum() == 1
    packed = packed_batch(task, 2, 2 * length + 1, g)
    assert (packed.targets != IGNORE).sum() == 4


def test_induction_positions_cover_the_range_and_are_seeded():
    task = make_task("induction", length=6)
    g = make_generator(0)
    _, x, pos = task.sequences(2000, 6, g)
    assert set(pos.tolist()) == {0, 1, 2, 3} and set(x.tolist()) == {0, 1, 2, 3}
    a = task.batch(8, make_generator(3)).tokens
    assert torch.equal(a, task.batch(8, make_generator(3)).tokens)
    assert not torch.equal(a, task.batch(8, make_generator(4)).tokens)


@pytest.mark.parametrize("bad", [dict(D=1), dict(length=2)])
def test_induction_config_checks(bad):
    with pytest.raises(InputError):
        make_task("induction", bad)
    with pytest.raises(InputError):
        make_task("induction").eval_batch(2, make_generator(0), length=2)


def test_trainer_reports_recall_accuracy():
    from analyses.zoo.levels import make_run_config
    from models.train.loop import train

    run_config = make_run_config("stu", "induction", "quick",
                     model=dict(d_model=8, filter_len=16, num_filters=4, d_mlp=16),
                     task_config=dict(length=8),
                     train=dict(steps=2, batch_size=4, eval_batches=1, eval_batch_size=8,
                                warmup_steps=1))
    assert run_config.model.vocab_size == 6
    ck = train(run_config, progress=False)
    last = ck["history"][-1]
    assert 0.0 <= last["string_acc"] <= 1.0 and "eval_loss" in last
