"""The reproduce plan: which analyses make which paper figure, and how their JSON is read
against the paper's claims. Kept apart from :mod:`analyses.reproduce` (the runner)."""

from __future__ import annotations

from analyses.reproduce import Claim, Step, _get, _no_train_args, _train_args


def _ngram_match(d: dict) -> tuple[str, bool]:
    heads = d.get("match_heads", [])
    best = max((h["match_score"] for h in heads), default=0.0)
    return f"{len(heads)} heads with match score >= {d.get('threshold')}, best {best:.2f}", bool(heads)


def _ngram_ablation(d: dict) -> tuple[str, bool]:
    drop = _get(d, "ablated", "drop", "string_acc")
    rnd = _get(d, "random", "string_drop_mean")
    if drop is None:
        return "no ablation result in the JSON", False
    text = f"string-accuracy drop {100 * drop:.0f} pts (random heads: "
    text += f"{100 * rnd:.0f} pts)" if rnd is not None else "n/a)"
    return text, drop >= 0.5 and (rnd is None or rnd < drop / 2)


def plan() -> list[Step]:
    return [
        Step("ngram_heads", "n-gram match heads in a copy transformer",
             "Copy paper §2.2, Fig. 3, App. C", _train_args,
             (Claim("copy transformers retrieve by n-gram matching: heads attend to the "
                    "successor of the earlier occurrence of the current n-gram", _ngram_match),
              Claim("ablating those heads destroys copying; as many random heads do not",
                    _ngram_ablation))),
        Step("duplicated_ngrams", "Copying with a duplicated n-gram", "Copy paper §3.4, Fig. 4",
             _train_args),
        Step("copy_bounds", "Hash-copy construction vs the bounds",
             "Copy paper Thm 2.3, Lemma 2.4, Thm 2.7", _train_args),
        Step("length_generalization", "Length generalisation on copy", "Copy paper Fig. 1b",
             _train_args),
        Step("copy_efficiency", "Copy accuracy vs samples seen", "Copy paper Figs. 1a, 9",
             _train_args),
        Step("ngram_lookup", "n-gram lookup, suffix and prefix keys", "Copy paper Figs. 5, 6",
             _train_args),
        Step("markov_laplace", "Mamba vs the add-β estimator", "Markov paper Figs. 1, 7, 8, 10",
             _train_args),
        Step("state_probe", "Linear probes of the Mamba state for transition counts",
             "Markov paper Thm 1, App. C.2", _train_args),
        Step("bc_orthogonality", "b·c orthogonality", "Markov paper Fig. 5", _train_args),
        Step("mamba_decay", "a_t on Markov and switching Markov data", "Markov paper Figs. 4, 13",
             _train_args),
        Step("markov_ablations", "Ablations: conv, window, width", "Markov paper Figs. 3, 6, 11, 12",
             _train_args),
        Step("markov_holdout", "Hold-out kernels", "Markov paper App. E.5, Table 2", _train_args),
        Step("memorization", "Memorization vs parameter count (token level)",
             "Memorization paper Figs. 1, 2",
             lambda preset, out, cache: ["--data", "synthetic", "--task", "token", f"--{preset}",
                                         "--out", str(out), "--no-progress"],
             outputs=("memorization_synthetic_token",)),
        Step("spectral_lds", "Spectral filtering on LDS regions A and B",
             "Spectral paper Figs. 2-4", _no_train_args),
        Step("stu_induction", "STU on induction heads, trained short", "Spectral paper Fig. 5",
             _train_args),
    ]
