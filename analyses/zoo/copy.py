"""The copy paper's settings and recipes (Jelassi et al., "Repeat After Me"): its level rows
(:data:`TABLE`), the copy models at every level, their HF-export twins, and the n-gram lookup
models (suffix and prefix keys)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from analyses.zoo.recipe import Recipe, checked_labels
from models.levels import LevelTable
from seqprobe.config import check
from seqprobe.flags import (
    MAX_BATCH,
    MAX_DIM,
    MAX_ENTRIES,
    MAX_EXAMPLES,
    MAX_LENGTH,
    MAX_N,
    Config,
    bound,
)

# The level rows of the copy and lookup tasks: every recipe below starts from them. Why each
# setting was chosen is said beside it; what its runs give is in the reproduce index.
_PAPER_COPY_MODELS = {
    # Paper App. A.2: GPT-NeoX, 12 layers, hidden 1024, 16 heads, M = 6 masked heads.
    "transformer": {"model": {"d_model": 1024, "n_layers": 12, "n_heads": 16,
                              "hard_alibi_heads": 6}},
    # App. A.2: Mamba 24 layers, hidden 1024, state size 32. The Mamba trains with checkpointed
    # blocks (TrainConfig.checkpoint_blocks; its scan="auto" takes the chunked scan at this
    # size): without mamba-ssm's kernels, 24 layers of activations at 420 positions would not
    # fit one 80 GB card at batch 64. Memory settings change no number and no cache key.
    "mamba": {"model": {"d_model": 1024, "n_layers": 24, "d_state": 32},
              "train": {"checkpoint_blocks": True}},
    # The copy paper trains no Mamba-2; sized as its Mamba (24 layers, d 1024, N 32) with
    # heads of 64 channels (mamba-ssm's Mamba-2 default headdim), so Fig. 1a's GSSM side has
    # both generations at the paper's scale.
    "mamba2": {"model": {"d_model": 1024, "n_layers": 24, "d_state": 32, "n_heads": 32},
               "train": {"checkpoint_blocks": True}},
    # App. A.2: LSTM 4 layers, 1024.
    "lstm": {"model": {"d_model": 1024, "n_layers": 4}},
}
TABLE = LevelTable.of({
    # Quick: strings of length <= 20, a 2-layer model. lr 3e-3, not the paper's 5e-5 (tuned
    # for a 12-layer model): the small model learns far faster with it. 3000 steps, not 1500:
    # the n-gram match heads (analyses.ngram_heads) form only in the second half, and they are
    # what copies beyond the training length. The in-training eval is teacher forced
    # (``greedy_eval`` False): the same string accuracy as greedy decoding at one pass instead
    # of one per answer token, so an eval every 100 steps (the resolution of
    # analyses.copy_efficiency) stays cheap.
    ("quick", "copy", "*"): {
        "task": {"min_len": 1, "max_len": 20},
        "train": {"steps": 3000, "batch_size": 32, "lr": 3e-3, "warmup_steps": 200,
                  "weight_decay": 0.1, "schedule": "linear", "eval_every": 100,
                  "greedy_eval": False},
    },
    ("quick", "copy", "transformer"): {
        "model": {"d_model": 128, "n_layers": 2, "n_heads": 8},  # Hard-ALiBi: M = 4 masked heads
    },
    # Quick GSSMs learn copying far more slowly than the transformers at this budget (the
    # copy paper's Fig. 1a contrast; analyses.copy_efficiency measures it).
    ("quick", "copy", "mamba"): {"model": {"d_model": 64, "n_layers": 2, "d_state": 16}},
    ("quick", "copy", "lstm"): {"model": {"d_model": 256, "n_layers": 2}},
    # Paper App. A.2: AdamW lr 5e-5, linear decay, 300 warm-up steps, weight decay 0.1, batch
    # 64. Context C = 620 for Fig. 1a (strings <= 300: 602-token examples), C = 420 elsewhere
    # (Fig. 1b: strings <= 50; length_generalization sets it).
    ("paper", "copy", "*"): {
        "task": {"min_len": 1, "max_len": 300},
        "train": {"context": 620, "lr": 5e-5, "warmup_steps": 300, "weight_decay": 0.1,
                  "schedule": "linear", "batch_size": 64, "steps": 20000, "eval_every": 1000},
    },
    **{("paper", "copy", arch): row for arch, row in _PAPER_COPY_MODELS.items()},
    # Copy paper §3.3 (Figs. 5, 6): the lookup models are the copy models (the same rows; tests
    # check it); at quick they are fine-tuned from the quick copy checkpoints (below), at paper
    # trained from scratch.
    **{("paper", "lookup", arch): row for arch, row in _PAPER_COPY_MODELS.items()},
})



def _recipe(*args, **kwargs) -> Recipe:
    """A recipe of this paper: on top of its :data:`TABLE`."""
    return Recipe(*args, table=TABLE, **kwargs)


# Copy paper (Jelassi et al.). Quick: strings <= 20 (TABLE). Paper: Fig. 1b's
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
# The quick Hard-ALiBi keeps the level's 3000 steps: its n-gram match heads, which
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
        yield _recipe(f"copy/{label}", "copy", arch, {"model": model},
                     {"quick": COPY_QUICK_BY_LABEL.get(label, COPY_QUICK), "paper": COPY_PAPER},
                     doc=f"{label} trained to copy (copy paper §3, Figs. 1a-b)")


# A Mamba-2 copy model that models.hf.export accepts with an MLP: the gated MLP with the mixer's
# own SiLU is exactly HF's BambaForCausalLM block (the quick Markov Mamba-2's ReLU MLP is
# refused). The mixer is copy/mamba2's (the level's d 32, one layer, N = 16) and the MLP is
# 2·d wide, so the two compare at the quick level as one model with and without the MLP, at
# about copy/mamba2's training cost.
COPY_MAMBA2_EXPORT = {"d_mlp": 64, "mlp_act": "silu"}


def _copy_export() -> Iterator[Recipe]:
    yield _recipe("copy/mamba2_mlp", "copy", "mamba2", {"model": COPY_MAMBA2_EXPORT},
                 {"quick": COPY_QUICK}, levels=("quick",),
                 doc="Mamba-2 with a gated SiLU MLP trained to copy; exports as Bamba")


# ---- medium: copy efficiency (every model at its own best lr)
# Copy paper §3.2, Fig. 1a (and 9b) as numbers (analyses.copy_efficiency --level medium): samples to
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
# - each model trained at every lr of COPY_MEDIUM["lrs"] (AdamW, the quick level's warm-up,
#   linear decay and weight decay: the authors' optimiser), the analysis credits each model
#   and L with its best lr (most seeds at 90 %, then lowest median samples).
# - scored at exactly L, as Fig. 1a's caption says (the trainer's evaluation scores every
#   length of 1..L; string_acc_at[L]), with the score over the training distribution (the
#   paper's §3.1 wording) beside it.
# Not matched: L <= 10, not 300; ~100k parameters, not 160M; the step cap is short, so a run
# that does not get there is censored: its samples a lower bound (analyses.copy_efficiency.regime).
# The claims are decided where the paper's trend predicts a clear gap. Its trend (gap
# proportional to L: Mamba ~10x at L <= 30) puts Mamba's gap at or below 2x for L <= 6, so the
# lengths run to 10: L = 4 and 6 show where the gap is absent, 8 and 10 where the trend predicts
# it, and the four lengths give each seed a slope of log ratio on log L ("the gap grows").
# Longer strings do not fit the level: at L = 12 and 20 the transformer's samples to 90 % at
# exactly L come near or past the step cap, so a GSSM's censored ratio would bound nothing, and
# a cap long enough costs more than the level's copy budget for the Mamba alone (the costs:
# the pilot's report). L = 8 and 10 get twice the cap (COPY_MEDIUM_LONG_TRAIN) so
# that the reference gets there and a GSSM that does not is bounded away from 1; the linear
# decay spans the cap, so their schedule is longer too, alike for every model of a length.
# The models are the paper's GSSMs (Mamba, LSTM; Mamba-2 is not in the paper) against RoPE, the
# reference transformer of the earlier medium runs at both lengths; Hard-ALiBi and Mamba-2 keep
# their recipes (--models trains them) but are left out of the level's plan to fit its budget.
# Seeds: the verdict's seeds (COPY_MEDIUM["seeds"]) are not those the lrs were chosen on
# (COPY_MEDIUM["sweep_seeds"]: tuned on other seeds). Their count is the design's in
# analyses.copy_efficiency.regime (a stated prior: the paper's trend as the effect and a prior
# spread, at the alpha of Holm's most stringent step): the most any row of either claim asks
# for at these lengths; each claim's text prints the count beside its tests.
COPY_MEDIUM = {"lengths": (4, 6, 8, 10), "labels": ("rope", "mamba", "lstm"),
               "seeds": (3, 4, 5, 6, 7), "sweep_seeds": (0, 1, 2), "swept_lengths": (4, 6),
               "lrs": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)}
# Each model's lr at each swept L, chosen by the sweep on the sweep seeds (every lr of the grid
# at every sweep seed, the analysis' best_lr rule; `python -m analyses.copy_efficiency --train
# medium --sweep` runs it again). A length beyond the swept ones takes the model's lr at the
# longest swept length: a rule fixed before any run at that length, the same for every model
# (a sweep there would cost several times the level's budget for the Mamba alone).
# COPY_MEDIUM_LR_GRID: the grid each entry was chosen on — the wide grid of COPY_MEDIUM["lrs"],
# except Mamba-2 and the LSTM at L = 6, chosen on the earlier grid {1e-3, 3e-3, 1e-2} extended by
# 3e-2 (their wide sweep's low end was not run); the analysis flags an entry at an end of its
# grid (lr_edge).
_WIDE, _EXTENDED = COPY_MEDIUM["lrs"], (1e-3, 3e-3, 1e-2, 3e-2)
_SWEPT_LR = {4: {"rope": 1e-3, "hard_alibi": 3e-3, "mamba": 1e-2, "mamba2": 3e-3, "lstm": 1e-2},
             6: {"rope": 3e-3, "hard_alibi": 1e-3, "mamba": 1e-2, "mamba2": 1e-2, "lstm": 1e-2}}
_SWEPT_GRID = {4: dict.fromkeys(("rope", "hard_alibi", "mamba", "mamba2", "lstm"), _WIDE),
               6: {"rope": _WIDE, "hard_alibi": _WIDE, "mamba": _WIDE, "mamba2": _EXTENDED,
                   "lstm": _EXTENDED}}
_LONGEST_SWEPT = max(COPY_MEDIUM["swept_lengths"])
COPY_MEDIUM_LR = {L: dict(_SWEPT_LR.get(L, _SWEPT_LR[_LONGEST_SWEPT]))
                  for L in COPY_MEDIUM["lengths"]}
COPY_MEDIUM_LR_GRID = {L: dict(_SWEPT_GRID.get(L, _SWEPT_GRID[_LONGEST_SWEPT]))
                       for L in COPY_MEDIUM["lengths"]}
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
COPY_MEDIUM_LONG_TRAIN = {8: {"steps": 2400}, 10: {"steps": 2400}}  # see COPY_MEDIUM
COPY_MEDIUM_SETTING = {
    "paper": "Fig. 1a's, CPU-sized: parameter-matched models (89k-109k; paper ~160M), RoPE "
             "as the authors' GPT-NeoX (rotary 0.25, parallel residual) against Mamba and the "
             "LSTM, strings of random length 1..L scored at exactly L (Fig. 1a's caption; the "
             "training distribution's score beside it), each model at its lr chosen on seeds "
             "that are not the verdict's",
    "not_matched": "L <= 10 (paper 300; Fig. 9b 30); a cap of 1,200 steps × 32 at L <= 6, "
                   "2,400 at L = 8, 10 (a run that never got there is censored: its samples a "
                   "lower bound)",
}


def copy_medium_name(label: str, length: int, seed: int, lr: float) -> str:
    return f"copy_medium/{label}_L{length}_lr{lr:.0e}_s{seed}".replace("e-0", "e-")


def copy_medium_recipes(labels: Iterable[str] | None = None, sweep: bool = False) -> list[str]:
    """The medium copy-efficiency recipes of ``labels`` (default: the level's plan,
    ``COPY_MEDIUM["labels"]``): every length at the verdict's seeds at each model's chosen lr
    (:data:`COPY_MEDIUM_LR`), or, with ``sweep``, every lr of the grid at the sweep seeds at
    the swept lengths (the runs that chose those lrs)."""
    labels = checked_labels(labels if labels is not None else COPY_MEDIUM["labels"],
                            COPY_MEDIUM_LABELS, "medium")
    if sweep:
        return [copy_medium_name(label, L, s, lr) for L in COPY_MEDIUM["swept_lengths"]
                for label in labels for lr in COPY_MEDIUM["lrs"]
                for s in COPY_MEDIUM["sweep_seeds"]]
    return [copy_medium_name(label, L, s, COPY_MEDIUM_LR[L][label])
            for L in COPY_MEDIUM["lengths"] for label in labels for s in COPY_MEDIUM["seeds"]]


_MEDIUM_SEEDS = range(max(*COPY_MEDIUM["seeds"], *COPY_MEDIUM["sweep_seeds"]) + 1)


def _copy_medium() -> Iterator[Recipe]:
    for L in COPY_MEDIUM["lengths"]:
        for label in COPY_MEDIUM_LABELS:
            arch, model = COPY_MEDIUM_MODEL[label]
            for lr in COPY_MEDIUM["lrs"]:
                for s in _MEDIUM_SEEDS:
                    yield _recipe(copy_medium_name(label, L, s, lr), "copy", arch,
                                 {"model": model, "task": {"min_len": 1, "max_len": L},
                                  "train": {**COPY_MEDIUM_TRAIN,
                                            **COPY_MEDIUM_LONG_TRAIN.get(L, {}),
                                            "lr": lr, "seed": s}},
                                 levels=("medium",),
                                 doc=f"{label} copying strings of length 1..{L}, lr {lr:g}, "
                                     f"seed {s} (copy paper Fig. 1a)")

# ---- end medium: copy efficiency

# n-gram lookup (copy paper §3.3, Figs. 5-6). Quick fine-tunes each copy checkpoint (its
# n-gram match head is the lookup the task asks for; from random init neither the transformer
# nor the LSTM learns lookup at this budget). Paper: from scratch with the paper's settings.
# lookup_scratch_*: from random init at both levels (at paper the same run as lookup_*), to
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
                yield _recipe(f"{stem}_{key}/{label}", "lookup", arch,
                             {"model": model, "task": {**LOOKUP_TASK, "key": key}},
                             {"quick": {"train": LOOKUP_QUICK_TRAIN},
                              "paper": {"train": LOOKUP_PAPER_TRAIN}},
                             init_from=init,
                             doc=f"{label}, {key}-key n-gram lookup (copy paper Figs. 5-6)"
                                 + ("" if init else ", from random init"))


# ---- medium: prefix lookup
# Copy paper §3.5, Fig. 6 as numbers (analyses.ngram_lookup --level medium): prefix-key lookup from
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
# budget for this figure.
LOOKUP_MEDIUM = {"labels": ("hard_alibi", "mamba", "lstm"), "seeds": 2}
LOOKUP_MEDIUM_TASK = {"D": 8, "min_len": 5, "max_len": 20, "n": 3, "k": 1, "key": "prefix"}
LOOKUP_MEDIUM_TRAIN = {"steps": 1000, "batch_size": 4, "context": 420, "lr": 3e-3,
                       "warmup_steps": 50, "weight_decay": 0.1, "schedule": "linear",
                       "eval_every": 250, "eval_batches": 4, "greedy_eval": False}
LOOKUP_MEDIUM_BY_LABEL = {"hard_alibi": {"model": {"n_layers": 3}, "train": {"lr": 1e-3}},
                          "mamba": {"train": {"lr": 1e-2}}}


def lookup_medium_name(label: str, seed: int) -> str:
    return f"lookup_medium_prefix/{label}_s{seed}"




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
            yield _recipe(lookup_medium_name(label, s), "lookup", arch,
                         {"model": {**TABLE.rows("quick", "copy", arch)["model"], **model,
                                    **extra.get("model", {})},
                          "task": LOOKUP_MEDIUM_TASK,
                          "train": {**LOOKUP_MEDIUM_TRAIN, **extra.get("train", {}), "seed": s}},
                         levels=("medium",),
                         doc=f"{label}, prefix-key n-gram lookup from random init, seed {s} "
                             "(copy paper Fig. 6)")


# ---- end medium: prefix lookup


# ---- large: the smallest settings that decide each headline claim, for one
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
              # chosen lrs: one more step below brackets the transformers'
              "lrs": (3e-4, 1e-3, 3e-3, 1e-2)}
COPY_LARGE_LABELS = ("rope", "hard_alibi", "mamba", "mamba2", "lstm")
# Matched at ~1M parameters (+-10 % of the RoPE transformer; tests/integration/test_large_level.py builds
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
                    yield _recipe(copy_large_name(label, L, s, lr), "copy", arch,
                                 {"model": model, "task": {"D": 26, "min_len": 1, "max_len": L},
                                  "train": {**COPY_LARGE_TRAIN, "lr": lr, "seed": s}},
                                 levels=("large",),
                                 doc=f"{label} (~1M params) copying strings of length 1..{L}, "
                                     f"lr {lr:g}, seed {s} (copy paper Figs. 1a, 9b)")


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
            yield _recipe(lookup_large_name(label, s), "lookup", arch,
                         {"model": model, "task": LOOKUP_LARGE_TASK,
                          "train": {**LOOKUP_LARGE_TRAIN, "seed": s}},
                         levels=("large",),
                         doc=f"{label} (~1M params), prefix-key n-gram lookup from random init, "
                             f"seed {s} (copy paper Fig. 6)")


def recipes() -> Iterator[Recipe]:
    """This paper's recipes, in the order ``python -m analyses.zoo --list`` shows them."""
    yield from _copy()
    yield from _copy_export()
    yield from _copy_medium()
    yield from _lookup()
    yield from _lookup_medium()
    yield from _copy_large()
    yield from _lookup_large()



