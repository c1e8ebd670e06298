"""Which heads of a trained transformer copy by n-gram lookup? (copy paper §2.2, Fig. 3, App. C)

``python -m analyses.ngram_heads ckpt.pt`` — the suite's signature command.

1. n-gram match score, for every layer and head and n = 1..n_max: on copy examples
   ``<BOS> x <COPY> x``, at each answer-phase query the attention mass on the keys whose
   preceding n tokens equal the current n-gram (the successor of its earlier occurrence: the
   token Algorithm 1 copies next). A head's *match score* is its best score over n; the
   *target score* is the mass on the true source position.
2. Hashing heads: the earlier-layer heads whose ablation lowers the match heads' score most,
   and how much of their attention falls on the current token and the 1, 2, … before it (the
   construction's Hard-ALiBi heads average exactly their window, Lemma C.1).
3. Causal check: mean- (or zero-) ablate the match heads and measure string- and character-
   level copy accuracy (§3.1; decoded greedily here, where the paper's synthetic evaluation
   is one teacher-forced pass: the string accuracy is the same), against ablating as many
   randomly chosen other heads (several draws).

On an induction-heads checkpoint the examples are its task's own rows (flag, token, query:
repeated random letters would be out of its distribution); on one trained on another
language-model task over letters (lookup, phone-book), random strings of its letters repeated
twice (the answer is the second copy), the induction-head setting. ``--train PRESET`` uses the zoo's
``copy/hard_alibi``.

SSMs (Mamba-2, Mamba) enter through their effective attention (probes.effective_attention):
y_q = Σ_k M[q, k] x_k per head (a Mamba channel is a head), scored as the pattern of each key's
share of |M| — so the same match and target scores, and the ablation replaces a head's scan
output Σ_k M x_k (its D skip stays). The search for feeding heads runs over Mamba-2 heads but
not over Mamba's channels (hundreds per layer; the conv, not a head, hashes there). A model
with neither attention nor effective attention (LSTM, STU) is refused.

Several checkpoints (``python -m analyses.ngram_heads hard_alibi.pt mamba2.pt``) are probed on
the same data and drawn side by side: copy examples when all were trained on copy; else each
on its own task's examples (``--data task``: copy examples, or the flag-recall sequences of the
induction task, whose query at the last flag should read the token after the first);
``--data repeat``: repeated random strings over the letters they all know.

HuggingFace models (a directory or hub name, booted by models.hf): a pretrained causal LM
(GPT-NeoX / Pythia, GPT-2, Llama, Mamba, Mamba-2) is probed on ``[BOS] r r`` with r random
tokens of its vocabulary (the induction setting) and r a window of natural text (``--text
FILE``; default: text the suite generates offline, which the output says is not natural text),
both by default, drawn side by side. The feeding-head search is off for them (hundreds of heads
before the match heads). A model this suite exported (models.export_hf) keeps our token ids and
its task, and is probed exactly like its .pt file. ``--per-head`` also ablates each head alone.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from tqdm.auto import tqdm

from analyses.common import (
    Checkpoint,
    Claim,
    Figure,
    get,
    ints,
    label_for,
    load_model,
    run_analysis,
    to_jsonable,
)
from figures.style import COLORS, new_figure, plt
from models.checkpoint import is_hf_source
from models.hf import HF_MAMBA, HF_MAMBA2, HF_TRANSFORMER
from probes import effective_attention as ea
from probes.attention import pattern_scores
from probes.copying import accuracy_on
from tasks.base import PromptBatch, check, make_generator
from tasks.copy import CopyConfig, CopyTask
from tasks.induction import InductionConfig, InductionHeadsTask
from tasks.prompts import GENERATED_TEXT_NOTE, generated_text, read_text
from tasks.registry import make_task

NAME = "ngram_heads"
ARCHS = ("transformer", *ea.SSM_ARCHS)
HF_ARCHS = (HF_TRANSFORMER, HF_MAMBA, HF_MAMBA2)  # pretrained LMs booted by models.hf
DATA = ("auto", "repeat", "task", "text")  # --data: which probe examples (module docstring)
# a pretrained LM: tokens per repeated segment (a few n-grams' worth, short enough for a CPU)
HF_LENGTHS = (10, 20, 40)
GENERATED_WORDS = 4000  # words of the offline default text (windows at many starts)
COPY_TASKS = ("copy", "dup_ngram_copy")
# language-model tasks over letters, on which "the token to output next appeared before"
# means something; a Markov or memorization checkpoint has no copy heads to find
TASKS = (*COPY_TASKS, "lookup", "phonebook", "induction")
RECIPE = "copy/hard_alibi"  # --train: Hard-ALiBi forms the match heads the paper describes


# ---------------------------------------------------------------------------- probe data
def own_task_rows(task_name: str | None, data: str) -> bool:
    """Probe on the induction task's own flag-recall rows: asked for (``task``), or by default
    (repeated letters are out of an induction model's distribution)."""
    return task_name == "induction" and data in ("task", "auto")


def probe_batches(model, task_name: str, task_config: dict, lengths: list[int],
                  batch_size: int, seed: int, data: str = "auto"
                  ) -> list[tuple[PromptBatch, int | torch.Tensor]]:
    """``[(PromptBatch, period)]``: one batch per length; the answer token at sequence position
    i was seen before at i − period (copy: period L + 1; repeated random tokens: L; the
    induction task with ``data="task"``: one period per row, ``[batch, 1]``)."""
    check(data in DATA, f"data must be one of {DATA}, got {data!r}")
    g = make_generator(seed)
    out = []
    if task_name in COPY_TASKS and data != "repeat":
        task = CopyTask(CopyConfig(D=int(task_config.get("D", 26))))
        check(task.vocab.size <= model.cfg.vocab_size, f"copy vocabulary ({task.vocab.size}) "
              f"does not fit the model ({model.cfg.vocab_size})")
        for L in lengths:
            out.append((task.eval_batch(batch_size, g, length=L), L + 1))
        return out
    if own_task_rows(task_name, data):
        task = InductionHeadsTask(InductionConfig(**task_config))
        flag = task.vocab.id("FLAG")
        for L in lengths:
            batch = task.eval_batch(batch_size, g, length=L)
            first = (batch.prompts == flag).int().argmax(1, keepdim=True)  # [batch, 1]
            # the query (last flag, position L − 1) copies from first + 1
            out.append((batch, L - 1 - first))
        return out
    D = letters_of(task_name, task_config)
    return repeated_batches(D, lengths, batch_size, g)


def letters_of(task_name: str, task_config: dict) -> int:
    """Size of a task's letter alphabet (its tokens 0..D − 1, before the special tokens)."""
    return make_task(task_name, task_config).vocab.D


def repeated_batches(D: int, lengths: list[int], batch_size: int, g: torch.Generator
                     ) -> list[tuple[PromptBatch, int]]:
    """Random strings of ``D`` letters repeated twice: the answer is the second copy."""
    out = []
    for L in lengths:
        r = torch.randint(0, D, (batch_size, L), generator=g)
        out.append((PromptBatch(torch.cat([r, r[:, :1]], 1), r[:, 1:]), L))
    return out


def hf_batches(model, lengths: list[int], batch_size: int, g: torch.Generator, data: str,
               text: str | None = None) -> list[tuple[PromptBatch, int]]:
    """A pretrained LM's probe data: ``[BOS] r r`` (the answer is the second copy of r) for
    segments r of L tokens drawn uniformly from the tokenizer's ordinary tokens
    (``data="repeat"``), or cut from ``text`` at random starts (``data="text"``)."""
    bos = torch.tensor(model.bos_ids(), dtype=torch.long)
    if data == "text":
        check(text is not None, "data='text' needs a text")
        ids = torch.tensor(model.text_ids(text), dtype=torch.long)
        check(len(ids) >= max(lengths), f"the text has {len(ids)} tokens, fewer than the "
              f"segment length {max(lengths)}")
    else:
        vocab = model.ordinary_token_ids()
    out = []
    for L in lengths:
        if data == "text":
            starts = torch.randint(0, len(ids) - L + 1, (batch_size,), generator=g)
            r = torch.stack([ids[s : s + L] for s in starts.tolist()])
        else:
            r = vocab[torch.randint(0, len(vocab), (batch_size, L), generator=g)]
        prefix = bos.expand(batch_size, -1)
        out.append((PromptBatch(torch.cat([prefix, r, r[:, :1]], 1), r[:, 1:]), L))
    return out


def accuracy(model, data) -> dict[str, float]:
    """Greedy string- and character-level accuracy over the probe batches (paper §3.1)."""
    return accuracy_on(model, (batch for batch, _ in data), greedy=True)


def _nanmax(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    filled = torch.nan_to_num(x, nan=-1.0)
    v, i = filled.max(dim=-1)
    return v.clamp(min=0), i + 1


# ---------------------------------------------------------------------------- compute
def data_name(task_name: str | None, data: str = "auto") -> str:
    """Which examples :func:`probe_batches` gives: ``copy``, ``repeat``, ``induction`` or
    ``text`` (a pretrained LM, ``task_name`` None: ``repeat`` or ``text``)."""
    if task_name is None:
        return "text" if data == "text" else "repeat"
    if data != "repeat" and task_name in COPY_TASKS:
        return "copy"
    return "induction" if own_task_rows(task_name, data) else "repeat"


def default_lengths(task_name: str, task_config: dict, data: str = "auto") -> list[int]:
    """The upper half of the training range (the induction task with ``data="task"``: its
    training length)."""
    if task_name is None:
        return list(HF_LENGTHS)
    if own_task_rows(task_name, data):
        return [int(task_config.get("length", InductionConfig.length))]
    hi = int(task_config.get("max_len", 20))
    lo = max(int(task_config.get("min_len", 1)), hi // 2, 1)
    return sorted({int(round(v)) for v in np.linspace(lo, hi, 4)})


def check_model(model) -> str:
    """The model's kind of heads (probes.effective_attention.kind); one line if it has none
    or is not a language model."""
    if getattr(model, "arch", None) not in (*ARCHS, *HF_ARCHS):
        ea.kind(model)  # the one-line refusal: no attention and no effective attention
        check(False, f"ngram_heads takes {', '.join(ARCHS)} models, got {model.arch!r}")
    head = getattr(model.cfg, "head", "lm")
    check(head == "lm", f"ngram_heads needs a language-model head, got {head!r}")
    return ea.kind(model)


def compute(model, task_name: str = "copy", task_config: dict | None = None, n_max: int = 8,
            lengths: list[int] | None = None, batch_size: int = 64, seed: int = 0,
            mode: str = "mean", threshold: float = 0.5, draws: int = 10,
            top_k: int | None = None, n_hashing: int = 4, progress: bool = True,
            data: str = "auto", batches: list | None = None, text: str | None = None,
            feeding: bool | None = None, per_head: bool = False) -> dict:
    """All numbers of the analysis (see the module docstring). ``batches`` (from
    :func:`probe_batches`) replaces the probe data the task would give, so several models can
    be scored on the same examples. A pretrained LM (``task_name`` None) is probed on repeated
    random tokens of its vocabulary, or with ``data="text"`` on repeated windows of ``text``.
    ``feeding``: search the feeding heads (default: on suite transformers and Mamba-2).
    ``per_head``: also ablate every head alone (``per_head_drop`` [layer, head]: the string
    accuracy each costs), which finds the heads a copy needs even where no head's pattern
    concentrates on the copied token."""
    kind = check_model(model)
    hf = ea.is_hf(model)
    data_mode = data
    check(n_max >= 1 and batch_size >= 1 and draws >= 1,
          "n_max, batch_size and draws must be >= 1")
    check(mode in ("mean", "zero"), f"mode must be mean or zero, got {mode!r}")
    task_config = dict(task_config or {})
    if lengths is None:
        lengths = default_lengths(task_name, task_config, data)
    check(all(L >= 2 for L in lengths), f"lengths must be >= 2, got {lengths}")
    model.eval()
    Lh, H = model.cfg.n_layers, ea.n_heads(model)
    if batches is None and task_name is None:
        batches = hf_batches(model, lengths, batch_size, make_generator(seed),
                             data_name(None, data), text)
    elif batches is None:
        batches = probe_batches(model, task_name, task_config, lengths, batch_size, seed, data)
    data = batches
    # Mamba's heads are its channels: ablating each in turn is hundreds of runs, and its
    # conv, not a head, does the local hashing the feeding-head search looks for; a
    # pretrained LM has hundreds of heads before its match heads
    feeding_on = (kind != "s6" and not hf) if feeding is None else feeding
    steps = 3 + 2 * draws + (Lh * H if feeding_on else 0) + (Lh * H if per_head else 0)
    bar = tqdm(total=steps, desc=NAME, disable=not progress, leave=False)

    sc = pattern_scores(model, data, n_max, patterns=ea.head_patterns)
    bar.update(1)
    match_score, best_n = _nanmax(sc["match"])  # [layer, head]
    order = sorted(((float(match_score[i, h]), i, h) for i in range(Lh) for h in range(H)),
                   reverse=True)
    if top_k:
        top = [(i, h) for _, i, h in order[:top_k]]
    else:
        top = [(i, h) for s, i, h in order if s >= threshold] or [(order[0][1], order[0][2])]
    threshold_met = all(float(match_score[i, h]) >= threshold for i, h in top)

    # ---- causal check: ablate the match heads vs as many random other heads
    all_tokens = [torch.cat([b.prompts, b.answers], 1) for b, _ in data]
    means = {}
    for tok in all_tokens:
        for i, m in ea.head_means(model, tok.to(model.device)).items():
            means[i] = means.get(i, 0) + m / len(all_tokens)
    base = accuracy(model, data)
    bar.update(1)
    with ea.ablated_heads(model, top, mode, means):
        abl = accuracy(model, data)
    bar.update(1)
    # two controls: as many random heads from anywhere, and from the match heads' own layers
    others = [(i, h) for i in range(Lh) for h in range(H) if (i, h) not in top]
    top_layers = {i for i, _ in top}
    same_layer = [(i, h) for i, h in others if i in top_layers]
    rng = np.random.default_rng(seed)
    controls = {}
    for name, pool in (("random", others), ("random_same_layer", same_layer)):
        runs = []
        k = min(len(top), len(pool))
        for _ in range(draws if k else 0):
            pick = [pool[j] for j in rng.choice(len(pool), size=k, replace=False)]
            with ea.ablated_heads(model, pick, mode, means):
                acc = accuracy(model, data)
            runs.append({"heads": pick, **acc})
            bar.update(1)
        controls[name] = _control_summary(runs, base)

    per_head_drop = None
    if per_head:
        per_head_drop = torch.zeros(Lh, H)
        for i in range(Lh):
            for h in range(H):
                with ea.ablated_heads(model, [(i, h)], mode, means):
                    per_head_drop[i, h] = base["string_acc"] - accuracy(model, data)["string_acc"]
                bar.update(1)

    # ---- hashing heads: earlier-layer heads whose ablation lowers the match heads' score
    top_layer = max(i for i, _ in top)
    ref = float(np.mean([float(sc["match"][i, h, best_n[i, h] - 1]) for i, h in top]))
    feeding = []
    for i in range(top_layer if feeding_on else 0):
        for h in range(H):
            with ea.ablated_heads(model, [(i, h)], mode, means):
                s2 = pattern_scores(model, data, n_max, patterns=ea.head_patterns)["match"]
            after = float(np.mean([float(s2[a, b, best_n[a, b] - 1]) for a, b in top]))
            feeding.append({"layer": i, "head": h, "match_score_drop": ref - after})
            bar.update(1)
    bar.close()
    feeding.sort(key=lambda r: -r["match_score_drop"])
    hashing = [(r["layer"], r["head"]) for r in feeding[:n_hashing]]

    def drop(acc):
        return {k: base[k] - acc[k] for k in ("string_acc", "char_acc")}

    return to_jsonable({
        "task": task_name, "lengths": lengths, "batch_size": batch_size, "n_max": n_max,
        "mode": mode, "threshold": threshold, "seed": seed,
        "n_layers": Lh, "n_heads": H, "pe": getattr(model.cfg, "pe", None),
        "arch": model.arch, "heads": kind, "data": data_name(task_name, data_mode),
        "feeding_searched": feeding_on, "per_head_drop": per_head_drop,
        "match_by_n": sc["match"], "queries_by_n": sc["counts"],
        "match_score": match_score, "best_n": best_n, "target_score": sc["target"],
        "match_heads": [{"layer": i, "head": h, "match_score": float(match_score[i, h]),
                         "best_n": int(best_n[i, h]), "target_score": float(sc["target"][i, h])}
                        for i, h in top],
        "threshold_met": threshold_met,
        "previous_token_profile": sc["profile"],
        "feeding_heads": feeding,
        "hashing_heads": [{"layer": i, "head": h, "profile": sc["profile"][i, h]}
                          for i, h in hashing],
        "accuracy": base,
        "ablated": {"heads": top, **abl, "drop": drop(abl)},
        **controls,
    })


def _control_summary(runs: list[dict], base: dict) -> dict:
    """Mean and max accuracy drop over the random-ablation draws."""
    if not runs:
        return {"runs": [], "string_drop_mean": None, "string_drop_max": None,
                "char_drop_mean": None, "char_drop_max": None}
    ds = [base["string_acc"] - r["string_acc"] for r in runs]
    dc = [base["char_acc"] - r["char_acc"] for r in runs]
    return {"runs": runs, "string_drop_mean": float(np.mean(ds)), "string_drop_max": float(max(ds)),
            "char_drop_mean": float(np.mean(dc)), "char_drop_max": float(max(dc))}


# ---------------------------------------------------------------------------- plot
ANNOTATE_MAX_HEADS = 16  # write the scores into the heat map up to this many heads per layer


def _heatmap(fig, ax, result: dict, title: str, key: str = "match_score") -> None:
    """``key`` (match score, or the per-head ablation drop) per layer and head, on the 0..1
    scale every panel shares."""
    ms = np.array(result[key], dtype=float)
    im = ax.imshow(ms, vmin=0, vmax=1, cmap="viridis", aspect="auto", interpolation="nearest")
    if ms.shape[1] <= ANNOTATE_MAX_HEADS:
        for i in range(ms.shape[0]):
            for h in range(ms.shape[1]):
                ax.text(h, i, f"{ms[i, h]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if ms[i, h] < 0.6 else "black")
        ax.set(xticks=range(ms.shape[1]))
    ax.set(xlabel="channel" if result.get("heads") == "s6" else "head", ylabel="layer",
           title=title, yticks=range(ms.shape[0]))
    ax.grid(False)
    fig.colorbar(im, ax=ax, fraction=0.046)


def _by_n(result: dict) -> np.ndarray:
    return np.array([[[np.nan if v is None else v for v in row] for row in layer]
                     for layer in result["match_by_n"]], dtype=float)


def plot(result: dict):
    if "models" in result:
        return plot_side_by_side(result)
    fig, ax = new_figure(4, width_per_panel=3.9, height=3.4)
    _heatmap(fig, ax[0], result, "n-gram match score (max over n)")

    by_n = _by_n(result)
    ns = np.arange(1, by_n.shape[2] + 1)
    for r in result["match_heads"]:
        ax[1].plot(ns, by_n[r["layer"], r["head"]], marker="o", label=f"L{r['layer']}H{r['head']}")
    ax[1].set(xlabel="n (length of the matched n-gram)", ylabel="mass on n-gram successors",
              ylim=(0, 1.05), title="match heads: score vs n")
    ax[1].legend()

    for r in result["hashing_heads"]:
        prof = np.array(r["profile"], dtype=float)
        ax[2].plot(np.arange(len(prof)), prof, marker="s", label=f"L{r['layer']}H{r['head']}")
    ax[2].set(xlabel="offset back from the query (0 = own token)", ylabel="attention mass",
              ylim=(0, 1.05), title="hashing heads: previous-token profile")
    if result["hashing_heads"]:
        ax[2].legend()

    base, abl = result["accuracy"], result["ablated"]
    x = np.arange(2)
    w = 0.2
    ax[3].bar(x - 1.5 * w, [base["string_acc"], base["char_acc"]], w, label="no ablation",
              color=COLORS["hard_alibi"])
    bars = ax[3].bar(x - 0.5 * w, [abl["string_acc"], abl["char_acc"]], w,
                     label=f"match heads ({len(abl['heads'])})", color=COLORS["rope"])
    ax[3].bar_label(bars, fmt="%.2f", fontsize=6)
    for j, (key, label, color) in enumerate((("random", "random heads", COLORS["lstm"]),
                                             ("random_same_layer", "random, same layer",
                                              COLORS["alibi"]))):
        runs = result[key]["runs"]
        if not runs:
            continue
        rs = np.array([[r["string_acc"], r["char_acc"]] for r in runs])
        ax[3].bar(x + (0.5 + j) * w, rs.mean(0), w, color=color, capsize=3,
                  yerr=[rs.mean(0) - rs.min(0), rs.max(0) - rs.mean(0)],
                  label=f"{label} ({len(rs)} draws, range)")
    ax[3].set(xticks=x, xticklabels=["string", "char"], ylabel="copy accuracy", ylim=(0, 1.05),
              title=f"{result['mode']}-ablation")
    ax[3].legend(loc="lower left", fontsize=6)
    return fig


def plot_side_by_side(result: dict):
    """Several models on the same data: a match-score map per model (attention heads and SSM
    heads on one scale), the best head's score against n, and the ablation of each model's
    match heads against random heads."""
    runs = result["models"]
    N = len(runs)
    per_head = all(r.get("per_head_drop") is not None for r in runs)
    # with --per-head a second row: what ablating each head alone costs, under its scores
    rows, cols = (2, N + 1) if per_head else (1, N + 2)
    fig, grid = plt.subplots(rows, cols, squeeze=False, figsize=(3.9 * cols, 3.4 * rows))
    for j, r in enumerate(runs):
        what = "effective attention" if r["heads"] != "attention" else "attention"
        _heatmap(fig, grid[0][j], r, f"{r['label']}: match score ({what})")
        if per_head:
            _heatmap(fig, grid[1][j], r, f"{r['label']}: string acc. lost, head ablated alone",
                     "per_head_drop")
    ax = [*grid[0][:N], grid[0][N], grid[-1][-1]]
    a = ax[len(runs)]
    for r in runs:
        by_n = _by_n(r)
        best = r["match_heads"][0]
        a.plot(np.arange(1, by_n.shape[2] + 1), by_n[best["layer"], best["head"]], marker="o",
               color=COLORS.get(r["label"]), label=f"{r['label']} L{best['layer']}H{best['head']}")
    a.set(xlabel="n (length of the matched n-gram)", ylabel="mass on n-gram successors",
          ylim=(0, 1.05), title="best head: score vs n")
    a.legend(fontsize=6)
    a = ax[len(runs) + 1]
    x = np.arange(len(runs))
    w = 0.27
    base = [r["accuracy"]["string_acc"] for r in runs]
    abl = [r["ablated"]["string_acc"] for r in runs]
    a.bar_label(a.bar(x - w, base, w, label="no ablation", color=COLORS["hard_alibi"]),
                fmt="%.2f", fontsize=6)
    a.bar_label(a.bar(x, abl, w, label="match heads ablated", color=COLORS["rope"]),
                fmt="%.2f", fontsize=6)
    labelled = False
    for j, r in enumerate(runs):
        rs = np.array([d["string_acc"] for d in r["random"]["runs"]], dtype=float)
        if rs.size:
            a.bar(x[j] + w, rs.mean(), w, color=COLORS["lstm"], capsize=3,
                  yerr=[[rs.mean() - rs.min()], [rs.max() - rs.mean()]],
                  label=None if labelled else "as many random heads (range)")
            labelled = True
    a.set(xticks=x, xticklabels=[r["label"] for r in runs], ylabel="string accuracy",
          ylim=(0, 1.35), yticks=np.linspace(0, 1, 6),
          title=f"{result['mode']}-ablation on {result['data']} data")
    a.legend(loc="upper center", fontsize=6, ncol=2)
    return fig


def _head_rows(result: dict, prefix: list) -> list[list]:
    rows = []
    for r in result["match_heads"]:
        rows.append([*prefix, r["layer"], r["head"], r["match_score"], r["best_n"],
                     r["target_score"]])
    return rows


PER_HEAD_ROWS = 5  # heads listed by the accuracy their ablation alone costs
GRID_HEADS = 32  # per-head match scores are printed for layers this narrow (not Mamba channels)


def _grid_rows(result: dict, prefix: list, width: int) -> list[list]:
    """Every head's match score, a row per layer (the figure's heat map, as numbers)."""
    scores = np.asarray(result["match_score"], dtype=float)  # [layer, head]
    if scores.ndim != 2 or scores.shape[1] > GRID_HEADS:
        return []
    return [[*prefix, f"match L{layer}", " ".join(f"{v:.2f}" for v in row),
             *[""] * (width - len(prefix) - 2)] for layer, row in enumerate(scores)]


def _per_head_rows(result: dict, prefix: list) -> list[list]:
    """The heads whose ablation alone costs the most string accuracy (with ``--per-head``),
    with their match and target scores."""
    drop = result.get("per_head_drop")
    if drop is None:
        return []
    d = np.array(drop, dtype=float)
    ms, ts = np.array(result["match_score"]), np.array(result["target_score"])
    order = np.argsort(-d, axis=None)[:PER_HEAD_ROWS]
    rows = []
    for flat in order:
        i, h = np.unravel_index(flat, d.shape)
        rows.append([*prefix, f"L{i}H{h} alone", f"drop {d[i, h]:.3f}", float(ms[i, h]), "",
                     float(ts[i, h])])
    return rows


def table(result: dict) -> list[list]:
    if "models" in result:
        rows = [["model", "layer", "head", "match", "best n", "target"]]
        for r in result["models"]:
            rows += _head_rows(r, [r["label"]])
        for r in result["models"]:
            rows += _per_head_rows(r, [r["label"]])
        for r in result["models"]:
            rows += _grid_rows(r, [r["label"]], 6)
        rows.append(["", "", "", "", "", ""])
        rows.append(["model", "string acc", "match heads abl.", "random abl. mean", "", ""])
        for r in result["models"]:
            rnd = r["random"]["string_drop_mean"]
            rows.append([r["label"], r["accuracy"]["string_acc"], r["ablated"]["string_acc"],
                         "" if rnd is None else r["accuracy"]["string_acc"] - rnd, "", ""])
        return rows
    rows = [["layer", "head", "match", "best n", "target"], *_head_rows(result, []),
            *_per_head_rows(result, []), *_grid_rows(result, [], 5)]
    b, a = result["accuracy"], result["ablated"]
    rows.append(["", "", "", "", ""])
    rows.append(["accuracy", "string", "char", "", ""])
    rows.append(["no ablation", b["string_acc"], b["char_acc"], "", ""])
    rows.append(["match heads", a["string_acc"], a["char_acc"], "", ""])
    rows.append(["drop", "string", "char", "", ""])
    rows.append(["match heads", a["drop"]["string_acc"], a["drop"]["char_acc"], "", ""])
    for key in ("random", "random_same_layer"):
        c = result[key]
        if c["runs"]:
            rows.append([f"{key} mean", c["string_drop_mean"], c["char_drop_mean"], "", ""])
            rows.append([f"{key} max", c["string_drop_max"], c["char_drop_max"], "", ""])
    return rows


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-max", type=int, default=8, help="largest n of the match score")
    p.add_argument("--lengths", default=None, help="string lengths to probe (default: upper "
                   "half of the (first) checkpoint's training range)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--mode", choices=["mean", "zero"], default="mean", help="ablation")
    p.add_argument("--threshold", type=float, default=0.5, help="match score of a match head")
    p.add_argument("--top-k", type=int, default=None, help="ablate the k best heads instead")
    p.add_argument("--draws", type=int, default=10, help="random ablations")
    p.add_argument("--data", choices=DATA, default="auto",
                   help="probe examples: auto (copy examples for copy models, the task's own "
                   "rows for induction models, else repeated random strings; a pretrained LM: "
                   "both repeat and text), repeat, task (each model's own task) or text (a "
                   "pretrained LM: repeated windows of --text)")
    p.add_argument("--per-head", action="store_true", help="also ablate each head alone "
                   "(the string accuracy each costs)")
    p.add_argument("--text", default=None, help="a pretrained LM's natural text (a UTF-8 "
                   "file; default: text the suite generates offline, not natural text)")


def _kwargs(args) -> dict:
    return dict(n_max=args.n_max, batch_size=args.batch_size, seed=args.seed, mode=args.mode,
                threshold=args.threshold, draws=args.draws, top_k=args.top_k,
                per_head=args.per_head)


def probe_text(path: str | None, seed: int) -> tuple[str, str]:
    """``(text, source)``: the file's text, or the suite's offline generated text (and a note
    that it is not natural text)."""
    if path is None:
        print(f"note: {GENERATED_TEXT_NOTE}")
        return generated_text(GENERATED_WORDS, make_generator(seed)), "generated"
    return read_text(path), path


def task_of(model) -> dict | None:
    """The task a model was trained on: a suite checkpoint's, or the one ``models.export_hf``
    stored in an exported model's config (``seqprobe``: its tokenizer keeps our token ids, so it
    is probed on the same examples as its .pt file); None for a pretrained LM."""
    task = model.checkpoint.get("task")
    if task is None and ea.is_hf(model):
        prov = model.checkpoint["model"].get("config", {}).get("seqprobe")
        if isinstance(prov, dict) and isinstance(prov.get("task"), dict):
            task = prov["task"]
    return task


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    check(len(checkpoints) >= 1, "give checkpoint(s) (or --train quick)")
    lengths = ints(args.lengths) if args.lengths else None
    models = []
    for c in checkpoints:  # all loaded (and refused) before any compute
        archs = HF_ARCHS if is_hf_source(c.path) else None
        model = load_model(c.path, archs=archs, device=args.device, tasks=TASKS)
        check_model(model)
        task = task_of(model)
        check(task is None or task["name"] in TASKS, f"{c.path}: this analysis needs a model "
              f"trained on {' or '.join(TASKS)}, but its task is {task and task['name']!r}")
        models.append((c, model))
    runs = []  # (label, checkpoint, model, data)
    for c, m in models:
        if task_of(m) is None:
            kinds = ("repeat", "text") if args.data == "auto" else (args.data,)
            check(set(kinds) <= {"repeat", "text"}, f"{c.path}: a pretrained LM has no task; "
                  "probe it with --data repeat, text or auto (both)")
            runs += [(f"{m.name} {k}" if len(kinds) > 1 else m.name, c.path, m, k)
                     for k in kinds]
        else:
            check(args.data != "text", f"{c.path}: --data text is for pretrained LMs (a suite "
                  "model knows only its task's tokens)")
            runs.append((m.name if ea.is_hf(m) else label_for(m), c.path, m, args.data))
    text, source = (probe_text(args.text, args.seed) if any(r[3] == "text" for r in runs)
                    else (None, None))
    if len(runs) == 1:
        (_, path, model, data), = runs
        task = task_of(model) or {"name": None, "config": {}}
        result = compute(model, task["name"], task["config"], lengths=lengths, data=data,
                         text=text, **_kwargs(args))
        result["checkpoint"] = path
        if source:
            result["text_source"] = source
        if not result["threshold_met"]:
            print(f"note: no head reaches match score {args.threshold}; ablated the best one")
        return result
    result = compute_many(runs, lengths, text=text, **_kwargs(args))
    if source:
        result["text_source"] = source
    return result


def shared_data(models: list, lengths: list[int] | None, batch_size: int, seed: int,
                data: str) -> tuple[str, dict, list[int], list | None]:
    """``(task, config, lengths, batches)`` every model is probed on: copy examples when all
    were trained on copy tasks over one alphabet; repeated random strings over the letters all
    of them know with ``data="repeat"``; else (``task``, or ``auto`` over different tasks)
    batches None: each model gets its own task's examples. (Repeats over the few letters an
    induction model knows put chance-level n-gram matches everywhere, and are as foreign to a
    copy model as to it; each model on its own task is the fairer side by side.)"""
    tasks = [task_of(m) for _, _, m, _ in models]
    first = tasks[0]
    copy = all(t["name"] in COPY_TASKS for t in tasks)
    if data == "task" or (data == "auto" and not copy):
        return first["name"], first["config"], lengths, None
    if data == "auto":
        Ds = {int(t["config"].get("D", 26)) for t in tasks}
        check(len(Ds) == 1, f"the copy checkpoints use different alphabets (D = {sorted(Ds)}); "
              "use --data repeat")
        lengths = lengths or default_lengths(first["name"], first["config"])
        return first["name"], first["config"], lengths, probe_batches(
            models[0][2], first["name"], first["config"], lengths, batch_size, seed)
    D = min(letters_of(t["name"], t["config"]) for t in tasks)
    lengths = lengths or default_lengths(first["name"], first["config"])
    return "repeat", {"D": D}, lengths, repeated_batches(D, lengths, batch_size,
                                                         make_generator(seed))


def compute_many(models: list[tuple[str, str, object, str]], lengths: list[int] | None = None,
                 batch_size: int = 64, seed: int = 0, text: str | None = None, **kw) -> dict:
    """:func:`compute` for each ``(label, checkpoint, model, data)``: suite models on shared
    probe data (:func:`shared_data`); with a pretrained LM among them, each model on its own
    (a pretrained LM's tokens are not a suite task's)."""
    data = models[0][3]
    if any(task_of(m) is None for _, _, m, _ in models):
        task, config, batches = None, {}, None
    else:
        task, config, lengths, batches = shared_data(models, lengths, batch_size, seed, data)
    out, seen = [], set()
    for label, path, model, data in tqdm(models, desc=NAME, leave=False):
        while label in seen:  # two checkpoints of one kind
            label += "'"
        seen.add(label)
        t = task_of(model) or {"name": None, "config": {}}
        if t["name"] is None:
            r = compute(model, None, {}, lengths=lengths, batch_size=batch_size, seed=seed,
                        data=data, text=text, progress=False, **kw)
        elif batches is None:
            r = compute(model, t["name"], t["config"], lengths=lengths, batch_size=batch_size,
                        seed=seed, data="task", progress=False, **kw)
        else:
            r = compute(model, task if task != "repeat" else t["name"], config, lengths=lengths,
                        batch_size=batch_size, seed=seed, data="repeat" if task == "repeat"
                        else data, batches=batches, progress=False, **kw)
        out.append({"label": label, "checkpoint": path, "task": t["name"], **r})
    names = {r["data"] for r in out}
    return {"models": out, "data": names.pop() if len(names) == 1 else "task",
            "mode": out[0]["mode"], "lengths": lengths, "seed": seed}


# ---------------------------------------------------------------------------- the paper's claims
def claim_match_heads(d: dict) -> tuple[str, bool]:
    """Some head's match score reaches the threshold (the heads found are listed)."""
    heads = d.get("match_heads", [])
    best = max((h["match_score"] for h in heads), default=0.0)
    names = ", ".join(f"L{h['layer']}H{h['head']}" for h in heads[:4])
    return (f"{len(heads)} heads ({names}) with match score >= {d.get('threshold')}, best "
            f"{best:.2f}", bool(d.get("threshold_met")) and bool(heads))


def claim_ablation(d: dict) -> tuple[str, bool]:
    """Ablating the match heads costs >= 50 points of string accuracy, and random heads less
    than half of that."""
    drop = get(d, "ablated", "drop", "string_acc")
    rnd = get(d, "random", "string_drop_mean")
    if drop is None:
        return "no ablation result in the JSON", False
    text = f"string-accuracy drop {100 * drop:.0f} pts (random heads: "
    text += f"{100 * rnd:.0f} pts)" if rnd is not None else "n/a)"
    return text, drop >= 0.5 and (rnd is None or rnd < drop / 2)


FIGURE = Figure(
    "n-gram match heads in a copy transformer", "Copy paper §2.2, Fig. 3, App. C",
    (Claim("copy transformers retrieve by n-gram matching: heads attend to the successor of "
           "the earlier occurrence of the current n-gram", claim_match_heads),
     Claim("ablating those heads destroys copying; as many random heads do not",
           claim_ablation)),
    recipes=lambda preset: [RECIPE], slots=2)


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=4)


if __name__ == "__main__":
    raise SystemExit(main())
