"""Small crafted results, shaped as each analysis' ``compute`` returns them, for
tests/unit/analyses/test_figure_quality.py: enough curves, models and seeds that a figure has what a real
quick run gives it to draw (several models in a legend, curves crossing the panel, negative
R², a ratio of exactly 0), from numbers made up here rather than a trained model."""

from __future__ import annotations

import numpy as np

from analyses.copy_efficiency.seeded import compute_medium
from analyses.markov_holdout import combine
from tests.unit.analyses.test_copy_efficiency_medium import runs
from tests.unit.analyses.test_markov_holdout import _run
from tests.integration.test_ngram_lookup_medium import prefix_json

RNG = np.random.default_rng(0)
COPY_LABELS = ("hard_alibi", "nope", "rope", "lstm", "mamba2")


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def copy_efficiency() -> dict:
    curves, reach, train = {}, {}, {}
    for i, label in enumerate(COPY_LABELS):
        rows = []
        for step in range(100, 1600, 100):
            s = _sigmoid((step - 400 - 300 * i) / 120) if i < 3 else 0.02 * step / 1500
            rows.append({"samples_seen": step * 32, "step": step, "string_acc": float(s),
                         "char_acc": float(0.2 + 0.8 * s), "string_acc_at_L": None,
                         "eval_loss": float(1 - s)})
        curves[label] = rows
        reach[label] = {"string_0.5": 12800 if i < 3 else None,
                        "string_0.9": 28800 if i < 3 else None}
        train[label] = {"max_len": 20, "context": 0, "steps": 3000 if i == 0 else 1500,
                        "greedy_eval": False, "samples_seen": 48000}
    return {"curves": curves, "samples_to_reach": reach, "ratio_to_fastest": {},
            "train": train}


def length_generalization() -> dict:
    lengths = [5, 10, 20, 30, 40, 60, 80, 120, 160]
    curves = {}
    for i, label in enumerate(COPY_LABELS):
        reach = {0: 100, 1: 12, 2: 22}.get(i, 4)
        curves[label] = [{"L": L, "string_acc": float(_sigmoid((reach - L) / 4)),
                          "char_acc": float(0.3 + 0.7 * _sigmoid((reach * 1.5 - L) / 8))}
                         for L in lengths]
    train = {k: {"max_len": 20, "context": 0, "steps": 1500} for k in COPY_LABELS}
    return {"D": 26, "lengths": lengths, "n_examples": 128, "seed": 0, "train": train,
            "curves": curves}


def _probe_row(layer: int, good: float, S: int = 2, k: int = 1) -> dict:
    n = S ** k * S
    true = RNG.uniform(0, 40, size=(200, n))
    return {"layer": layer, "r2_mean": good, "r2": list(np.clip(good + RNG.normal(0, .05, n),
                                                              -1, 1)),
            "r2_within_pos": good - 0.1, "ctx_r2_mean": good, "state_explained_by_counts":
            good - 0.05, "readout_r2_mean": good - 0.2,
            "scatter": {"true": true.tolist(), "pred": (true * good + RNG.normal(0, 3, true.shape))
                        .tolist()},
            "r2_by_bucket": [{"r2_mean": good - 0.1 * j} for j in range(6)],
            "shuffled_r2_by_bucket": [{"r2_mean": -0.3 - 0.1 * j} for j in range(6)]}


def state_probe() -> dict:
    return {"S": 2, "order": 1, "targets": ["0->0", "0->1", "1->0", "1->1"],
            "bucket_edges": [0, 16, 32, 64, 128, 192, 256],
            "trained": [_probe_row(0, 0.97), _probe_row(1, 0.9)],
            "random_init": [_probe_row(0, 0.4), _probe_row(1, 0.3)]}