# ---------------------------------------------------------------------------- analyses' levels
# What each of the paper's analyses measures at a level, beside the rows its models train at:
# one settings class per analysis, each numeric field declared once with its bound (the flag
# that overrides it is made from the field: seqprobe.cli.add_fields).
LENGTHS = "tokens per string"
PER_POINT = "examples per point; papers: up to 1,280"


@dataclass(frozen=True)
class CopyBoundsSettings(Config):
    """analyses.copy_bounds at a level. Construction (part 1): ``n_values`` n-gram lengths ×
    ``lengths`` string lengths, p_n-gram counted on ``count_samples`` uniform strings,
    ``model_samples`` strings per stratum run through it. Checkpoints (part 2):
    ``gssm_samples`` strings at each of ``gssm_lengths``; ``gssm_archs``, the GSSMs that
    ``--train`` trains (``--archs`` picks others); ``D``, the construction's alphabet (the
    checkpoints' must match it)."""

    n_values: tuple[int, ...] = field(metadata=bound(
        1, MAX_N, "n of an n-gram; papers: up to 10", flag="--n",
        help="n-gram lengths of the construction"))
    lengths: tuple[int, ...] = field(metadata=bound(
        1, MAX_LENGTH, LENGTHS, help="string lengths of the construction"))
    count_samples: int = field(metadata=bound(
        1, MAX_EXAMPLES, "samples per point", help="uniform strings counted for p_n-gram"))
    model_samples: int = field(metadata=bound(
        1, MAX_EXAMPLES, "samples per point",
        help="strings per stratum run through the construction"))
    gssm_lengths: tuple[int, ...] = field(metadata=bound(
        1, MAX_LENGTH, LENGTHS, help="string lengths each GSSM checkpoint copies"))
    gssm_samples: int = field(metadata=bound(
        1, MAX_EXAMPLES, "samples per point", help="strings per length of each checkpoint"))
    gssm_archs: tuple[str, ...] = ()
    D: int = field(default=26, metadata=bound(
        2, MAX_DIM, "the alphabet", help="alphabet size of the construction part"))


