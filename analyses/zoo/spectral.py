"""The spectral filtering paper's settings and recipes (induction heads, §4.2, Fig. 5): its
level rows (:data:`TABLE`), STU, Hard-ALiBi transformer and Mamba-2 trained at T^q, every
level."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from analyses.zoo.recipe import Recipe
from models.levels import LevelTable
from seqprobe.config import check
from seqprobe.flags import MAX_DIM, MAX_HORIZON, MAX_SCALE, MAX_SEEDS, WIDTH_WHY, Config, bound

# Induction heads (spectral filtering paper §4.2, Fig. 5): vocabulary 4, STU filters of length
# T = 256, trained at length T^q. Quick: small models and 400 steps, enough for STU, Hard-ALiBi
# transformer and Mamba-2 to recall at their training length. The paper rows are these at
# twice the width (below, and why there).
INDUCTION_QUICK_MODELS: dict[str, dict] = {
    "stu": {"d_model": 32, "n_layers": 2, "filter_len": 256, "num_filters": 24,
            "param": "tensordot"},
    "transformer": {"d_model": 32, "n_layers": 2, "n_heads": 4, "pe": "hard_alibi"},
    "mamba2": {"d_model": 32, "n_layers": 2, "d_mlp": 64, "n_heads": 4},
}


def _twice_as_wide(model: dict) -> dict:
    """``model`` with d_model and d_mlp (where set) doubled."""
    return {**model, **{k: 2 * v for k, v in model.items() if k in ("d_model", "d_mlp")}}


TABLE = LevelTable.of({
    ("quick", "induction", "*"): {
        "task": {"D": 4, "length": 16},
        "train": {"steps": 400, "batch_size": 32, "lr": 3e-3, "warmup_steps": 50,
                  "weight_decay": 0.0, "schedule": "linear", "eval_every": 0,
                  "eval_batches": 2, "eval_batch_size": 64},
    },
    **{("quick", "induction", arch): {"model": model}
       for arch, model in INDUCTION_QUICK_MODELS.items()},
    # Paper: "trained until convergence with a tuned Adam optimizer"; sizes are not given, so
    # the paper models are the quick ones at twice the width (d_model, d_mlp).
    ("paper", "induction", "*"): {
        "task": {"D": 4, "length": 16},
        "train": {"steps": 5000, "batch_size": 64, "lr": 1e-3, "warmup_steps": 200,
                  "weight_decay": 0.0, "schedule": "linear", "eval_every": 500},
    },
    **{("paper", "induction", arch): {"model": _twice_as_wide(model)}
       for arch, model in INDUCTION_QUICK_MODELS.items()},
})


def _recipe(*args, **kwargs) -> Recipe:
    """A recipe of this paper: on top of its :data:`TABLE`."""
    return Recipe(*args, table=TABLE, **kwargs)


# Induction heads (spectral paper §4.2, Fig. 5): trained at length T^q for filters of length
# T = 256, several seeds; the level rows (TABLE) give the model sizes.
INDUCTION_T = 256
INDUCTION_RUNS = {"quick": {"qs": (1 / 2, 3 / 4), "seeds": 3},
                  "paper": {"qs": (1 / 2, 5 / 8, 3 / 4, 7 / 8), "seeds": 5}}


def induction_length(q: float, T: int = INDUCTION_T) -> int:
    return max(3, round(T**q))


def induction_name(arch: str, length: int, seed: int) -> str:
    return f"induction/{arch}_L{length}_s{seed}"


def _induction() -> Iterator[Recipe]:
    lengths = {induction_length(q) for p in INDUCTION_RUNS for q in INDUCTION_RUNS[p]["qs"]}
    for arch in ("stu", "transformer", "mamba2"):
        for L in sorted(lengths):
            for s in range(max(r["seeds"] for r in INDUCTION_RUNS.values())):
                levels = tuple(lv for lv, r in INDUCTION_RUNS.items() if s < r["seeds"] and any(
                    induction_length(q) == L for q in r["qs"]))
                yield _recipe(induction_name(arch, L, s), "induction", arch,
                             {"task": {"length": L}, "train": {"seed": s}}, levels=levels,
                             doc=f"{arch} on induction heads at length {L}, seed {s} "
                                 "(spectral paper Fig. 5)")


# ---- medium: STU length generalisation
# Fig. 5 at medium, the paper's setting: "trained until convergence with a tuned Adam" — no
# early stop (stop_at 0), a fixed step budget with a cosine-decayed learning rate, so every
# seed ends on a plateau of the training loss at its training length, not at the first
# evaluation that happens to be all right. Labels: stu, the paper's model (two tensordot STU
# layers with LayerNorm, our per-branch filter mixtures); stu_shared, the tensordot of the
# paper's reference code (hazan-lab/flash-stu-2: one filter mixture for both branches, which
# reads even lags only); stu_blank0, BLANK's embedding held at zero and no norm (BLANK then
# adds nothing to the first layer's filtered sums: does the loss of recall below the training
# length come from BLANK's filtered sum?); Hard-ALiBi and Mamba-2 baselines with fewer seeds.
# q = 7/8 (L = 128) is left out: twice the cost of L = 64 per step, and the budget of this
# block goes to 8 seeds of the paper's STU at q = 1/2 and 3/4; the two ablations need fewer
# (stu_shared's ceiling is structural, the same at every seed; stu_blank0 asks whether recall
# below the training length comes back: "as well as padded" is a sign test against a margin,
# and 5 seeds are the fewest whose sign test can reach 0.05, 2^-5 < 0.05). Hard-ALiBi has 3
# seeds: the STU-vs-baselines claim is a Mann-Whitney per (length, baseline), Holm over the four, so
# its first step is at 0.05 / 4, and 8 STU seeds against 2 can never reach it (even complete
# separation gives 1 / C(10, 2) = 1/45) while against 3 they can (1/165).
INDUCTION_MEDIUM_QS = (1 / 2, 3 / 4)
INDUCTION_BLANK = 4  # tasks.induction: the D = 4 symbols, then BLANK (tests check the id)
INDUCTION_MEDIUM_MODELS = {  # label -> (arch, model overrides, seeds)
    "stu": ("stu", {}, 8), "stu_shared": ("stu", {"mixture": "shared"}, 2),
    "stu_blank0": ("stu", {"zero_embed": (INDUCTION_BLANK,), "normalization": "none"}, 5),
    "transformer": ("transformer", {}, 3), "mamba2": ("mamba2", {}, 2)}
INDUCTION_MEDIUM_TRAIN = {"steps": 1200, "eval_every": 400, "stop_at": 0.0,
                          "schedule": "cosine", "lr": 3e-3, "warmup_steps": 50}
# the baselines recall at their training length within ~200 steps: half the STU's budget
# still ends each on a plateau, and the budget goes to the STU seeds
INDUCTION_MEDIUM_STEPS = {"transformer": 600, "mamba2": 600}


def induction_medium_name(label: str, length: int, seed: int) -> str:
    return f"induction_medium/{label}_L{length}_s{seed}"


def _induction_medium() -> Iterator[Recipe]:
    for label, (arch, model, seeds) in INDUCTION_MEDIUM_MODELS.items():
        steps = {"steps": INDUCTION_MEDIUM_STEPS[label]} if label in INDUCTION_MEDIUM_STEPS else {}
        for L in sorted({induction_length(q) for q in INDUCTION_MEDIUM_QS}):
            for s in range(seeds):
                yield _recipe(induction_medium_name(label, L, s), "induction", arch,
                             {"model": model, "task": {"length": L}, "train": {"seed": s}},
                             {"medium": {"train": {**INDUCTION_MEDIUM_TRAIN, **steps}}},
                             levels=("medium",),
                             doc=f"{label} on induction heads at length {L}, seed {s}, trained "
                                 "to convergence (spectral paper Fig. 5)")
# ---- end medium: STU length generalisation


# Spectral paper Fig. 5 at large: every q of the figure (T^q = 16, 32, 64, 128 for T = 256),
# 16 seeds at each of two learning rates (the paper's "tuned Adam": the lr is part of what a
# seed draws, so both count), the paper's STU and the reference code's tensordot STU
# (shared mixture). Trained as at medium: to convergence, a fixed budget with a cosine decay,
# no early stop. No baselines: medium settled them (they recall at their training length).
INDUCTION_LARGE_QS = (1 / 2, 5 / 8, 3 / 4, 7 / 8)
INDUCTION_LARGE_LRS = (1e-3, 3e-3)
INDUCTION_LARGE_MODELS = {"stu": ("stu", {}, 16), "stu_shared": ("stu", {"mixture": "shared"}, 16)}


def induction_large_name(label: str, length: int, lr: float, seed: int) -> str:
    return f"induction_large/{label}_L{length}_lr{lr:.0e}_s{seed}".replace("e-0", "e-")


def induction_large_recipes(labels: Iterable[str] | None = None,
                            qs: Iterable[float] | None = None,
                            seeds: int | None = None) -> list[str]:
    """The large induction recipes of ``labels`` (default: both STUs) at every q, lr and seed
    (the first ``seeds`` of each)."""
    labels = list(labels or INDUCTION_LARGE_MODELS)
    qs = list(qs or INDUCTION_LARGE_QS)
    check(all(lab in INDUCTION_LARGE_MODELS for lab in labels),
          f"the large induction runs are {', '.join(INDUCTION_LARGE_MODELS)}, got "
          f"{', '.join(labels)}")
    check(all(q in INDUCTION_LARGE_QS for q in qs), "the large induction runs are q in "
          + ", ".join(f"{q:.4g}" for q in INDUCTION_LARGE_QS))
    top = min(INDUCTION_LARGE_MODELS[lab][2] for lab in labels)
    check(seeds is None or 1 <= seeds <= top, f"need 1 <= seeds <= {top}, got {seeds}")
    return [induction_large_name(lab, induction_length(q), lr, s) for lab in labels for q in qs
            for lr in INDUCTION_LARGE_LRS
            for s in range(INDUCTION_LARGE_MODELS[lab][2] if seeds is None else seeds)]


def _induction_large() -> Iterator[Recipe]:
    for label, (arch, model, seeds) in INDUCTION_LARGE_MODELS.items():
        for L in sorted({induction_length(q) for q in INDUCTION_LARGE_QS}):
            for lr in INDUCTION_LARGE_LRS:
                for s in range(seeds):
                    yield _recipe(induction_large_name(label, L, lr, s), "induction", arch,
                                 {"model": model, "task": {"length": L},
                                  "train": {**INDUCTION_MEDIUM_TRAIN, "lr": lr, "seed": s}},
                                 levels=("large",),
                                 doc=f"{label} on induction heads at length {L}, lr {lr:g}, "
                                     f"seed {s}, trained to convergence (spectral paper Fig. 5)")


def recipes() -> Iterator[Recipe]:
    """This paper's recipes, in the order ``python -m analyses.zoo --list`` shows them."""
    yield from _induction()
    yield from _induction_medium()
    yield from _induction_large()



