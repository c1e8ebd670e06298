"""Copying strings that hold a duplicated n-gram (copy paper §3.4, Fig. 4).

``python -m analyses.duplicated_ngrams ckpt.pt``: string- and character-level copy accuracy
(teacher-forced argmax, as the paper's synthetic evaluation) on strings in which one n-gram is
repeated — the two copies followed by different tokens — for n = 1..10, beside the
no-duplicate baseline at the same length. A model that copies by looking up the last m tokens
is confused once n ≥ m, so accuracy stays flat for small n and falls from some n on: that n
(the "duplicated-n-gram accuracy loss") is reported as the first n whose accuracy is clearly
below the baseline (by more than 5 points and two standard errors), and where it falls below
half the baseline. The hash-copy construction of App. C with a known n (``--reference-n``) is
evaluated on the same strings as a calibration: it must fail from exactly that n on.

Strings must hold two copies and a successor (length ≥ 2n + 1), so n = 10 needs length ≥ 21.
When L = 2n + 1 the later copy ends the string and confuses only the <EOS> step, which is not
scored, so large n need longer strings: the default lengths are the training max_len and
max(max_len, 3·n_max). String accuracy comes from one teacher-forced pass (exact: equal to
greedy decoding's), character accuracy per token given the true prefix — the copy paper's
synthetic evaluation (the authors' code takes the argmax of one forward pass over prompt and
true answer); ``--greedy`` decodes instead.

A pretrained HuggingFace causal LM (a model directory or a hub name) gets the same strings
drawn over the ordinary tokens of its tokenizer, n counted in tokens, in the copy paper's prompt
format for pretrained models (§4.2, App. B.2: the string twice, then its first token;
``analyses.copy_models.copy_prompts``); with only such models the default length is max(2·n_max + 1,
3·n_max).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from analyses.claims import Claim, Figure, Margin, Reading, tightest
from analyses.common import Checkpoint, need, run_analysis, to_jsonable
from analyses.copy_models import COPY_OR_HF_ARCHS, copy_prompts, load_copy_models
from figures.style import COLORS, new_figure
from models.registry import HF_ARCHS
from probes.copying import accuracy_at
from seqprobe import memory
from seqprobe.cli import add_fields
from seqprobe.config import check
from seqprobe.flags import MAX_BATCH, MAX_EXAMPLES, MAX_LENGTH, MAX_N, Config, bound
from tasks.copy import CopyConfig, CopyTask, DuplicatedNgramCopyTask, DupNgramConfig

# The constructions and the meta-device memory estimate (model code, which imports
# TransformerLens and so transformers) are imported in the functions that build them: --help
# and the refusals read no model code.

NAME = "duplicated_ngrams"
REF_STYLES = (("#555555", "s"), ("#999999", "^"), ("#bbbbbb", "v"))


def first_clear_drop(baseline: float, accs: list[float | None], ns: list[int], n_examples: int,
                     min_drop: float = 0.05) -> int | None:
    """Smallest n whose accuracy is below the baseline by > max(min_drop, 2 standard errors)."""
    def se(p):
        return math.sqrt(max(p * (1 - p), 1e-12) / n_examples)

    for n, a in zip(ns, accs, strict=True):
        if a is None:
            continue
        if baseline - a > max(min_drop, 2 * math.sqrt(se(baseline) ** 2 + se(a) ** 2)):
            return n
    return None


def compute(models: dict, D: int, n_values: list[int] | None = None,
            lengths: list[int] | None = None, n_examples: int = 512, batch_size: int = 128,
            seed: int = 0, train_max_len: int | None = None, greedy: bool = False,
            progress: bool = True) -> dict:
    """Accuracy vs duplicated n-gram length for every model in ``models`` ({label: model})."""
    n_values = list(n_values or range(1, 11))
    check(all(n >= 1 for n in n_values), f"n values must be >= 1, got {n_values}")
    if lengths is None:
        top = max(train_max_len or 0, 2 * max(n_values) + 1)
        lengths = sorted({max(train_max_len or 0, 3), max(top, 3 * max(n_values))})
    check(all(L >= 3 for L in lengths), f"lengths must be >= 3, got {lengths}")
    plain = CopyTask(CopyConfig(D=D, min_len=1, max_len=max(lengths)))
    # a pretrained LM reads the strings in its own tokens (checked before any work)
    prompts_of = {label: copy_prompts(m, plain, lengths) for label, m in models.items()}
    jobs = len(models) * len(lengths) * (1 + len(n_values))
    bar = tqdm(total=jobs, desc=NAME, disable=not progress, leave=False)
    curves = {}
    for label, model in models.items():
        model.eval()
        per_len = []
        prompts = prompts_of[label]
        for L in lengths:
            base = accuracy_at(model, prompts, L, n_examples, seed + L, prompts.example_len(L),
                               batch_size, greedy)
            bar.update(1)
            rows = []
            for n in n_values:
                if 2 * n + 1 > L:
                    rows.append({"n": n, "string_acc": None, "char_acc": None})
                    bar.update(1)
                    continue
                task = copy_prompts(model, DuplicatedNgramCopyTask(
                    DupNgramConfig(D=D, min_len=L, max_len=L, n=n)))
                acc = accuracy_at(model, task, L, n_examples, seed + 1000 * n + L,
                                  task.example_len(L), batch_size, greedy)
                rows.append({"n": n, **acc})
                bar.update(1)
            accs = [r["string_acc"] for r in rows]
            drop_n = first_clear_drop(base["string_acc"], accs, n_values, n_examples)
            half_n = next((n for n, a in zip(n_values, accs, strict=True)
                           if a is not None and a < base["string_acc"] / 2), None)
            per_len.append({"length": L, "baseline": base, "by_n": rows, "first_drop_n": drop_n,
                            "half_n": half_n})
        curves[label] = per_len
    bar.close()
    return to_jsonable({"D": D, "n_values": n_values, "lengths": lengths, "greedy": greedy,
                        "n_examples": n_examples, "seed": seed, "train_max_len": train_max_len,
                        "curves": curves})


def plot(result: dict):
    lengths = result["lengths"]
    fig, axes = new_figure(len(lengths), width_per_panel=4.6, height=3.4)
    palette = [COLORS["hard_alibi"], COLORS["nope"], COLORS["rope"], COLORS["alibi"],
               COLORS["mamba"], COLORS["lstm"]]
    for j, ax in enumerate(axes):
        n_ref, named = 0, set()
        for k, (label, per_len) in enumerate(result["curves"].items()):
            entry = per_len[j]
            ns = [r["n"] for r in entry["by_n"] if r["string_acc"] is not None]
            acc = [r["string_acc"] for r in entry["by_n"] if r["string_acc"] is not None]
            ref = label.startswith("construction")
            if ref:  # calibration curves: greys, dashed
                color, marker = REF_STYLES[n_ref % len(REF_STYLES)]
                n_ref += 1
            else:
                color, marker = palette[k % len(palette)], "o"
            line = ax.plot(ns, acc, marker=marker, ls="--" if ref else "-", color=color,
                           label=label)[0]
            # the reference lines of every model in its colour: the legend names each kind once
            ax.axhline(entry["baseline"]["string_acc"], color=line.get_color(), lw=0.8, ls=":",
                       label=None if "base" in named else "without a duplicate (each colour)")
            named.add("base")
            if entry["first_drop_n"] is not None and not ref:
                ax.axvline(entry["first_drop_n"], color=line.get_color(), lw=0.8, alpha=0.5,
                           label=None if "drop" in named else "first clear drop")
                named.add("drop")
        ax.set(xlabel="n (length of the duplicated n-gram)", ylabel="string-level accuracy",
               ylim=(-0.02, 1.02), title=f"copy with a duplicated n-gram, L = {entry['length']}")
    # one legend under the panels: inside, it sat on the "without a duplicate" lines near 1
    # (reference lines, which the overlap check does not count) and on the falling curves
    entries: dict = {}
    for ax in axes:  # every panel's entries, each label once (a panel may lack a drop line)
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    fig.legend(list(entries.values()), list(entries), loc="lower center",
               ncol=min(3, len(entries)), frameon=False)
    return fig


def table(result: dict) -> list[list]:
    rows = [["model", "L", "base"] + [f"n={n}" for n in result["n_values"]]
            + ["drop at", "< half at"]]
    for label, per_len in result["curves"].items():
        for e in per_len:
            rows.append([label, e["length"], e["baseline"]["string_acc"]]
                        + ["-" if r["string_acc"] is None else r["string_acc"] for r in e["by_n"]]
                        + [e["first_drop_n"] if e["first_drop_n"] is not None else "none",
                           e["half_n"] if e["half_n"] is not None else "none"])
    return rows


@dataclass(frozen=True)
class Settings(Config):
    """What the analysis measures (each field is a flag: seqprobe.cli.add_fields)."""

    n: tuple[int, ...] = field(default=tuple(range(1, 11)), metadata=bound(
        1, MAX_N, "n of an n-gram; papers: up to 10", help="duplicated n-gram lengths"))
    lengths: tuple[int, ...] | None = field(default=None, metadata=bound(
        1, MAX_LENGTH, "tokens per string",
        help="test string lengths (default: max(train max_len, 2·max n + 1))"))
    n_examples: int = field(default=512, metadata=bound(
        1, MAX_EXAMPLES, "examples per point; papers: up to 1,280", help="strings per point"))
    batch_size: int = field(default=128, metadata=bound(
        1, MAX_BATCH, "rows per forward pass; defaults: 4 to 512", help="rows per forward pass"))
    reference_n: tuple[int, ...] = field(default=(3, 5), metadata=bound(
        1, MAX_N, "n of an n-gram", allow_empty=True,
        help="hash-copy constructions to evaluate alongside ('' for none)"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_fields(p, Settings)
    p.add_argument("--greedy", action="store_true", help="decode greedily (slower)")


def memory_estimate(models: dict, D: int, reference_n: list[int], n_values: list[int],
                    lengths: list[int] | None, max_len: int, batch_size: int) -> int:
    """Bytes the run needs at its peak, from the flags and configs alone (erring high):

        Σ_n weights(construction n)  +  max over models of plain forward(batch_size, 2·L_max + 4)

    The constructions for every ``reference_n`` are held at once (their width grows as n²,
    so their weights as n⁴: n = 64 is a 42,240-wide model); the models are evaluated one after
    the other, each on ``batch_size`` strings of the longest length L_max (the default lengths
    of :func:`compute` when none are given) held twice in a copy example, in one teacher-forced
    pass (:func:`models.memory.forward_bytes`, ``cached=False``). A pretrained LM's forward is
    not estimated (no suite architecture to run on the meta device)."""
    from models.constructions import HashCopyConfig, hash_copy_model_config
    from models.memory import forward_bytes, weight_bytes

    n_top = max(n_values, default=1)
    L = max(lengths) if lengths else max(max_len, 3, 2 * n_top + 1, 3 * n_top)
    positions = 2 * L + 4
    configs = [("transformer", hash_copy_model_config(HashCopyConfig(n=n, D=D)))
               for n in reference_n]
    weights = sum(weight_bytes(arch, cfg) for arch, cfg in configs)
    configs += [(m.arch, m.cfg) for m in models.values() if m.arch not in HF_ARCHS]
    peak = max((forward_bytes(arch, cfg, batch_size, positions, cached=False)
                for arch, cfg in configs), default=0)
    return weights + peak


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    from models.constructions import build_hash_copy_transformer

    need(checkpoints, "copy checkpoints")
    models, info, D = load_copy_models([c.path for c in checkpoints], args.device,
                                       COPY_OR_HF_ARCHS)
    max_len = max(int(i["max_len"] or 0) for i in info.values())
    memory.check_fits(memory_estimate(models, D, list(args.reference_n), list(args.n),
                                      args.lengths, max_len, args.batch_size),
                      f"{NAME} (constructions for --reference-n {list(args.reference_n)}, "
                      f"--batch-size {args.batch_size})",
                      "lower --reference-n (a construction's weights grow as n^4), "
                      "--batch-size or --lengths")
    for n in args.reference_n:
        models[f"construction n={n}"] = build_hash_copy_transformer(n, D).to(args.device)
    n_values = list(args.n)
    lengths = list(args.lengths) if args.lengths else None
    if lengths is None and not max_len and n_values:  # pretrained LMs only: no training length
        lengths = [max(2 * max(n_values) + 1, 3 * max(n_values))]
    result = compute(models, D, n_values, lengths,
                     n_examples=args.n_examples, batch_size=args.batch_size, seed=args.seed,
                     train_max_len=max_len, greedy=args.greedy)
    result["checkpoints"] = [c.path for c in checkpoints]
    return result


# ---------------------------------------------------------------------------- the paper's claims
def claim_flat_then_falls(d: dict) -> Reading:
    """Fig. 4: flat for small n, falling for larger n (first curve, longest length)."""
    label, per_len = next(iter(d["curves"].items()))
    e = per_len[-1]
    accs = {r["n"]: r["string_acc"] for r in e["by_n"] if r["string_acc"] is not None}
    base = e["baseline"]["string_acc"]
    small = accs.get(min(accs))
    large = accs.get(max(accs))
    drop_n = e["first_drop_n"]
    text = (f"{label}, L = {e['length']}: no-duplicate {base:.2f}; n = {min(accs)}: "
            f"{small:.2f}; n = {max(accs)}: {large:.2f}; first clear drop at n = {drop_n}")
    flat = small is not None and small >= base - 0.1
    falls = large is not None and large < base - 0.1 and drop_n is not None and drop_n > min(accs)
    margins = [Margin(f"string accuracy at n = {n}", a, rel, base - 0.1)
               for n, a, rel in ((min(accs), small, ">="), (max(accs), large, "<"))
               if a is not None]
    return Reading(text, flat and falls, tightest(*margins) if margins else None)


FIGURE = Figure(
    "Copying with a duplicated n-gram", "Copy paper §3.4, Fig. 4",
    (Claim("accuracy is flat for short duplicated n-grams and falls once n reaches the "
           "length of the n-grams the model matches", claim_flat_then_falls),),
    # the copy model whose match heads analyses.ngram_heads finds: Fig. 4 asks how long they are
    recipes=lambda level: ["copy/hard_alibi"])


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=4)


if __name__ == "__main__":
    raise SystemExit(main())
