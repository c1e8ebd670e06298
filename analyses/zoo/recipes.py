"""The zoo's recipes as data: every trained model an analysis uses, by name.

What a recipe is (a task × arch with overrides on the preset rows, at the levels it lists):
:class:`analyses.zoo.recipe.Recipe`.

The tables below are literals; recipes that come in grids (lengths × seeds × learning rates)
are expanded by one function per family, and :func:`build_recipes` collects them all once.
:mod:`analyses.zoo` serves them. Why a setting was chosen is said beside it; what a run of it
measured is in the reproduce index.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyses.zoo.recipe import DEFAULT_LEVELS, Parts, Recipe  # noqa: F401 - importable from here
from models.train.levels import preset_overrides
from seqprobe.config import check

# Copy paper (Jelassi et al.). Quick: strings <= 20 (models.train.levels). Paper: Fig. 1b's
# setting, strings <= 50 in contexts of C = 420 (App. A.2), tested up to 1000.
COPY_MODELS: dict[str, tuple[str, dict]] = {
    "hard_alibi": ("transformer", {"pe": "hard_alibi"}),
    "nope": ("transformer", {"pe": "nope"}),
    "alibi": ("transformer", {"pe": "alibi"}),
    "rope": ("transformer", {"pe": "rope"}),
    "mamba": ("mamba", {}),
    "mamba2": ("mamba2", {}),
    "lstm": ("lstm", {}),
}
COPY_PAPER = {"task": {"min_len": 1, "max_len": 50}, "train": {"context": 420}}
# The quick Hard-ALiBi keeps the preset's 3000 steps: its n-gram match heads, which
# analyses.ngram_heads finds and which copy beyond the training length, form late. The other
# quick copy models get 1500: NoPE and RoPE are near-perfect in distribution by then, and
# more steps do not teach positions never seen; the GSSMs stay far behind either way.
COPY_QUICK = {"train": {"steps": 1500}}
# The copy and lookup models train on one core each (the Recipe default), like every other
# zoo model: a second thread speeds a quick copy step up by far less than 2x, so two of them
# side by side get through more of the plan, and a one-thread job keeps its pace when other
# work shares the machine, where a two-thread one waits on its slower thread.
COPY_QUICK_BY_LABEL = {"hard_alibi": {}}


def _copy() -> Iterator[Recipe]:
    for label, (arch, model) in COPY_MODELS.items():
        yield Recipe(f"copy/{label}", "copy", arch, {"model": model},
                     {"quick": COPY_QUICK_BY_LABEL.get(label, COPY_QUICK), "paper": COPY_PAPER},
                     doc=f"{label} trained to copy (copy paper §3, Figs. 1a-b)")


# A Mamba-2 copy model that models.hf.export accepts with an MLP: the gated MLP with the mixer's
# own SiLU is exactly HF's BambaForCausalLM block (the quick Markov Mamba-2's ReLU MLP is
# refused). The mixer is copy/mamba2's (the preset's d 32, one layer, N = 16) and the MLP is
# 2·d wide, so the two compare at the quick level as one model with and without the MLP, at
# about copy/mamba2's training cost (issue 37).
COPY_MAMBA2_EXPORT = {"d_mlp": 64, "mlp_act": "silu"}


def _copy_export() -> Iterator[Recipe]:
    yield Recipe("copy/mamba2_mlp", "copy", "mamba2", {"model": COPY_MAMBA2_EXPORT},
                 {"quick": COPY_QUICK}, levels=("quick",),
                 doc="Mamba-2 with a gated SiLU MLP trained to copy; exports as Bamba")


# ---- medium: copy efficiency (issue 21, made fair in issue 27)
# Copy paper §3.2, Fig. 1a (and 9b) as numbers (analyses.copy_efficiency --medium): samples to
# 90 % string accuracy, GSSMs against transformers, several seeds, every model at its own best
# learning rate. The paper's setting, CPU-sized:
# - models of about the same parameter count (paper: ~160M each; here 89k-109k, within
#   ±20 % of the RoPE transformer): the transformers are the authors' GPT-NeoX
#   (transformers_ssm_copy builds GPTNeoXConfig at its defaults: a quarter of each head
#   rotated, parallel residual; their Hard-ALiBi subclass keeps the parallel residual);
#   Mamba with S = 16 (the paper sweeps 16..256); Mamba-2 and the LSTM widened to the same
#   count. NoPE is left out: the claim is GSSMs vs the fastest transformer, and its runs would
#   not fit the budget beside the lr sweep.
# - strings of random length 1..L (paper: "strings of random length <= L"), not exactly L,
#   so a transformer cannot copy by absolute position alone;
# - each model trained at every lr of COPY_MEDIUM["lrs"] (AdamW, the quick preset's warm-up,
#   linear decay and weight decay: the authors' optimiser), the analysis credits each model
#   and L with its best lr (most seeds at 90 %, then lowest median samples).
# - scored at exactly L, as Fig. 1a's caption says (the trainer's evaluation scores every
#   length of 1..L; string_acc_at[L]), with the score over the training distribution (the
#   paper's §3.1 wording) beside it.
# Not matched: L <= 6, not 300; ~100k parameters, not 160M; the shared step cap is short, so a
# GSSM that does not get there counts as a lower bound.
# Lengths, seeds, cap and eval spacing are what fits 1800 core-seconds of training on a CPU.
# The lr grid spans 100x in steps of ~3x so that each model's optimum is bracketed: on the
# earlier grid {1e-3, 3e-3, 1e-2} most chosen lrs sat at one of its ends (issue 36), where the
# best may lie beyond it; the analysis flags a choice at an end of its grid (lr_edge).
COPY_MEDIUM = {"lengths": (4, 6), "seeds": 3, "lrs": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)}
# Each model's lr at each L, chosen by the full sweep (every lr of the grid at every seed, the
# analysis' best_lr rule; `python -m analyses.copy_efficiency --train medium --sweep` runs it
# again and credits each model with its best). The medium plan trains these alone: the sweep
# is five times their training. COPY_MEDIUM_LR_GRID: the grid the entries below were chosen
# on (the earlier, narrower one, until the sweep is rerun on COPY_MEDIUM["lrs"]); the analysis
# flags an entry at an end of it.
COPY_MEDIUM_LR_GRID = (1e-3, 3e-3, 1e-2)
COPY_MEDIUM_LR = {4: {"rope": 1e-3, "hard_alibi": 1e-3, "mamba": 1e-2, "mamba2": 3e-3,
                      "lstm": 1e-2},
                  6: {"rope": 1e-3, "hard_alibi": 1e-3, "mamba": 1e-2, "mamba2": 1e-2,
                      "lstm": 1e-2}}
COPY_MEDIUM_LABELS = ("rope", "hard_alibi", "mamba", "mamba2", "lstm")
_NEOX = {"d_model": 64, "n_layers": 2, "n_heads": 4, "parallel_residual": True}
COPY_MEDIUM_MODEL = {
    "rope": ("transformer", {**_NEOX, "pe": "rope", "rotary_frac": 0.25}),
    "hard_alibi": ("transformer", {**_NEOX, "pe": "hard_alibi"}),  # M = 2 of 4 heads
    "mamba": ("mamba", {"d_model": 80, "n_layers": 2, "d_state": 16}),
    "mamba2": ("mamba2", {"d_model": 84, "n_layers": 2}),
    "lstm": ("lstm", {"d_model": 80, "n_layers": 2}),
}
# Evaluated every 20 steps on 8 × 16 strings spread evenly over every length of 1..L (the
# same strings for every model of a seed: the seed pairs the runs).
COPY_MEDIUM_TRAIN = {"steps": 1200, "eval_every": 20, "eval_batches": 8, "eval_batch_size": 16,
                     "stop_at": 0.9}
COPY_MEDIUM_SETTING = {
    "paper": "Fig. 1a's, CPU-sized: parameter-matched models (89k-109k; paper ~160M), RoPE "
             "and Hard-ALiBi as the authors' GPT-NeoX (rotary 0.25, parallel residual), "
             "strings of random length 1..L scored at exactly L (Fig. 1a's caption; the "
             "training distribution's score beside it), each model at its best lr",
    "not_matched": "L <= 6 (paper 300); a shared cap of 1,200 steps × 32 (a GSSM that never "
                   "got there is a lower bound)",
}


def copy_medium_name(label: str, length: int, seed: int, lr: float) -> str:
    return f"copy_medium/{label}_L{length}_lr{lr:.0e}_s{seed}".replace("e-0", "e-")


def copy_medium_recipes(labels: Iterable[str] | None = None, sweep: bool = False) -> list[str]:
    """The medium copy-efficiency recipes of ``labels`` (default: all), every length and
    seed, at each model's chosen lr (:data:`COPY_MEDIUM_LR`) or, with ``sweep``, at every lr
    of the sweep."""
    labels = checked_labels(labels, COPY_MEDIUM_LABELS, "medium")
    return [copy_medium_name(label, L, s, lr) for L in COPY_MEDIUM["lengths"] for label in labels
            for lr in (COPY_MEDIUM["lrs"] if sweep else (COPY_MEDIUM_LR[L][label],))
            for s in range(COPY_MEDIUM["seeds"])]


def _copy_medium() -> Iterator[Recipe]:
    for L in COPY_MEDIUM["lengths"]:
        for label in COPY_MEDIUM_LABELS:
            arch, model = COPY_MEDIUM_MODEL[label]
            for lr in COPY_MEDIUM["lrs"]:
                for s in range(COPY_MEDIUM["seeds"]):
                    yield Recipe(copy_medium_name(label, L, s, lr), "copy", arch,
                                 {"model": model, "task": {"min_len": 1, "max_len": L},
                                  "train": {**COPY_MEDIUM_TRAIN, "lr": lr, "seed": s}},
                                 levels=("medium",),
                                 doc=f"{label} copying strings of length 1..{L}, lr {lr:g}, "
                                     f"seed {s} (copy paper Fig. 1a)")

# ---- end medium: copy efficiency

# n-gram lookup (copy paper §3.3, Figs. 5-6). Quick fine-tunes each copy checkpoint (its
# n-gram match head is the lookup the task asks for; from random init neither the transformer
# nor the LSTM learns lookup at this budget). Paper: from scratch with the paper's settings.
# lookup_scratch_*: from random init at both presets (at paper the same run as lookup_*), to
# show what the quick fine-tuning buys (analyses.ngram_lookup --init none).
LOOKUP_TASK = {"min_len": 10, "max_len": 30, "n": 3, "k": 1}
LOOKUP_QUICK_TRAIN = {"steps": 500, "batch_size": 32, "lr": 1e-3, "warmup_steps": 50,
                      "weight_decay": 0.1, "schedule": "linear", "eval_every": 250,
                      "greedy_eval": False}
LOOKUP_PAPER_TRAIN = {"lr": 5e-5, "warmup_steps": 300, "weight_decay": 0.1, "schedule": "linear",
                      "batch_size": 64, "steps": 20000, "context": 420, "eval_every": 1000}


def _lookup() -> Iterator[Recipe]:
    for key in ("suffix", "prefix"):
        for label, (arch, model) in COPY_MODELS.items():
            for stem, init in (("lookup", {"quick": f"copy/{label}"}), ("lookup_scratch", {})):
                yield Recipe(f"{stem}_{key}/{label}", "lookup", arch,
                             {"model": model, "task": {**LOOKUP_TASK, "key": key}},
                             {"quick": {"train": LOOKUP_QUICK_TRAIN},
                              "paper": {"train": LOOKUP_PAPER_TRAIN}},
                             init_from=init,
                             doc=f"{label}, {key}-key n-gram lookup (copy paper Figs. 5-6)"
                                 + ("" if init else ", from random init"))


# ---- medium: prefix lookup (issues 21, 27)
# Copy paper §3.5, Fig. 6 as numbers (analyses.ngram_lookup --medium): prefix-key lookup from
# random init (the paper's start), several seeds, trained the paper's way (App. A.2) where a CPU
# allows it. Matched: i.i.d. examples packed into contexts of 420 tokens (a GSSM's state runs on
# across the packed examples: the authors' code concatenates them and never resets it); AdamW,
# weight decay 0.1, warm-up, then a linear decay to zero over the whole run and no early stop
# (the authors' "epoch" is a block of optimiser steps on freshly sampled batches, not a pass
# over a fixed set, so their 15 epochs are a step count: ours is far smaller). Not matched, for
# the level's CPU budget: the alphabet (8, not 26: each example supervises one answer token, and
# with 26 letters no model got far past chance at these budgets); strings of 5..20, not <= 30
# (more examples per token of the budget, and the setting in which the earlier unpacked runs
# learnt it); the model sizes (the quick copy models; the paper's ~160M-parameter models are
# GPU-only); lr (the paper's 5e-5 is for those: the small models take 3e-3, Mamba 1e-2, which
# learnt it about twice as fast per step; Hard-ALiBi 1e-3 with a third layer, since a prefix key
# takes it three hops: hash each trigram, fetch the key's hash from the separator after the
# key, match; two layers stayed near chance). Trigram keys: 8^3 n-grams keep a unique key likely
# in strings up to 256 (tasks.lookup's check), so the test lengths reach 5x the training length.
# Batch 4 contexts (~80 examples a step); 2 seeds of 1,000 steps fit the level's training
# budget for this figure (issue 27).
LOOKUP_MEDIUM = {"labels": ("hard_alibi", "mamba", "lstm"), "seeds": 2}
LOOKUP_MEDIUM_TASK = {"D": 8, "min_len": 5, "max_len": 20, "n": 3, "k": 1, "key": "prefix"}
LOOKUP_MEDIUM_TRAIN = {"steps": 1000, "batch_size": 4, "context": 420, "lr": 3e-3,
                       "warmup_steps": 50, "weight_decay": 0.1, "schedule": "linear",
                       "eval_every": 250, "eval_batches": 4, "greedy_eval": False}
LOOKUP_MEDIUM_BY_LABEL = {"hard_alibi": {"model": {"n_layers": 3}, "train": {"lr": 1e-3}},
                          "mamba": {"train": {"lr": 1e-2}}}


def lookup_medium_name(label: str, seed: int) -> str:
    return f"lookup_medium_prefix/{label}_s{seed}"


def checked_labels(labels: Iterable[str] | None, allowed: Iterable[str], level: str) -> list[str]:
    """``labels`` (default: every one ``allowed``), each checked to be a model of the level."""
    allowed = tuple(allowed)
    labels = list(labels or allowed)
    for label in labels:
        check(label in allowed,
              f"unknown model {label!r}; allowed at {level}: {', '.join(allowed)}")
    return labels


def lookup_medium_recipes(labels: Iterable[str] | None = None) -> list[str]:
    """The medium prefix-lookup recipes of ``labels`` (default: all), every seed."""
    return [lookup_medium_name(label, s)
            for label in checked_labels(labels, LOOKUP_MEDIUM["labels"], "medium")
            for s in range(LOOKUP_MEDIUM["seeds"])]


def _lookup_medium() -> Iterator[Recipe]:
    for label in LOOKUP_MEDIUM["labels"]:
        arch, model = COPY_MODELS[label]
        extra = LOOKUP_MEDIUM_BY_LABEL.get(label, {})
        for s in range(LOOKUP_MEDIUM["seeds"]):
            yield Recipe(lookup_medium_name(label, s), "lookup", arch,
                         {"model": {**preset_overrides("quick", "copy", arch)["model"], **model,
                                    **extra.get("model", {})},
                          "task": LOOKUP_MEDIUM_TASK,
                          "train": {**LOOKUP_MEDIUM_TRAIN, **extra.get("train", {}), "seed": s}},
                         levels=("medium",),
                         doc=f"{label}, prefix-key n-gram lookup from random init, seed {s} "
                             "(copy paper Fig. 6)")


# ---- end medium: prefix lookup

# Markov chains (Bondaschi et al.): the preset rows of (markov, mamba2) are the paper's model.
MARKOV_TRANSFORMER = {"d_model": 32, "n_heads": 1, "pe": "rope"}
# the quick transformer baselines are several times slower a step than the Mamba-2: fewer
# steps keep markov_laplace's figure within its budget; their gap to add-β stays far larger
MARKOV_TF_QUICK = {"train": {"steps": 750}}
MARKOV_RECIPES = (
    Recipe("markov/mamba2", "markov", "mamba2",
           doc="1-layer Mamba-2 on binary first-order chains (Markov paper Figs. 1-5)"),
    Recipe("markov/transformer_1L", "markov", "transformer",
           {"model": {**MARKOV_TRANSFORMER, "n_layers": 1}}, {"quick": MARKOV_TF_QUICK},
           doc="1-layer transformer baseline (Markov paper Fig. 1)"),
    Recipe("markov/transformer_2L", "markov", "transformer",
           {"model": {**MARKOV_TRANSFORMER, "n_layers": 2}}, {"quick": MARKOV_TF_QUICK},
           doc="2-layer transformer baseline (Markov paper Fig. 1)"),
    Recipe("markov/mamba2_S3", "markov", "mamba2", {"task": {"S": 3}}, doc="Fig. 8: S = 3"),
    Recipe("markov/mamba2_S4", "markov", "mamba2", {"task": {"S": 4}}, doc="Fig. 8: S = 4"),
    Recipe("markov/mamba2_k2", "markov", "mamba2", {"task": {"order": 2}},
           doc="Fig. 10: order 2 (the preset's window w = 4 >= k + 1)"),
    Recipe("markov/transformer_2L_k2", "markov", "transformer",
           {"model": {**MARKOV_TRANSFORMER, "n_layers": 2}, "task": {"order": 2}},
           {"quick": MARKOV_TF_QUICK}, doc="Fig. 10: 2-layer transformer, order 2"),
)


def _markov_rows(level: str, parts: Iterable[str] = ("model", "train")) -> dict:
    """The (markov, mamba2) preset rows, for Markov variants that are other tasks."""
    rows = preset_overrides(level, "markov", "mamba2")
    return {k: rows[k] for k in parts}


def _markov_variants() -> Iterator[Recipe]:
    # a_t must drop at a switch to forget the old kernel's counts: a larger step size than the
    # stationary chains' lets the quick run learn the reset (Markov paper Fig. 13)
    quick = _markov_rows("quick")
    yield Recipe("switching_markov/mamba2", "switching_markov", "mamba2",
                 {"task": {"p_switch": 0.01}},
                 {"quick": {"model": quick["model"],
                            "train": {**quick["train"], "lr": 3e-3, "steps": 2000}},
                  "paper": _markov_rows("paper")},
                 doc="Mamba-2 on switching Markov data (Markov paper Figs. 4, 13)")
    yield Recipe("markov_holdout/mamba2", "markov_holdout", "mamba2",
                 {"task": {"p_lo": 0.0, "p_hi": 0.5}},
                 {lv: _markov_rows(lv, ("model", "task", "train")) for lv in ("quick", "paper")},
                 doc="Mamba-2 trained on P(1|·) in [0, 0.5] (Markov paper App. E.5)")


# ---- medium: markov holdout (issues 21, 27)
# App. E.5 / Table 2 at medium (analyses.markov_holdout --medium), in the paper's setting: the
# model the authors ran (models.ssm.mamba2.MARKOV_PAPER_MODEL: bias-free LayerNorm, LN(y) ⊙ act(z),
# no D, gated SiLU MLP, their init) at the quick sizes (d = N = 16, e = 2, w = 4, MLP 4d, one
# layer, one head — all inside Table 7's grid), and Table 7's optimiser (AdamW 0.9 / 0.95,
# lr 1e-3, cosine, weight decay 1e-3; a 2 % warm-up). Only the warm-up's length matches the
# authors' OneCycleLR: theirs starts at lr/100 and anneals to lr/5, ours warms up from
# lr/warmup_steps and decays to 0; their weight decay is on Linear weights only, ours on every
# matrix (embedding and conv filters too: models.train.loop.make_optimizer); their scripts run
# lr 2e-3 where Table 7 says 1e-3 (the presets' Markov paper row; issue 36 read their
# scripts, which are not in this repository). Sequences of 512 (Table 7's grid) so that
# Table 2's t = 300 is inside the training length; batch 16 (the
# grid's smallest) and 2,700 steps: what three seeds fit in this level's training compute
# (Table 7's 10,000 steps do not, at either length). Three seeds for the spread.
MARKOV_HOLDOUT_MEDIUM = {
    "seeds": (0, 1, 2),
    "model": {"norm": "layernorm", "norm_before_gate": True, "use_D": False,
              "activation": "silu", "mlp_act": "silu", "paper_init": True},
    "task": {"seq_len": 512},
    "train": {"steps": 2700, "batch_size": 16, "lr": 1e-3, "beta1": 0.9, "beta2": 0.95,
              "weight_decay": 1e-3, "schedule": "cosine", "warmup_steps": 54,
              "eval_every": 1350}}


def markov_holdout_medium_recipes() -> list[str]:
    return [f"markov_holdout_medium/mamba2_s{s}" for s in MARKOV_HOLDOUT_MEDIUM["seeds"]]


def _markov_holdout_medium() -> Iterator[Recipe]:
    rows = _markov_rows("quick", ("model", "task", "train"))
    for s, name in zip(MARKOV_HOLDOUT_MEDIUM["seeds"], markov_holdout_medium_recipes(),
                       strict=True):
        yield Recipe(name, "markov_holdout", "mamba2",
                     {"task": {"p_lo": 0.0, "p_hi": 0.5}},
                     {"medium": {"model": {**rows["model"], **MARKOV_HOLDOUT_MEDIUM["model"]},
                                 "task": {**rows["task"], **MARKOV_HOLDOUT_MEDIUM["task"]},
                                 "train": {**rows["train"], **MARKOV_HOLDOUT_MEDIUM["train"],
                                           "seed": s}}},
                     levels=("medium",),
                     doc=f"the Markov paper's Mamba-2 (the authors' layers and init) trained on "
                         f"P(1|·) in [0, 0.5], seed {s} (App. E.5)")
# ---- end medium: markov holdout

# MambaZero (§4.1) with its L1 prediction. Thm 1's exact size (d = 4, N = 2) stalls at quick
# budgets, hence d = 16, N = 8. Its unembedding bias starts at 1: with the default init every
# output is ≈ 0, the L1 prediction clamps the negative ones (no gradient) and training falls
# into the uniform predictor; the add-β logits β + n are positive too.
MAMBAZERO_MODEL = {"d_model": 16, "d_state": 8, "unembed_bias": True,
                   "unembed_bias_init": 1.0}
MAMBAZERO_RECIPES = (
    # Fig. 5 is a statement at convergence: shorter sequences buy the paper's 10 000 steps on
    # a CPU, and a step size between the Mamba-2's and a larger one that trains unstably (a
    # quick run at lr 1e-2 fell to the uniform predictor and never fully recovered) converges.
    # The same converged model is Fig. 3a's MambaZero (analyses.markov_ablations): at paper
    # both figures' MambaZero were already one run.
    Recipe("markov/mambazero_fig5", "markov", "mambazero", {"model": MAMBAZERO_MODEL},
           {"quick": {"task": {"seq_len": 128}, "train": {"lr": 3e-3, "steps": 10000}}},
           doc="L1 MambaZero trained to convergence (Markov paper Figs. 3a, 5)"),
)

# Markov ablations (Figs. 3, 6, 11, 12, Table 3): group -> [(label, arch, model, task)].
# Quick sweeps beyond Fig. 3a are shorter runs on shorter sequences; the conv group keeps the
# preset, so its full model is markov/mamba2.
ABLATION_GROUPS: dict[str, list[tuple[str, str, dict, dict]]] = {
    "conv": [("no_conv", "mamba2", {"conv": False}, {})],
    "window": [(f"k{k}_w{w}", "mamba2", {"d_conv": w}, {"order": k})
               for k in (1, 2) for w in (1, 2, 3)],
    "width": [(f"k{k}_d{d}", "mamba2", {"d_model": d, "d_conv": k + 1}, {"order": k})
              for k in (1, 2, 3) for d in (2, 4, 8)],
    "depth": [("1L", "mamba2", {}, {}), ("1L_no_conv", "mamba2", {"conv": False}, {}),
              ("2L_no_conv", "mamba2", {"conv": False, "n_layers": 2}, {})],
    "noconv_width": [(f"no_conv_d{d}", "mamba2", {"conv": False, "d_model": d}, {})
                     for d in (10, 100, 1000)],
}
ABLATION_QUICK_SWEEP = {"train": {"steps": 600}, "task": {"seq_len": 128}}
ABLATION_PAPER_ONLY = ("no_conv_d1000",)  # d = 1000 is no CPU run


def _ablations() -> Iterator[Recipe]:
    for group, runs in ABLATION_GROUPS.items():
        for label, arch, model, task in runs:
            yield Recipe(f"markov_ablation/{group}/{label}", "markov", arch,
                         {"model": model, "task": task},
                         {} if group == "conv" or label in ABLATION_PAPER_ONLY
                         else {"quick": ABLATION_QUICK_SWEEP},
                         levels=("paper",) if label in ABLATION_PAPER_ONLY else DEFAULT_LEVELS,
                         doc=f"Markov ablation, {group}: {label}")

# Induction heads (spectral paper §4.2, Fig. 5): trained at length T^q for filters of length
# T = 256, several seeds; the preset rows give the model sizes.
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
                yield Recipe(induction_name(arch, L, s), "induction", arch,
                             {"task": {"length": L}, "train": {"seed": s}}, levels=levels,
                             doc=f"{arch} on induction heads at length {L}, seed {s} "
                                 "(spectral paper Fig. 5)")


# ---- medium: STU length generalisation (issues 21, 27)
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
# below the training length comes back, a yes/no that 4 seeds settle).
INDUCTION_MEDIUM_QS = (1 / 2, 3 / 4)
INDUCTION_BLANK = 4  # tasks.induction: the D = 4 symbols, then BLANK (tests check the id)
INDUCTION_MEDIUM_MODELS = {  # label -> (arch, model overrides, seeds)
    "stu": ("stu", {}, 8), "stu_shared": ("stu", {"mixture": "shared"}, 2),
    "stu_blank0": ("stu", {"zero_embed": (INDUCTION_BLANK,), "normalization": "none"}, 4),
    "transformer": ("transformer", {}, 2), "mamba2": ("mamba2", {}, 2)}
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
                yield Recipe(induction_medium_name(label, L, s), "induction", arch,
                             {"model": model, "task": {"length": L}, "train": {"seed": s}},
                             {"medium": {"train": {**INDUCTION_MEDIUM_TRAIN, **steps}}},
                             levels=("medium",),
                             doc=f"{label} on induction heads at length {L}, seed {s}, trained "
                                 "to convergence (spectral paper Fig. 5)")
# ---- end medium: STU length generalisation


# ---- large (issue 36 §2): the smallest settings that decide each headline claim, for one
# machine with one 80 GB GPU and 16 CPU cores (each analysis <= 10 min, the level <= 60 min).
# Small models run side by side: the copy and lookup models several at once on the one GPU,
# the tiny ones (STU, Markov, memorization) one per CPU core, where a GPU does not help (a
# tiny model is launch-bound there). Which device each job uses: the reproduce plan's
# PLACEMENT (analyses.reproduce.plan).

# Copy paper Fig. 1a / 9b at large: strings of random length 1..L over the paper's 26
# letters for L = 10, 20, 30 (Fig. 9b's L <= 30 is where the paper puts Mamba ~10x and the
# LSTM ~100x behind, a gap the medium L <= 6 is too short to show), i.i.d. examples packed into
# contexts of C = 420 (App. A.2; samples_seen counts contexts, the same packing for every
# model at a given L, so the ratios compare like with like).
COPY_LARGE = {"lengths": (10, 20, 30), "seeds": 3, "sweep_seed": 0,
              # the medium grid's optimum sat at an edge of {1e-3, 3e-3, 1e-2} for 9 of 10
              # chosen lrs (issue 36 §1): one more step below brackets the transformers'
              "lrs": (3e-4, 1e-3, 3e-3, 1e-2)}
COPY_LARGE_LABELS = ("rope", "hard_alibi", "mamba", "mamba2", "lstm")
# Matched at ~1M parameters (+-10 % of the RoPE transformer; tests/test_large_level.py builds
# each and checks it). Depths keep the paper's ratios (App. A.2: 12 transformer layers, 24
# Mamba layers, 4 LSTM layers of width 1024) at a fifth of the depth where it divides; the
# transformers are the authors' GPT-NeoX as at medium (a quarter of each head rotated, parallel
# residual), 8 heads of 16 (Hard-ALiBi: M = 4 masked heads, the suite's default n_heads / 2);
# Mamba with the paper's state size N = 32.
_NEOX_LARGE = {"d_model": 128, "n_layers": 5, "n_heads": 8, "parallel_residual": True}
COPY_LARGE_MODEL = {
    "rope": ("transformer", {**_NEOX_LARGE, "pe": "rope", "rotary_frac": 0.25}),
    "hard_alibi": ("transformer", {**_NEOX_LARGE, "pe": "hard_alibi"}),
    "mamba": ("mamba", {"d_model": 128, "n_layers": 8, "d_state": 32}),
    "mamba2": ("mamba2", {"d_model": 144, "n_layers": 8}),
    "lstm": ("lstm", {"d_model": 176, "n_layers": 4}),
}
COPY_LARGE_PARAMS = 1_000_000  # the parameter count the models are matched at
# Batch 64 contexts (App. A.2's batch), a run stopped at 90 % string accuracy (Fig. 1a's
# threshold) or after 2,000 steps; warm-up 1.5 % of the cap as the paper's 300 of 20,000, then
# linear decay; evaluated every 50 steps on 8 x 64 strings spread over every length 1..L
# (models.train.evaluation scores each length, exactly L among them, and stop_at waits for
# every one): 512 strings keep ~17 at each length at L <= 30, where 128 left ~4.
COPY_LARGE_TRAIN = {"steps": 2000, "batch_size": 64, "context": 420, "warmup_steps": 30,
                    "schedule": "linear", "weight_decay": 0.1, "eval_every": 50,
                    "eval_batches": 8, "eval_batch_size": 64, "greedy_eval": False,
                    "stop_at": 0.9}
COPY_LARGE_SETTING = {
    "paper": "Fig. 1a / 9b's: parameter-matched models (~1M; paper ~160M), RoPE and Hard-ALiBi "
             "as the authors' GPT-NeoX, strings of random length 1..L over 26 letters packed "
             "in contexts of 420, L <= 10, 20, 30, each model at its best lr of a 4-lr sweep "
             "(seed 0), then 3 seeds at it",
    "not_matched": "L <= 30 (Fig. 1a: 300; Fig. 9b's L <= 30 matched); ~1M parameters (paper "
                   "~160M); a shared cap of 2,000 steps x 64 contexts (a GSSM that never got "
                   "there is a lower bound)",
}


def copy_large_name(label: str, length: int, seed: int, lr: float) -> str:
    return f"copy_large/{label}_L{length}_lr{lr:.0e}_s{seed}".replace("e-0", "e-")


def copy_large_recipes(labels: Iterable[str] | None = None,
                       seeds: Iterable[int] | None = None,
                       lrs: Iterable[float] | None = None) -> list[str]:
    """The large copy-efficiency recipes of ``labels`` (default: all) at every length; by
    default the lr sweep at the sweep seed (each model's best lr then trains at the other
    seeds: analyses.copy_efficiency)."""
    labels = checked_labels(labels, COPY_LARGE_LABELS, "large")
    seeds = list((COPY_LARGE["sweep_seed"],) if seeds is None else seeds)
    lrs = list(COPY_LARGE["lrs"] if lrs is None else lrs)
    for s in seeds:
        check(0 <= s < COPY_LARGE["seeds"], f"large copy seeds are 0..{COPY_LARGE['seeds'] - 1}"
              f", got {s}")
    for lr in lrs:
        check(lr in COPY_LARGE["lrs"], f"large copy lrs are {COPY_LARGE['lrs']}, got {lr:g}")
    return [copy_large_name(label, L, s, lr) for L in COPY_LARGE["lengths"] for label in labels
            for lr in lrs for s in seeds]


def _copy_large() -> Iterator[Recipe]:
    for L in COPY_LARGE["lengths"]:
        for label in COPY_LARGE_LABELS:
            arch, model = COPY_LARGE_MODEL[label]
            for lr in COPY_LARGE["lrs"]:
                for s in range(COPY_LARGE["seeds"]):
                    yield Recipe(copy_large_name(label, L, s, lr), "copy", arch,
                                 {"model": model, "task": {"D": 26, "min_len": 1, "max_len": L},
                                  "train": {**COPY_LARGE_TRAIN, "lr": lr, "seed": s}},
                                 levels=("large",),
                                 doc=f"{label} (~1M params) copying strings of length 1..{L}, "
                                     f"lr {lr:g}, seed {s} (copy paper Figs. 1a, 9b)")


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
                    yield Recipe(induction_large_name(label, L, lr, s), "induction", arch,
                                 {"model": model, "task": {"length": L},
                                  "train": {**INDUCTION_MEDIUM_TRAIN, "lr": lr, "seed": s}},
                                 levels=("large",),
                                 doc=f"{label} on induction heads at length {L}, lr {lr:g}, "
                                     f"seed {s}, trained to convergence (spectral paper Fig. 5)")


# Copy paper Fig. 6 at large: prefix-key lookup from random init in the paper's setting where
# medium could not match it: 26 letters (medium: 8), strings of 5..30 (the paper's <= 30;
# medium 5..20), packed in contexts of 420, tested to length 100 (analyses.ngram_lookup), the
# large copy models (~1M parameters; the paper's lookup models are its copy models). About 40x
# medium's training examples (1,000 steps x 4 contexts of ~12 examples there; 1,700 steps x 32
# contexts of ~9 longer examples here), warm-up then a linear decay to zero, no early stop.
# lr 1e-3 for every model: the ~1M models are wider than medium's, whose best lrs (1e-3 to
# 1e-2) were for ~100k parameters; the copy sweep at this level measures the same models'.
LOOKUP_LARGE = {"labels": ("hard_alibi", "mamba", "lstm"), "seeds": 2}
LOOKUP_LARGE_TASK = {"D": 26, "min_len": 5, "max_len": 30, "n": 3, "k": 1, "key": "prefix"}
LOOKUP_LARGE_TRAIN = {"steps": 1700, "batch_size": 32, "context": 420, "lr": 1e-3,
                      "warmup_steps": 50, "weight_decay": 0.1, "schedule": "linear",
                      "eval_every": 250, "eval_batches": 4, "greedy_eval": False,
                      "stop_at": 0.0}


def lookup_large_name(label: str, seed: int) -> str:
    return f"lookup_large_prefix/{label}_s{seed}"


def lookup_large_recipes(labels: Iterable[str] | None = None) -> list[str]:
    """The large prefix-lookup recipes of ``labels`` (default: all), every seed."""
    return [lookup_large_name(label, s)
            for label in checked_labels(labels, LOOKUP_LARGE["labels"], "large")
            for s in range(LOOKUP_LARGE["seeds"])]


def _lookup_large() -> Iterator[Recipe]:
    for label in LOOKUP_LARGE["labels"]:
        arch, model = COPY_LARGE_MODEL[label]
        for s in range(LOOKUP_LARGE["seeds"]):
            yield Recipe(lookup_large_name(label, s), "lookup", arch,
                         {"model": model, "task": LOOKUP_LARGE_TASK,
                          "train": {**LOOKUP_LARGE_TRAIN, "seed": s}},
                         levels=("large",),
                         doc=f"{label} (~1M params), prefix-key n-gram lookup from random init, "
                             f"seed {s} (copy paper Fig. 6)")


# Markov paper Table 2 (App. E.5) at large: Table 7 in full where medium cut it — 10,000
# steps, sequences of 512, batch 64 — at every d = N of {8, 16, 32} (Table 7's grid; medium
# had 16 only), 5 seeds; the authors' model and optimiser as at medium (MARKOV_HOLDOUT_MEDIUM).
# Warm-up 2 % as medium's. Batch 16 (``_b16`` recipes; ``analyses.markov_holdout --train large
# --cpu-batch``) is the fallback for a machine without a GPU: Table 7's smallest batch, every
# other setting kept (issue 36 §2).
MARKOV_HOLDOUT_LARGE = {"seeds": (0, 1, 2, 3, 4), "widths": (8, 16, 32), "cpu_batch": 16,
                        "task": {"seq_len": 512},
                        "train": {"steps": 10000, "batch_size": 64, "warmup_steps": 200,
                                  "eval_every": 2500}}


def markov_holdout_large_name(width: int, seed: int, cpu_batch: bool = False) -> str:
    batch = f"_b{MARKOV_HOLDOUT_LARGE['cpu_batch']}" if cpu_batch else ""
    return f"markov_holdout_large/mamba2_d{width}{batch}_s{seed}"


def markov_holdout_large_recipes(widths: Iterable[int] | None = None,
                                 cpu_batch: bool = False) -> list[str]:
    """The large hold-out runs of ``widths`` (default: all), every seed; ``cpu_batch``: the
    batch-16 fallback for a machine without a GPU."""
    widths = list(widths or MARKOV_HOLDOUT_LARGE["widths"])
    check(all(w in MARKOV_HOLDOUT_LARGE["widths"] for w in widths),
          f"the large Markov hold-out widths are {MARKOV_HOLDOUT_LARGE['widths']}, got {widths}")
    return [markov_holdout_large_name(w, s, cpu_batch) for w in widths
            for s in MARKOV_HOLDOUT_LARGE["seeds"]]


def _markov_holdout_large() -> Iterator[Recipe]:
    rows = _markov_rows("quick", ("model", "task", "train"))
    large = MARKOV_HOLDOUT_LARGE
    for cpu in (False, True):
        batch = {"batch_size": large["cpu_batch"]} if cpu else {}
        for w in large["widths"]:
            for s in large["seeds"]:
                yield Recipe(
                    markov_holdout_large_name(w, s, cpu), "markov_holdout", "mamba2",
                    {"task": {"p_lo": 0.0, "p_hi": 0.5}},
                    {"large": {
                        # d = N (Table 7 ties them), MLP 4d as the preset row
                        "model": {**rows["model"], **MARKOV_HOLDOUT_MEDIUM["model"],
                                  "d_model": w, "d_state": w, "d_mlp": 4 * w},
                        "task": {**rows["task"], **large["task"]},
                        "train": {**rows["train"], **MARKOV_HOLDOUT_MEDIUM["train"],
                                  **large["train"], **batch, "seed": s}}},
                    levels=("large",),
                    doc=f"the Markov paper's Mamba-2, d = N = {w}, trained on P(1|·) in [0, 0.5] "
                        f"with Table 7's full budget{' at batch 16 (CPU)' if cpu else ''}, "
                        f"seed {s} (App. E.5)")
# ---- end large


def build_recipes() -> dict[str, Recipe]:
    """Every recipe by name, in the order ``python -m analyses.zoo --list`` shows them."""
    recipes: dict[str, Recipe] = {}
    for r in (*_copy(), *_copy_export(), *_copy_medium(), *_lookup(), *_lookup_medium(),
              *MARKOV_RECIPES, *_markov_variants(), *_markov_holdout_medium(), *MAMBAZERO_RECIPES,
              *_ablations(), *_induction(), *_induction_medium(), *_copy_large(),
              *_induction_large(), *_lookup_large(), *_markov_holdout_large()):
        check(r.name not in recipes, f"recipe {r.name} defined twice")
        recipes[r.name] = r
    return recipes


RECIPES: dict[str, Recipe] = build_recipes()
