"""The copy paper's bounds against measured errors (Thm 2.3, Lemma 2.4, Thm 2.7, App. C, D).

``python -m analyses.copy_bounds [GSSM or transformer copy checkpoints...]``

1. Upper bound (transformers): the hash-copy construction of App. C
   (:func:`models.constructions.build_hash_copy_transformer`) errs only when the string repeats
   an n-gram (Thm 2.3), and for uniform strings p_n-gram < L²·D^(−n) (Lemma 2.4). For each n
   and length L we measure p_n-gram by counting on many uniform strings and the construction's
   string-level error (one exact teacher-forced pass), stratified: error = p̂·err(strings with a
   repeat) + (1 − p̂)·err(strings without), both strata run through the model.
2. Lower bound (GSSMs, Thm 2.7): a model whose state takes at most 2^bits values errs with
   probability > 1 − 2^bits / D^L. For each GSSM checkpoint, bits = (floats in its state) ×
   bits per float (32 and 8 shown); the bound is drawn beside the checkpoint's measured error.
   Transformer checkpoints are measured for contrast (their KV cache grows with L: no bound).
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import numpy as np
import torch
from tqdm.auto import tqdm

from analyses.claims import Claim, Figure, Margin, Reading, tightest
from analyses.common import Checkpoint, run_analysis, to_jsonable
from analyses.copy_models import load_copy_models
from analyses.zoo.copy import COPY_BOUNDS_LEVELS as LEVELS
from analyses.zoo.copy import CopyBoundsSettings
from figures.style import COLORS, new_figure
from probes.copying import state_floats, string_errors
from seqprobe import memory
from seqprobe.cli import add_fields, settings_from_args
from seqprobe.config import check
from tasks.base import make_generator
from tasks.copy import CopyConfig, CopyTask

# The constructions, their bounds and the meta-device memory estimate (model code, which
# imports TransformerLens and so transformers) are imported in the functions that use them:
# --help and the refusals read no model code.
NAME = "copy_bounds"
GSSM_ARCHS = ("mamba", "mamba2", "lstm")
BOUND_ARCHS = (*GSSM_ARCHS, "transformer")
COUNT_BATCH = 2000  # uniform strings counted at once by construction_errors
CONSTRUCTION_ROWS = 8  # copy_errors' batch through the construction
CHECKPOINT_ROWS = 32  # checkpoint_errors' batch


def copy_errors(model, x: torch.Tensor, D: int,
                batch_size: int = CONSTRUCTION_ROWS) -> torch.Tensor:
    """[batch] bool: the model's copy of each row of x (``<BOS> x <COPY>``) is wrong."""
    vocab = CopyTask(CopyConfig(D=D)).vocab
    B = x.shape[0]
    prompts = torch.cat([torch.full((B, 1), vocab.id("BOS")), x,
                         torch.full((B, 1), vocab.id("COPY"))], dim=1)  # [batch, L + 2]
    return string_errors(model, prompts, x, batch_size)


def construction_errors(n_values: list[int], lengths: list[int], D: int = 26,
                        count_samples: int = 4000, model_samples: int = 16, seed: int = 0,
                        device: str = "cpu", progress: bool = True) -> list[dict]:
    """Measured p_n-gram, Lemma 2.4's bound and the construction's stratified error."""
    from models.constructions import (
        build_hash_copy_transformer,
        has_repeated_ngram,
        lemma_2_4_bound,
    )

    rows = []
    bar = tqdm(total=len(n_values) * len(lengths), desc=f"{NAME}: construction",
               disable=not progress, leave=False)
    for n in n_values:
        model = build_hash_copy_transformer(n, D, max_keys=max(4 * max(lengths), 1000)).to(device)
        for L in lengths:
            if L < 2 * n:  # Thm 2.3 needs 2n ≤ L
                bar.update(1)
                continue
            g = make_generator(seed + 7919 * n + L)
            rep_x, norep_x, n_rep, done = [], [], 0, 0
            while done < count_samples:  # count repeats; keep a few strings of each stratum
                b = min(COUNT_BATCH, count_samples - done)
                x = torch.randint(0, D, (b, L), generator=g)
                r = has_repeated_ngram(x, n, D)
                n_rep += int(r.sum())
                done += b
                if sum(len(t) for t in rep_x) < model_samples:
                    rep_x.append(x[r][:model_samples])
                if sum(len(t) for t in norep_x) < model_samples:
                    norep_x.append(x[~r][:model_samples])
            p_hat = n_rep / done
            rep = torch.cat(rep_x)[:model_samples]
            norep = torch.cat(norep_x)[:model_samples]
            err_rep = float(copy_errors(model, rep, D).float().mean()) if len(rep) else 0.0
            err_norep = float(copy_errors(model, norep, D).float().mean()) if len(norep) else 0.0
            err = p_hat * err_rep + (1 - p_hat) * err_norep
            # standard error: counting noise on p̂ plus model-sample noise in both strata
            se = math.sqrt((err_rep - err_norep) ** 2 * p_hat * (1 - p_hat) / done
                           + p_hat**2 * err_rep * (1 - err_rep) / max(len(rep), 1)
                           + (1 - p_hat) ** 2 * err_norep * (1 - err_norep) / max(len(norep), 1))
            rows.append({"n": n, "L": L, "D": D, "p_ngram": p_hat, "count_samples": done,
                         "bound": lemma_2_4_bound(L, n, D), "error": err, "error_se": se,
                         "error_given_repeat": err_rep if len(rep) else None,
                         "error_given_no_repeat": err_norep if len(norep) else None,
                         "model_samples_repeat": len(rep), "model_samples_no_repeat": len(norep),
                         "within_bound": err <= lemma_2_4_bound(L, n, D)})
            bar.update(1)
    bar.close()
    return rows


