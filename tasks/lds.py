"""Random noiseless linear dynamical systems for the length-generalisation experiments.

Spectral-filtering paper §4.1 and Fig. 1: a symmetric PSD transition matrix A (hidden
dimension 512 at paper scale) whose eigenvalues are drawn from

    Region B = (1 − log T / (8 T^{7/8}),  1 − 1 / (2 T^{5/4}))        the "bad" interval, and
    Region A = [0.9 (1 − log T / (8 T^{7/8})),  1 − log T / (8 T^{7/8})]  ∪  [1 − 1/(2 T^{5/4}), 1]
               (half of the eigenvalues uniform in each part: Region A hugs Region B).

``q_boundary`` (7/8 in the paper) is the exponent in these bounds; log is the natural log.

Indexing. With x_0 = 0 we use ``x_{t+1} = A x_t + B u_t`` and ``y_t = C x_t``, so
``y_t = Σ_{j≥1} C A^{j−1} B u_{t−j}`` depends on the inputs before t only — the predictors read
u_{t−1}, u_{t−2}, … This is Eq. (1) of the paper with (C, D) := (C A, C B); the paper's
(A, B, C, I) systems differ from it only by a known input feed-through.

Everything is a pure function of the config and a seeded ``torch.Generator`` (float64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from jaxtyping import Float
from torch import Tensor

from seqprobe.config import check
from seqprobe.flags import MAX_HORIZON, MAX_SCALE, WIDTH_FIELD, Config, bound

LDS_HORIZON_WHY = "a dynamical system's horizon (the regions need T >= 4); the STU paper: 2^14"
REGIONS = ("A", "B")


@dataclass(frozen=True)
class LDSConfig(Config):
    T: int = field(  # horizon (paper: 2^14); the regions depend on it
        default=2**14, metadata=bound(4, MAX_HORIZON, LDS_HORIZON_WHY))
    d_hidden: int = field(default=512, metadata=WIDTH_FIELD)  # hidden dimension d_A (paper: 512)
    # input dimension (the paper does not say; small keeps OGD fast)
    d_in: int = field(default=4, metadata=WIDTH_FIELD)
    d_out: int = field(default=4, metadata=WIDTH_FIELD)
    region: str = "A"  # A | B (Fig. 1)
    q_boundary: float = field(  # exponent q of log T / (8 T^q) in the region bounds
        default=7 / 8, metadata=bound(0.0, 1.0, "an exponent q of T^q", open_lo=True))
    left_factor: float = field(  # Region A starts at left_factor · (1 − log T / (8 T^q))
        default=0.9, metadata=bound(0.0, 1.0, "a fraction of Region B's left end", open_lo=True))
    input_scale: float = field(  # u_t ~ N(0, input_scale² I)
        default=1.0, metadata=bound(0.0, MAX_SCALE, "an input's standard deviation",
                                    open_lo=True))

    def __post_init__(self):
        check(self.region in REGIONS, f"region must be one of {REGIONS}, got {self.region!r}")
        lo, hi = region_bounds(self.T, self.q_boundary)
        check(0.0 < lo < hi < 1.0, f"T={self.T}, q_boundary={self.q_boundary}: Region B "
              f"({lo:.6g}, {hi:.6g}) is empty or leaves (0, 1); use a larger T")


def region_bounds(T: int, q: float) -> tuple[float, float]:
    """``(1 − log T / (8 T^q), 1 − 1 / (2 T^{5/4}))``: the ends of the bad Region B."""
    return 1.0 - math.log(T) / (8.0 * T**q), 1.0 - 1.0 / (2.0 * T**1.25)


def region_intervals(cfg: LDSConfig) -> list[tuple[float, float]]:
    """The intervals the eigenvalues are drawn from (uniformly; equal shares for Region A)."""
    lo, hi = region_bounds(cfg.T, cfg.q_boundary)
    if cfg.region == "B":
        return [(lo, hi)]
    return [(cfg.left_factor * lo, lo), (hi, 1.0)]


def sample_eigenvalues(cfg: LDSConfig, g: torch.Generator) -> Float[Tensor, " d_hidden"]:
    """``d_hidden`` eigenvalues of A, split as evenly as possible over the region's intervals."""
    parts = region_intervals(cfg)
    sizes = [cfg.d_hidden // len(parts) + (i < cfg.d_hidden % len(parts))
             for i in range(len(parts))]
    vals = [a + (b - a) * torch.rand(n, generator=g, dtype=torch.float64)
            for (a, b), n in zip(parts, sizes, strict=True)]
    return torch.cat(vals)


