"""The copy paper's claims read from a copy_efficiency JSON: every GSSM needs more samples than
the fastest transformer to reach 90 % string accuracy (:func:`claim_fewer_samples`), and the
gap grows with the string length (:func:`claim_gap_grows`, medium and above). At medium and
above both are decided in the paper's regime: rows where the paper's own trend
(:func:`paper_gap`) predicts a clear gap decide, rows where it predicts at most
:data:`CLEAR_GAP` are shown beside them; the tests, censoring and seed design are
:mod:`analyses.copy_efficiency.regime`'s.
"""

from __future__ import annotations

import math

from analyses import stats
from analyses.claims import Margin, Reading, Undecided, Verdict
from analyses.copy_efficiency.regime import (
    MIN_LENGTHS,
    PRIOR_LOG_SD,
    BoundedTest,
    bounded_t_test,
    log_ratios,
    row_design,
    row_tests,
    seed_slopes,
    slope_design,
    slope_points,
)
from analyses.copy_efficiency.seeded import _by_length, _ratio_text
from models.levels import SEEDED
from probes.sample_efficiency import (
    CLEAR_GAP,
    EXACT,
    GSSMS,
    THRESHOLDS,
    gap_is_clear,
    paper_gap,
)

# the copy paper states no significance level: the conventional one-sided 0.05 (stats)
GAP_ALPHA = stats.ALPHA_05


def _seeded(d: dict) -> bool:
    """A result over seeds and lengths (medium and the levels above it), not one run each."""
    return d.get("level") in SEEDED and "by_length" in d


def _trend_text(gssms, lengths) -> str:
    """What the paper's trend (:func:`paper_gap`) predicts for these GSSMs at these L."""
    return "the paper's trend (gap ∝ L: Mamba 10× at L <= 30, 100× at 300; LSTM 100× at 30) " \
        "predicts " + "; ".join(
            f"L={L}: " + ", ".join(f"{g} {paper_gap(g, L):.1f}×" for g in gssms
                                   if paper_gap(g, L) is not None)
            for L in lengths)


def _combine(failed: list[tuple[str, int]], unlearnt: list[int]) -> Verdict:
    """The claim's verdict from where it failed: (GSSM, L) pairs where a GSSM was as fast as the
    fastest transformer, and lengths where no transformer learnt the task. A failure where the
    paper's trend predicts a clear gap does not hold; one where it predicts <= CLEAR_GAP, or an
    unlearnt length, leaves the claim not decided; none at all: it holds."""
    decided = [(g, L) for g, L in failed if gap_is_clear(g, L)]
    if decided:
        return False
    if failed:
        where = ", ".join(f"{g} at L={L}" for g, L in failed)
        return Undecided.regime(
            f"GSSMs as fast as the transformers only where the paper's own trend predicts a gap "
            f"of at most {CLEAR_GAP:g}× ({where}): too short to show it")
    if unlearnt:
        return Undecided.not_learnt(
            f"no transformer reached 90 % in every seed at L={', '.join(map(str, unlearnt))}")
    return True


def claim_fewer_samples(d: dict) -> Reading:
    """Every GSSM needs more samples to reach 90 % string accuracy than the fastest
    transformer (or never reaches it); n/a without a GSSM. Medium and above: t tests of the
    per-seed log ratios with Holm over the rows in the regime (:func:`_fewer_samples_medium`).
    Quick (one seed per model, no test): where a GSSM is not slower the claim does not hold
    only if the paper's own trend (:func:`paper_gap`) predicts a gap above :data:`CLEAR_GAP`
    at that length; else it is not decided at this level (too short to show the gap), as it
    is when no model learnt."""
    if _seeded(d):
        return _fewer_samples_medium(d)
    key = "string_0.9"
    reach = {k: v.get(key) for k, v in d["samples_to_reach"].items()}
    text = "samples to 90 % string accuracy: " + ", ".join(
        f"{k} {v:,}" if v is not None else f"{k} never" for k, v in reach.items())
    gssm = {k: v for k, v in reach.items() if k.split("'")[0] in GSSMS}
    tf = [v for k, v in reach.items() if k.split("'")[0] not in GSSMS and v is not None]
    if not gssm:
        return text, None
    tops = [i.get("max_len") for i in (d.get("train") or {}).values() if i.get("max_len")]
    L = max(tops) if tops else None
    if L is not None:
        names = sorted({k.split("'")[0] for k in gssm})
        text += f" (strings of length <= {L}; {_trend_text(names, [L])})"
    if not tf:
        if all(v is None for v in gssm.values()):
            return text, Undecided.not_learnt("no model reached 90 %")
        return text, False  # a GSSM got there and no transformer did
    best = min(tf)
    slow = [k.split("'")[0] for k, v in gssm.items() if v is not None and v <= best]
    m = _fewer_margin(d, gssm, best)
    if not slow:
        return Reading(text, True, m)
    if L is None:  # the length is not recorded: nothing says the run is outside the regime
        return Reading(text, False, m)
    return Reading(text, _combine([(g, L) for g in slow], []), m)