def checkpoint_errors(model, D: int, lengths: list[int], samples: int, seed: int,
                      progress: bool = True) -> list[dict]:
    """Measured string-level copy error of a checkpoint on uniform strings of each length."""
    rows = []
    for L in tqdm(lengths, desc=f"{NAME}: {model.arch}", disable=not progress, leave=False):
        x = torch.randint(0, D, (samples, L), generator=make_generator(seed + L))
        err = copy_errors(model, x, D, batch_size=CHECKPOINT_ROWS)
        rows.append({"L": L, "error": float(err.float().mean()), "samples": samples})
    return rows


def compute(models: dict | None = None, D: int = 26, level: str = "quick", seed: int = 0,
            device: str = "cpu", progress: bool = True, settings: CopyBoundsSettings | None = None
            ) -> dict:
    """Both parts; ``models`` = {label: checkpoint model} for part 2 (may be empty);
    ``settings``: the level's unless given."""
    from models.constructions import gssm_error_bound

    check(level in LEVELS, f"unknown level {level!r}; allowed: {', '.join(LEVELS)}")
    cfg = settings or LEVELS[level]
    constr = construction_errors(list(cfg.n_values), list(cfg.lengths), D, cfg.count_samples,
                                 cfg.model_samples, seed, device, progress)
    gssm = []
    for label, model in (models or {}).items():
        model.eval()
        entry = {"label": label, "arch": model.arch,
                 "measured": checkpoint_errors(model, D, list(cfg.gssm_lengths),
                                               cfg.gssm_samples, seed, progress)}
        if model.arch in GSSM_ARCHS:
            floats = state_floats(model)
            entry["state_floats"] = floats
            entry["bounds"] = {str(b): {"state_bits": floats * b,
                                        "L_star": floats * b / math.log2(D),
                                        "by_L": [{"L": r["L"], "bound": gssm_error_bound(
                                            floats * b, r["L"], D)} for r in entry["measured"]]}
                               for b in (32, 8)}
        gssm.append(entry)
    return to_jsonable({"D": D, "level": level, "seed": seed,
                        "settings": dataclasses.asdict(cfg),
                        "construction": constr, "checkpoints": gssm})


