"""Named levels of scale: ``quick`` (CPU-sized, minutes), ``medium`` (CPU-sized, each headline
comparison learned by both sides: tens of minutes a figure), ``large`` (one GPU machine, about
an hour: the smallest settings that decide each claim) and ``paper`` (the papers' settings, for
a GPU).

:data:`PRESETS` is one table of literals, rows keyed ``(level, task, arch)``, where ``"*"``
stands for every task or arch and more specific rows win. A level with a
:data:`BASE` is an overlay: its rows go on top of the base level's merged rows (``medium``
over ``quick``). ``paper`` has no base: it states the papers' settings whole. Each row may set
``model``, ``task`` and ``train`` fields; every field can still be overridden on the command
line or by a zoo recipe. Why each setting was chosen is said beside it; what a run of it
measured is in the reproduce index and the README, not here.
"""

from __future__ import annotations

from typing import Any

from seqprobe.cli import LEVELS
from seqprobe.errors import InputError

Row = dict[str, dict[str, Any]]
# ``large`` (issue 36 §2): the smallest settings that decide each headline claim, sized for one
# machine with one 80 GB GPU and 16 CPU cores; its runs are recipes of their own
# (analyses.zoo.recipes), like medium's, so its rows start from medium's.
BASE = {"medium": "quick", "large": "medium"}  # a level that is an overlay on another
# The levels whose analyses run several seeds per setting and read each claim with its spread
# (the quick and paper results are single runs): an analysis' JSON records its level, and a
# claim reader that needs the seeds checks ``level in SEEDED``.
SEEDED = ("medium", "large")

# Induction heads (spectral paper §4.2): the quick models; the paper rows are these at twice
# the width (below, and why there).
INDUCTION_QUICK_MODELS: dict[str, dict] = {
    "stu": {"d_model": 32, "n_layers": 2, "filter_len": 256, "num_filters": 24,
            "param": "tensordot"},
    "transformer": {"d_model": 32, "n_layers": 2, "n_heads": 4, "pe": "hard_alibi"},
    "mamba2": {"d_model": 32, "n_layers": 2, "d_mlp": 64, "n_heads": 4},
}


def _twice_as_wide(model: dict) -> dict:
    """``model`` with d_model and d_mlp (where set) doubled."""
    return {**model, **{k: 2 * v for k, v in model.items() if k in ("d_model", "d_mlp")}}