def _fewer_margin(d: dict, gssm: dict, best: int) -> Margin:
    """The fastest GSSM's samples to 90 % over the fastest transformer's (> 1: slower); a GSSM
    that never got there counts with the samples it saw, a lower bound of its own."""
    seen = {k: (d.get("train") or {}).get(k, {}).get("samples_seen") for k in gssm}
    need = [v if v is not None else seen[k] for k, v in gssm.items()]
    need = [v for v in need if v is not None]
    never = all(v is None for v in gssm.values())
    return Margin("fastest GSSM's samples to 90 % / fastest transformer's"
                  + (" (never reached: the samples it saw, a lower bound)" if never else ""),
                  min(need) / best if need else float("inf"), ">", 1, "×")


def _rows(d: dict) -> tuple[list[tuple[str, int, BoundedTest]], list[int]]:
    """Every (GSSM, L) row's :func:`bounded_t_test` of its per-seed log ratios, and the lengths
    where no transformer reached 90 % in every seed (no reference: no row)."""
    rows, unlearnt = [], []
    for L, m in _by_length(d).items():
        if m["reference"] is None:
            unlearnt.append(L)
            continue
        for g, r in m["ratio_to_reference"].items():
            logs, kinds = log_ratios(r)
            rows.append((g, L, bounded_t_test(f"{g} L={L}", logs, kinds, r.get("seeds") or ())))
    return rows, unlearnt


def _fewer_samples_medium(d: dict) -> Reading:
    """Medium and above: per GSSM and length, a one-sided t test over seeds (the
    unit) of log(GSSM / fastest transformer samples to 90 %) > 0, a seed that never got there
    at its bound (:mod:`analyses.copy_efficiency.regime`: such a row may hold, never fail).
    The claim's rows are those where the paper's trend predicts a clear gap
    (:func:`gap_is_clear`), tested with Holm over them at :data:`GAP_ALPHA`: it holds when every
    row holds, does not hold when one is decided against; rows where the trend predicts at most
    :data:`CLEAR_GAP` are tested and shown beside them (where the gap is absent), not counted.
    Not decided: a length no transformer learnt, no row in the regime, or rows the seeds leave
    open (with the seeds the design asks for: the paper's gap as a prior effect)."""
    rows, unlearnt = _rows(d)
    claim = [(g, L, t) for g, L, t in rows if gap_is_clear(g, L)]
    shown = [(g, L, t) for g, L, t in rows if not gap_is_clear(g, L)]
    a = GAP_ALPHA.value
    design = [row_design(paper_gap(g, L), len(claim), a) for g, L, _ in claim]
    dec, run = row_tests([t for *_, t in claim], a, design)
    side, side_run = row_tests([t for *_, t in shown], a, [None] * len(shown))
    lengths = list(_by_length(d))
    gssms = sorted({g for g, _, _ in rows})
    parts = []
    for L, m in _by_length(d).items():
        if m["reference"] is None:
            parts.append(f"L={L}: no transformer reached 90 % in every seed")
            continue
        mean = m["models"][m["reference"]][f"string_{THRESHOLDS[-1]}"]["mean"]
        parts.append(f"L={L}: {m['reference']} {mean:,.0f} samples; " + ", ".join(
            f"{g} {_ratio_text(r)}" for g, r in m["ratio_to_reference"].items()))
    text = (_not_matched_text(d) + "samples to 90 % string accuracy, GSSM / fastest transformer "
            "(per-seed min–max; a seed that never got there counts at its budget, a lower "
            "bound): " + "; ".join(parts)
            + (f"; {_trend_text(gssms, lengths)}" if gssms else "")
            + ("; in the regime (trend > " + f"{CLEAR_GAP:g}×), log ratio > 0: "
               + "; ".join(f"{r.test.label} {r.text()}" for r in run) if run else "")
            + ("; where the trend predicts <= " + f"{CLEAR_GAP:g}× (shown, not counted): "
               + "; ".join(f"{r.test.label} {r.text()}" for r in side_run) if side_run else "")
            + _setting_text(d))
    tests = [(f"{r.test.label}: log ratio > 0", r) for r in run] + [
        (f"{r.test.label}: log ratio > 0 (outside the regime)", r) for r in side_run]
    low = min(((t.mean, t.label) for *_, t in claim if t.n), default=None)
    margin = None if low is None else Margin(
        f"smallest mean log ratio in the regime ({low[1]})", low[0], ">", 0, "")
    if dec.failed:
        return Reading(text, False, margin, tests)
    if unlearnt:
        return Reading(text, Undecided.not_learnt(
            f"no transformer reached 90 % in every seed at L={', '.join(map(str, unlearnt))}"),
            margin, tests)
    if not claim:
        return Reading(text, Undecided.regime(
            f"no length where the paper's trend predicts a gap above {CLEAR_GAP:g}×")
            if rows else None, margin, tests)
    if dec.all_hold:
        return Reading(text, True, margin, tests)
    need = max((n for n in design if n), default=None)
    why = "; ".join(f"{t.label}: {dec.why[t.label]}"
                    + _below_trend(t, paper_gap(g, L), len(claim), f"{paper_gap(g, L):.1f}×")
                    for g, L, t in claim if t.label in dec.why)
    return Reading(text, Undecided(_open_reason(
        why, need, max(t.n for *_, t in claim), "the paper's gap as prior effect, prior sd "
        f"{PRIOR_LOG_SD:g}", "gap")), margin, tests)