# ---------------------------------------------------------------------------- analyses' levels
# What analyses.spectral_lds measures at a level (the online-learning experiments of §4.1 train
# no zoo model): each numeric field declared once with its bound, its flag made from the field
# (seqprobe.cli.add_fields).


@dataclass(frozen=True)
class SpectralLDSSettings(Config):
    """analyses.spectral_lds at a level: horizon ``T`` (also the filter length), ``k``
    spectral filters, the LDS's dimensions and ``seeds`` systems per region; and at every
    level ``qs`` (contexts L = T^q), the step size ``lr`` and the balls' ``radius``."""

    T: int = field(metadata=bound(  # tasks.lds.LDSConfig's T: the regions need T >= 4
        4, MAX_HORIZON, "a dynamical system's horizon; the STU paper: 2^14",
        help="horizon / filter length"))
    k: int = field(metadata=bound(1, MAX_DIM, "spectral filters", help="number of filters"))
    d_hidden: int = field(metadata=bound(1, MAX_DIM, WIDTH_WHY, help="hidden dimension of the LDS"))
    d_in: int = field(metadata=bound(1, MAX_DIM, WIDTH_WHY, help="input dimension of the LDS"))
    d_out: int = field(metadata=bound(1, MAX_DIM, WIDTH_WHY, help="output dimension of the LDS"))
    seeds: int = field(metadata=bound(1, MAX_SEEDS, "independently trained systems per point",
                                      help="random systems per region"))
    qs: tuple[float, ...] = field(default=(1 / 4, 1 / 2, 3 / 4, 7 / 8, 1.0), metadata=bound(
        0.0, 1.0, "fractions of the length", open_lo=True,
        help="context exponents q (L = T^q), fractions such as 1/4 allowed"))
    lr: float = field(default=0.3, metadata=bound(
        0.0, MAX_SCALE, "a step size in units of 1/E|X_t|^2", open_lo=True,
        help="step size in units of 1/E‖X_t‖²"))
    radius: float = field(default=10.0, metadata=bound(
        0.0, MAX_SCALE, "a spectral radius", open_lo=True, help="r of the Frobenius balls"))


SPECTRAL_LDS_LEVELS: dict[str, SpectralLDSSettings] = {
    # quick: a CPU-sized horizon and hidden dimension, the paper's number of filters
    "quick": SpectralLDSSettings(T=2**13, k=24, d_hidden=256, d_in=4, d_out=4, seeds=3),
    # paper §4.1: T = 2^14, k = 24, hidden dimension 512 (d_in, d_out and seeds unspecified)
    "paper": SpectralLDSSettings(T=2**14, k=24, d_hidden=512, d_in=4, d_out=4, seeds=5),
}
