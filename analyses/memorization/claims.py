"""The paper's claims read from a run's JSON (Fig. 1's trends, Fig. 2's growth and shape),
and the :data:`FIGURE` the reproduce plan reads."""

from __future__ import annotations

from analyses.claims import Claim, Figure, Margin, Reading, Undecided, Verdict, tightest
from analyses.common import fmt, get
from analyses.memorization.grid import dry_run_cells, expected_cells


def claim_trends(d: dict) -> Reading | None:
    """Fig. 1: the error does not rise with width nor fall with N in >= 80 % of neighbour
    pairs (within the trend tolerance). Not read from a search (no full grid)."""
    if "search" in d:
        return None
    t = d["trends"]
    w, n = t["width_pairs_error_not_rising"], t["n_pairs_error_not_falling"]
    m = tightest(Margin("share of width pairs with the error not rising", w, ">=", 0.8),
                 Margin("share of N pairs with the error not falling", n, ">=", 0.8))
    return Reading(f"error not rising with width in {100 * w:.0f} % of neighbour pairs; not "
                   f"falling with N in {100 * n:.0f} % (Spearman vs width "
                   f"{fmt(t['spearman_error_vs_width'], '.2f')}, "
                   f"vs N {fmt(t['spearman_error_vs_n'], '.2f')})", w >= 0.8 and n >= 0.8, m)


# A trend read from one width search per N: a rank correlation this high tolerates one
# search landing a width step low without calling a rising series flat.
MIN_SPEARMAN_GROWTH = 0.8


def claim_params(d: dict) -> Reading:
    """Fig. 2: the smallest memorising model grows with N — its rank correlation with N is
    at least :data:`MIN_SPEARMAN_GROWTH` over two N at least (a strict never-shrinks reading
    would turn one width search's noise into a verdict)."""
    t = d["trends"]
    fit = get(d, "fits", "non_embedding", "linear")
    rho = t.get("spearman_min_params_vs_n")
    text = (f"{t['n_memorized']}/{len(d['n_examples'])} dataset sizes memorised; smallest "
            f"memorising model (non-embedding params): {d['min_params_non_embedding']}; "
            f"Spearman vs N {fmt(rho, '.2f')}"
            f"{'' if t['min_params_nondecreasing'] else ' (not monotone)'}")
    if fit:
        text += f"; linear fit R² {fmt(fit['r2'], '.2f')}"
    m = (None if rho is None else
         Margin("Spearman of the smallest memorising model vs N", rho, ">=",
                MIN_SPEARMAN_GROWTH))
    return Reading(text, rho is not None and rho >= MIN_SPEARMAN_GROWTH
                   and t["n_memorized"] >= 2, m)


def budget_text(d: dict) -> str:
    """The step budgets of a search: ``2,000 steps`` or ``2,000 steps (8,000 at N = …)``."""
    steps = get(d, "search", "steps")
    if not steps:
        return "steps n/a"
    base = min(steps)
    longer = [(n, s) for n, s in zip(d["n_examples"], steps, strict=True) if s != base]
    text = f"{base:,} steps"
    if longer:
        text += (f" ({', '.join(sorted({f'{s:,}' for _, s in longer}))} at N = "
                 f"{', '.join(str(n) for n, _ in longer)})")
    return text


def fit_summary(d: dict, which: str = "non_embedding") -> str:
    """The numbers behind a shape verdict: exponent, residuals of both fits, log-log slope."""
    fit = d["fits"][which]
    lin, th, pw, ll = fit["linear"], fit["theory"], fit["power"], fit["loglog"]
    sr = d["search"]
    if not d["n_examples"]:  # the inverted search (large): no width below the ladder's top
        return (f"no width memorised a dataset size below the top of its ladder, "
                f"{len(sr['seeds'])} seed(s), {budget_text(d)}; verdict: {fit['verdict']}")
    text = (f"{len(d['n_examples'])} N = {min(d['n_examples'])}…{max(d['n_examples'])} "
            f"({d['n_ratio']:.0f}x), {len(sr['seeds'])} seed{'s' * (len(sr['seeds']) != 1)}, "
            f"{budget_text(d)} "
            f"({which.replace('_', '-')} params)")
    if pw.get("k") is not None:
        text += (f"; P = a + b*N^k: k = {pw['k']:.2f} [95 % CI {pw['ci'][0]:.2f}, "
                 f"{pw['ci'][1]:.2f}]")
    if lin and th:
        text += (f"; RMSE linear {lin['rmse']:,.0f} vs a + b*sqrt(nN) {th['rmse']:,.0f} "
                 f"(R² {fmt(lin['r2'], '.3f')} vs {fmt(th['r2'], '.3f')})")
    if ll.get("slope") is not None:
        text += f"; log-log slope {ll['slope']:.2f} [{ll['ci'][0]:.2f}, {ll['ci'][1]:.2f}]"
    return f"{text}; verdict: {fit['verdict']}"


