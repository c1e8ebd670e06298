"""The state-transition factor a_t on Markov and switching Markov data (Markov paper Figs 4, 13).

``python -m analyses.mamba_decay markov.pt [switching.pt]`` (or ``--train --level quick``: the zoo's
``markov/mamba2`` and ``switching_markov/mamba2``)

a_t = exp(−exp(A_log)·Δ_t) (``blocks.{i}.mixer.hook_decay``, [batch, pos, heads]) decides how
much of H_{t−1} survives into H_t. The add-β estimator needs every past count, so on random
Markov chains a trained model should keep a_t ≈ 1 at every position (§4.2.1 (i), Fig. 4). On
switching Markov data the optimal predictor forgets all counts at a switch token: a_t ≈ 0 at
switch tokens and ≈ 1 elsewhere (§5.1, Fig. 13).

For each checkpoint (kind read from its task): a_t per position (mean over test sequences),
per layer and head; for switching data the mean at switch tokens vs elsewhere and one
sequence's a_t trace with its switch positions; the model's loss gap to the optimal predictor
(which shows whether it learned the task at all). The readers are :mod:`probes.ssm`'s
(``decay_from_parameters`` recomputes a_t from the weights as a check on the hook).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
import torch

from analyses.claims import Claim, Figure, Margin, Reading, Undecided
from analyses.common import Checkpoint, load_model, need, run_analysis, to_jsonable
from figures.style import COLORS, new_figure
from probes.markov import MAMBA2_ARCHS, evaluate_markov, markov_batch, markov_task_of
from probes.ssm import read_decay
from seqprobe.cli import add_fields
from seqprobe.config import check
from seqprobe.flags import MAX_EXAMPLES, Config, bound

NAME = "mamba_decay"
RECIPES = ("markov/mamba2", "switching_markov/mamba2")


def _summary(a: torch.Tensor) -> dict:
    """Per-layer, per-head means and the per-position curve of a [layers, batch, pos, heads]."""
    return {
        "mean": float(a[:, :, 1:].mean()),  # a_1 multiplies H_0 = 0: left out
        "mean_per_layer_head": a[:, :, 1:].mean(dim=(1, 2)),  # [layers, heads]
        "min_per_layer_head": a[:, :, 1:].amin(dim=(1, 2)),
        "curve": a.mean(dim=1),  # [layers, pos, heads]
    }


def compute(models: list[tuple[str, object]], n_seqs: int = 64, seed: int = 0) -> dict:
    """a_t statistics for each ``(label, model)``; switching checkpoints get the switch split."""
    check(len(models) >= 1, "need at least one model")
    rows = []
    for label, model in models:
        check(model.arch in MAMBA2_ARCHS,
              f"mamba_decay needs Mamba-2 / MambaZero, got {model.arch!r}")
        task = markov_task_of(model)
        batch = markov_batch(task, n_seqs, seed)
        a = read_decay(model, batch.tokens)  # [layers, batch, pos, heads]
        ev = evaluate_markov(model, task, n_seqs, seed + 1)
        row = {"label": label, "task": task.name, "loss_gap": ev["loss_gap"],
               "n_layers": model.cfg.n_layers, "n_heads": model.cfg.n_heads, **_summary(a)}
        if hasattr(task, "switch_id"):
            sw = batch.tokens == task.switch_id  # [batch, pos]
            pos = torch.arange(sw.shape[1])
            other = ~sw & (pos >= 1)
            row.update({
                "p_switch": task.cfg.p_switch, "n_switch": int(sw.sum()),
                "mean_at_switch": float(a[:, sw].mean()) if sw.any() else None,
                "mean_elsewhere": float(a[:, other].mean()),
                # just after a switch the counts restart: a_t there says whether it waits
                "mean_after_switch": float(a[:, torch.roll(sw, 1, 1) & other].mean())
                if sw.any() else None,
            })
            row.update(switch_ratio(a, sw, other, seed))
            idx = int(sw.sum(1).argmax())  # the test sequence with the most switches
            row["trace"] = {"a": a[:, idx], "switch_pos": sw[idx].nonzero().flatten()}
        rows.append(row)
    return to_jsonable({"n_seqs": n_seqs, "seed": seed, "models": rows})


BOOTSTRAP = 2000  # resamples of the test chains for the interval of the switch ratio


def switch_ratio(a: torch.Tensor, sw: torch.Tensor, other: torch.Tensor, seed: int) -> dict:
    """a_t at switch tokens over a_t elsewhere (layers and heads averaged), with a 95 %
    bootstrap interval that resamples the test chains (each with all its positions): how much
    of the state a switch keeps relative to an ordinary token, and how sure the run is of it.
    ``a``: [layers, batch, pos, heads]; ``sw``, ``other``: [batch, pos] masks."""
    per_pos = a.mean(dim=(0, 3)).double()  # [batch, pos]
    at_sum = (per_pos * sw).sum(1).numpy()  # [batch]: per chain
    at_n = sw.sum(1).double().numpy()
    else_sum = (per_pos * other).sum(1).numpy()
    else_n = other.sum(1).double().numpy()
    if at_n.sum() == 0:
        return {"switch_ratio": None, "switch_ratio_ci": None}
    ratio = float((at_sum.sum() / at_n.sum()) / (else_sum.sum() / else_n.sum()))
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(at_n), (BOOTSTRAP, len(at_n)))  # [resample, chain]
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = ((at_sum[pick].sum(1) / at_n[pick].sum(1))
                / (else_sum[pick].sum(1) / else_n[pick].sum(1)))
    boot = boot[np.isfinite(boot)]  # a resample with no switch token says nothing
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return {"switch_ratio": ratio, "switch_ratio_ci": [float(lo), float(hi)],
            "n_chains_with_switch": int((at_n > 0).sum()), "n_chains": len(at_n)}


# ---------------------------------------------------------------------------- plot
def plot(result: dict):
    rows = result["models"]
    fig, ax = new_figure(2, width_per_panel=5.0, height=3.3)
    for i, r in enumerate(rows):
        if "trace" in r:
            continue
        curve = np.array(r["curve"], dtype=float)  # [layers, pos, heads]
        for layer in range(curve.shape[0]):
            for h in range(curve.shape[2]):
                ax[0].plot(np.arange(1, curve.shape[1] + 1), curve[layer, :, h], lw=1,
                           color=list(COLORS.values())[(i + layer + h) % len(COLORS)],
                           label=f"{r['label'][-28:]} L{layer}H{h}")
    ax[0].set(xlabel="position t", ylabel="mean a_t", ylim=(-0.02, 1.05),
              title="a_t on Markov data (Fig. 4)")
    if ax[0].lines:
        ax[0].legend(fontsize=6)
    sw_rows = [r for r in rows if "trace" in r]
    if sw_rows:
        r = sw_rows[0]
        a = np.array(r["trace"]["a"], dtype=float)  # [layers, pos, heads]
        for layer in range(a.shape[0]):
            for h in range(a.shape[2]):
                ax[1].plot(np.arange(1, a.shape[1] + 1), a[layer, :, h], lw=1,
                           label=f"L{layer}H{h}")
        for j, p in enumerate(r["trace"]["switch_pos"]):
            ax[1].axvline(p + 1, color=COLORS["rope"], lw=0.8, ls="--",
                          label="switch token" if j == 0 else None)
        ax[1].set(xlabel="position t", ylabel="a_t", ylim=(-0.02, 1.05),
                  title=f"switching Markov (Fig. 13)\nmean a_t at a switch "
                        f"{r['mean_at_switch']:.3f}, elsewhere {r['mean_elsewhere']:.3f}")
        ax[1].legend(fontsize=6)
    else:
        ax[1].text(0.5, 0.5, "no switching-Markov checkpoint given", ha="center",
                   transform=ax[1].transAxes)
    return fig


def table(result: dict) -> list[list]:
    out = [["model", "task", "mean a_t", "min a_t", "at switch", "elsewhere", "loss gap"]]
    for r in result["models"]:
        out.append([r["label"][-40:], r["task"], r["mean"],
                    float(np.min(np.array(r["min_per_layer_head"], dtype=float))),
                    r.get("mean_at_switch", "-") if r.get("mean_at_switch") is not None else "-",
                    r.get("mean_elsewhere", "-"), r["loss_gap"]])
    return out


@dataclass(frozen=True)
class Settings(Config):
    """What the analysis measures (each field is a flag: seqprobe.cli.add_fields)."""

    n_seqs: int = field(default=64, metadata=bound(
        1, MAX_EXAMPLES, "sequences per point", help="test sequences"))


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    add_fields(p, Settings)


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints)
    models = [(c.label, load_model(c.path, archs=MAMBA2_ARCHS, device=args.device))
              for c in checkpoints]
    result = compute(models, n_seqs=args.n_seqs, seed=args.seed)
    result["checkpoints"] = [c.path for c in checkpoints]
    return result


# ---------------------------------------------------------------------------- the paper's claims
def claim_markov(d: dict) -> Reading:
    """Fig. 4: on Markov data the first non-switching model keeps a_t ≈ 1 (mean >= 0.95)."""
    r = next(x for x in d["models"] if "p_switch" not in x)
    m = Margin("mean a_t", r["mean"], ">=", 0.95)
    return Reading(f"mean a_t on Markov data {r['mean']:.3f} ({r['label']})", m.holds, m)


RESET = 0.1  # a_t at switches below this: a full reset (said beside the verdict)
KEEP = 0.5  # a switch keeps less than half of what an ordinary token keeps: nearer 0 than 1


def claim_switch(d: dict) -> Reading:
    """Fig. 13 / §5.1: Mamba "forgets past counts every time a switch token occurs", a_t = 0
    at switches and 1 elsewhere. Read as the paper states it — the state is reset at a switch,
    relative to what an ordinary token keeps — not against a fixed a_t: holds when the 95 %
    bootstrap interval (over the test chains and their positions) of a_t at switches over
    a_t elsewhere lies below :data:`KEEP` (nearer the paper's 0 than its 1), does not hold
    when it lies at or above it, and is not decided when it holds :data:`KEEP`. A full reset
    (a_t < :data:`RESET`) or a partial one is said in the text."""
    r = next((x for x in d["models"] if x.get("mean_at_switch") is not None), None)
    if r is None:
        return Reading("no switching model", False)
    at, elsewhere = r["mean_at_switch"], r["mean_elsewhere"]
    ratio, ci = r.get("switch_ratio"), r.get("switch_ratio_ci")
    text = f"a_t at switch tokens {at:.3f}, elsewhere {elsewhere:.3f}"
    if ratio is None or ci is None:
        return Reading(text, Undecided.regime(
            "this result has no interval of a_t at switches over elsewhere (an older run of "
            "the analysis: run it again)"))
    lo, hi = ci
    text += (f": a switch keeps {ratio:.2f} of what other tokens keep (95 % CI {lo:.2f}–"
             f"{hi:.2f}, bootstrap over {r.get('n_chains', '?')} test chains); "
             + ("a full reset" if at < RESET else "a partial reset" if hi < KEEP else "no reset"))
    m = Margin("a_t at switches / elsewhere", ratio, "<", KEEP, interval=(lo, hi))
    if hi < KEEP:
        return Reading(text, True, m)
    if lo >= KEEP:
        return Reading(text, False, m)
    return Reading(text, Undecided.either_shape(
        f"the interval holds {KEEP}: the run cannot say whether a switch keeps less than half "
        "of what other tokens keep"), m)


FIGURE = Figure(
    "a_t on Markov and switching Markov data", "Markov paper Figs. 4, 13",
    (Claim("a_t ≈ 1 on Markov data (no forgetting; mean >= 0.95)", claim_markov),
     Claim("a_t ≈ 0 at switch tokens, ≈ 1 elsewhere: the counts reset at a switch (a_t at "
           f"switches below {KEEP} of a_t elsewhere, 95 % CI)", claim_switch)),
    recipes=lambda level: list(RECIPES))


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