PRESETS: dict[tuple[str, str, str], Row] = {
    # ---------------------------------------------------------------- defaults
    ("quick", "*", "*"): {"train": {"steps": 1000, "batch_size": 32, "lr": 1e-3}},
    ("paper", "*", "*"): {"train": {"steps": 10000, "batch_size": 64}},
    # ---------------------------------------------------------------- copy paper (Jelassi et al.)
    # Quick: strings of length <= 20, a 2-layer model. lr 3e-3, not the paper's 5e-5 (tuned
    # for a 12-layer model): the small model learns far faster with it. 3000 steps, not 1500:
    # the n-gram match heads (analyses.ngram_heads) form only in the second half, and they are
    # what copies beyond the training length. The in-training eval is teacher forced
    # (``greedy_eval`` False): the same
    # string accuracy as greedy decoding at one pass instead of one per answer token, so an
    # eval every 100 steps (the resolution of analyses.copy_efficiency) stays cheap.
    ("quick", "copy", "*"): {
        "task": {"min_len": 1, "max_len": 20},
        "train": {"steps": 3000, "batch_size": 32, "lr": 3e-3, "warmup_steps": 200,
                  "weight_decay": 0.1, "schedule": "linear", "eval_every": 100,
                  "greedy_eval": False},
    },
    ("quick", "copy", "transformer"): {
        "model": {"d_model": 128, "n_layers": 2, "n_heads": 8},  # Hard-ALiBi: M = 4 masked heads
    },
    # Paper App. A.2: GPT-NeoX, 12 layers, hidden 1024, 16 heads, M = 6 masked heads, AdamW
    # lr 5e-5, linear decay, 300 warm-up steps, weight decay 0.1, batch 64. Context C = 620 for
    # Fig. 1a (strings <= 300: 602-token examples), C = 420 elsewhere (Fig. 1b: strings <= 50;
    # length_generalization sets it).
    ("paper", "copy", "*"): {
        "task": {"min_len": 1, "max_len": 300},
        "train": {"context": 620, "lr": 5e-5, "warmup_steps": 300, "weight_decay": 0.1,
                  "schedule": "linear", "batch_size": 64, "steps": 20000, "eval_every": 1000},
    },
    ("paper", "copy", "transformer"): {
        "model": {"d_model": 1024, "n_layers": 12, "n_heads": 16, "hard_alibi_heads": 6},
    },
    # ---------------------------------------------------------------- Markov (Bondaschi et al.)
    # Quick: binary first-order chains, T = 256; 1500 steps bring a 1-layer Mamba-2 with the
    # Fig. 2 MLP close to L_beta (analyses.markov_laplace reports the gap).
    ("quick", "markov", "*"): {
        "task": {"S": 2, "order": 1, "beta": 1.0, "seq_len": 256},
        "train": {"steps": 1500, "batch_size": 32, "lr": 2e-3, "beta2": 0.95,
                  "weight_decay": 1e-3, "schedule": "cosine", "warmup_steps": 50,
                  "eval_every": 250},
    },
    ("quick", "markov", "mamba2"): {
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 1, "d_state": 16, "d_conv": 4,
                  "d_mlp": 64},
    },
    # Paper App. F, Tables 6-7: AdamW (0.9, 0.95), lr 1e-3, cosine, weight decay 1e-3, 10 000
    # iterations, 1 layer, 1 head, embedding d in {2..32}, window w in 2..6, MLP 4d. The paper's
    # table, not the authors' scripts (Bond1995/Markov-Mamba, as issue 36 read them): those run
    # lr 2e-3 in every script, a OneCycleLR (from lr/100 to lr/5) and weight decay on the
    # Linear layers' weights only, where make_optimizer decays every matrix (the embedding and
    # the conv filters too).
    ("paper", "markov", "*"): {
        "task": {"S": 2, "order": 1, "beta": 1.0, "seq_len": 256},
        "train": {"steps": 10000, "batch_size": 64, "lr": 1e-3, "beta1": 0.9, "beta2": 0.95,
                  "weight_decay": 1e-3, "schedule": "cosine", "warmup_steps": 0,
                  "eval_every": 500},
    },
    ("paper", "markov", "mamba2"): {
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 1, "d_state": 16, "d_conv": 4,
                  "d_mlp": 64},
    },
    # MambaZero (§4.1, Thm 1 sizes for S = 2: d = 4, N = 2, w = 2, L1 prediction) learns only
    # with a larger step size than the Mamba-2.
    ("quick", "markov", "mambazero"): {"train": {"lr": 1e-2}},
    # ---------------------------------------------------------------- SSM / LSTM on copy
    # Quick GSSMs learn copying far more slowly than the transformers at this budget (the
    # copy paper's Fig. 1a contrast; analyses.copy_efficiency measures it).
    ("quick", "copy", "mamba"): {"model": {"d_model": 64, "n_layers": 2, "d_state": 16}},
    ("quick", "copy", "lstm"): {"model": {"d_model": 256, "n_layers": 2}},
    # Copy paper App. A.2: Mamba 24 layers, hidden 1024, state size 32; LSTM 4 layers, 1024.
    # The Mamba trains with checkpointed blocks (TrainConfig.checkpoint_blocks; its scan="auto"
    # takes the chunked scan at this size): without mamba-ssm's kernels, 24 layers of
    # activations at 420 positions would not fit one 80 GB card at batch 64. Memory settings
    # change no number and no cache key.
    ("paper", "copy", "mamba"): {"model": {"d_model": 1024, "n_layers": 24, "d_state": 32},
                                 "train": {"checkpoint_blocks": True}},
    # The copy paper trains no Mamba-2; sized as its Mamba (24 layers, d 1024, N 32) with
    # heads of 64 channels (mamba-ssm's Mamba-2 default headdim), so Fig. 1a's GSSM side has
    # both generations at the paper's scale.
    ("paper", "copy", "mamba2"): {"model": {"d_model": 1024, "n_layers": 24, "d_state": 32,
                                            "n_heads": 32},
                                  "train": {"checkpoint_blocks": True}},
    ("paper", "copy", "lstm"): {"model": {"d_model": 1024, "n_layers": 4}},
    # ---------------------------------------------------------------- memorization (Kim et al.)
    # Encoder classifiers, d_mlp = 4m (q/m = 4), k = m/h; RoPE gives positions with no extra
    # parameters (analyses/memorization/ says why). analyses.memorization varies d_model.
    # Quick: lr 1e-2 with linear decay, no weight decay (it works against memorising); a
    # smaller step size needed about twice the steps to memorise the quick grid.
    ("quick", "memorization", "*"): {
        "train": {"steps": 2000, "batch_size": 256, "lr": 1e-2, "warmup_steps": 100,
                  "schedule": "linear", "weight_decay": 0.0, "grad_clip": 1.0, "eval_every": 50},
    },
    ("quick", "memorization", "transformer"): {
        "model": {"d_model": 16, "n_layers": 2, "n_heads": 2, "pe": "rope"},
    },
    # Paper §5.1 / App. F: L = 6, h = 12, m/k = 12, q/m = 4; Adam lr 2e-5, batch 32, no weight
    # decay (dropout 10 % in the paper; the suite's transformer has none).
    ("paper", "memorization", "*"): {
        "train": {"steps": 7500, "batch_size": 32, "lr": 2e-5, "warmup_steps": 0,
                  "schedule": "linear", "weight_decay": 0.0, "eval_every": 250},
    },
    ("paper", "memorization", "transformer"): {
        "model": {"d_model": 120, "n_layers": 6, "n_heads": 12, "pe": "rope"},
    },
    # ---------------------------------------------------------------- induction heads (spectral
    # filtering paper §4.2, Fig. 5): vocabulary 4, STU filters of length T = 256, trained at
    # length T^q. Quick: small models and 400 steps, enough for STU, Hard-ALiBi transformer and
    # Mamba-2 to recall at their training length.
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
    # ---------------------------------------------------------------- n-gram lookup
    # Copy paper §3.3 (Figs. 5, 6): the lookup models are the copy models (the same rows; tests
    # check it); at quick they are fine-tuned from the quick copy checkpoints (analyses.zoo), at
    # paper trained from scratch.
    ("paper", "lookup", "transformer"): {
        "model": {"d_model": 1024, "n_layers": 12, "n_heads": 16, "hard_alibi_heads": 6},
    },
    ("paper", "lookup", "mamba"): {"model": {"d_model": 1024, "n_layers": 24, "d_state": 32},
                                   "train": {"checkpoint_blocks": True}},
    ("paper", "lookup", "mamba2"): {"model": {"d_model": 1024, "n_layers": 24, "d_state": 32,
                                              "n_heads": 32},
                                    "train": {"checkpoint_blocks": True}},
    ("paper", "lookup", "lstm"): {"model": {"d_model": 1024, "n_layers": 4}},
}


def preset_overrides(preset: str, task: str, arch: str) -> Row:
    """Merge the rows of level ``preset`` that apply to (task, arch), general first, specific
    last (a level with a :data:`BASE`: the base's merged rows first, then its own)."""
    if preset not in LEVELS:
        raise InputError(f"unknown preset {preset!r}; allowed: {', '.join(LEVELS)}")
    merged: Row = (preset_overrides(BASE[preset], task, arch) if preset in BASE
                   else {"model": {}, "task": {}, "train": {}})
    for key in ((preset, "*", "*"), (preset, "*", arch), (preset, task, "*"), (preset, task, arch)):
        for part, values in PRESETS.get(key, {}).items():
            merged[part].update(values)
    return merged