COPY_BOUNDS_LEVELS: dict[str, CopyBoundsSettings] = {
    # quick: CPU-sized estimates; paper: tighter estimates and longer strings (GPU). Quick
    # measures the LSTM only: the quick Mamba does not learn to copy at CPU budgets and its
    # reference scan is slow; ``--archs mamba,lstm`` adds it.
    "quick": CopyBoundsSettings(
        n_values=(3, 4, 5), lengths=(20, 50, 100, 200, 500, 1000), count_samples=4000,
        model_samples=16, gssm_lengths=(10, 20, 40, 80, 160), gssm_samples=64,
        gssm_archs=("lstm",)),
    "paper": CopyBoundsSettings(
        n_values=(3, 4, 5, 6), lengths=(20, 50, 100, 200, 500, 1000, 2000),
        count_samples=100_000, model_samples=128, gssm_lengths=(10, 20, 50, 100, 200, 500, 1000),
        gssm_samples=640, gssm_archs=("mamba", "lstm")),
}


@dataclass(frozen=True)
class LengthGeneralizationSettings(Config):
    """analyses.length_generalization at a level (which models: analyses.copy_models'
    COPY_LABELS): ``n_examples`` uniform strings at each of the test ``lengths``."""

    lengths: tuple[int, ...] = field(metadata=bound(1, MAX_LENGTH, LENGTHS,
                                                    help="test lengths"))
    n_examples: int = field(metadata=bound(1, MAX_EXAMPLES, PER_POINT,
                                           help="strings per length"))