def setting_text(d: dict) -> str:
    """Our setting beside the paper's (§5.1, App. F), from the run's config: what differs."""
    task, model, train = (get(d, "config", k, default={}) for k in ("task", "model", "train"))
    return (f"ours: synthetic token labels (n = {d.get('seq_len')}, |V| = "
            f"{task.get('vocab', 'n/a')}, C = {task.get('n_classes', 'n/a')}), "
            f"L = {model.get('n_layers', 'n/a')}, h = {model.get('n_heads', 'n/a')}, "
            f"{model.get('pe', 'n/a')}, AdamW (weight decay {train.get('weight_decay', 'n/a')}) lr "
            f"{train.get('lr', 'n/a')} "
            f"({train.get('schedule', 'n/a')} decay), full batch, widths in steps of 1-4; "
            f"paper: BERT on CoNLL-2003 (14,000 sentences), L = 6, h = 12, m in steps of 12, "
            f"Adam lr 2e-5, batch 32, dropout 0.1, 1,500 steps (GPU-sized; the suite's "
            f"transformer has no dropout and no learned positions)")


def power_text(name: str, pw: dict | None) -> str:
    if not pw or pw.get("k") is None:
        return f"{name} k n/a"
    return f"{name} k = {pw['k']:.2f} [{pw['ci'][0]:.2f}, {pw['ci'][1]:.2f}]"


def shape_holds(verdict: str, shape: str) -> Verdict:
    """A shape claim from :func:`~analyses.memorization.stats.shape_verdict`: holds for its
    shape, does not for the other, not decided at this level when the fit cannot tell them
    apart (the exponent's interval holds both, or the residuals and the interval disagree)."""
    if verdict == "undecided":
        return Undecided.either_shape("the exponent's 95 % interval (or the residuals) fits "
                                      "both the line and √(nN)")
    return verdict == shape


def _k_margin(pw: dict | None, relation: str, threshold: float, which: str = "") -> Margin | None:
    """The exponent k of a + b·N^k against the shape's value, with its 95 % interval."""
    if not pw or pw.get("k") is None:
        return None
    return Margin(f"exponent k{which} of a + b·N^k", pw["k"], relation, threshold,
                  interval=tuple(pw["ci"]) if pw.get("ci") else None)


def claim_sqrt(d: dict) -> Reading | None:
    """Thm 3.1 as context: its Õ(d + n + √(nN)) is what a construction of depth Õ(n + √(nN))
    and bit complexity Õ(√(nN)) needs, not the paper's reading of Fig. 2 (fixed depth and
    precision: linear, Thms B.1 / B.2). Holds when a + b·√(nN) leaves smaller residuals than
    the line and the exponent's interval excludes 1. Only from a search (the quick grid has
    too few N to tell)."""
    if "search" not in d:
        return None
    fit = d["fits"]["non_embedding"]
    return Reading(fit_summary(d), shape_holds(fit["verdict"], "sqrt"),
                   _k_margin(fit.get("power"), "<", 1))


def claim_linear(d: dict) -> Reading | None:
    """§5.2's reading of Fig. 2: the smallest memorising model grows linearly in N — the line
    leaves smaller residuals than a + b·√(nN) and the exponent's interval excludes 1/2."""
    if "search" not in d:
        return None
    fit = d["fits"]["non_embedding"]
    return Reading(f"{fit_summary(d)}; {setting_text(d)}", shape_holds(fit["verdict"], "linear"),
                   _k_margin(fit.get("power"), ">", 0.5))


