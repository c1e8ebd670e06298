"""Length generalisation of online spectral filtering on random LDSs (spectral paper Figs 2–4).

``python -m analyses.spectral_lds [--level quick|paper]``

For each region (A: eigenvalues hugging the bad interval; B: inside it, Fig. 1), seed and
algorithm (1: one autoregressive term; 2: two), a random noiseless LDS is driven by Gaussian
inputs and the online predictor of Alg. 1 / Alg. 2 runs with context lengths L = T^q,
q ∈ {1/4, 1/2, 3/4, 7/8, 1}. Outputs:

* ℓ_t(M^t, T^q) vs t, averaged over seeds and smoothed (Figs 2, 3, 4 and Alg. 2 on Region A);
* a table of average losses, their ratio to the full-context (q = 1) online predictor over the
  whole horizon and over its last quarter, and the asymmetric regret
  Σ_t ℓ_t(M^t, T^q) − Σ_t ℓ_t(M*_T, T) against the best full-context predictor in hindsight
  M*_T (least squares over the whole sequence, Definition 3), with ℓ(M*_T, T^q): how well the
  full-context optimum itself does when cut to context T^q (Eq. 7 of the proof overview).

Step size: η = lr / E_t‖X_t‖²_F with X_t the full-context regressors of the same system and
algorithm (one η for every q, so context is the only thing that changes). The default lr was
picked on full-context runs only, with a margin below the step sizes at which they become
unstable, so that no shorter context is favoured by the choice.

No suite model is trained: the predictors are the closed-form online learners of
:mod:`models.spectral`, so the analysis takes no checkpoints and no ``--train``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
from matplotlib import colormaps
from tqdm.auto import tqdm

from analyses.claims import Claim, Figure, Margin, Reading, tightest
from analyses.common import Checkpoint, fmt, get, run_analysis, to_jsonable
from analyses.zoo.spectral import SPECTRAL_LDS_LEVELS as LEVELS
from analyses.zoo.spectral import SpectralLDSSettings
from figures.style import new_figure
from models.spectral import (
    DENSE_MAX_T,
    autoregressive_base,
    best_in_hindsight,
    context_length,
    online_gradient_descent,
    predict,
    predictor_features,
    true_weights,
)
from seqprobe import memory
from seqprobe.cli import add_fields, add_level_flag, settings_from_args
from seqprobe.config import check
from tasks.base import make_generator
from tasks.lds import LDSConfig, region_bounds, sample_sequence

NAME = "spectral_lds"
QS = LEVELS["quick"].qs  # the context exponents of every level


REGION_SEED = {"A": 0, "B": 500_009}  # separate streams per region


def smooth(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far)."""
    if window <= 1:
        return x
    c = np.cumsum(np.insert(x, 0, 0.0))
    n = np.arange(1, len(x) + 1)
    lo = np.maximum(0, n - window)
    return (c[n] - c[lo]) / (n - lo)


def run_system(cfg: LDSConfig, k: int, qs: tuple[float, ...], algorithms: tuple[int, ...],
               lr: float, radius: float, g: torch.Generator) -> dict:
    """One random system: per algorithm, the online losses [q, T] and the comparators."""
    system, u, y = sample_sequence(cfg, g)
    T = cfg.T
    out = {"lam_min": float(system.lam.min()), "lam_max": float(system.lam.max())}
    for alg in algorithms:
        base = autoregressive_base(y, alg)
        target = y - base  # [T, d_out]
        Ls = [context_length(T, q, alg) for q in qs]
        X = torch.stack([predictor_features(u, alg, T, k, L) for L in Ls])  # [q, T, k, d_in]
        full = X[Ls.index(T)] if T in Ls else predictor_features(u, alg, T, k, T)
        eta = lr / float(full.pow(2).sum((-1, -2)).mean())
        ogd = online_gradient_descent(X, target.expand(len(qs), -1, -1), eta, radius)
        Mstar = best_in_hindsight(full, target)  # the best full-context predictor
        star_full = (predict(full, Mstar, base) - y).pow(2).sum(-1)  # ℓ_t(M*_T, T)
        star_ctx = (predict(X, Mstar, base) - y).pow(2).sum(-1)  # ℓ_t(M*_T, T^q) [q, T]
        Mtrue = true_weights(system.impulse_response(T), alg, T, k)
        out[alg] = {"losses": ogd["losses"].numpy(), "L": Ls, "eta": eta,
                    "star_full": star_full.numpy(), "star_ctx": star_ctx.numpy(),
                    "final_M_norm": float(ogd["M"].flatten(2).norm(dim=-1).max()),
                    "true_M_norm": float(Mtrue.flatten(1).norm(dim=-1).max()),
                    "Mstar_norm": float(Mstar.flatten(1).norm(dim=-1).max())}
    return out


