"""The copy paper's claims read from an ngram_heads JSON (§2.2, Fig. 3, App. C): some head's
match score reaches the threshold (:func:`claim_match_heads`), and ablating those heads destroys
copying while as many random heads of the same layers do not (:func:`claim_ablation`).
"""

from __future__ import annotations

from analyses.claims import Margin, Reading, Undecided, tightest
from analyses.common import get

LEARNT = 0.9  # string accuracy (nothing ablated) of a model that copies the probe strings


def _not_learnt(d: dict) -> Undecided | None:
    """"Not decided" when the model does not copy the probe strings: no copying mechanism can
    be read from it, so neither claim can fail on it."""
    acc = get(d, "accuracy", "string_acc")
    if acc is None or acc >= LEARNT:
        return None
    return Undecided.not_learnt(f"the model copies {acc:.0%} of the probe strings "
                                f"(< {LEARNT:.0%})")


def claim_match_heads(d: dict) -> Reading:
    """Some head's match score reaches the threshold (the heads found are listed)."""
    heads = d.get("match_heads", [])
    best = max((h["match_score"] for h in heads), default=0.0)
    names = ", ".join(f"L{h['layer']}H{h['head']}" + (" one past" if h.get("lag") else "")
                      for h in heads[:4])
    m = (Margin("best head's match score", best, ">=", d["threshold"])
         if d.get("threshold") is not None else None)
    holds = bool(d.get("threshold_met")) and bool(heads)
    return Reading(f"{len(heads)} heads ({names}) with match score >= {d.get('threshold')}, "
                   f"best {best:.2f}", holds or _not_learnt(d) or False, m)


def claim_ablation(d: dict) -> Reading:
    """Ablating the match heads costs >= 50 points of string accuracy, and as many random other
    heads of the match heads' own layers (distinct sets drawn without replacement, or all of
    them) less than half of that on average. The control is drawn from the match heads' layers
    because heads from anywhere include the earlier-layer hashing heads the match heads read
    through (App. C's construction needs them too): how often a random set hits one of those
    says how large the circuit is, not whether the match heads matter. Where no same-layer
    control exists, the control from anywhere; the text gives both controls' spread."""
    drop = get(d, "ablated", "drop", "string_acc")
    if drop is None:
        return Reading("no ablation result in the JSON", False)
    same, anywhere = d.get("random_same_layer") or {}, d.get("random") or {}
    key, control = (("random heads of the same layers", same)
                    if same.get("string_drop_mean") is not None
                    else ("random heads", anywhere))
    rnd = control.get("string_drop_mean")

    def pts(x: float) -> str:  # a drop in points, rounded to an int: a tiny gain prints 0, not -0
        return f"{round(100 * x) + 0:d}"

    def spread(name: str, r: dict) -> str:
        if r.get("string_drop_mean") is None:
            return f"{name}: n/a"
        out = f"{name}: mean {pts(r['string_drop_mean'])} pts"
        lo, hi, n = r.get("string_drop_min"), r.get("string_drop_max"), r.get("n_sets")
        if lo is not None and hi is not None:
            out += f", range {pts(lo)}–{pts(hi)}"
        if r.get("string_drop_quartiles"):
            q1, _, q3 = r["string_drop_quartiles"]
            out += f", IQR {pts(q1)}–{pts(q3)}"
        if n:
            out += f", {'all ' if r.get('exhaustive') else ''}{n} sets"
        return out
    controls = [spread("same layers", same)] if same else []
    controls.append(spread("from anywhere", anywhere))
    text = f"string-accuracy drop {pts(drop)} pts (random heads, {'; '.join(controls)})"
    margins = [Margin("string-accuracy drop", drop, ">=", 0.5)]
    if rnd is not None:
        margins.append(Margin(f"{key}' mean drop", rnd, "<", drop / 2))
    holds = drop >= 0.5 and (rnd is None or rnd < drop / 2)
    return Reading(text, holds or _not_learnt(d) or False, tightest(*margins))