def claim_concave_small(d: dict) -> Reading | None:
    """§5.2: the concavity is "only at the low dataset size" — the exponent over the smaller
    half of the N has its interval below 1 and the one over the larger half holds 1. Does not
    hold when the smaller half's interval lies above 1 (no concavity there) or the larger
    half's excludes 1 (concave throughout, or not the line the paper reads there); not decided
    when the smaller half's interval holds 1 (it fits a concave and a linear shape alike), or
    a half has no interval."""
    if "search" not in d:
        return None
    fit = d["fits"]["non_embedding"]
    small, large = fit.get("power_small") or {}, fit.get("power_large") or {}
    ns = d["n_examples"]
    half = (len(ns) + 1) // 2
    text = (f"{power_text(f'N = {ns[0]}…{ns[half - 1]}:', small)}; "
            f"{power_text(f'N = {ns[-half]}…{ns[-1]}:', large)} (a + b*N^k per half, "
            f"95 % CI; {budget_text(d)})")
    m = _k_margin(small, "<", 1, " (smaller half of the N)")
    if small.get("ci") is None or large.get("ci") is None:
        return Reading(text, Undecided("too few N in a half for an interval of its exponent"), m)
    (s_lo, s_hi), (l_lo, l_hi) = small["ci"], large["ci"]
    if s_lo > 1 or (s_hi < 1 and not l_lo <= 1 <= l_hi):
        return Reading(text, False, m)
    if s_hi < 1:
        return Reading(text, True, m)
    return Reading(text, Undecided.either_shape(
        f"the smaller half's interval [{s_lo:.2f}, {s_hi:.2f}] holds 1 as well as k < 1"), m)


def plan_args(level: str) -> list[str]:
    """The flags the reproduce plan passes: the synthetic token-level grid. Quick runs half of
    the ten dataset sizes, which keeps the figure within one analysis' time budget; the
    trends are read the same way from five sizes."""
    quick = ["--fractions", "0.2,0.4,0.6,0.8,1.0"] if level == "quick" else []
    return ["--data", "synthetic", "--labels-per", "token", "--no-progress", *quick]


# level -> what the plan's grid (analyses.zoo.memorization.GRIDS, synthetic token level)
# trains there, for the index's scale line
SCALE = {"quick": "memorization on five dataset sizes",
         "medium": "memorization N = 16…512 (nine sizes)",
         "large": "memorization's largest N per width, 8 widths",
         "paper": "memorization with 6-layer encoders on 14,000 synthetic sequences (the "
                  "CoNLL set's size)"}

FIGURE = Figure(
    "Memorization vs parameter count (token level)", "Memorization paper Figs. 1, 2",
    (Claim("training error falls with width and rises with dataset size (Fig. 1)",
           claim_trends),
     Claim("the smallest memorising model grows with N (Fig. 2)", claim_params),
     Claim("§5.2, Fig. 2: \"a linear trend in the number of parameters\" of the smallest "
           "memorising model (error < 0.005) as N grows; the paper conjectures fixed depth and "
           "bit complexity as the cause: Õ(d + n + nN/L) parameters at depth Õ(L) (Thm B.1), "
           "Õ(d + n + nN/B) at bit complexity Õ(B) (Thm B.2) (medium; 4x the quick "
           "step budget at every N)", claim_linear),
     Claim("§5.2, Fig. 2: \"a slight downward curvature (concavity) as our theory predicts, "
           "but only at the low dataset size\" (medium)", claim_concave_small),
     Claim("context, not the paper's reading of Fig. 2: Thm 3.1's Õ(d + n + √(nN)) "
           "parameters (a construction of width 16, depth Õ(n + √(nN)), bit complexity "
           "Õ(√(nN))) — a + b·√(nN) fits better than a line (medium)", claim_sqrt)),
    levels=("quick", "medium", "large", "paper"),
    recipes=lambda level: (),  # no zoo checkpoints: every cell is trained here
    extra_args=plan_args, outputs=("memorization_synthetic_token",), slots=2,
    dry_run_configs=dry_run_cells,  # the plan's grid: synthetic, token level
    own_runs=expected_cells,  # the large level's searches, costed before any run timed them
    resume_files=("memorization_*_cells/*.json",),  # every cell saved as it lands (CellStore)
    scale=SCALE.get, paper_scale="memorization with BERT (6 layers) on 14,000 CoNLL "
    "sentences (§5.1, App. F)")