def mamba_decay() -> dict:
    pos = np.arange(1, 129)
    curve = np.stack([np.stack([1 - 0.5 / pos ** (0.5 + 0.2 * h) for h in range(2)], -1)])
    a = 0.95 + 0.03 * RNG.random((1, 128, 2))
    switch = [30, 71, 100]
    for p in switch:
        a[:, p] = 0.05
    return {"models": [{"label": "zoo:markov/mamba2", "curve": curve.tolist()},
                       {"label": "zoo:switching_markov/mamba2",
                        "trace": {"a": a.tolist(), "switch_pos": switch},
                        "mean_at_switch": 0.0513, "mean_elsewhere": 0.9612}]}


def bc_orthogonality() -> dict:
    rows = []
    for series, final in (("markov/mamba2", 0.02), ("mambazero_fig5", 0.0)):
        for i, step in enumerate((0, 500, 1000, 2000)):
            ratio = 1.0 if i == 0 else final + (1 - final) * 0.3 ** i
            pinned = None if i == 0 else 0.0 if final == 0 and i == 3 else ratio * 0.5
            rows.append({"label": f"{series} @ {step}", "series": series, "step": step,
                         "ratio_pairs": ratio, "ratio_pinned": pinned, "ratio_table": ratio * 2,
                         "ratio_readout": None, "table": RNG.normal(0, 1, (2, 2, 2)).tolist(),
                         "beta_fit": 0.5 + i * .1, "beta_true": 0.5,
                         "l1": {"beta_per_context": [[0.4 + 0.05 * i, 0.6], [0.5, 0.55]]}})
    return {"models": rows}


def markov_laplace() -> dict:
    T = 128
    p_beta = np.clip(0.5 + 0.3 * np.sin(np.arange(T) / 9), 0, 1)
    rows = []
    for i, (label, arch) in enumerate((("markov/mamba2", "mamba2"),
                                       ("markov/transformer_1L", "transformer"),
                                       ("markov/transformer_2L", "transformer"))):
        rows.append({"label": label, "arch": arch, "S": 2, "order": 1,
                     "fixed": {"p_beta": p_beta.tolist(),
                               "p_model": np.clip(p_beta + RNG.normal(0, .05 * (i + 1), T),
                                                  0, 1).tolist()},
                     "l1_curve": (0.5 / np.arange(1, T + 1) ** 0.5 * (i + 1)).tolist(),
                     "loss_gap": 0.001 * (i + 1)})
    return {"models": rows, "t_min": 16}


def _ngram_heads_run(label: str = "hard_alibi", heads: str = "attention") -> dict:
    ms = RNG.uniform(0, 0.3, (2, 8))
    ms[1, 5] = 0.99
    by_n = RNG.uniform(0, 0.3, (2, 8, 6))
    by_n[1, 5] = [0.2, 0.6, 0.95, 0.97, 0.98, 0.99]
    runs = [{"string_acc": 0.97 - 0.02 * j, "char_acc": 0.99 - 0.01 * j} for j in range(7)]
    return {"label": label, "heads": heads, "match_score": ms.tolist(),
            "match_by_n": by_n.tolist(), "target_score": ms.tolist(),
            "match_heads": [{"layer": 1, "head": 5, "match_score": 0.99, "best_n": 4,
                             "target_score": 0.99}],
            "hashing_heads": [{"layer": 0, "head": 2, "profile": [0.05, 0.9, 0.03, 0.02]}],
            "accuracy": {"string_acc": 0.99, "char_acc": 0.998},
            "ablated": {"string_acc": 0.0, "char_acc": 0.12, "heads": [[1, 5]],
                        "drop": {"string_acc": 0.99, "char_acc": 0.88}},
            "random": {"runs": runs, "string_drop_mean": 0.05},
            "random_same_layer": {"runs": runs[:4], "string_drop_mean": 0.03},
            "mode": "mean"}


def ngram_heads() -> dict:
    return _ngram_heads_run()


def ngram_heads_side_by_side() -> dict:
    return {"models": [_ngram_heads_run("hard_alibi"), _ngram_heads_run("mamba", "s6")],
            "mode": "mean", "data": "copy"}


