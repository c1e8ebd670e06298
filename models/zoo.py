"""The checkpoint zoo: every trained model an analysis uses, as a named recipe.

A recipe is (task, arch, model / task / training overrides for each preset, and optionally
another recipe whose checkpoint starts it). :func:`checkpoint` serves a recipe through the one
locked, hashed cache of :mod:`models.train.cache`: trained once, reused by every analysis and
by ``python -m analyses.reproduce``, which trains what its plan needs from here.

    python -m models.zoo --list [--medium | --paper] [--cache-dir DIR]  # cached or not
    python -m models.zoo train copy/hard_alibi markov/mamba2 [--paper] [--cache-dir DIR]
    python -m models.zoo train induction/stu_L16_s0 induction/stu_L16_s1 --ray [ADDRESS]

Why a setting was chosen is said beside it; what a run of it measured is in the reproduce index.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from models.cli import OneLineParser, add_device_argument, add_scale_arguments, run_cli
from models.device import resolve_device
from models.sweep import (
    EXIT_SOME_FAILED,
    Backend,
    Failed,
    add_backend_arguments,
    backend_of,
    map_tasks,
)
from models.train.cache import (
    cache_path,
    check_cache_dir,
    entry_state,
    is_cached,
    train_spec_cached,
)
from models.train.presets import NAMES as PRESETS
from models.train.presets import preset_overrides
from models.train.spec import RunSpec, make_spec
from tasks.base import TaskError, check

OPT_IN = ("medium",)  # presets a recipe is in only where its by_preset names them
Parts = Mapping[str, Mapping[str, Any]]  # {"model": {...}, "task": {...}, "train": {...}}


def _frozen(parts: Mapping | None) -> Parts:
    parts = parts or {}
    check(set(parts) <= {"model", "task", "train"},
          f"recipe overrides take model / task / train, got {sorted(parts)}")
    return MappingProxyType({k: MappingProxyType(dict(parts.get(k, {})))
                             for k in ("model", "task", "train")})


@dataclass(frozen=True)
class Recipe:
    """One named checkpoint: ``task`` × ``arch`` with overrides on top of the preset rows of
    :mod:`models.train.presets`. ``by_preset[p]`` adds to (or ``None`` leaves out) preset p; a
    recipe is in an :data:`OPT_IN` preset (``medium``) only where ``by_preset`` names it;
    ``init_from`` names the recipe whose checkpoint starts this one (fine-tuning); ``slots``
    is how many cores its training keeps busy (the reproduce scheduler reads it)."""

    name: str
    task: str
    arch: str
    common: Parts = field(default_factory=dict)
    by_preset: Mapping[str, Parts | None] = field(default_factory=dict)
    init_from: Mapping[str, str] = field(default_factory=dict)  # preset -> recipe name
    slots: int = 1
    doc: str = ""

    def __post_init__(self):
        object.__setattr__(self, "common", _frozen(self.common))
        object.__setattr__(self, "by_preset", MappingProxyType(
            {p: (None if v is None else _frozen(v)) for p, v in self.by_preset.items()}))
        object.__setattr__(self, "init_from", MappingProxyType(dict(self.init_from)))

    def available(self, preset: str) -> bool:
        if preset in OPT_IN and preset not in self.by_preset:
            return False
        return self.by_preset.get(preset, {}) is not None

    def parts(self, preset: str) -> dict[str, dict[str, Any]]:
        check(preset in PRESETS, f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
        check(self.available(preset), f"recipe {self.name} has no {preset} version")
        extra = self.by_preset.get(preset) or _frozen({})
        return {k: {**self.common[k], **extra[k]} for k in ("model", "task", "train")}


# ---------------------------------------------------------------------------- the table
RECIPES: dict[str, Recipe] = {}


def _add(*recipes: Recipe) -> None:
    for r in recipes:
        check(r.name not in RECIPES, f"recipe {r.name} defined twice")
        RECIPES[r.name] = r


# Copy paper (Jelassi et al.). Quick: strings <= 20 (models.train.presets). Paper: Fig. 1b's
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
COPY_QUICK_STEPS = {"hard_alibi": None}
for _label, (_arch, _model) in COPY_MODELS.items():
    _steps = COPY_QUICK_STEPS.get(_label, 1500)
    _add(Recipe(f"copy/{_label}", "copy", _arch, {"model": _model},
                {"quick": {"train": {"steps": _steps}} if _steps else {}, "paper": COPY_PAPER},
                slots=2, doc=f"{_label} trained to copy (copy paper §3, Figs. 1a-b)"))

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
# Not matched: the evaluation is the trainer's, on fresh strings of the training distribution
# (the paper's §3.1 wording; Fig. 1a's caption evaluates at length L, which needs an eval-length
# option the copy task does not have); L <= 6, not 300; ~100k parameters, not 160M; the
# shared step cap is short, so a GSSM that does not get there counts as a lower bound.
# Lengths, seeds, cap and eval spacing are what fits 1800 core-seconds of training on a CPU.
COPY_MEDIUM = {"lengths": (4, 6), "seeds": 3, "lrs": (1e-3, 3e-3, 1e-2)}
COPY_MEDIUM_LABELS = ("rope", "hard_alibi", "mamba", "mamba2", "lstm")
_NEOX = {"d_model": 64, "n_layers": 2, "n_heads": 4, "parallel_residual": True}
COPY_MEDIUM_MODEL = {
    "rope": ("transformer", {**_NEOX, "pe": "rope", "rotary_frac": 0.25}),
    "hard_alibi": ("transformer", {**_NEOX, "pe": "hard_alibi"}),  # M = 2 of 4 heads
    "mamba": ("mamba", {"d_model": 80, "n_layers": 2, "d_state": 16}),
    "mamba2": ("mamba2", {"d_model": 84, "n_layers": 2}),
    "lstm": ("lstm", {"d_model": 80, "n_layers": 2}),
}
# Evaluated every 20 steps on 8 batches of 16 (each batch one length drawn from 1..L, so 8
# lengths; the same ones for every model of a seed: the seed pairs the runs).
COPY_MEDIUM_TRAIN = {"steps": 1200, "eval_every": 20, "eval_batches": 8, "eval_batch_size": 16,
                     "stop_at": 0.9}
COPY_MEDIUM_SETTING = {
    "paper": "Fig. 1a's, CPU-sized: parameter-matched models (89k-109k; paper ~160M), RoPE "
             "and Hard-ALiBi as the authors' GPT-NeoX (rotary 0.25, parallel residual), "
             "strings of random length 1..L, each model at its best lr",
    "not_matched": "L <= 6 (paper 300); accuracy on strings of the training distribution "
                   "(paper §3.1; Fig. 1a's caption: at length L); a shared cap of 1,200 steps × "
                   "32 (a GSSM that never got there is a lower bound)",
}


def copy_medium_name(label: str, length: int, seed: int, lr: float) -> str:
    return f"copy_medium/{label}_L{length}_lr{lr:.0e}_s{seed}".replace("e-0", "e-")


def copy_medium_recipes(labels: Iterable[str] | None = None) -> list[str]:
    """The medium copy-efficiency recipes of ``labels`` (default: all), every length, lr and
    seed."""
    labels = list(labels or COPY_MEDIUM_LABELS)
    for label in labels:
        check(label in COPY_MEDIUM_LABELS,
              f"unknown model {label!r}; allowed at medium: {', '.join(COPY_MEDIUM_LABELS)}")
    return [copy_medium_name(label, L, s, lr) for L in COPY_MEDIUM["lengths"] for label in labels
            for lr in COPY_MEDIUM["lrs"] for s in range(COPY_MEDIUM["seeds"])]


for _L in COPY_MEDIUM["lengths"]:
    for _label in COPY_MEDIUM_LABELS:
        _arch, _model = COPY_MEDIUM_MODEL[_label]
        for _lr in COPY_MEDIUM["lrs"]:
            for _s in range(COPY_MEDIUM["seeds"]):
                _add(Recipe(copy_medium_name(_label, _L, _s, _lr), "copy", _arch,
                            {"model": _model, "task": {"min_len": 1, "max_len": _L},
                             "train": {**COPY_MEDIUM_TRAIN, "lr": _lr, "seed": _s}},
                            {"quick": None, "medium": {}, "paper": None},
                            doc=f"{_label} copying strings of length 1..{_L}, lr {_lr:g}, seed "
                                f"{_s} (copy paper Fig. 1a)"))
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
for _key in ("suffix", "prefix"):
    for _label, (_arch, _model) in COPY_MODELS.items():
        for _stem, _init in (("lookup", {"quick": f"copy/{_label}"}), ("lookup_scratch", {})):
            _add(Recipe(f"{_stem}_{_key}/{_label}", "lookup", _arch,
                        {"model": _model, "task": {**LOOKUP_TASK, "key": _key}},
                        {"quick": {"train": LOOKUP_QUICK_TRAIN},
                         "paper": {"train": LOOKUP_PAPER_TRAIN}},
                        init_from=_init, slots=2,
                        doc=f"{_label}, {_key}-key n-gram lookup (copy paper Figs. 5-6)"
                            + ("" if _init else ", from random init")))

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


def lookup_medium_recipes(labels: Iterable[str] | None = None) -> list[str]:
    """The medium prefix-lookup recipes of ``labels`` (default: all), every seed."""
    labels = list(labels or LOOKUP_MEDIUM["labels"])
    for label in labels:
        check(label in LOOKUP_MEDIUM["labels"], f"unknown model {label!r}; allowed at medium: "
              f"{', '.join(LOOKUP_MEDIUM['labels'])}")
    return [lookup_medium_name(label, s) for label in labels
            for s in range(LOOKUP_MEDIUM["seeds"])]


for _label in LOOKUP_MEDIUM["labels"]:
    _arch, _model = COPY_MODELS[_label]
    _extra = LOOKUP_MEDIUM_BY_LABEL.get(_label, {})
    for _s in range(LOOKUP_MEDIUM["seeds"]):
        _add(Recipe(lookup_medium_name(_label, _s), "lookup", _arch,
                    {"model": {**preset_overrides("quick", "copy", _arch)["model"], **_model,
                               **_extra.get("model", {})},
                     "task": LOOKUP_MEDIUM_TASK,
                     "train": {**LOOKUP_MEDIUM_TRAIN, **_extra.get("train", {}), "seed": _s}},
                    {"quick": None, "medium": {}, "paper": None},
                    doc=f"{_label}, prefix-key n-gram lookup from random init, seed {_s} "
                        "(copy paper Fig. 6)"))
# ---- end medium: prefix lookup

# Markov chains (Bondaschi et al.): the preset rows of (markov, mamba2) are the paper's model.
MARKOV_TRANSFORMER = {"d_model": 32, "n_heads": 1, "pe": "rope"}
# the quick transformer baselines are several times slower a step than the Mamba-2: fewer
# steps keep markov_laplace's figure within its budget; their gap to add-β stays far larger
MARKOV_TF_QUICK = {"train": {"steps": 750}}
_add(
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


def _markov_rows(preset: str, parts: Iterable[str] = ("model", "train")) -> dict:
    """The (markov, mamba2) preset rows, for Markov variants that are other tasks."""
    rows = preset_overrides(preset, "markov", "mamba2")
    return {k: rows[k] for k in parts}


_add(
    # a_t must drop at a switch to forget the old kernel's counts: a larger step size than the
    # stationary chains' lets the quick run learn the reset (Markov paper Fig. 13)
    Recipe("switching_markov/mamba2", "switching_markov", "mamba2",
           {"task": {"p_switch": 0.01}},
           {"quick": {"model": _markov_rows("quick")["model"],
                      "train": {**_markov_rows("quick")["train"], "lr": 3e-3, "steps": 2000}},
            "paper": _markov_rows("paper")},
           doc="Mamba-2 on switching Markov data (Markov paper Figs. 4, 13)"),
    Recipe("markov_holdout/mamba2", "markov_holdout", "mamba2", {"task": {"p_lo": 0.0,
                                                                         "p_hi": 0.5}},
           {p: _markov_rows(p, ("model", "task", "train")) for p in ("quick", "paper")},
           doc="Mamba-2 trained on P(1|·) in [0, 0.5] (Markov paper App. E.5)"),
)

# ---- medium: markov holdout (issues 21, 27)
# App. E.5 / Table 2 at medium (analyses.markov_holdout --medium), in the paper's setting: the
# model the authors ran (models.mamba2.MARKOV_PAPER_MODEL: bias-free LayerNorm, LN(y) ⊙ act(z),
# no D, gated SiLU MLP, their init) at the quick sizes (d = N = 16, e = 2, w = 4, MLP 4d, one
# layer, one head — all inside Table 7's grid), and Table 7's optimiser (AdamW 0.9 / 0.95,
# lr 1e-3, cosine, weight decay 1e-3; 2 % warm-up as the authors' OneCycleLR). Sequences of 512
# (Table 7's grid) so that Table 2's t = 300 is inside the training length; batch 16 (the
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


for _s, _name in zip(MARKOV_HOLDOUT_MEDIUM["seeds"], markov_holdout_medium_recipes(),
                     strict=True):
    _rows = _markov_rows("quick", ("model", "task", "train"))
    _add(Recipe(_name, "markov_holdout", "mamba2",
                {"task": {"p_lo": 0.0, "p_hi": 0.5}},
                {"quick": None, "paper": None,
                 "medium": {"model": {**_rows["model"], **MARKOV_HOLDOUT_MEDIUM["model"]},
                            "task": {**_rows["task"], **MARKOV_HOLDOUT_MEDIUM["task"]},
                            "train": {**_rows["train"], **MARKOV_HOLDOUT_MEDIUM["train"],
                                      "seed": _s}}},
                doc=f"the Markov paper's Mamba-2 (the authors' layers and init) trained on "
                    f"P(1|·) in [0, 0.5], seed {_s} (App. E.5)"))
# ---- end medium: markov holdout

# MambaZero (§4.1) with its L1 prediction. Thm 1's exact size (d = 4, N = 2) stalls at quick
# budgets, hence d = 16, N = 8. Its unembedding bias starts at 1: with the default init every
# output is ≈ 0, the L1 prediction clamps the negative ones (no gradient) and training falls
# into the uniform predictor; the add-β logits β + n are positive too.
MAMBAZERO_MODEL = {"d_model": 16, "d_state": 8, "unembed_bias": True,
                   "unembed_bias_init": 1.0}
_add(
    Recipe("markov/mambazero", "markov", "mambazero", {"model": MAMBAZERO_MODEL},
           {"quick": {"train": {"lr": 1e-2, "steps": 2000}}},
           doc="L1 MambaZero for the conv ablation (Markov paper Fig. 3a)"),
    # Fig. 5 is a statement at convergence: shorter sequences buy the paper's 10 000 steps on
    # a CPU, and a step size between the Mamba-2's and the quick MambaZero's converges
    Recipe("markov/mambazero_fig5", "markov", "mambazero", {"model": MAMBAZERO_MODEL},
           {"quick": {"task": {"seq_len": 128}, "train": {"lr": 3e-3, "steps": 10000}}},
           doc="L1 MambaZero trained to convergence (Markov paper Fig. 5)"),
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
for _group, _runs in ABLATION_GROUPS.items():
    for _label, _arch, _model, _task in _runs:
        _quick = None if _label == "no_conv_d1000" else (
            {} if _group == "conv" else ABLATION_QUICK_SWEEP)
        _add(Recipe(f"markov_ablation/{_group}/{_label}", "markov", _arch,
                    {"model": _model, "task": _task}, {"quick": _quick},
                    doc=f"Markov ablation, {_group}: {_label}"))

# Induction heads (spectral paper §4.2, Fig. 5): trained at length T^q for filters of length
# T = 256, several seeds; the preset rows give the model sizes.
INDUCTION_T = 256
INDUCTION_RUNS = {"quick": {"qs": (1 / 2, 3 / 4), "seeds": 3},
                  "paper": {"qs": (1 / 2, 5 / 8, 3 / 4, 7 / 8), "seeds": 5}}


def induction_length(q: float, T: int = INDUCTION_T) -> int:
    return max(3, round(T**q))


def induction_name(arch: str, length: int, seed: int) -> str:
    return f"induction/{arch}_L{length}_s{seed}"


for _arch in ("stu", "transformer", "mamba2"):
    _lengths = {induction_length(q) for p in INDUCTION_RUNS for q in INDUCTION_RUNS[p]["qs"]}
    for _L in sorted(_lengths):
        for _s in range(max(r["seeds"] for r in INDUCTION_RUNS.values())):
            _in = {p for p in INDUCTION_RUNS if _s < INDUCTION_RUNS[p]["seeds"] and any(
                induction_length(q) == _L for q in INDUCTION_RUNS[p]["qs"])}
            _add(Recipe(induction_name(_arch, _L, _s), "induction", _arch,
                        {"task": {"length": _L}, "train": {"seed": _s}},
                        {p: ({} if p in _in else None) for p in INDUCTION_RUNS},
                        doc=f"{_arch} on induction heads at length {_L}, seed {_s} "
                            "(spectral paper Fig. 5)"))


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
# block goes to >= 8 seeds of each STU variant at q = 1/2 and 3/4.
INDUCTION_MEDIUM_QS = (1 / 2, 3 / 4)
INDUCTION_BLANK = 4  # tasks.induction: the D = 4 symbols, then BLANK (tests check the id)
INDUCTION_MEDIUM_MODELS = {  # label -> (arch, model overrides, seeds)
    "stu": ("stu", {}, 8), "stu_shared": ("stu", {"mixture": "shared"}, 8),
    "stu_blank0": ("stu", {"zero_embed": (INDUCTION_BLANK,), "normalization": "none"}, 8),
    "transformer": ("transformer", {}, 2), "mamba2": ("mamba2", {}, 2)}
INDUCTION_MEDIUM_TRAIN = {"steps": 1200, "eval_every": 400, "stop_at": 0.0,
                          "schedule": "cosine", "lr": 3e-3, "warmup_steps": 50}
# the baselines recall at their training length within ~200 steps: half the STU's budget
# still ends each on a plateau, and the budget goes to the STU seeds
INDUCTION_MEDIUM_STEPS = {"transformer": 600, "mamba2": 600}


def induction_medium_name(label: str, length: int, seed: int) -> str:
    return f"induction_medium/{label}_L{length}_s{seed}"


for _label, (_arch, _model, _seeds) in INDUCTION_MEDIUM_MODELS.items():
    for _L in sorted({induction_length(q) for q in INDUCTION_MEDIUM_QS}):
        for _s in range(_seeds):
            _add(Recipe(induction_medium_name(_label, _L, _s), "induction", _arch,
                        {"model": _model, "task": {"length": _L}, "train": {"seed": _s}},
                        {"quick": None, "paper": None,
                         "medium": {"train": {**INDUCTION_MEDIUM_TRAIN, **(
                             {"steps": INDUCTION_MEDIUM_STEPS[_label]}
                             if _label in INDUCTION_MEDIUM_STEPS else {})}}},
                        doc=f"{_label} on induction heads at length {_L}, seed {_s}, trained "
                            "to convergence (spectral paper Fig. 5)"))
# ---- end medium: STU length generalisation


# ---------------------------------------------------------------------------- serving
def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        close = [n for n in RECIPES if n.split("/")[0] == name.split("/")[0]][:6]
        hint = f"; e.g. {', '.join(close)}" if close else "; see `python -m models.zoo --list`"
        raise TaskError(f"unknown recipe {name!r}{hint}")
    return RECIPES[name]


def spec(name: str, preset: str, cache_dir: str | Path = "checkpoints",
         train: Mapping[str, Any] | None = None) -> RunSpec:
    """The run spec of a recipe at a preset; an ``init_from`` recipe must be cached already
    (:func:`checkpoint` trains it first). ``train`` overrides training fields on top."""
    r = recipe(name)
    parts = r.parts(preset)
    tr = {**parts["train"], **(train or {})}
    if preset in r.init_from:
        init = cache_path(spec(r.init_from[preset], preset, cache_dir), cache_dir)
        check(init.exists(), f"recipe {name} starts from {r.init_from[preset]}, which is not "
              f"trained yet in {cache_dir}")
        tr["init_from"] = str(init)
    return make_spec(r.arch, r.task, preset, parts["model"], parts["task"], tr)


def dependencies(name: str, preset: str) -> list[str]:
    """The recipes ``name`` needs trained first (its init chain), nearest last."""
    r = recipe(name)
    if preset not in r.init_from:
        return []
    parent = r.init_from[preset]
    return [*dependencies(parent, preset), parent]


def checkpoint(name: str, preset: str = "quick", cache_dir: str | Path = "checkpoints",
               device: str = "auto", progress: bool = True,
               train: Mapping[str, Any] | None = None, resume: str | Path | None = None) -> Path:
    """The path of recipe ``name``'s checkpoint at ``preset``, trained (and its init chain
    first) if it is not cached. ``train`` overrides training fields (another cache entry);
    ``resume`` continues the same run stopped earlier (see ``train_spec_cached``)."""
    for dep in dependencies(name, preset):
        train_spec_cached(spec(dep, preset, cache_dir), cache_dir, device, progress)
    return train_spec_cached(spec(name, preset, cache_dir, train), cache_dir, device, progress,
                             resume)


def checkpoints(names: Iterable[str], preset: str = "quick",
                cache_dir: str | Path = "checkpoints", device: str = "auto",
                progress: bool = True) -> dict[str, Path]:
    """:func:`checkpoint` of each name: ``{name: path}``."""
    return {n: checkpoint(n, preset, cache_dir, device, progress) for n in names}


def _train_one(name: str, preset: str, cache_dir: str, device: str,
               train: Mapping[str, Any] | None) -> str:
    """Task body of :func:`train_recipes` (a worker process, a Ray worker or this one)."""
    return str(checkpoint(name, preset, cache_dir, device, progress=False, train=train))


def _cached(name: str, preset: str, cache_dir: str | Path,
            train: Mapping[str, Any] | None) -> Path | None:
    try:
        run = spec(name, preset, cache_dir, train)
    except TaskError as e:
        if "not trained" in str(e):
            return None  # its init recipe is not trained yet: so neither is it
        raise
    path = cache_path(run, cache_dir)
    return path if is_cached(path, run) else None


def train_recipes(names: Iterable[str], preset: str = "quick",
                  cache_dir: str | Path = "checkpoints", device: str = "auto",
                  backend: Backend | None = None, train: Mapping[str, Any] | None = None,
                  progress: bool = True) -> dict[str, Path | Failed]:
    """:func:`checkpoint` of each name, the ones not cached yet run as tasks on ``backend``
    (:mod:`models.sweep`; default: one after the other here). A recipe whose training fails
    on every attempt maps to a :class:`Failed`; the others still train. The cache must be
    one the workers share (a cluster: a shared file system)."""
    names = list(dict.fromkeys(names))
    for n in names:  # every name checked before any training
        recipe(n).parts(preset)
    out: dict[str, Path | Failed] = {}
    todo = []
    for n in names:
        path = _cached(n, preset, cache_dir, train)
        if path is None:
            todo.append(n)
        else:
            out[n] = path
    results = map_tasks(_train_one, [(n, preset, str(cache_dir), device,
                                      dict(train) if train else None) for n in todo],
                        backend or Backend(), desc="train", progress=progress,
                        done_before=len(out), on_done=lambda i, _: {"recipe": todo[i]})
    for n, r in zip(todo, results, strict=True):
        out[n] = r if isinstance(r, Failed) else Path(r)
    return {n: out[n] for n in names}


def status(name: str, preset: str, cache_dir: str | Path) -> str:
    """``cached`` / ``missing`` / ``needs NAME`` (its init recipe is not trained yet) /
    ``interrupted`` (resumed when trained) / ``broken`` or ``other run`` (retrained)."""
    try:
        run = spec(name, preset, cache_dir)
    except TaskError as e:
        if "not trained" in str(e):
            return f"needs {recipe(name).init_from[preset]}"
        return "invalid: " + str(e).splitlines()[0][:60]
    state = entry_state(cache_path(run, cache_dir), run)
    return {"done": "cached", "other": "other run"}.get(state, state)


# ---------------------------------------------------------------------------- command line
def _main(argv: list[str] | None) -> int:
    p = OneLineParser(prog="python -m models.zoo", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="`train NAME...`: recipes to train; else name "
                   "prefixes to list (default: all)")
    p.add_argument("--list", action="store_true", help="list the recipes (the default)")
    add_scale_arguments(p)
    p.add_argument("--cache-dir", default="checkpoints")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--jobs", type=int, default=None,
                   help="with --ray: the CPUs of the Ray instance started here (default: all)")
    add_device_argument(p, default="auto")
    add_backend_arguments(p)
    args = p.parse_intermixed_args(argv)  # `train --medium NAME...`: flags between the names
    check_cache_dir(args.cache_dir)
    if args.names[:1] == ["train"] and not args.list:
        args.names = args.names[1:]
        check(bool(args.names), "name the recipes to train (see --list)")
        for n in args.names:
            recipe(n).parts(args.preset)  # every name checked before any training
        if args.ray is None:  # as ever: one after the other, each with its own progress bar
            for n, path in checkpoints(args.names, args.preset, args.cache_dir, args.device,
                                       not args.no_progress).items():
                print(f"{n}: {path}")
            return 0
        jobs = args.jobs or os.cpu_count() or 1
        slots = max(recipe(n).slots for n in args.names)
        device = str(resolve_device(args.device))  # auto: what this machine has
        backend = backend_of(args, jobs, device, num_cpus=slots)
        done = train_recipes(args.names, args.preset, args.cache_dir, device, backend,
                             progress=not args.no_progress)
        for n, path in done.items():
            print(f"{n}: {path.error} (failed after {path.attempts} attempt(s))"
                  if isinstance(path, Failed) else f"{n}: {path}")
        return EXIT_SOME_FAILED if any(isinstance(r, Failed) for r in done.values()) else 0
    names = [n for n in RECIPES if not args.names or n.startswith(tuple(args.names))]
    check(bool(names), f"no recipe starts with {', '.join(args.names)}; see "
          "`python -m models.zoo --list`")
    rows = [(n, RECIPES[n].task, RECIPES[n].arch,
             status(n, args.preset, args.cache_dir) if RECIPES[n].available(args.preset)
             else f"(no {args.preset} version)", RECIPES[n].doc) for n in names]
    widths = [max(len(r[i]) for r in rows) for i in range(4)] if rows else []
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
