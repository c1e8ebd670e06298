"""Spectral filters and the online spectral-filtering predictors of Algorithms 1 and 2.

Paper: "Provable length generalization in sequence prediction via spectral filtering"
(§2.2 filters, §3 Algorithms 1 and 2, Theorems 5 and 6). Also the source of the fixed
filters of the STU layer (:mod:`models.stu`).

Glossary (code name -> paper symbol):
    T                 horizon = length of the filters (H_T is T x T)
    k                 number of filters / matrices M_1..M_k
    L (context)       context length: ŷ_t reads only u_{t-1}, …, u_{t-L} (and y_{t-1}, y_{t-2})
    hankel_H(T)       H_T = ∫_0^1 μ_α μ_αᵀ dα, μ_α = (1 − α)[1, α, …, α^(T−1)]   (Eq. 3)
    hankel_N(T)       N_T = ∫_0^1 μ̃_α μ̃_αᵀ dα, μ̃_α = (1 − α)²[1, α, …, α^(T−1)] (Eq. 5)
    sigma, phi        eigenpairs (σ_i, φ_i) of H_T (Alg. 1) or (σ̃_i, φ̃_i) of N_{T−2} (Alg. 2),
                      σ_1 ≥ σ_2 ≥ …; phi[:, i] is the filter φ_{i+1} (columns, unit norm)
    features X_t[i]   σ_i^{1/4} u_{(t−1):(t−L)} φ_i  (Alg. 1, Eq. 4)
    M [m, d_out, d_in] the learned matrices M^t (m = k); for Alg. 2 M[0] = M_1 (on u_{t−1}),
                      M[1] = M_2 (on u_{t−2}), M[2:] act on the filtered u_{(t−3):(t−L)}
    radius            r: each M_i is projected onto the Frobenius ball ‖M_i‖_F ≤ r (K_r)
    lr                η_t, the online-gradient step size

Closed forms (0-based indices i, j; m = i + j):
    H_T[i, j] = ∫ (1−α)² α^m dα = B(m+1, 3) = 2 / ((m+1)(m+2)(m+3))
              (= 2 / ((i'+j')³ − (i'+j')) with 1-based i', j', the STU papers' form)
    N_T[i, j] = ∫ (1−α)⁴ α^m dα = B(m+1, 5) = 24 / ((m+1)(m+2)(m+3)(m+4)(m+5))

Reading of Algorithm 2 used here: the matrices are M_1, …, M_k as in Alg. 1 (same number of
parameters); M_1, M_2 multiply u_{t−1}, u_{t−2} and M_3..M_k the k − 2 *top* filters φ̃_1..φ̃_{k−2}
(the paper's sum index i = 3..k names the matrices, not the eigenvectors — dropping the two
largest eigenvectors would discard most of the signal).
"""

from __future__ import annotations

import functools
import math

import torch
from jaxtyping import Float
from torch import Tensor

from seqprobe.config import check

KINDS = ("H", "N")  # H_T (Alg. 1, STU) and N_T (Alg. 2)
DENSE_MAX_T = 1024  # above this, top-k eigenpairs by subspace iteration (dense eigh is O(T³))


# ---------------------------------------------------------------------------- the matrices
def hankel_entries(kind: str, n: int) -> Float[Tensor, " n"]:
    """h[m] = ∫ w(α) α^m dα for m = 0..n−1: H_T, N_T are Hankel, entry [i, j] = h[i + j]."""
    check(kind in KINDS, f"kind must be one of {KINDS}, got {kind!r}")
    m = torch.arange(n, dtype=torch.float64)
    if kind == "H":  # Beta(m+1, 3) = 2! m! / (m+3)!
        return 2.0 / ((m + 1) * (m + 2) * (m + 3))
    return 24.0 / ((m + 1) * (m + 2) * (m + 3) * (m + 4) * (m + 5))  # Beta(m+1, 5)


def hankel_matrix(kind: str, T: int) -> Float[Tensor, "T T"]:
    """The dense T x T matrix H_T (kind "H") or N_T (kind "N"), float64."""
    check(T >= 1, f"T must be >= 1, got {T}")
    h = hankel_entries(kind, 2 * T - 1)
    idx = torch.arange(T)
    return h[idx[:, None] + idx[None, :]]  # [T, T]


def hankel_H(T: int) -> Float[Tensor, "T T"]:
    """H_T of Eq. 3 (float64)."""
    return hankel_matrix("H", T)