def ngram_heads_per_head() -> dict:
    """Side by side with ``--per-head``: each model's map and its per-head ablation map."""
    d = ngram_heads_side_by_side()
    for r in d["models"]:
        r["per_head_drop"] = RNG.uniform(0, 0.2, (2, 8)).tolist()
    return d


def stu_induction() -> dict:
    lengths = [16, 32, 64, 128, 256]
    rows = []
    for arch in ("stu", "transformer", "mamba2"):
        for tl in (16, 64):
            per = np.clip(np.array([[1.0 if L <= tl else 0.9 * tl / L + 0.05 * s
                                     for L in lengths] for s in range(3)]), 0, 1)
            rows.append({"arch": arch, "train_length": tl, "n_models": 3,
                         "acc_mean": per.mean(0).tolist(), "acc_per_model": per.tolist(),
                         "acc_min": per.min(0).tolist(), "acc_max": per.max(0).tolist()})
    return {"lengths": lengths, "rows": rows, "chance": 0.125, "seeds": [0, 1, 2]}


def spectral_lds() -> dict:
    t = list(range(1, 257))
    curves = {}
    for key in ("A1", "B1", "B2", "A2"):
        qs, Ls = [0.5, 0.75, 1], [16, 64, 256]
        loss = [1 / np.arange(1, 257) ** (0.3 + 0.2 * i) + 1e-3 for i in range(3)]
        curves[key] = {"qs": qs, "L": Ls, "t": t, "loss": [c.tolist() for c in loss],
                       "loss_min": [(0.8 * c).tolist() for c in loss],
                       "loss_max": [(1.25 * c).tolist() for c in loss]}
    return {"curves": curves, "T": 256, "k": 8, "d_hidden": 16, "seeds": 3}


def markov_ablations() -> dict:
    rows = []
    for i, label in enumerate(("mamba2", "no_conv", "mambazero")):
        rows.append({"group": "conv", "label": label, "abs_gap": 0.001 * 10 ** i,
                     "curve": [{"step": s, "loss_gap": 0.5 / (1 + s / 100) * (i + 1)}
                               for s in range(0, 2000, 250)]})
    return {"models": rows}


def copy_efficiency_medium() -> dict:
    """The seeded comparison (medium and above), from the medium tests' runs."""
    d = compute_medium(runs({("rope", 4): [2, 2, 4], ("hard_alibi", 4): [3, 3, 3],
                             ("mamba", 4): [4, 6, 8], ("lstm", 4): [6, None, 6],
                             ("rope", 6): [3, 4, 4], ("hard_alibi", 6): [4, 5, 3],
                             ("mamba", 6): [6, 8, 9], ("lstm", 6): [9, None, None]}))
    return {**d, "level": "medium"}


def markov_holdout() -> dict:
    return combine([_run([0.3, 0.2, 0.1, 0.01], [0.2, 0.02, 0.01, 0.01], 0.3),
                    _run([0.3, 0.2, 0.1, 0.03], [0.2, 0.02, 0.01, 0.01], 0.1)])


def ngram_lookup() -> dict:
    d = prefix_json({"hard_alibi": [1.0, 1.0, 0.9], "hard_alibi'": [1.0, 0.9, 0.8],
                     "lstm": [0.9, 0.3, 0.1]})
    for t in d["train"]["prefix"].values():
        t["steps"] = 500
    d["curves"]["suffix"] = {"hard_alibi": d["curves"]["prefix"]["hard_alibi"],
                             "lstm": d["curves"]["prefix"]["lstm"]}
    d["train"]["suffix"] = {k: {"max_len": 20, "steps": 500} for k in ("hard_alibi", "lstm")}
    return d


