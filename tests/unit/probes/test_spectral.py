"""Spectral filters (H_T, N_T) and the online predictors of Algorithms 1 and 2."""

import math

import numpy as np
import pytest
import torch

import models.spectral as S
from models.spectral import (
    autoregressive_base,
    best_in_hindsight,
    causal_filter,
    context_length,
    hankel_H,
    hankel_N,
    online_gradient_descent,
    predict,
    predictor_features,
    spectral_filters,
    true_weights,
)
from seqprobe.errors import InputError
from tasks.base import make_generator
from tasks.lds import LDS, LDSConfig, sample_sequence


def _gauss_legendre_integral(f, n=200):
    """∫_0^1 f(α) dα by n-point Gauss–Legendre (exact for polynomials of degree < 2n);
    ``f`` maps the nodes [n] to values [n, ...]."""
    x, w = (torch.from_numpy(v) for v in np.polynomial.legendre.leggauss(n))
    vals = f((x + 1) / 2)
    return torch.tensordot(w / 2, vals, dims=1)


def test_H_and_N_entries_equal_their_integrals_and_closed_forms():
    T = 40
    H, N = hankel_H(T), hankel_N(T)
    assert H.dtype == torch.float64 and H.shape == (T, T)
    for i, j in [(0, 0), (0, 1), (3, 7), (12, 5), (39, 39), (20, 39)]:
        m = i + j
        h = _gauss_legendre_integral(lambda a, m=m: (1 - a) ** 2 * a**m)
        n = _gauss_legendre_integral(lambda a, m=m: (1 - a) ** 4 * a**m)
        torch.testing.assert_close(H[i, j], h, rtol=1e-12, atol=0)
        torch.testing.assert_close(N[i, j], n, rtol=1e-12, atol=0)
        # the STU papers' 1-based form 2 / ((i+j)^3 − (i+j))
        s = (i + 1) + (j + 1)
        assert H[i, j].item() == pytest.approx(2.0 / (s**3 - s), rel=1e-14)
    # ∫ μ_α μ_αᵀ dα with the vectors themselves (μ_α = (1 − α)[1, α, …])
    pw = torch.arange(T, dtype=torch.float64)
    full = _gauss_legendre_integral(
        lambda a: ((1 - a)[:, None, None] ** 2) * a[:, None, None] ** (pw[None, :, None]
                                                                       + pw[None, None, :]))
    torch.testing.assert_close(H, full, rtol=1e-10, atol=1e-16)
    assert torch.equal(H, H.T)


@pytest.mark.parametrize("kind", ["H", "N"])
@pytest.mark.parametrize("T,k", [(64, 10), (1200, 14)])  # dense path and subspace iteration
def test_eigenpairs_orthonormal_sorted_and_eigen(kind, T, k):
    sigma, phi = spectral_filters(T, k, kind)
    assert sigma.shape == (k,) and phi.shape == (T, k) and phi.dtype == torch.float64
    assert (sigma[:-1] > sigma[1:]).all(), "eigenvalues must be sorted, largest first"
    assert (sigma > 0).all()
    torch.testing.assert_close(phi.T @ phi, torch.eye(k, dtype=torch.float64), atol=1e-10,
                               rtol=0)
    M = S.hankel_matrix(kind, T)
    resid = (M @ phi - phi * sigma).norm(dim=0)
    assert resid.max() < 1e-12 * sigma[0]
    # sign convention: largest-magnitude entry positive
    idx = phi.abs().argmax(0)
    assert (phi[idx, torch.arange(k)] > 0).all()


def test_subspace_iteration_matches_dense_eigh(monkeypatch):
    T, k = 300, 12
    dense = S._eigenpairs.__wrapped__("H", T, k)
    monkeypatch.setattr(S, "DENSE_MAX_T", 0)
    sub = S._eigenpairs.__wrapped__("H", T, k)
    torch.testing.assert_close(sub[0], dense[0], rtol=1e-6, atol=1e-18)
    overlap = (sub[1] * dense[1]).sum(0)  # same signs by the convention
    assert (overlap > 1 - 1e-6).all()


def test_filters_cached_and_returned_as_copies():
    S._eigenpairs.cache_clear()
    s1, p1 = spectral_filters(50, 5)
    p1.zero_()
    s2, p2 = spectral_filters(50, 5)
    info = S._eigenpairs.cache_info()
    assert info.hits == 1 and info.misses == 1
    assert p2.abs().sum() > 0, "mutating a returned filter must not corrupt the cache"
    with pytest.raises(InputError):
        spectral_filters(10, 11)
    with pytest.raises(InputError):
        spectral_filters(10, 2, kind="X")