def hankel_N(T: int) -> Float[Tensor, "T T"]:
    """N_T of Eq. 5 (float64)."""
    return hankel_matrix("N", T)


def _hankel_matmul(h: Tensor, T: int, V: Tensor, chunk: int = 1024) -> Tensor:
    """H @ V for the Hankel matrix H[i, j] = h[i + j], built in row blocks (memory O(chunk·T)).

    Dense products (not FFT) so the rounding error is that of a dense matrix, eps·‖H‖.
    """
    out = torch.empty(T, V.shape[1], dtype=V.dtype)
    cols = torch.arange(T)
    for r0 in range(0, T, chunk):
        rows = torch.arange(r0, min(T, r0 + chunk))
        out[rows] = h[rows[:, None] + cols[None, :]] @ V  # [chunk, T] @ [T, p]
    return out


@functools.lru_cache(maxsize=32)
def _eigenpairs(kind: str, T: int, k: int) -> tuple[Tensor, Tensor]:
    if T <= DENSE_MAX_T:
        sigma, phi = torch.linalg.eigh(hankel_matrix(kind, T))  # ascending
        sigma, phi = sigma.flip(0)[:k], phi.flip(1)[:, :k]
    else:
        # Randomised subspace iteration + Rayleigh–Ritz: the spectrum of a positive Hankel
        # matrix decays geometrically (the premise of spectral filtering, §2.2), so a block of
        # k + 20 vectors and a few power iterations resolve the top k to the accuracy of a
        # dense eigh (tests/unit/probes/test_spectral.py compares the two).
        h = hankel_entries(kind, 2 * T - 1)
        p = min(T, k + 20)
        g = torch.Generator().manual_seed(0)  # deterministic filters
        Q = torch.linalg.qr(torch.randn(T, p, generator=g, dtype=torch.float64))[0]
        for _ in range(3):
            Q = torch.linalg.qr(_hankel_matmul(h, T, Q))[0]
        Bm = Q.T @ _hankel_matmul(h, T, Q)  # [p, p] Rayleigh quotient
        w, U = torch.linalg.eigh(0.5 * (Bm + Bm.T))
        sigma, phi = w.flip(0)[:k], (Q @ U.flip(1))[:, :k]
    # eigenvectors are defined up to sign: make each one's largest-magnitude entry positive
    idx = phi.abs().argmax(dim=0)
    signs = torch.sign(phi[idx, torch.arange(phi.shape[1])])
    return sigma.clone(), (phi * signs).contiguous()


def spectral_filters(T: int, k: int, kind: str = "H") -> tuple[Float[Tensor, " k"],
                                                               Float[Tensor, "T k"]]:
    """Top-k eigenpairs ``(sigma [k], phi [T, k])`` of H_T (or N_T), float64, sorted by
    decreasing eigenvalue, orthonormal columns. Cached per (kind, T, k); returns copies."""
    check(kind in KINDS, f"kind must be one of {KINDS}, got {kind!r}")
    check(T >= 1, f"T must be >= 1, got {T}")
    check(1 <= k <= T, f"k must be in [1, T={T}], got {k}")
    if torch.get_default_device().type == "meta":  # a shape-only build (size checks): the
        # eigenpairs are neither computed nor cached (a cached meta tensor would poison real builds)
        return torch.empty(k, dtype=torch.float64), torch.empty(T, k, dtype=torch.float64)
    sigma, phi = _eigenpairs(kind, int(T), int(k))
    return sigma.clone(), phi.clone()


# ---------------------------------------------------------------------------- features
def causal_filter(u: Float[Tensor, "*batch time d"], filters: Float[Tensor, "n m"],
                  delay: int = 1) -> Float[Tensor, "*batch time m d"]:
    """``out[..., t, i, :] = Σ_{j=0}^{n−1} filters[j, i] · u[..., t − delay − j, :]`` (zero
    before time 0), by FFT convolution — every filter, channel and batch entry at once."""
    check(delay >= 0, f"delay must be >= 0, got {delay}")
    T, n = u.shape[-2], filters.shape[0]
    size = 1 << math.ceil(math.log2(max(2, T + n)))
    U = torch.fft.rfft(u, n=size, dim=-2)  # [*batch, freq, d]
    F = torch.fft.rfft(filters, n=size, dim=0)  # [freq, m]
    conv = torch.fft.irfft(U.unsqueeze(-2) * F.unsqueeze(-1), n=size, dim=-3)  # [*b, size, m, d]
    out = torch.zeros(*u.shape[:-2], T, filters.shape[1], u.shape[-1], dtype=conv.dtype)
    if delay < T:
        out[..., delay:, :, :] = conv[..., : T - delay, :, :]
    return out


