"""Samples to a copy accuracy, read from the evaluation history a trained model's checkpoint
stores (copy paper §3.2, Figs. 1a, 9): when a run first reaches a level, and, over seeds,
learning rates and string lengths, which lr represents a model and how many times the samples
of the fastest transformer each GSSM needs. Plain data in, plain data out: the analysis
``analyses.copy_efficiency`` reads the checkpoints and writes the result.
"""

from __future__ import annotations

import math

import numpy as np

GSSMS = ("mamba", "mamba2", "lstm")
TRANSFORMERS = ("hard_alibi", "rope", "nope", "alibi")
LEVELS = (0.5, 0.9)


def samples_to_reach(history: list[dict], key: str, level: float) -> int | None:
    """First ``samples_seen`` whose ``key`` accuracy is >= level (None if never)."""
    for h in history:
        if h.get(key) is not None and h[key] >= level:
            return int(h["samples_seen"])
    return None


def reach_summary(values: list[int | None]) -> dict:
    """Samples to a level over seeds (None: that seed never got there): mean ± sd of those
    that did, min, max and how many did."""
    got = [v for v in values if v is not None]
    return {"per_seed": values, "reached": len(got), "seeds": len(values),
            "mean": float(np.mean(got)) if got else None,
            "sd": float(np.std(got, ddof=1)) if len(got) > 1 else 0.0 if got else None,
            "min": min(got) if got else None, "max": max(got) if got else None}


def best_lr(by_lr: dict[str, dict]) -> str:
    """The learning rate (key of ``by_lr``: {lr: summary of samples to 90 % over seeds}) a
    model is credited with: the most seeds at 90 %, then the lowest median samples over seeds
    (a seed that never got there counts as infinitely many), then the lowest lr. Each model
    and length gets its own best: the sweep favours every model alike."""
    def key(lr):
        s = by_lr[lr]
        vals = [math.inf if v is None else v for v in s["per_seed"]]
        return (-s["reached"], float(np.median(vals)) if vals else math.inf,
                0.0 if lr == "-" else float(lr))
    return min(by_lr, key=key)


def medium_by_length(runs: list[dict]) -> tuple[list[dict], dict[int, dict]]:
    """``(runs, by_length)`` of :func:`analyses.copy_efficiency.compute_medium` (which says
    what they hold), before they are made JSON."""
    by_length: dict[int, dict] = {}
    flat = []
    key = f"string_{LEVELS[-1]}"
    for r in sorted(runs, key=lambda r: (r["length"], r["label"], r.get("lr") or 0, r["seed"])):
        rows = [{"samples_seen": int(h["samples_seen"]), "string_acc": h.get("string_acc"),
                 "char_acc": h.get("char_acc")} for h in r["history"] if "samples_seen" in h]
        reach = {f"string_{lv}": samples_to_reach(rows, "string_acc", lv) for lv in LEVELS}
        flat.append({"label": r["label"], "length": int(r["length"]), "seed": int(r["seed"]),
                     "lr": r.get("lr"), "params": r.get("params"), **reach,
                     "final_string_acc": rows[-1]["string_acc"] if rows else None,
                     "curve": rows})
    for L in sorted({f["length"] for f in flat}):
        at = [f for f in flat if f["length"] == L]
        models, sweep, chosen = {}, {}, {}
        for label in dict.fromkeys(f["label"] for f in at):
            mine = [f for f in at if f["label"] == label]
            groups: dict[str, list[dict]] = {}
            for f in mine:
                groups.setdefault(lr_key(f["lr"]), []).append(f)
            sweep[label] = {}
            for lr, fs in groups.items():
                fs = sorted(fs, key=lambda f: f["seed"])
                sweep[label][lr] = {"seeds": [f["seed"] for f in fs],
                                    **{f"string_{lv}":
                                       reach_summary([f[f"string_{lv}"] for f in fs])
                                       for lv in LEVELS}}
            lr = best_lr({k: v[key] for k, v in sweep[label].items()})
            chosen[label] = lr
            models[label] = {**sweep[label][lr], "lr": lr_value(lr),
                             "params": next((f["params"] for f in mine if f["params"]), None)}
            for f in mine:
                f["best_lr"] = lr_key(f["lr"]) == lr
        done = {k: m[key]["mean"] for k, m in models.items()
                if k in TRANSFORMERS and m[key]["reached"] == m[key]["seeds"]}
        ref = min(done, key=done.get) if done else None
        ratios = {}
        for g in (k for k in models if k in GSSMS and ref is not None):
            gm, tm = models[g], models[ref]
            t_by_seed = dict(zip(tm["seeds"], tm[key]["per_seed"], strict=True))
            per_seed = [None if v is None or s not in t_by_seed else v / t_by_seed[s]
                        for s, v in zip(gm["seeds"], gm[key]["per_seed"], strict=True)]
            got = [x for x in per_seed if x is not None]
            ratios[g] = {"ratio": (gm[key]["mean"] / tm[key]["mean"]
                                   if gm[key]["mean"] is not None else None),
                         "per_seed": per_seed, "min": min(got) if got else None,
                         "max": max(got) if got else None,
                         "all_reached": gm[key]["reached"] == gm[key]["seeds"]}
        full = {g: r["ratio"] for g, r in ratios.items() if r["all_reached"]}
        by_length[L] = {"models": models, "reference": ref, "ratio_to_reference": ratios,
                        "best_gssm": min(full, key=full.get) if full else None,
                        "sweep": sweep, "best_lr": {k: lr_value(v) for k, v in chosen.items()}}
    return flat, by_length


def lr_key(lr) -> str:
    """A learning rate as a JSON key ("-" for runs that do not record one)."""
    return "-" if lr is None else f"{float(lr):g}"


def lr_value(key: str) -> float | None:
    return None if key == "-" else float(key)
