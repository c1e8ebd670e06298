"""Task generators of the spectral-filtering paper: random LDS (§4.1, Fig. 1) and induction
heads (§4.2)."""

import math

import pytest
import torch

from tasks.base import TaskError, make_generator
from tasks.lds import (
    LDSConfig,
    region_bounds,
    region_intervals,
    sample_inputs,
    sample_lds,
    sample_sequence,
)

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
    with pytest.raises(TaskError):
        LDSConfig(**bad)