def copy_bounds() -> dict:
    rows = [{"n": n, "L": L, "bound": L * L * 26.0 ** -n,
             "p_ngram": min(1, L * L * 26.0 ** -n) / 2,
             "error": 0.0 if L * L * 26.0 ** -n < 1e-2 else min(1, L * L * 26.0 ** -n) / 3,
             "error_se": 0.0 if L * L * 26.0 ** -n < 1e-2 else 1e-3}
            for n in (3, 4, 5) for L in (20, 100, 300, 1000)]
    measured = [{"L": L, "error": min(1.0, L / 80)} for L in (10, 20, 40, 80, 160)]
    return {"D": 26, "construction": rows, "checkpoints": [{
        "label": "copy/lstm", "arch": "lstm", "state_floats": 1024, "measured": measured,
        "bounds": {"32": {"L_star": 6971, "state_bits": 32768},
                   "8": {"L_star": 1743, "state_bits": 8192}}}]}


def duplicated_ngrams() -> dict:
    def entry(L, drop_at, base):
        return {"length": L, "baseline": {"string_acc": base}, "first_drop_n": drop_at,
                "by_n": [{"n": n, "string_acc": base if n < drop_at else base * 0.3}
                         for n in range(1, 11)]}
    return {"lengths": [20, 30], "curves": {
        "hard_alibi": [entry(20, 3, 0.96), entry(30, 3, 0.9)],
        "construction n=3": [entry(20, 3, 1.0), entry(30, 3, 1.0)],
        "construction n=5": [entry(20, 5, 1.0), entry(30, 5, 1.0)]}}


def memorization() -> dict:
    ns, widths = [100, 200, 400, 800, 1600], [8, 16, 24, 32, 48, 64]
    err = np.array([[max(0.0, 0.6 - w / (n ** 0.5 * 2)) for w in widths] for n in ns])
    fit = {"linear": {"a": 100.0, "b": 4.0, "r2": 0.97},
           "theory": {"a": -200.0, "b": 180.0, "r2": 0.99}}
    return {"data": "wikitext", "labels_per": "sequence", "seq_len": 16, "threshold": 0.01,
            "widths": widths, "n_examples": ns, "error": err.tolist(),
            "min_params_total": [900, 1500, 2600, 4800, None],
            "min_params_non_embedding": [500, 900, 1700, 3300, None],
            "params_total": [900, 1500, 2600, 4800, 9000, 12000],
            "params_non_embedding": [500, 900, 1700, 3300, 6000, 8000],
            "fits": {"total": fit, "non_embedding": fit}}


def pretrained_copy() -> dict:
    models = {"pythia-410m": {"arch": "gpt_neox", "n_params": 405_000_000},
              "mamba-370m": {"arch": "mamba_hf", "n_params": 370_000_000}}

    def curve(key, xs, fall):
        return {m: [{key: x, "acc": float(_sigmoid((fall * (i + 1) - x) / (fall / 4)))}
                    for x in xs] for i, m in enumerate(models)}
    return {"models": models,
            "phonebook": {"curves": curve("entries", [10, 20, 40, 80, 160], 40)},
            "copy": {"curves": curve("tokens", [16, 32, 64, 128, 256], 64),
                     "text": {"natural": True, "shuffled": False}}}


CASES = {
    "pretrained_copy": pretrained_copy,
    "memorization": memorization,
    "copy_bounds": copy_bounds, "duplicated_ngrams": duplicated_ngrams,
    "copy_efficiency_medium": copy_efficiency_medium, "markov_holdout": markov_holdout,
    "ngram_lookup": ngram_lookup,
    "copy_efficiency": copy_efficiency, "length_generalization": length_generalization,
    "state_probe": state_probe, "mamba_decay": mamba_decay,
    "bc_orthogonality": bc_orthogonality, "markov_laplace": markov_laplace,
    "ngram_heads": ngram_heads, "ngram_heads_side_by_side": ngram_heads_side_by_side,
    "ngram_heads_per_head": ngram_heads_per_head,
    "stu_induction": stu_induction, "spectral_lds": spectral_lds,
    "markov_ablations": markov_ablations,
}