def _open_reason(why: str, need: int | None, n: int, design: str, what: str) -> str:
    """Why rows stay open: too few seeds where the design asks for more than were run; else
    the seeds fit either side, and where they are as many as the design asks, that the effect
    at this scale is smaller than the paper's trend (which they had 80 % power to show)."""
    if need and need > n:
        return f"{stats.TOO_FEW}: {why}; the design ({design}) asks for {need} seeds"
    text = f"{stats.EITHER_SIDE}: {why}"
    if need:
        text += (f"; {n} seeds, as many as the design ({design}) asks to show the paper's "
                 f"{what} with 80 % power: the {what} at this scale is smaller than its trend")
    return text


def _below_trend(t: BoundedTest, target: float | None, rows: int, what: str,
                 log: bool = True) -> str:
    """" (below the paper's trend: its WHAT rejected, p = …)" where the row's seeds, none of
    them censored, put its values below what the trend predicts (``target``: a gap, compared
    on the log scale, or with ``log`` False a slope; one-sided t test at α / rows,
    Bonferroni): the row is open because the effect at this scale is smaller than the
    paper's, not for want of seeds to show the paper's; '' otherwise."""
    if target is None or t.n < 2 or t.censored or not t.sd > 0:
        return ""
    from scipy import stats as sps  # a large import, where a claim is read

    goal = math.log(target) if log else target
    p = float(sps.ttest_1samp(t.values, goal, alternative="less").pvalue)
    if p >= GAP_ALPHA.value / max(rows, 1):
        return ""
    return f" (below the paper's trend: its {what} rejected, p = {p:.2g})"


def _not_matched_text(d: dict) -> str:
    """"not matched: …. " of the zoo's setting, the first words of a medium claim's text."""
    nm = (d.get("setting") or {}).get("not_matched")
    return f"not matched: {nm}. " if nm else ""


def _setting_text(d: dict) -> str:
    """What was trained (each model at its best lr of the sweep, its parameter count), for a
    medium claim's text (what of the paper's setting is not matched comes first:
    :func:`_not_matched_text`)."""
    last = list(_by_length(d).values())[-1] if d.get("by_length") else {}
    models = last.get("models", {})
    seeds = max((len(m.get("seeds", [])) for m in models.values()), default=0)
    lrs = sorted({float(k) for sw in last.get("sweep", {}).values() for k in sw if k != "-"})
    parts = []
    if any(m.get("params") for m in models.values()):
        parts.append("params " + ", ".join(f"{k} {m['params'] / 1e3:.0f}k"
                                           for k, m in models.items() if m.get("params")))
    swept = any(len([k for k in sw if k != "-"]) > 1 for sw in last.get("sweep", {}).values())
    if lrs:
        parts.append(("each model at its best lr of " + "/".join(f"{x:g}" for x in lrs)
                      if swept else "each model at its lr chosen on seeds that are not the "
                      "verdict's (zoo_copy.COPY_MEDIUM_LR: the sweep seeds' best at the swept "
                      "lengths, the longest swept length's beyond; --sweep reruns the sweep)")
                     + " per L (" + "; ".join(
                         f"L={L} " + ", ".join(f"{k} {v:g}" for k, v in m["best_lr"].items()
                                               if v is not None)
                         for L, m in _by_length(d).items() if m.get("best_lr")) + ")")
    if seeds:
        parts.append(f"{seeds} seeds")
    setting = d.get("setting") or {}
    if setting.get("paper"):
        parts.append(f"setting: {setting['paper']}")
    return (" [" + "; ".join(parts) + "]") if parts else ""