def predictor_features(u: Float[Tensor, "*batch time d_in"], algorithm: int, T: int, k: int,
                       context: int) -> Float[Tensor, "*batch time k d_in"]:
    """The k regressors ``X_t[i]`` that M_i multiplies in Alg. 1 or Alg. 2 at context L.

    Alg. 1 (Eq. 4): ``X_t[i] = σ_i^{1/4} Σ_{j=1}^{L} φ_i[j−1] u_{t−j}`` with φ from H_T.
    Alg. 2: ``X_t[0] = u_{t−1}``, ``X_t[1] = u_{t−2}``, ``X_t[2+i] = σ̃_i^{1/4} Σ_{j=3}^{L}
    φ̃_i[j−3] u_{t−j}`` with φ̃ from N_{T−2}. Filters are truncated to the context (the
    entries beyond L are dropped, not renormalised: the predictor simply cannot see further).
    """
    check(algorithm in (1, 2), f"algorithm must be 1 or 2, got {algorithm}")
    check(context >= algorithm, f"context must be >= {algorithm} for Alg. {algorithm}")
    u = u.to(torch.float64)
    if algorithm == 1:
        check(1 <= k <= T, f"k must be in [1, T], got {k}")
        sigma, phi = spectral_filters(T, k, "H")
        n = min(context, T)
        return causal_filter(u, phi[:n] * sigma.clamp(min=0) ** 0.25, delay=1)
    check(3 <= k <= T - 2, f"Alg. 2 needs 3 <= k <= T − 2, got k={k}, T={T}")
    sigma, phi = spectral_filters(T - 2, k - 2, "N")
    n = min(context, T) - 2
    shifted = [causal_filter(u, torch.ones(1, 1, dtype=torch.float64), delay=d) for d in (1, 2)]
    if n <= 0:  # context 2: only the two autoregressive input terms
        filt = torch.zeros(*u.shape[:-1], k - 2, u.shape[-1], dtype=torch.float64)
    else:
        filt = causal_filter(u, phi[:n] * sigma.clamp(min=0) ** 0.25, delay=3)
    return torch.cat([*shifted, filt], dim=-2)  # [*batch, time, k, d_in]


def autoregressive_base(y: Float[Tensor, "*batch time d_out"], algorithm: int
                        ) -> Float[Tensor, "*batch time d_out"]:
    """The closed-loop part of ŷ_t: ``y_{t−1}`` (Alg. 1) or ``2 y_{t−1} − y_{t−2}`` (Alg. 2)."""
    y = y.to(torch.float64)
    y1 = torch.zeros_like(y)
    y1[..., 1:, :] = y[..., :-1, :]
    if algorithm == 1:
        return y1
    y2 = torch.zeros_like(y)
    y2[..., 2:, :] = y[..., :-2, :]
    return 2 * y1 - y2


# ---------------------------------------------------------------------------- online learning
def online_gradient_descent(features: Float[Tensor, "runs time m d_in"],
                            targets: Float[Tensor, "runs time d_out"],
                            lr: float | Tensor, radius: float = math.inf,
                            decay: str = "constant", M0: Tensor | None = None,
                            ) -> dict[str, Tensor]:
    """Online gradient descent on ``ℓ_t(M) = ‖Σ_i M_i X_t[i] − target_t‖²`` with projection
    of each M_i onto the Frobenius ball of radius r (step 4 of Algorithms 1 and 2).

    ``targets`` is ``y_t`` minus the autoregressive base, so the prediction error is the same.
    The loop over t is sequential (M^{t+1} depends on ℓ_t(M^t)); everything inside it is
    batched over runs, matrices and coordinates. ``lr`` may be one value per run;
    ``decay="sqrt"`` uses η_t = η / √t (the OGD rate of the regret bounds).
    Returns ``losses [runs, time]`` (ℓ_t(M^t), before the update) and the final ``M``.
    """
    check(decay in ("constant", "sqrt"), f"decay must be constant or sqrt, got {decay!r}")
    R, T, m, d_in = features.shape
    d_out = targets.shape[-1]
    X = features.to(torch.float64)
    Y = targets.to(torch.float64)
    M = (torch.zeros(R, m, d_out, d_in, dtype=torch.float64) if M0 is None
         else M0.to(torch.float64).clone())
    eta = torch.as_tensor(lr, dtype=torch.float64).reshape(-1)
    eta = eta.expand(R).clone() if eta.numel() == 1 else eta
    check(eta.numel() == R, f"lr needs 1 or {R} values, got {eta.numel()}")
    losses = torch.empty(R, T, dtype=torch.float64)
    for t in range(T):
        x = X[:, t]  # [runs, m, d_in]
        err = torch.einsum("rmoi,rmi->ro", M, x) - Y[:, t]  # [runs, d_out]
        losses[:, t] = err.pow(2).sum(-1)
        step = eta if decay == "constant" else eta / math.sqrt(t + 1)
        # ∇_{M_i} ‖err‖² = 2 err x_iᵀ
        M -= (2 * step)[:, None, None, None] * err[:, None, :, None] * x[:, :, None, :]
        if math.isfinite(radius):
            norms = M.flatten(2).norm(dim=-1).clamp(min=1e-300)  # [runs, m]
            M *= (radius / norms).clamp(max=1.0)[:, :, None, None]
    return {"losses": losses, "M": M}