def plot(result: dict):
    from models.constructions import gssm_error_bound

    fig, ax = new_figure(2, width_per_panel=5.0, height=3.6)
    D = result["D"]
    shades = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"]
    ns = sorted({r["n"] for r in result["construction"]})
    for k, n in enumerate(ns):
        rows = [r for r in result["construction"] if r["n"] == n]
        L = np.array([r["L"] for r in rows])
        c = shades[k % len(shades)]
        ax[0].plot(L, np.minimum([r["bound"] for r in rows], 1.0), ls="--", color=c, lw=1,
                   label=f"n={n}: L²·D^-n" if k == 0 else f"n={n}: bound")
        ax[0].plot(L, [r["p_ngram"] for r in rows], ls=":", color=c, lw=1.2,
                   label="measured p_n-gram" if k == 0 else None)
        ax[0].errorbar(L, [r["error"] for r in rows], yerr=[r["error_se"] for r in rows],
                       marker="o", ls="none", color=c, capsize=2,
                       label="construction error" if k == 0 else None)
    # log y: the larger n are orders of magnitude rarer (zero errors are not drawn)
    ax[0].set(xscale="log", yscale="log", xlabel="string length L", ylabel="probability",
              ylim=(1e-4, 1.5), title=f"hash-copy construction (D={D}): error ≤ p ≤ bound")
    ax[0].legend(fontsize=6)

    cks = result["checkpoints"]
    if not cks:
        ax[1].text(0.5, 0.5, "no GSSM checkpoint given", ha="center", va="center",
                   transform=ax[1].transAxes)
    for k, e in enumerate(cks):
        color = COLORS.get(e["arch"], shades[k % len(shades)])
        L = [r["L"] for r in e["measured"]]
        ax[1].plot(L, [r["error"] for r in e["measured"]], marker="o", color=color,
                   label=f"{e['label']}: measured error")
        if "bounds" in e:
            Lmax = max(max(L), e["bounds"]["32"]["L_star"] * 1.3)
            grid = np.unique(np.geomspace(max(1, min(L)), Lmax, 200).astype(int))
            for b, ls in (("32", "--"), ("8", ":")):
                bits = e["bounds"][b]["state_bits"]
                ax[1].plot(grid, [gssm_error_bound(bits, int(x), D) for x in grid], ls=ls,
                           color=color, lw=1,
                           label=f"Thm 2.7 bound, {e['state_floats']} floats × {b} bits")
    ax[1].set(xscale="log", xlabel="string length L", ylabel="string-level error",
              ylim=(-0.02, 1.05), title="GSSMs: error > 1 − 2^bits / D^L")
    if cks:
        ax[1].legend(fontsize=6)
    return fig


def table(result: dict) -> list[list]:
    rows = [["n", "L", "error", "± se", "p_ngram", "L²D^-n", "err|repeat", "err|none"]]
    for r in result["construction"]:
        rows.append([r["n"], r["L"], r["error"], r["error_se"], r["p_ngram"], r["bound"],
                     "-" if r["error_given_repeat"] is None else r["error_given_repeat"],
                     "-" if r["error_given_no_repeat"] is None else r["error_given_no_repeat"]])
    for e in result["checkpoints"]:
        rows.append([e["label"], "L", "error", "", "", "bound@32b", "", ""])
        for j, r in enumerate(e["measured"]):
            b = e["bounds"]["32"]["by_L"][j]["bound"] if "bounds" in e else "-"
            rows.append(["", r["L"], r["error"], "", "", b, "", ""])
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_fields(p, CopyBoundsSettings, levels=True)
    p.add_argument("--archs", default=None,
                   help=f"with --train: GSSMs to measure, of {', '.join(GSSM_ARCHS)} "
                        "(default: the level's)")


def gssm_recipes(level: str, archs: list[str] | None = None) -> list[str]:
    """The zoo's copy recipes of the GSSMs (default: the level's ``gssm_archs``)."""
    archs = archs or LEVELS[level].gssm_archs
    for a in archs:
        check(a in GSSM_ARCHS, f"unknown GSSM {a!r}; allowed: {', '.join(GSSM_ARCHS)}")
    return [f"copy/{a}" for a in archs]


def memory_estimate(settings: CopyBoundsSettings, D: int, models: dict) -> int:
    """Bytes the run needs at its peak, from the settings and configs alone (erring high).
    One construction is held at a time (built per n), so the peak is the largest of

        weights(construction n) + plain forward(8 rows, 2·L_max + 4) + 2000·L_max·8·4

    (its weights grow as n⁴: n = 64 is a 42,240-wide model; the last term is the counting of
    repeated n-grams: strings, their n-gram codes, sorted, compared) and, per checkpoint,
    plain forward(32 rows, 2·max(gssm_lengths) + 4) (:func:`models.memory.forward_bytes`: a
    teacher-forced pass holds one block's activations at a time)."""
    from models.constructions import HashCopyConfig, hash_copy_model_config
    from models.memory import forward_bytes, weight_bytes

    L = max(settings.lengths)
    counting = COUNT_BATCH * L * 8 * 4
    peaks = [weight_bytes("transformer", cfg)
             + forward_bytes("transformer", cfg, CONSTRUCTION_ROWS, 2 * L + 4, cached=False)
             + counting
             for cfg in (hash_copy_model_config(HashCopyConfig(n=n, D=D))
                         for n in settings.n_values)]  # built even where 2n > L
    peaks += [forward_bytes(m.arch, m.cfg, CHECKPOINT_ROWS, 2 * max(settings.gssm_lengths) + 4,
                           cached=False) for m in models.values()]
    return max(peaks, default=0)


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    paths = [c.path for c in checkpoints]
    models, _, D = load_copy_models(paths, args.device, BOUND_ARCHS)
    settings = settings_from_args(LEVELS[args.level], args)
    check(not models or D == settings.D,
          f"the checkpoints' alphabet D={D} differs from --D {settings.D}")
    memory.check_fits(memory_estimate(settings, settings.D, models),
                      f"{NAME} (constructions for n = {list(settings.n_values)} at L up to "
                      f"{max(settings.lengths)})",
                      "lower --n (a construction's weights grow as n^4) or --lengths")
    result = compute(models, settings.D, args.level, args.seed, args.device, settings=settings)
    result["checkpoint_paths"] = paths
    return result


