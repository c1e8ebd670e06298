"""How many training samples does each model need to learn to copy? (copy paper §3.2, Figs. 1a, 9)

``python -m analyses.copy_efficiency ckpt.pt ...`` (or ``--train quick``): string- and
character-level copy accuracy against the number of training examples seen, read from the
evaluation history the trainer stores in every checkpoint (``history``: samples_seen,
string_acc, char_acc, eval_loss; evaluated on fresh strings of the training distribution). For
each model: the samples needed to first reach 50 % and 90 % string accuracy, and their ratio to
the fastest model (paper: transformers need ~100× fewer samples than GSSMs on length-300
strings, ~10× fewer on length ≤ 30, Fig. 9b).

With ``--train`` it reads the zoo's copy models of Fig. 1, the same checkpoints as
``length_generalization`` (``analyses.common.COPY_LABELS``; trained once, cached); the quick
preset evaluates every 100 steps.
"""

from __future__ import annotations

import numpy as np

from analyses.common import (
    Checkpoint,
    Claim,
    Figure,
    add_copy_models_argument,
    copy_models_recipes,
    copy_recipes,
    load_copy_models,
    need,
    run_analysis,
    to_jsonable,
)
from figures.style import COLORS, new_figure
from tasks.base import check

NAME = "copy_efficiency"
GSSMS = ("mamba", "mamba2", "lstm")
LEVELS = (0.5, 0.9)


def samples_to_reach(history: list[dict], key: str, level: float) -> int | None:
    """First ``samples_seen`` whose ``key`` accuracy is >= level (None if never)."""
    for h in history:
        if h.get(key) is not None and h[key] >= level:
            return int(h["samples_seen"])
    return None


def compute(histories: dict[str, list[dict]], info: dict | None = None) -> dict:
    """Curves and samples-to-accuracy for {label: checkpoint history}."""
    curves, reach = {}, {}
    for label, hist in histories.items():
        rows = [{"samples_seen": int(h["samples_seen"]), "step": int(h.get("step", 0)),
                 "string_acc": h.get("string_acc"), "char_acc": h.get("char_acc"),
                 "eval_loss": h.get("eval_loss")} for h in hist if "samples_seen" in h]
        curves[label] = rows
        reach[label] = {f"string_{lv}": samples_to_reach(rows, "string_acc", lv) for lv in LEVELS}
        reach[label].update({f"char_{lv}": samples_to_reach(rows, "char_acc", lv)
                             for lv in LEVELS})
    ratios = {}
    for key in (f"string_{LEVELS[-1]}", f"string_{LEVELS[0]}"):
        reached = {k: v[key] for k, v in reach.items() if v[key] is not None}
        if reached:
            best = min(reached.values())
            ratios[key] = {k: (v[key] / best if v[key] is not None else None)
                           for k, v in reach.items()}
    return to_jsonable({"curves": curves, "samples_to_reach": reach,
                        "ratio_to_fastest": ratios, "train": info or {}})


def plot(result: dict):
    fig, axes = new_figure(2, width_per_panel=4.6, height=3.5)
    for label, rows in result["curves"].items():
        color = COLORS.get(label.split("'")[0])
        x = [r["samples_seen"] for r in rows]
        for ax, key in zip(axes, ("string_acc", "char_acc"), strict=True):
            y = [np.nan if r[key] is None else r[key] for r in rows]
            ax.plot(x, y, marker="o", ms=3, color=color, label=label)
    axes[0].set(ylabel="string-level accuracy", title="copy: training efficiency")
    # the paper decodes greedily; a teacher-forced eval (quick preset) gives the same string
    # accuracy but counts each character given the true prefix
    forced = any(not i.get("greedy_eval", True) for i in result["train"].values())
    axes[1].set(ylabel="character-level accuracy" + (" (teacher forced)" if forced else ""),
                title="character level (Fig. 9)")
    for ax in axes:
        ax.set(xscale="log", xlabel="training examples seen", ylim=(-0.02, 1.02))
        ax.legend(fontsize=7)
    return fig


def table(result: dict) -> list[list]:
    rows = [["model", "final string", "final char", "samples→50%", "samples→90%", "×fastest"]]
    ratio = result["ratio_to_fastest"].get(f"string_{LEVELS[-1]}", {})
    for label, r in result["curves"].items():
        last = r[-1] if r else {}
        reach = result["samples_to_reach"][label]
        rows.append([label, last.get("string_acc", "-"), last.get("char_acc", "-"),
                     reach[f"string_{LEVELS[0]}"] or "never",
                     reach[f"string_{LEVELS[-1]}"] or "never",
                     "-" if ratio.get(label) is None else ratio[label]])
    return rows


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints, "copy checkpoints")
    models, info, _ = load_copy_models([c.path for c in checkpoints], args.device)
    histories = {label: m.checkpoint["history"] for label, m in models.items()}
    for label, h in histories.items():
        check(any("string_acc" in r for r in h),
              f"{info[label]['path']}: the checkpoint has no accuracy history (was it trained?)")
    return compute(histories, info)


# ---------------------------------------------------------------------------- the paper's claims
def claim_fewer_samples(d: dict) -> tuple[str, bool | None]:
    """Every GSSM needs more samples to reach 90 % string accuracy than the fastest
    transformer (or never reaches it); n/a without a GSSM."""
    key = "string_0.9"
    reach = {k: v.get(key) for k, v in d["samples_to_reach"].items()}
    text = "samples to 90 % string accuracy: " + ", ".join(
        f"{k} {v:,}" if v is not None else f"{k} never" for k, v in reach.items())
    gssm = [v for k, v in reach.items() if k.split("'")[0] in GSSMS]
    tf = [v for k, v in reach.items() if k.split("'")[0] not in GSSMS and v is not None]
    if not tf or not gssm:
        return text, None if not gssm else False
    best = min(tf)
    return text, all(v is None or v > best for v in gssm)


FIGURE = Figure(
    "Copy accuracy vs samples seen", "Copy paper Figs. 1a, 9",
    (Claim("transformers learn to copy from far fewer samples than GSSMs", claim_fewer_samples),),
    recipes=copy_recipes)


def main(argv=None) -> int:
    return run_analysis(
        NAME, __doc__, argv, compute=_compute, plot=plot, table=table, figure=FIGURE,
        add_arguments=add_copy_models_argument, recipes=copy_models_recipes)


if __name__ == "__main__":
    raise SystemExit(main())
