"""The copy paper's claims read from an ngram_lookup JSON (§3.5, Figs. 5-6): with a suffix key
the transformers beat the GSSMs beyond the training length (:func:`claim_suffix`); with a
prefix key too, among models that learnt the task (:data:`LEARNT`; :func:`claim_prefix`), and
across the lengths it is tested at (:func:`claim_prefix_length`); with what of the paper's
setting (:data:`PAPER_SETTING`) a run matches or not (:func:`setting_text`,
:func:`not_matched_text`).
"""

from __future__ import annotations

from statistics import fmean
from typing import TypeVar

from analyses import stats
from analyses.claims import Margin, OneSeed, Reading, Undecided

T = TypeVar("T")
GSSMS = ("mamba", "mamba2", "lstm")


def _lookup_means(d: dict, key: str, beyond: bool) -> dict[str, float]:
    """Mean string accuracy per model for one key kind, over the test lengths (``beyond``:
    only those longer than the longest training string)."""
    out = {}
    for label, rows in d["curves"][key].items():
        top = d["train"][key][label]["max_len"]
        rows = [r for r in rows if r["L"] > top] if beyond else rows
        if rows:
            out[label] = sum(r["string_acc"] for r in rows) / len(rows)
    return out


def _split(means: dict[str, float]) -> tuple[list[float], list[float]]:
    """(transformers', GSSMs') mean accuracies; the GSSM labels are the arch names."""
    return ([v for k, v in means.items() if model_of(k) not in GSSMS],
            [v for k, v in means.items() if model_of(k) in GSSMS])


def claim_suffix(d: dict) -> Reading | None:
    """Fig. 5: the best transformer beats the best GSSM by > 10 points beyond the training
    length; n/a without both kinds; not a claim of a level without suffix-key models
    (medium)."""
    means = _lookup_means(d, "suffix", beyond=True)
    if not d["curves"]["suffix"]:
        return None
    tf, ss = _split(means)
    text = ("suffix key, mean accuracy beyond the training length: "
            + ", ".join(f"{k} {v:.2f}" for k, v in means.items()))
    if not (tf and ss):
        return Reading(text, None)
    m = Margin("best transformer − best GSSM, beyond the training length", max(tf) - max(ss),
               ">", 0.1)
    # one checkpoint per model (the quick level's suffix key): what it shows, said as such
    return Reading(text, OneSeed.of(max(tf) > max(ss) + 0.1), m)


def model_of(label: str) -> str:
    """The model of a checkpoint's label: a model's further seeds are its label with primes
    (``lstm``, ``lstm'``, ... as :func:`compute` names them)."""
    return label.split("'")[0]


def _by_model(per_label: dict[str, T]) -> dict[str, list[T]]:
    """Per-checkpoint values grouped by model, seeds in order."""
    out: dict[str, list[T]] = {}
    for label, v in per_label.items():
        out.setdefault(model_of(label), []).append(v)
    return out


def _seeds_text(groups: dict[str, list[float]], count: bool) -> str:
    """``model mean`` per model, with its seeds' range (and how many) where it has several."""
    return ", ".join(
        f"{k} {fmean(v):.2f}" + (f" (seeds {min(v):.2f}-{max(v):.2f}"
                                 + (f", n={len(v)})" if count else ")") if len(v) > 1 else "")
        for k, v in groups.items())


# A model has learnt the lookup task when its mean string accuracy up to its training length
# (in distribution) is at least this: the paper's Fig. 6 models are near-perfect there, and a
# comparison between models that have not learnt the task says nothing about the task.
LEARNT = 0.9


