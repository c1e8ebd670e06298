"""The copy paper's claims read from a copy_efficiency JSON: every GSSM needs more samples than
the fastest transformer to reach 90 % string accuracy (:func:`claim_fewer_samples`), and the
gap grows with the string length (:func:`claim_gap_grows`, medium and above). A GSSM as fast as
a transformer only where the paper's own trend predicts a small gap (:func:`paper_gap`) leaves
a claim not decided rather than not holding.
"""

from __future__ import annotations

from statistics import fmean

from analyses import stats
from analyses.claims import Margin, Reading, Undecided, Verdict
from analyses.copy_efficiency.seeded import _by_length, _ratio_text
from models.train.levels import SEEDED
from probes.sample_efficiency import (
    CLEAR_GAP,
    GSSMS,
    LEVELS,
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
    transformer (or never reaches it); n/a without a GSSM. Medium and above: at every length,
    a sign test over seeds of the per-seed ratios against 1 (:func:`_fewer_samples_medium`).
    Where a GSSM is not slower the claim does not hold only if the paper's own trend
    (:func:`paper_gap`) predicts a gap above :data:`CLEAR_GAP` at that length; else it
    is not decided at this level (too short to show the gap), as it is when no model learnt."""
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


def _fewer_samples_medium(d: dict) -> Reading:
    """Medium and above: per GSSM and length, an exact sign test over seeds (the seed the
    unit; :data:`GAP_ALPHA`) of the per-seed ratio GSSM / fastest transformer against 1 (a
    GSSM seed that never got there counts as slower). Holds when every test finds the GSSM
    slower; where one finds it faster (Bonferroni over the tests) :func:`_combine` decides
    (does not hold only where the paper's trend predicts a clear gap); otherwise not decided
    (too few seeds to reach the level, or the seeds fit either side)."""
    parts, failed, unlearnt, gssms, tests = [], [], [], set(), []
    for L, m in _by_length(d).items():
        ref = m["reference"]
        if ref is None:
            parts.append(f"L={L}: no transformer reached 90 % in every seed")
            unlearnt.append(L)
            continue
        mean = m["models"][ref][f"string_{LEVELS[-1]}"]["mean"]
        ratios = m["ratio_to_reference"]
        gssms |= set(ratios)
        tests += [(g, L, stats.sign_test([float("inf") if x is None else x
                                          for x in r["per_seed"]], 1.0, GAP_ALPHA))
                  for g, r in ratios.items()]
        parts.append(f"L={L}: {ref} {mean:,.0f} samples; " + ", ".join(
            f"{g} {_ratio_text(r)}" for g, r in ratios.items()))
    against = GAP_ALPHA.value / max(len(tests), 1)
    failed = [(g, L) for g, L, t in tests if t.can_decide and t.p_against < against]
    lengths = list(_by_length(d))
    text = (_not_matched_text(d) + "samples to 90 % string accuracy, GSSM / fastest transformer "
            "(per-seed min–max): " + "; ".join(parts)
            + (f"; {_trend_text(sorted(gssms), lengths)}" if gssms else "")
            + ("; sign test over seeds (the unit), ratio > 1: " + ", ".join(
                f"{g} L={L} {t.agree} above 1, p = {t.p:.2g}" for g, L, t in tests)
               if tests else "") + _setting_text(d))
    if not tests and not unlearnt:
        return Reading(text, None)
    # the margin: the smallest per-seed GSSM / transformer ratio (every one must exceed 1)
    seeds = [(x, g, L) for L, m in _by_length(d).items() if m["reference"] is not None
             for g, r in m["ratio_to_reference"].items() for x in r["per_seed"] if x is not None]
    low = min(seeds, default=None)
    m = None if low is None else Margin(f"smallest per-seed ratio ({low[1]} at L={low[2]})",
                                        low[0], ">", 1, "×")
    run = [(f"{g} L={L}: ratio > 1", t) for g, L, t in tests]
    if failed or unlearnt or not all(t.holds for *_, t in tests):
        if failed or unlearnt:
            return Reading(text, _combine(failed, unlearnt), m, run)
        few = next((t for *_, t in tests if not t.can_decide), None)
        # the power calculation of every test, not only the first: the claim needs them all
        where = "; ".join(f"{lab.split(':')[0]}: {t.power_text()}" for lab, t in run
                          if t.power_n)
        return Reading(text, stats.too_few(few, where) if few else next(
            t for *_, t in tests if not t.holds).verdict(against=False), m, run)
    return Reading(text, True, m, run)


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
                      if swept else "each model at its lr from the full sweep "
                      "(zoo_copy.COPY_MEDIUM_LR; --sweep reruns it)")
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


def _paired(m: dict, g: str) -> dict:
    """{seed: GSSM / reference samples ratio} of GSSM ``g`` at one length (a seed that never
    got there left out); seeds by id where the result has them, else by position."""
    r = m["ratio_to_reference"].get(g)
    if not r:
        return {}
    seeds = (m.get("models", {}).get(g) or {}).get("seeds") or range(len(r["per_seed"]))
    return {s: x for s, x in zip(seeds, r["per_seed"], strict=False) if x is not None}


def claim_gap_grows(d: dict) -> Reading | None:
    """Medium and above: each GSSM needs more samples relative to the fastest transformer as
    the strings get longer (Figs. 1a, 9b: ~10× at L <= 30, ~100× at 300). The unit is the seed:
    per GSSM and pair of neighbouring lengths, the per-seed change of its ratio (seed s's
    ratio at the longer L minus at the shorter), an exact one-sided sign test of the changes
    against 0 at :data:`GAP_ALPHA` (with the Student-t interval of the mean change beside it).
    Holds when every test finds a rise (all must: no correction); does not hold when one finds
    a fall (Bonferroni over the pairs) at lengths where the paper's trend predicts a clear gap
    (:func:`gap_is_clear` at the shorter L); otherwise not decided: too few seeds to reach the
    level (3 cannot: 2^-3 > 0.05; with the seeds a sign test would need at the measured
    spread), the seeds fit either side, or the lengths are too short. None on a quick result
    (one length): left out of its index."""
    if not _seeded(d):
        return None
    at = _by_length(d)
    lengths = list(at)
    parts, thin, found = [], [], []  # found: (label, test, change margin, shorter L)
    gssms = list(dict.fromkeys(g for m in at.values() for g in m["ratio_to_reference"]))
    pairs = [(g, a, b) for g in gssms for a, b in zip(lengths, lengths[1:], strict=False)]
    against = stats.Threshold(GAP_ALPHA.value / max(len(pairs), 1),
                              f"{GAP_ALPHA.source}, Bonferroni over {len(pairs)} pairs")
    for g, a, b in pairs:
        pa, pb = _paired(at[a], g), _paired(at[b], g)
        both = [s for s in pa if s in pb]
        if len(both) == 1:  # one seed pairing: a change, but no test
            s0 = both[0]
            parts.append(f"{g} L={a}→{b}: {pa[s0]:.1f}× → {pb[s0]:.1f}× (one seed)")
            thin.append(f"{g} L={a}→{b}")
        if len(both) < 2:
            continue
        change = [pb[s] - pa[s] for s in both]
        t = stats.sign_test(change, 0.0, GAP_ALPHA)
        ci = stats.t_interval(change)
        mean, _ = stats.spread(change)
        found.append((f"{g} L={a}→{b}", t, Margin(
            f"{g} L={a}→{b}: mean change of its ratio", mean, ">", 0, "×",
            interval=ci.bounds), a, g))
        parts.append(f"{g} L={a}→{b}: {fmean(pa[s] for s in both):.1f}× → "
                     f"{fmean(pb[s] for s in both):.1f}×, change {mean:+.2f}, {ci}; "
                     f"{t.text()}" + (f"; {t.power_text()}" if t.power_n else ""))
    if len(lengths) < 2:
        return Reading(_not_matched_text(d) + f"one length (L={lengths[0]})" + _setting_text(d),
                       None)
    if not parts:
        return Reading((_not_matched_text(d) + "no GSSM reached 90 % in the same seed at two "
                        "lengths" + _setting_text(d)), Undecided.not_learnt(
                           "no GSSM reached 90 % in the same seed at two lengths"))
    # the margin: the change whose interval's lower end is lowest (every one must clear 0)
    m = min((f[2] for f in found), key=lambda c: c.interval[0] if c.interval else c.value,
            default=None)
    text = (_not_matched_text(d) + "GSSM / fastest transformer, samples to 90 %, per-seed "
            f"change of the ratio (the seed is the unit; α = {GAP_ALPHA}): " + "; ".join(parts)
            + f"; {_trend_text(gssms, lengths)}" + _setting_text(d))
    tests = [(f"{lab}: change > 0", t) for lab, t, *_ in found]
    down = [lab for lab, t, _, a, g in found if t.can_decide
            and t.p_against < against.value and gap_is_clear(g, a)]
    short = [lab for lab, t, _, a, g in found if t.can_decide
             and t.p_against < against.value and not gap_is_clear(g, a)]
    if down:
        return Reading(text, False, m, tests)
    if short:
        return Reading(text, Undecided.regime(
            f"the ratio falls ({', '.join(short)}) only where the paper's own trend predicts a "
            f"gap of at most {CLEAR_GAP:g}×"), m, tests)
    if found and not thin and all(t.holds for _, t in tests):
        return Reading(text, True, m, tests)
    few = [(lab, t) for lab, t, *_ in found if not t.can_decide]
    if few:
        where = "; ".join(lb + (f": {t.power_text()}" if t.power_n else "") for lb, t in few)
        return Reading(text, stats.too_few(few[0][1], where), m, tests)
    either = [lab + (f": {t.power_text()}" if t.power_n else "")
              for lab, t, *_ in found if not t.holds]
    return Reading(text, Undecided(
        "; ".join(([f"{stats.EITHER_SIDE} ({', '.join(either)})"] if either else [])
                  + ([f"one seed pairing, no test ({', '.join(thin)})"] if thin else []))), m,
        tests)