@dataclass
class LDS:
    """A = V diag(lam) Vᵀ (V orthogonal), B [d_hidden, d_in], C [d_out, d_hidden]."""

    lam: Tensor  # [d_hidden] eigenvalues of A
    V: Tensor  # [d_hidden, d_hidden]
    B: Tensor
    C: Tensor

    @property
    def A(self) -> Tensor:
        return self.V @ torch.diag(self.lam) @ self.V.T

    def impulse_response(self, n: int) -> Float[Tensor, "n d_out d_in"]:
        """``[C A^{j−1} B for j = 1..n]``: y_t = Σ_j impulse[j − 1] u_{t−j}."""
        CV, VB = self.C @ self.V, self.V.T @ self.B  # [d_out, h], [h, d_in]
        powers = self.lam[None, :] ** torch.arange(n, dtype=torch.float64)[:, None]  # [n, h]
        return torch.einsum("oh,jh,hi->joi", CV, powers, VB)

    def simulate(self, u: Float[Tensor, "*batch time d_in"]) -> Float[Tensor, "*batch time d_out"]:
        """Outputs y_0..y_{T−1} for inputs u_0..u_{T−1} (x_0 = 0, noiseless).

        Runs the recursion in A's eigenbasis, z = Vᵀx: z_{t+1} = lam ⊙ z_t + Vᵀ B u_t — one
        vectorised step per t over every coordinate and batch entry.
        """
        u = u.to(torch.float64)
        drive = u @ (self.V.T @ self.B).T  # [*batch, time, h]
        z = torch.zeros(*u.shape[:-2], self.lam.shape[0], dtype=torch.float64)
        zs = torch.empty_like(drive)
        for t in range(u.shape[-2]):
            zs[..., t, :] = z  # z_t depends on u_0..u_{t−1}
            z = self.lam * z + drive[..., t, :]
        return zs @ (self.C @ self.V).T  # [*batch, time, d_out]


def sample_lds(cfg: LDSConfig, g: torch.Generator) -> LDS:
    """A random system of the config's region: Haar-random eigenvectors, Gaussian B and C
    scaled so that C B u_t has entries of order one (B ~ N(0, 1/d_in), C ~ N(0, 1/d_hidden))."""
    h = cfg.d_hidden
    lam = sample_eigenvalues(cfg, g)
    Q, R = torch.linalg.qr(torch.randn(h, h, generator=g, dtype=torch.float64))
    V = Q * torch.sign(torch.diagonal(R))[None, :]  # Haar measure (sign-fixed QR)
    B = torch.randn(h, cfg.d_in, generator=g, dtype=torch.float64) / math.sqrt(cfg.d_in)
    C = torch.randn(cfg.d_out, h, generator=g, dtype=torch.float64) / math.sqrt(h)
    return LDS(lam, V, B, C)


def sample_inputs(cfg: LDSConfig, g: torch.Generator, batch: tuple[int, ...] = ()) -> Tensor:
    """i.i.d. Gaussian inputs ``[*batch, T, d_in]`` (well conditioned w.h.p., Theorem 5)."""
    return cfg.input_scale * torch.randn(*batch, cfg.T, cfg.d_in, generator=g,
                                         dtype=torch.float64)


def sample_sequence(cfg: LDSConfig, g: torch.Generator) -> tuple[LDS, Tensor, Tensor]:
    """``(system, u [T, d_in], y [T, d_out])`` — one seeded draw of system and inputs."""
    system = sample_lds(cfg, g)
    u = sample_inputs(cfg, g)
    return system, u, system.simulate(u)