def claim_prefix(d: dict) -> Reading:
    """Fig. 6: "GSSMs perform as well as the Hard-Alibi transformer" — the best GSSM within 10
    points of the best transformer over all lengths. Read only when some model learnt the task
    in distribution (mean >= :data:`LEARNT` up to its training length, seeds averaged); else
    not decided at this level (no model learnt it). A model's seeds are averaged (their range
    in the text); one run each (quick): what it shows, said as from one seed; with seeds
    (medium) the seed is the unit, a Mann-Whitney test of the best GSSM's seeds against the
    best transformer's less 0.1 (the "as well as" margin): holds where it finds them above,
    does not hold where below — never from the means alone — else not decided."""
    groups = _by_model(_lookup_means(d, "prefix", beyond=False))
    tf, ss = _split({k: fmean(v) for k, v in groups.items()})
    inside = _by_model(_band_means(d, "prefix", lambda L, top: L <= top))
    infos = list(d["train"]["prefix"].values())
    text = (not_matched_text(infos)
            + "prefix key, mean accuracy over all lengths: " + _seeds_text(groups, count=True)
            + ("; up to the training length: " + _seeds_text(inside, count=False)
               if inside else ""))
    if not (tf and ss):
        return Reading(text, None)
    learnt = [k for k, v in inside.items() if fmean(v) >= LEARNT]
    best_inside = max((fmean(v) for v in inside.values()), default=0.0)
    if not learnt:  # the margin: how far the best model is from having learnt the task
        return Reading(text, Undecided.not_learnt(
            f"no model reaches {LEARNT:.2f} up to its training length, so which learns it "
            "better cannot be read"),
            Margin("best mean accuracy up to the training length", best_inside, ">=", LEARNT))
    m = Margin("best GSSM − best transformer", max(ss) - max(tf), ">=", -0.1)
    text += f" (learnt: {', '.join(learnt)})"
    means = {k: fmean(v) for k, v in groups.items()}
    g = max((k for k in groups if k in GSSMS), key=means.get)
    t = max((k for k in groups if k not in GSSMS), key=means.get)
    if min(len(groups[g]), len(groups[t])) < 2:  # one run each (quick): said as such
        return Reading(text, OneSeed.of(max(ss) >= max(tf) - 0.1), m)
    # seeds (medium): the seed the unit, an exact Mann-Whitney test of the best GSSM's seeds
    # against the best transformer's less the 0.1 "as well as" allows
    test = stats.rank_test(groups[g], [x - 0.1 for x in groups[t]], stats.ALPHA_05, ">")
    text += (f"; {g} vs {t} − 0.1: {test.agree} with it above, {test.method}, p = "
             f"{test.p:.2g} that it lies above, {test.p_against:.2g} below")
    run = [(f"{g} above {t} − 0.1", test)]
    if test.fails:
        return Reading(text, False, m, run)
    if test.holds:
        return Reading(text, True, m, run)
    return Reading(text, test.verdict(against=False) if test.can_decide
                   else stats.too_few(test), m, run)


# The copy paper's lookup setting (§3.5 and App. A.2): strings of at most 30 tokens over the
# 26 letters, i.i.d. examples packed into contexts of 420 tokens, AdamW with a linear decay
# over the whole run (15 epochs), no early stop. The claim's text names what matches it.
PAPER_SETTING = {"D": 26, "max_len": 30, "context": 420, "schedule": "linear"}


def _one(values: list) -> object:
    """The value all models share, or None where they differ (or it was not recorded)."""
    return values[0] if values and all(v == values[0] for v in values) else None


def setting_text(infos: list[dict]) -> str:
    """How the models trained, each field marked as the paper's or not (:data:`PAPER_SETTING`);
    a field the models do not share, or the JSON lacks, is left out."""
    parts = setting_parts(infos)
    return "setting: " + ", ".join(parts) if parts else "setting: not recorded"


def not_matched_text(infos: list[dict]) -> str:
    """"not matched: …. " — the fields of :func:`setting_parts` that are not the paper's, the
    first words of a claim's text ('' when every recorded field is)."""
    parts = [p for p in setting_parts(infos) if "paper:" in p]
    return f"not matched: {'; '.join(parts)}. " if parts else ""


def setting_parts(infos: list[dict]) -> list[str]:
    """The fields of :func:`setting_text`, each with the paper's value where it differs."""
    def field(name):
        return _one([i.get(name) for i in infos])

    def mark(ok: bool, paper: str) -> str:
        return "paper's" if ok else f"paper: {paper}"

    parts = []
    D, lo, hi = field("D"), field("min_len"), field("max_len")
    if D is not None:
        parts.append(f"alphabet {D} ({mark(D == PAPER_SETTING['D'], str(PAPER_SETTING['D']))})")
    if hi is not None:
        span = f"{lo}-{hi}" if lo is not None else f"<= {hi}"
        parts.append(f"strings {span} ({mark(hi == PAPER_SETTING['max_len'], '<= 30')})")
    context = field("context")
    if context is not None:
        C = PAPER_SETTING["context"]
        parts.append(f"contexts packed to {context} tokens ({mark(context == C, str(C))})"
                     if context else f"one example a row, unpacked (paper: packed to {C})")
    schedule, stop_at = field("schedule"), field("stop_at")
    if schedule is not None:
        steps = [i.get("steps") for i in infos if i.get("steps")]
        span = (f" over {min(steps)}" + (f"-{max(steps)}" if max(steps) > min(steps) else "")
                + " steps") if steps else ""
        ok = schedule == PAPER_SETTING["schedule"]
        parts.append(f"{schedule} schedule{span} ({mark(ok, 'linear decay')})")
    if stop_at:
        parts.append(f"stopped at in-distribution accuracy {stop_at:g} (paper: the whole "
                     "schedule)")
    elif stop_at is not None:
        parts.append("no early stop (paper's)")
    return parts