def claim_gap_grows(d: dict) -> Reading | None:
    """Medium and above: each GSSM needs more samples relative to the fastest
    transformer as the strings get longer (Figs. 1a, 9b: ~10× at L <= 30, ~100× at 300). The
    unit is the seed (it shares its initial weights across L): each seed's least-squares slope
    of its log ratio on log L over at least :data:`MIN_LENGTHS` lengths
    (:func:`seed_slopes`; a censored point makes the slope a bound), a one-sided t test of the
    slopes > 0 per GSSM, Holm over the GSSMs at :data:`GAP_ALPHA`. Holds when every GSSM's
    slope test holds; does not hold when one is decided against (slopes below 0) and the
    longest length is one where the trend predicts a clear gap; otherwise not decided (fewer
    lengths than the slope needs, a length no transformer learnt, or the seeds leave it open,
    with the seeds the design asks for). None on a quick result (one length)."""
    if not _seeded(d):
        return None
    at = _by_length(d)
    lengths = list(at)
    learnt = [L for L, m in at.items() if m["reference"] is not None]
    head = _not_matched_text(d)
    if len(lengths) < 2:
        return Reading(head + f"one length (L={lengths[0]})" + _setting_text(d), None)
    if len(learnt) < MIN_LENGTHS:
        missing = [L for L in lengths if L not in learnt]
        return Reading(head + f"lengths with a reference: {learnt or 'none'} of {lengths}"
                       + _setting_text(d),
                       Undecided.not_learnt(f"no transformer reached 90 % in every seed at "
                                            f"L={', '.join(map(str, missing))}") if missing
                       else Undecided(f"{len(lengths)} lengths: a seed's slope needs at least "
                                      f"{MIN_LENGTHS}"))
    gssms = list(dict.fromkeys(g for m in at.values() for g in m["ratio_to_reference"]))
    tests, slopes_text = [], []
    for g in gssms:
        points = slope_points({L: at[L] for L in learnt}, g)
        seeds, slopes, kinds, dropped = seed_slopes(points)
        t = bounded_t_test(g, slopes, kinds, seeds)
        tests.append(BoundedTest(**{**t.__dict__, "dropped": t.dropped + dropped}))
        slopes_text.append(f"{g}: " + ", ".join(
            f"s{s} {v:+.2f}" + ("" if k == EXACT else f" ({k})")
            for s, v, k in zip(seeds, slopes, kinds, strict=True)))
    a = GAP_ALPHA.value
    design = [slope_design(learnt, len(tests), a)] * len(tests)
    dec, run = row_tests(tests, a, design, what="slope")
    text = (head + "GSSM / fastest transformer, samples to 90 %: each seed's slope of log ratio "
            f"on log L over L={', '.join(map(str, learnt))} (the seed the unit; the paper's "
            "trend, gap ∝ L, is slope 1): " + "; ".join(slopes_text) + "; slope > 0: "
            + "; ".join(f"{r.test.label} {r.text()}" for r in run)
            + f"; {_trend_text(gssms, lengths)}" + _setting_text(d))
    low = min(((t.mean, t.label) for t in tests if t.n), default=None)
    margin = None if low is None else Margin(f"smallest mean slope ({low[1]})", low[0], ">", 0)
    labelled = [(f"{r.test.label}: slope > 0", r) for r in run]
    if dec.failed and all(gap_is_clear(g, max(learnt)) for g in dec.failed):
        return Reading(text, False, margin, labelled)
    if dec.failed:
        return Reading(text, Undecided.regime(
            f"the ratio falls ({', '.join(dec.failed)}) over lengths where the paper's trend "
            f"predicts a gap of at most {CLEAR_GAP:g}×"), margin, labelled)
    if dec.all_hold:
        return Reading(text, True, margin, labelled)
    need = design[0] if design else None
    why = "; ".join(f"{t.label}: {dec.why[t.label]}"
                    + _below_trend(t, 1.0, len(tests), "slope 1", log=False)
                    for t in tests if t.label in dec.why)
    return Reading(text, Undecided(_open_reason(
        why, need, max(t.n for t in tests), "the paper's slope 1 as prior effect, prior sd "
        f"{PRIOR_LOG_SD:g} of a log ratio", "growth")), margin, labelled)