# ---------------------------------------------------------------------------- the paper's claims
def claim_no_repeat(d: dict) -> Reading:
    """Thm 2.3: the construction never errs on a string with no repeated n-gram."""
    errs = [r["error_given_no_repeat"] for r in d["construction"]
            if r["error_given_no_repeat"] is not None]
    m = Margin("largest error with no repeated n-gram", max(errs), "<=", 0.0)
    return Reading(f"error on strings with no repeated n-gram: max {max(errs):.3f} over "
                   f"{len(errs)} (n, L) cells", max(errs) == 0.0, m)


def claim_lemma_2_4(d: dict) -> Reading:
    """Lemma 2.4: at the longest length, every n's error is within L²·D^(−n)."""
    rows = [r for r in d["construction"] if r["L"] == max(r2["L"] for r2 in d["construction"])]
    parts = [f"n = {r['n']}: error {r['error']:.3f} (bound {min(r['bound'], 1):.3f}, "
             f"repeat prob {r['p_ngram']:.3f})" for r in rows]
    # a bound of 1 or more says nothing: the margin is that of the bounds below 1
    binding = [Margin(f"error at n = {r['n']}", r["error"], "<=", r["bound"]) for r in rows
               if r["bound"] < 1]
    m = tightest(*binding) if binding else None
    return Reading(f"L = {rows[0]['L']}: " + "; ".join(parts),
                   all(r["within_bound"] for r in rows), m)


def claim_gssm_bound(d: dict) -> Reading:
    """Error >= the bound everywhere; n/a when the bound is 0 at every tested length (a state
    of that many bits could copy them all, so the check says nothing)."""
    parts, ok, vacuous, margins = [], True, True, []
    for e in d["checkpoints"]:
        if "bounds" not in e:
            continue
        b32 = e["bounds"]["32"]
        last = e["measured"][-1]
        parts.append(f"{e['label']}: error {last['error']:.2f} at L = {last['L']}; bound > 0 "
                     f"only beyond L* = {b32['L_star']:.0f} ({e['state_floats']} floats x 32 bits)")
        for m, b in zip(e["measured"], b32["by_L"], strict=True):
            ok &= m["error"] >= b["bound"] - 1e-9
            vacuous &= b["bound"] <= 0
            margins.append(Margin(f"{e['label']} error at L = {m['L']}", m["error"], ">=",
                                  b["bound"]))
    if not parts:
        return Reading("no GSSM checkpoint", None)
    # vacuous (n/a): every bound is 0, so no margin says anything
    return Reading("; ".join(parts), None if vacuous else ok,
                   None if vacuous else min(margins, key=lambda g: g.distance))


FIGURE = Figure(
    "Hash-copy construction vs the bounds", "Copy paper Thm 2.3, Lemma 2.4, Thm 2.7",
    (Claim("the construction copies any string with no repeated n-gram (Thm 2.3)",
           claim_no_repeat),
     Claim("its error on uniform strings of length 1000 is within L²·D^(−n) (Lemma 2.4)",
           claim_lemma_2_4),
     Claim("a GSSM with a fixed-size state fails on long strings: error >= 1 − 2^bits/D^L "
           "(Thm 2.7)", claim_gssm_bound)),
    recipes=gssm_recipes)


def main(argv=None) -> int:
    return run_analysis(
        NAME, __doc__, argv, compute=_compute, plot=plot, table=table, figure=FIGURE,
        add_arguments=add_arguments, threads=4,
        recipes=lambda a: gssm_recipes(a.train, a.archs.split(",") if a.archs else None))


if __name__ == "__main__":
    raise SystemExit(main())