def _band_means(d: dict, key: str, band) -> dict[str, float]:
    """Mean string accuracy per model over the test lengths L with ``band(L, max_len)``."""
    out = {}
    for label, rows in d["curves"][key].items():
        top = d["train"][key][label]["max_len"]
        rows = [r for r in rows if band(r["L"], top)]
        if rows:
            out[label] = fmean(r["string_acc"] for r in rows)
    return out


def claim_prefix_length(d: dict) -> Reading | None:
    """Fig. 6: "GSSMs achieve perfect length-generalization on this variant" — a GSSM, its seeds
    averaged, >= 0.9 both just beyond the training length (max_len < L <= 2 max_len) and at the
    longest length tested (when longer than that), an exact sign test over its seeds (the seed
    the unit) of each seed's weaker band against 0.9; n/a when no GSSM learnt the task in
    distribution (>= 0.9 up to max_len); the transformers' beside it, each
    band reported apart, with the training setting and which of it is the paper's. A claim of
    the medium level (and paper's): at quick no model learns the prefix key, so there is
    nothing to generalise."""
    if d.get("level") in (None, "quick"):
        return None
    longest = max(d["lengths"])
    near = _by_model(_band_means(d, "prefix", lambda L, top: top < L <= 2 * top))
    far = _by_model(_band_means(d, "prefix", lambda L, top: L == longest > 2 * top))
    infos = list(d["train"]["prefix"].values())
    tops = sorted({i["max_len"] for i in infos})
    in_near = sorted({L for L in d["lengths"] if any(t < L <= 2 * t for t in tops)})
    inside = _by_model(_band_means(d, "prefix", lambda L, top: L <= top))
    # in distribution first: a model that never learnt the task has nothing to generalise
    bands = ["up to the training length: " + _seeds_text(inside, count=False)] if inside else []
    if near:
        where = f"L = {in_near[0]}-{in_near[-1]}" if len(in_near) > 1 else f"L = {in_near[0]}"
        bands.append(f"beyond the training length, {where}: " + _seeds_text(near, count=False))
    if far:
        bands.append(f"at L = {longest}: " + _seeds_text(far, count=False))
    if not (near or far):
        bands.append("no test length beyond the training length")
    text = (not_matched_text(infos) + "prefix key, " + "; ".join(bands)
            + f" [{setting_text(infos)}]")
    candidates = [k for k in near if k in GSSMS]
    if not candidates:
        return Reading(text, None)
    # only a GSSM that learnt the task in distribution can show (or fail) length generalisation
    gssms = [k for k in candidates if fmean(inside.get(k, [0.0])) >= LEARNT]
    if not gssms:
        best = max(fmean(inside.get(k, [0.0])) for k in candidates)
        return Reading(text, Undecided.not_learnt(
            f"no GSSM reaches {LEARNT:.2f} up to its training length, so how it generalises "
            "cannot be read"), Margin("best GSSM up to its training length", best, ">=", LEARNT))

    def worst_band(k: str) -> float:  # a GSSM generalises when both its bands reach 0.9
        return min(fmean(near[k]), *([fmean(far.get(k, [0.0]))] if far else []))
    m = Margin("best GSSM's weaker band beyond the training length",
               max(worst_band(k) for k in gssms), ">=", 0.9)
    # per seed: its weaker band (the bands of one checkpoint: same position in near and far)
    per_seed = {k: [min(a, *([far[k][i]] if far and k in far else [])) if not far or k in far
                    else 0.0 for i, a in enumerate(near[k])] for k in gssms}
    # "a GSSM generalises" is an "any of" over the GSSMs: Holm, the suite's one rule
    first = {k: stats.sign_test(v, 0.9, stats.ALPHA_05, ">") for k, v in per_seed.items()}
    tests = dict(zip(first, stats.holm(list(first.values())), strict=True))
    against = stats.holm(list(first.values()), against=True)
    text += ("; seeds' weaker band vs 0.9, sign test (the seed the unit; α = 0.05, Holm over "
             f"{len(tests)} GSSMs): " + ", ".join(
                 f"{k} {t.agree} above, p = {t.p:.2g} vs {t.alpha.value:.3g}"
                 for k, t in tests.items()))
    run = [(f"{k}: weaker band above 0.9", t) for k, t in tests.items()]
    if any(t.holds for t in tests.values()):
        return Reading(text, True, m, run)
    if all(t.fails for t in against):
        return Reading(text, False, m, run)
    best = max(gssms, key=worst_band)
    t = tests[best]
    return Reading(text, t.verdict(against=False) if t.can_decide else stats.too_few(t), m, run)