LENGTH_GENERALIZATION_LEVELS: dict[str, LengthGeneralizationSettings] = {
    "quick": LengthGeneralizationSettings(lengths=(5, 10, 20, 30, 40, 60, 80, 120, 160),
                                          n_examples=128),
    # Fig. 1b: trained on strings of length <= 50 (context 420), tested up to 1000
    "paper": LengthGeneralizationSettings(lengths=(10, 20, 50, 100, 200, 300, 500, 750, 1000),
                                          n_examples=1280),
}


@dataclass(frozen=True)
class NgramLookupSettings(Config):
    """analyses.ngram_lookup at a level: ``labels``, the lookup models that ``--train``
    trains (``--models`` picks others); ``lengths``, the test string lengths; ``n_examples``
    strings per length."""

    labels: tuple[str, ...]
    lengths: tuple[int, ...] = field(metadata=bound(1, MAX_LENGTH, LENGTHS,
                                                    help="test lengths"))
    n_examples: int = field(metadata=bound(1, MAX_EXAMPLES, PER_POINT,
                                           help="examples per length"))


NGRAM_LOOKUP_LEVELS: dict[str, NgramLookupSettings] = {
    "quick": NgramLookupSettings(labels=("hard_alibi", "lstm"),
                                 lengths=(10, 20, 30, 40, 60, 80, 100), n_examples=256),
    # prefix key only, from random init; the labels and seeds are LOOKUP_MEDIUM's
    "medium": NgramLookupSettings(labels=tuple(LOOKUP_MEDIUM["labels"]),
                                  lengths=(5, 10, 20, 25, 30, 40, 60, 100), n_examples=256),
    # large: the same, in the paper's setting (26 letters, strings 5..30), tested to 100
    # (Fig. 6's axis); LOOKUP_LARGE's labels and seeds
    "large": NgramLookupSettings(labels=tuple(LOOKUP_LARGE["labels"]),
                                 lengths=(5, 10, 20, 30, 40, 60, 80, 100), n_examples=256),
    "paper": NgramLookupSettings(labels=("hard_alibi", "nope", "alibi", "rope", "mamba", "lstm"),
                                 lengths=(10, 20, 30, 50, 75, 100, 150), n_examples=1280),
}