def test_causal_filter_matches_direct_sum():
    g = make_generator(0)
    u = torch.randn(2, 30, 3, generator=g, dtype=torch.float64)
    f = torch.randn(7, 4, generator=g, dtype=torch.float64)
    out = causal_filter(u, f, delay=2)
    ref = torch.zeros(2, 30, 4, 3, dtype=torch.float64)
    for t in range(30):
        for j in range(7):
            if t - 2 - j >= 0:
                ref[:, t] += f[j][None, :, None] * u[:, t - 2 - j][:, None, :]
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_true_weights_reproduce_a_known_lds(algorithm):
    cfg = LDSConfig(T=512, d_hidden=24, d_in=3, d_out=2, region="A")
    system, u, y = sample_sequence(cfg, make_generator(3))
    M = true_weights(system.impulse_response(cfg.T), algorithm, cfg.T, k=24)
    X = predictor_features(u, algorithm, cfg.T, 24, context=cfg.T)
    base = autoregressive_base(y, algorithm)
    yhat = predict(X, M, base)
    rel = (yhat - y).pow(2).sum() / (y - base).pow(2).sum()
    assert rel < 1e-9
    # fewer filters: a worse (but still small) approximation — the test can fail
    M8 = true_weights(system.impulse_response(cfg.T), algorithm, cfg.T, k=8)
    yhat8 = predict(predictor_features(u, algorithm, cfg.T, 8, cfg.T), M8, base)
    assert (yhat8 - y).pow(2).sum() > 100 * (yhat - y).pow(2).sum()
    # the online learner started at the true weights stays there (gradients ≈ 0)
    out = online_gradient_descent(X[None], (y - base)[None], lr=0.05, M0=M[None])
    assert out["losses"].mean() < 1e-9 * (y - base).pow(2).sum(-1).mean()
    # and best-in-hindsight least squares recovers them
    Mstar = best_in_hindsight(X, y - base)
    assert (predict(X, Mstar, base) - y).pow(2).sum() <= (yhat - y).pow(2).sum() * 1.01 + 1e-20


def test_online_gradient_descent_learns_and_projects():
    cfg = LDSConfig(T=1024, d_hidden=16, d_in=2, d_out=2, region="B")
    _, u, y = sample_sequence(cfg, make_generator(1))
    X = predictor_features(u, 2, cfg.T, 12, context=32)
    G2 = X.pow(2).sum((-1, -2)).mean()
    Y = (y - autoregressive_base(y, 2))
    out = online_gradient_descent(torch.stack([X, X]), torch.stack([Y, Y]),
                                  lr=torch.tensor([0.3, 0.3]) / G2, radius=math.inf)
    L = out["losses"][0]
    assert L[-256:].mean() < 1e-3 * L[:64].mean()
    small = online_gradient_descent(X[None], Y[None], lr=0.3 / G2, radius=0.05)
    assert small["M"].flatten(2).norm(dim=-1).max() <= 0.05 + 1e-12
    assert small["losses"][0, -256:].mean() > 10 * L[-256:].mean()


def _scalar_system(alpha: float) -> LDS:
    one = torch.ones(1, 1, dtype=torch.float64)
    return LDS(torch.tensor([alpha], dtype=torch.float64), one.clone(), one.clone(), one.clone())


def test_alg2_second_autoregressive_term_handles_marginally_stable_scalar_system():
    T, k, L = 2048, 12, 16
    u = torch.randn(T, 1, generator=make_generator(5), dtype=torch.float64)
    # α = 1: y_t = Σ_{j<t} u_j, so y_t − 2y_{t−1} + y_{t−2} = u_{t−1} − u_{t−2} exactly
    sys1 = _scalar_system(1.0)
    M = true_weights(sys1.impulse_response(T), 2, T, k)
    assert M[0].item() == pytest.approx(1.0) and M[1].item() == pytest.approx(-1.0)
    assert M[2:].abs().max() < 1e-12
    y = sys1.simulate(u)
    yhat = predict(predictor_features(u, 2, T, k, context=L), M, autoregressive_base(y, 2))
    assert (yhat - y).abs().max() < 1e-9
    # α = 1 − 10^{-3} (memory ≫ L): with context L the true matrices of Alg. 2 still predict
    # to ~(1−α)³ while those of Alg. 1 leave the un-seen tail, of order (1−α)/2
    sysa = _scalar_system(1 - 1e-3)
    y = sysa.simulate(u)
    h = sysa.impulse_response(T)
    late = slice(T // 2, None)
    loss = {}
    for alg in (1, 2):
        Mt = true_weights(h, alg, T, k)
        yhat = predict(predictor_features(u, alg, T, k, context=L), Mt, autoregressive_base(y, alg))
        loss[alg] = (yhat - y)[late].pow(2).mean().item()
    assert loss[2] < 1e-7
    assert loss[1] > 1e-4 and loss[1] > 1000 * loss[2]
    # and the online Alg. 2 learner with context L learns the α = 1 system to ~zero loss
    y = sys1.simulate(u)
    X = predictor_features(u, 2, T, k, context=L)
    G2 = X.pow(2).sum((-1, -2)).mean()
    target = y - autoregressive_base(y, 2)  # = u_{t−1} − u_{t−2}: variance 2
    out = online_gradient_descent(X[None], target[None], lr=0.3 / G2)
    assert out["losses"][0, late].mean() < 1e-6 * target.pow(2).mean()


def test_context_length_and_checks():
    assert context_length(4096, 0.5) == 64 and context_length(4096, 1.0) == 4096
    assert context_length(16, 0.0, algorithm=2) == 3
    with pytest.raises(InputError):
        context_length(16, 1.5)
    with pytest.raises(InputError):
        predictor_features(torch.zeros(8, 1), 3, 8, 2, 8)