def compute(T: int = 2**13, k: int = 24, d_hidden: int = 256, d_in: int = 4, d_out: int = 4,
            qs: tuple[float, ...] = QS, regions: tuple[str, ...] = ("A", "B"),
            algorithms: tuple[int, ...] = (1, 2), seeds: int = 3, seed: int = 0,
            lr: float = 0.3, radius: float = 10.0, points: int = 400,
            progress: bool = True) -> dict:
    """All numbers of the analysis (see the module docstring)."""
    check(seeds >= 1, f"seeds must be >= 1, got {seeds}")
    check(len(qs) >= 1 and all(0 < q <= 1 for q in qs), f"qs must be in (0, 1], got {qs}")
    check(1.0 in qs, "qs must include 1 (the full-context predictor everything is compared to)")
    check(all(a in (1, 2) for a in algorithms), f"algorithms must be 1 or 2, got {algorithms}")
    check(lr > 0 and radius > 0, "lr and radius must be > 0")
    qs = tuple(sorted(qs))
    t0 = time.time()
    window = max(1, T // 100)
    # t = 0 is left out: ℓ_0 = 0 (no input yet) and a log axis cannot show it
    grid = np.unique(np.linspace(1, T - 1, min(points, T - 1)).round().astype(int))
    late = slice(T - T // 4, T)
    i_full = qs.index(1.0)
    curves, rows, systems = {}, [], []
    bar = tqdm(total=len(regions) * seeds, desc=NAME, disable=not progress, leave=False)
    for region in regions:
        cfg = LDSConfig(T=T, d_hidden=d_hidden, d_in=d_in, d_out=d_out, region=region)
        runs = []
        for s in range(seeds):
            g = make_generator(seed + REGION_SEED[region] + 7919 * s)
            runs.append(run_system(cfg, k, qs, algorithms, lr, radius, g))
            bar.update(1)
        systems.append({"region": region, "lam_min": min(r["lam_min"] for r in runs),
                        "lam_max": max(r["lam_max"] for r in runs),
                        "region_bounds": region_bounds(T, cfg.q_boundary)})
        for alg in algorithms:
            L = runs[0][alg]["L"]
            losses = np.stack([r[alg]["losses"] for r in runs])  # [seed, q, T]
            star_full = np.stack([r[alg]["star_full"] for r in runs])  # [seed, T]
            star_ctx = np.stack([r[alg]["star_ctx"] for r in runs])  # [seed, q, T]
            mean_curve = losses.mean(0)  # [q, T]
            curves[f"{region}{alg}"] = {
                "region": region, "algorithm": alg, "qs": list(qs), "L": L,
                "t": grid.tolist(),
                "loss": [smooth(c, window)[grid].tolist() for c in mean_curve],
                # the seeds' spread, for the figure's band: each seed's smoothed curve
                "loss_min": np.min([[smooth(c, window)[grid] for c in seed_curves]
                                    for seed_curves in losses], axis=0).tolist(),
                "loss_max": np.max([[smooth(c, window)[grid] for c in seed_curves]
                                    for seed_curves in losses], axis=0).tolist(),
                "best_full": smooth(star_full.mean(0), window)[grid].tolist()}
            avg = losses.mean(-1)  # [seed, q]
            avg_late = losses[..., late].mean(-1)
            total = losses.sum(-1)
            for i, q in enumerate(qs):
                rows.append({
                    "region": region, "algorithm": alg, "q": q, "L": L[i],
                    "avg_loss": float(avg[:, i].mean()),
                    "avg_loss_std": float(avg[:, i].std()),
                    "late_loss": float(avg_late[:, i].mean()),
                    "ratio_to_full": float(avg[:, i].mean() / avg[:, i_full].mean()),
                    "late_ratio_to_full": float(avg_late[:, i].mean() / avg_late[:, i_full].mean()),
                    "regret_vs_full_online": float((total[:, i] - total[:, i_full]).mean()),
                    "asym_regret": float((total[:, i] - star_full.sum(-1)).mean()),
                    "best_full_avg_loss": float(star_full.mean()),
                    "best_at_context_avg_loss": float(star_ctx[:, i].mean()),
                    "eta": float(np.mean([r[alg]["eta"] for r in runs])),
                    "max_M_norm": max(r[alg]["final_M_norm"] for r in runs),
                    "max_true_M_norm": max(r[alg]["true_M_norm"] for r in runs),
                })
    bar.close()
    return to_jsonable({
        "T": T, "k": k, "d_hidden": d_hidden, "d_in": d_in, "d_out": d_out, "qs": list(qs),
        "seeds": seeds, "seed": seed, "lr": lr, "radius": radius, "smooth_window": window,
        "late_window": [late.start, late.stop], "systems": systems, "curves": curves,
        "rows": rows, "checks": checks(rows), "time_s": round(time.time() - t0, 1)})


def _row(rows, region, alg, q):
    for r in rows:
        if r["region"] == region and r["algorithm"] == alg and abs(r["q"] - q) < 1e-9:
            return r
    return None


def checks(rows: list[dict]) -> dict:
    """The ratios the paper's claims are about (None where a run is missing)."""
    out = {}
    for name, (region, alg, q) in {
        "B_alg2_q1/2": ("B", 2, 0.5), "B_alg1_q1/2": ("B", 1, 0.5),
        "A_alg1_q7/8": ("A", 1, 7 / 8), "A_alg2_q7/8": ("A", 2, 7 / 8),
        "A_alg1_q1/2": ("A", 1, 0.5),
    }.items():
        r = _row(rows, region, alg, q)
        out[name] = None if r is None else {"ratio_to_full": r["ratio_to_full"],
                                            "late_ratio_to_full": r["late_ratio_to_full"]}
    return out


# ---------------------------------------------------------------------------- plot
TITLES = {"A1": "Region A, Alg. 1 (Fig. 2)", "B1": "Region B, Alg. 1 (Fig. 3)",
          "B2": "Region B, Alg. 2 (Fig. 4)", "A2": "Region A, Alg. 2"}


def plot(result: dict):
    keys = [k for k in ("A1", "B1", "B2", "A2") if k in result["curves"]]
    fig, axes = new_figure(len(keys), width_per_panel=3.8, height=3.3)
    cmap = colormaps["viridis"]
    for ax, key in zip(axes, keys, strict=True):
        c = result["curves"][key]
        n = len(c["qs"])
        for i, (q, L) in enumerate(zip(c["qs"], c["L"], strict=True)):
            label = "q = 1 (full)" if q == 1 else f"q = {q:.3g} (L = {L})"
            ax.plot(c["t"], c["loss"][i], color=cmap(i / max(1, n - 1)), lw=1.2, label=label)
            if "loss_min" in c and result.get("seeds", 1) > 1:  # the seeds' min-max band
                ax.fill_between(c["t"], c["loss_min"][i], c["loss_max"][i], lw=0, alpha=0.15,
                                color=cmap(i / max(1, n - 1)))
        ax.set(yscale="log", xlabel="t", ylabel="ℓ_t (smoothed, mean over seeds)",
               title=TITLES.get(key, key))
    axes[0].legend(loc="upper right", fontsize=7)
    fig.suptitle(f"T = {result['T']}, k = {result['k']}, hidden {result['d_hidden']}, "
                 f"{result['seeds']} seeds (band: min–max over seeds)", fontsize=9)
    return fig


def table(result: dict) -> list[list]:
    head = ["region", "alg", "q", "L", "avg loss", "late loss", "ratio", "late ratio",
            "regret vs q=1", "asym regret", "M*_T at L"]
    rows = [head]
    for r in result["rows"]:
        rows.append([r["region"], r["algorithm"], round(r["q"], 3), r["L"], r["avg_loss"],
                     r["late_loss"], r["ratio_to_full"], r["late_ratio_to_full"],
                     r["regret_vs_full_online"], r["asym_regret"], r["best_at_context_avg_loss"]])
    return rows


# ---------------------------------------------------------------------------- the paper's claims
def _late_ratio(d: dict, name: str) -> float | None:
    return get(d, "checks", name, "late_ratio_to_full")


def claim_region_a(d: dict) -> Reading:
    """Fig. 2: in Region A, Alg. 1 with context T^7/8 is within 10 % of full context late on."""
    r = _late_ratio(d, "A_alg1_q7/8")
    text = f"Region A, Alg. 1, L = T^7/8: late loss / full-context {fmt(r)}"
    m = None if r is None else Margin("late loss / full-context's", r, "<=", 1.1, "×")
    return Reading(text, r is not None and r <= 1.1, m)


def claim_region_b(d: dict) -> Reading:
    """Figs. 3, 4: in Region B at context T^1/2, Alg. 2 is within 10 % of full context and
    Alg. 1 is more than 1.5 times as far off as Alg. 2."""
    r1, r2 = _late_ratio(d, "B_alg1_q1/2"), _late_ratio(d, "B_alg2_q1/2")
    text = f"Region B, L = T^1/2, late loss / full-context: Alg. 1 {fmt(r1)}, Alg. 2 {fmt(r2)}"
    m = (None if r1 is None or r2 is None else
         tightest(Margin("Alg. 2's late loss / full-context's", r2, "<=", 1.1, "×"),
                  Margin("Alg. 1's ratio over 1.5 × Alg. 2's", r1, ">", 1.5 * r2, "×")))
    return Reading(text, r1 is not None and r2 is not None and r2 <= 1.1 and r1 > 1.5 * r2, m)


FIGURE = Figure(
    "Spectral filtering on LDS regions A and B", "Spectral paper Figs. 2-4",
    (Claim("Region A: context T^7/8 closely matches full context (Fig. 2)", claim_region_a),
     Claim("Region B: Alg. 1 at T^1/2 fails, Alg. 2 at T^1/2 matches full context "
           "(Figs. 3, 4)", claim_region_b)),
    trains=False)


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    add_level_flag(p, levels=tuple(LEVELS))  # quick: CPU-sized; paper: the paper's §4.1
    add_fields(p, SpectralLDSSettings, levels=True)


def memory_estimate(s: SpectralLDSSettings, n_qs: int) -> int:
    """Bytes one system needs at its peak (systems run one after the other), float64, from the
    settings alone (erring high). With F = T·k·d_in (one context's regressors):

    * features: the n_qs contexts' regressors, listed and then stacked, the full-context ones,
      least squares' copy and its work (6 F), and one FFT convolution in flight: spectra of
      size S = 2^⌈log2(2T)⌉ ≤ 4T (complex, 16 bytes) and its real output (≤ 9 F in all):
      8·F·(2·n_qs + 15);
    * the system: its simulation (drive and states, T × d_hidden each), the impulse response
      (powers T × d_hidden, and T × d_out × d_hidden inside the einsum), the eigenbasis
      (4 d_hidden²), and per-step inputs, outputs and losses (T·(d_in + d_out)·(n_qs + 6));
    * the filters: a dense eigh of the T × T Hankel matrix (3 T²) up to ``DENSE_MAX_T``, else
      the subspace iteration's row blocks (1024 × T, gathered and indexed: 2 + 1 int64) and
      four T × (k + 20) bases.
    """
    T, k, h = s.T, s.k, s.d_hidden
    features = 8 * T * k * s.d_in * (2 * n_qs + 15)
    system = 8 * (T * h * (3 + s.d_out) + 4 * h * h + T * (s.d_in + s.d_out) * (n_qs + 6))
    filters = (8 * 3 * T * T if T <= DENSE_MAX_T
               else 8 * (3 * 1024 * T + 4 * T * (k + 20)))
    return features + system + filters


def _compute(args, _checkpoints: list[Checkpoint]) -> dict:
    check(args.device in ("cpu", "auto"),
          "spectral_lds runs on the CPU (float64 online learning); use --device cpu")
    s = settings_from_args(LEVELS[args.level], args)
    memory.check_fits(memory_estimate(s, len(s.qs)),
                      f"{NAME} at T = {s.T}, k = {s.k}, d_in = {s.d_in}, d_hidden = {s.d_hidden}",
                      "lower --T, --k or --d-in (the regressors are T x k x d_in per context)")
    return {**compute(**dataclasses.asdict(s), seed=args.seed), "level": args.level}


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, checkpoints=False, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