def predict(features: Float[Tensor, "*#batch time m d_in"], M: Float[Tensor, "m d_out d_in"],
            base: Float[Tensor, "*#batch time d_out"]) -> Float[Tensor, "*batch time d_out"]:
    """ŷ_t = base_t + Σ_i M_i X_t[i] for fixed matrices (no learning)."""
    return base + torch.einsum("...tmi,moi->...to", features.to(torch.float64),
                               M.to(torch.float64))


def best_in_hindsight(features: Float[Tensor, "time m d_in"],
                      targets: Float[Tensor, "time d_out"]) -> Float[Tensor, "m d_out d_in"]:
    """argmin_M Σ_t ‖Σ_i M_i X_t[i] − target_t‖² (unconstrained least squares): the best
    fixed predictor of the class, the comparator of the (asymmetric) regret."""
    T, m, d_in = features.shape
    Z = features.reshape(T, m * d_in).to(torch.float64)  # [time, m·d_in]
    W = torch.linalg.lstsq(Z, targets.to(torch.float64), driver="gelsd").solution  # [m·d_in, o]
    return W.T.reshape(-1, m, d_in).permute(1, 0, 2).contiguous()  # [m, d_out, d_in]


def context_length(T: int, q: float, algorithm: int = 1) -> int:
    """L = round(T^q), at least what the algorithm's autoregressive terms need."""
    check(0.0 <= q <= 1.0, f"q must be in [0, 1], got {q}")
    return int(min(T, max(algorithm + 1, round(T ** q))))


def true_weights(impulse: Float[Tensor, "n d_out d_in"], algorithm: int, T: int,
                 k: int) -> Float[Tensor, "k d_out d_in"]:
    """Matrices M that make Alg. 1 / Alg. 2 (full context) reproduce the system whose
    impulse response is ``impulse[j−1] = C A^{j−1} B`` (``y_t = Σ_j impulse[j−1] u_{t−j}``).

    The prediction error is ``Σ_j c_j u_{t−j}`` with c the first (Alg. 1) or second (Alg. 2)
    difference of the impulse response; M_i is the coordinate of c along the scaled filter
    σ_i^{1/4} φ_i (filters are orthonormal), so what is left is the part of c outside the
    span of the top-k filters — tiny for symmetric A with spectrum in [0, 1] (Theorem 4).
    """
    check(algorithm in (1, 2), f"algorithm must be 1 or 2, got {algorithm}")
    h = impulse.to(torch.float64)
    n = min(h.shape[0], T)
    h = h[:n]
    prev = torch.zeros_like(h)
    prev[1:] = h[:-1]
    d = h - prev  # first difference: y_t − y_{t−1} = Σ_j d_j u_{t−j}
    if algorithm == 1:
        sigma, phi = spectral_filters(T, k, "H")
        coef = torch.einsum("jk,joi->koi", phi[:n], d)
        return coef / sigma.clamp(min=1e-300)[:, None, None] ** 0.25
    prev_d = torch.zeros_like(d)
    prev_d[1:] = d[:-1]
    e = d - prev_d  # second difference: y_t − 2y_{t−1} + y_{t−2} = Σ_j e_j u_{t−j}
    sigma, phi = spectral_filters(T - 2, k - 2, "N")
    coef = torch.einsum("jk,joi->koi", phi[: max(0, n - 2)], e[2:])
    coef = coef / sigma.clamp(min=1e-300)[:, None, None] ** 0.25
    return torch.cat([e[:1], e[1:2], coef], dim=0)