@dataclass(frozen=True)
class PretrainedCopySettings(Config):
    """analyses.pretrained_copy at a level: phone books of each of ``entries`` entries, copy
    windows of each of ``lengths`` tokens, ``n_examples`` prompts per point, ``batch_size``
    of them per forward pass."""

    entries: tuple[int, ...] = field(metadata=bound(
        3, MAX_ENTRIES, "phone books need >= 3 entries: two shots and the query",
        help="phone-book sizes L"))
    lengths: tuple[int, ...] = field(metadata=bound(1, MAX_LENGTH, LENGTHS,
                                                    help="copy lengths in tokens"))
    n_examples: int = field(metadata=bound(1, MAX_EXAMPLES, PER_POINT,
                                           help="prompts per point"))
    batch_size: int = field(default=4, metadata=bound(
        1, MAX_BATCH, "rows per forward pass; defaults: 4 to 512",
        help="prompts per forward pass"))


PRETRAINED_COPY_LEVELS: dict[str, PretrainedCopySettings] = {
    # entries up to 70, where §4.3 says Pythia-410m beats every Mamba; copy up to 100 tokens
    "quick": PretrainedCopySettings(entries=(5, 20, 70), lengths=(10, 50, 100), n_examples=20),
    # 640 prompts per point (§4.1); books past L = 70 and texts up to 300 tokens (§4.2/4.3)
    "paper": PretrainedCopySettings(entries=(10, 20, 40, 70, 100, 140),
                                    lengths=(25, 50, 100, 200, 300), n_examples=640),
}
