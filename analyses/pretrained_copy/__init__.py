"""Pretrained LMs on the copy paper's phone-book and copy prompts (§4: Fig. 1c, Fig. 7a/b).

Pythia against Mamba, or any HuggingFace causal LMs given on the command line.

``python -m analyses.pretrained_copy EleutherAI/pythia-410m state-spaces/mamba-370m-hf``
(hub names need the internet; local HuggingFace model directories work offline). Each model is
booted through the suite's one HuggingFace loader (``models.hf.load_hf``) and prompted with its
own tokenizer, as in the authors' evaluation code:

* **phone-book lookup** (Fig. 1c, §4.3): accuracy against L, the number of entries in the book
  — synthetic "First Last: 609-323-7777" lines, two solved entries as shots, then a query name
  (format in :mod:`tasks.prompts`); right when the first line the model writes is the number.
* **copying a text** (Fig. 7a, §4.2): accuracy against the number of tokens copied — a window
  of that many tokens of the text, given twice and then its first word; right when the model
  writes the rest of the text before its first blank line. ``--shuffle`` shuffles the words of
  each window first (Fig. 7b). The windows start at random tokens of ``--text FILE`` (natural
  text: the paper samples C4 documents); without it, of sentences the suite generates offline
  from a small template grammar (:func:`tasks.prompts.generated_text`) — NOT natural text, and
  the figure, the table and the JSON say so. Models that share a tokenizer (Pythia and Mamba
  do) get the same windows; every model gets the same phone books.

Decoding is greedy (temperature 0, App. A.2), scored as the paper scores: the decoded
continuation, cut at the first newline (phone-book) or blank line (copy), stripped, must equal
the answer. One teacher-forced pass per prompt gives the greedy continuation as long as it
follows the expected tokens; from the first token it does not, decoding goes on step by step
until the verdict is certain (a wrong character, or the end mark), within the authors' token
budgets (50 new tokens for the phone-book, 1.5 × prompt + 50 in all for copying); an EOS token
ends the continuation, as in ``generate``. A point whose prompts do not fit an attention
model's context is reported as n/a.

Defaults are small (20 prompts per point, three sizes per task, books up to the L = 70 of
§4.3); ``--level paper`` evaluates 640 prompts per point (10 batches of 64, §4.1) at more sizes.
"""

from __future__ import annotations

import argparse
import math
from functools import partial

import torch
from tqdm.auto import tqdm

from analyses.claims import Claim, Figure, Margin, Reading
from analyses.common import export_of_dir, fmt, get, run_analysis, to_jsonable
from analyses.pretrained_copy.prompts import (
    Prompt,
    copy_prompts,
    decode,
    greedy_verdicts,
    phonebook_prompts,
)
from analyses.zoo.catalog import is_zoo_ref
from analyses.zoo.copy import PRETRAINED_COPY_LEVELS as LEVELS
from analyses.zoo.copy import PretrainedCopySettings
from figures.style import new_figure
from models.registry import HF_MAMBA, HF_MAMBA2, HF_TRANSFORMER
from seqprobe.cli import add_fields, add_level_flag, settings_from_args
from seqprobe.config import check
from tasks.base import make_generator
from tasks.prompts import GENERATED_TEXT_NOTE, generated_text, read_text

# The HuggingFace loader (models.hf: TransformerLens' bridge and transformers) is imported where
# the models are loaded: --help and the refusals read neither.
NAME = "pretrained_copy"
PROMPT_TASKS = ("phonebook", "copy")


# prompts x size (phone-book entries or copy tokens) of one point, all built before it runs:
# the paper's largest point is 640 x 300 tokens
MAX_PROMPT_UNITS = 10_000_000
PAPER_LONG_BOOK = 70  # §4.3: "when the phone-book size is long enough (L >= 70)"
HF_SSM_ARCHS = (HF_MAMBA, HF_MAMBA2)  # no positional limit on the context
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def context_of(model) -> int | None:
    """The longest sequence an attention model was built for; None for SSMs (no limit)."""
    return None if model.arch in HF_SSM_ARCHS else int(model.cfg.n_ctx)


def evaluate_point(model, build, n_examples: int, batch_size: int, on_batch
                   ) -> tuple[dict, Prompt]:
    """``(evaluate(...), first prompt)`` of the ``n_examples`` prompts ``build(k)`` makes (its
    first k prompts do not depend on k). The first is built alone first: a point whose prompt
    does not fit the model's context is n/a without building the others."""
    first = build(1)[0]
    limit, longest = context_of(model), len(first.ids) + len(first.expected)
    if limit is not None and longest > limit:
        on_batch(n_examples)
        return {"n": n_examples, "prompt_tokens": float(len(first.ids)), "acc": None,
                "note": f"prompts of {longest} tokens exceed the model's context ({limit})"}, first
    prompts = build(n_examples)
    return evaluate(model, prompts, batch_size, on_batch), prompts[0]


def evaluate(model, prompts: list[Prompt], batch_size: int, on_batch=None) -> dict:
    """Accuracy on one point; n/a when a prompt does not fit the model's context."""
    longest = max(len(p.ids) + len(p.expected) for p in prompts)
    limit = context_of(model)
    base = {"n": len(prompts), "prompt_tokens": sum(len(p.ids) for p in prompts) / len(prompts)}
    if limit is not None and longest > limit:
        if on_batch is not None:
            on_batch(len(prompts))
        return {**base, "acc": None, "note": f"prompts of up to {longest} tokens exceed the "
                f"model's context ({limit})"}
    verdicts = greedy_verdicts(model, prompts, batch_size, on_batch)
    right = [v for v, _ in verdicts]
    acc = sum(right) / len(right)
    return {**base, "acc": acc, "stderr": math.sqrt(acc * (1 - acc) / len(right)),
            "sample": {"answer": prompts[0].answer, "output": verdicts[0][1]}}


# ---------------------------------------------------------------------------- compute
def check_sizes(tasks, entries: list[int], lengths: list[int], n_examples: int,
                batch_size: int) -> None:
    check(bool(tasks) and set(tasks) <= set(PROMPT_TASKS),
          f"--tasks must be among {','.join(PROMPT_TASKS)}, got {','.join(tasks) or 'none'}")
    check(bool(entries) and all(L >= 3 for L in entries), f"--entries: phone books need >= 3 "
          f"entries (two shots and the query), got {entries}")
    check(bool(lengths) and all(n >= 1 for n in lengths),
          f"--lengths must be >= 1 token, got {lengths}")
    check(n_examples >= 1, f"--n-examples must be >= 1, got {n_examples}")
    check(batch_size >= 1, f"--batch-size must be >= 1, got {batch_size}")
    # the prompts of a point are all built before it runs: bound them before any is built
    for flag, sizes, unit in (("--entries", entries, "entries"), ("--lengths", lengths, "tokens")):
        work = n_examples * max(sizes)
        check(work <= MAX_PROMPT_UNITS, f"--n-examples {n_examples} x {flag} up to {max(sizes)} "
              f"is {work:,} {unit} of prompts per point, more than {MAX_PROMPT_UNITS:,}; lower "
              "one of them")


def model_info(model) -> dict:
    m = model.provenance.pretrained
    return {"source": model.provenance.source, "arch": model.arch,
            "hf_architecture": m["hf_architecture"],
            "model_type": m["config"].get("model_type"), "n_params": model.n_params(),
            "context": context_of(model)}


def compute(models: dict, tasks: tuple[str, ...] = PROMPT_TASKS, entries: list[int] | None = None,
            lengths: list[int] | None = None, n_examples: int = 20, text: str | None = None,
            text_source: str | None = None, shuffle: bool = False, seed: int = 0,
            batch_size: int = 4, progress: bool = True) -> dict:
    """Accuracies of {label: model} (``models.hf.HFModel``s) on the phone-book and copy
    prompts. ``text``: the text copy windows are cut from (``text_source`` names where it came
    from; default: the suite's generated sentences)."""
    entries = entries or list(LEVELS["quick"].entries)
    lengths = lengths or list(LEVELS["quick"].lengths)
    check_sizes(tasks, entries, lengths, n_examples, batch_size)
    natural = text is not None
    if text is None:  # enough words for every window length to start anywhere
        text = generated_text(20 * max(lengths) + 1000, make_generator(seed))
    text_ids = {label: list(m.tokenizer(text, add_special_tokens=False)["input_ids"])
                for label, m in models.items()} if "copy" in tasks else {}
    for label, ids in text_ids.items():  # every model checked before any is run
        check(len(ids) >= max(lengths), f"{text_source or 'the text'} has {len(ids)} tokens "
              f"for {label}'s tokenizer, fewer than the longest copy length {max(lengths)}")
    result = {"seed": seed, "n_examples": n_examples,
              "models": {label: model_info(m) for label, m in models.items()}}
    points = len(entries) * ("phonebook" in tasks) + len(lengths) * ("copy" in tasks)
    bar = tqdm(total=len(models) * points * n_examples, desc=NAME, unit="prompt",
               disable=not progress, leave=False)
    if "phonebook" in tasks:
        curves, example = {}, None
        for label, m in models.items():
            curves[label] = []
            for L in entries:
                r, first = evaluate_point(m, partial(phonebook_prompts, m.tokenizer, L,
                                                     seed=seed), n_examples, batch_size, bar.update)
                example = example or {"prompt": first.text, "answer": first.answer}
                curves[label].append({"entries": L, **r})
        result["phonebook"] = {"entries": entries, "shots": 2, "curves": curves,
                               "example": example}
    if "copy" in tasks:
        curves, example = {}, None
        for label, m in models.items():
            curves[label] = []
            for n in lengths:
                build = partial(copy_prompts, m.tokenizer, text_ids[label], n, seed=seed,
                                shuffle=shuffle)
                r, first = evaluate_point(m, build, n_examples, batch_size, bar.update)
                example = example or {"prompt": first.text, "answer": first.answer}
                curves[label].append({"tokens": n, **r})
        # characters a tokenizer cannot write (<unk>) drop out of its windows
        unknown = {label: sum(t == m.tokenizer.unk_token_id for t in text_ids[label])
                   for label, m in models.items() if m.tokenizer.unk_token_id is not None}
        result["copy"] = {
            "lengths": lengths, "curves": curves, "example": example,
            "text": {"source": text_source or "generated", "natural": natural,
                     "shuffled": shuffle, "note": None if natural else GENERATED_TEXT_NOTE,
                     "unknown_tokens": {k: v for k, v in unknown.items() if v}}}
    bar.close()
    return to_jsonable(result)


# ---------------------------------------------------------------------------- outputs
def _style(info: dict, i: int) -> dict:
    """One colour per model; SSMs dashed, so the two families read apart."""
    return {"color": f"C{i % 10}", "marker": "o",
            "ls": "--" if info.get("arch") in HF_SSM_ARCHS else "-"}


def _size(n: int | None) -> str:
    """Parameters as the model names write them: 405M, 1.4B, 37k."""
    if n is None:
        return "?"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def plot(result: dict):
    panels = [t for t in PROMPT_TASKS if t in result]
    fig, axes = new_figure(max(1, len(panels)), width_per_panel=4.6, height=3.5)
    for ax, task in zip(axes, panels, strict=False):
        key = "entries" if task == "phonebook" else "tokens"
        for i, (label, rows) in enumerate(result[task]["curves"].items()):
            ax.plot([r[key] for r in rows], [r["acc"] if r["acc"] is not None else math.nan
                                             for r in rows],
                    label=f"{label} ({_size(result['models'][label].get('n_params'))})",
                    **_style(result["models"][label], i))
        ax.set(ylim=(-0.02, 1.02), ylabel="string-level accuracy")
        ax.legend(fontsize=7)
    if "phonebook" in result:
        ax = axes[panels.index("phonebook")]
        ax.set(xlabel="entries in the phone book (L)", title="phone-book lookup (Fig. 1c)")
    if "copy" in result:
        ax = axes[panels.index("copy")]
        t = result["copy"]["text"]
        what = ("natural text" if t["natural"] else "generated text: not natural") + (
            ", words shuffled" if t["shuffled"] else "")
        ax.set(xlabel="tokens copied", title=f"copy ({what}; Fig. 7)")
    return fig


def table(result: dict) -> list[list]:
    rows = []
    for task, key, unit in (("phonebook", "entries", "L="), ("copy", "lengths", "tokens=")):
        if task not in result:
            continue
        sizes = result[task][key]
        head = [task] + [f"{unit}{s}" for s in sizes]
        if task == "copy" and not result["copy"]["text"]["natural"]:
            head.append("(generated text, not natural: see the JSON's copy.text)")
        rows.append(head)
        for label, r in result[task]["curves"].items():
            rows.append([f"  {label}"] + [fmt(x["acc"], ".2f") for x in r])
    return rows


# ---------------------------------------------------------------------------- CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", nargs="*", help="HuggingFace causal LMs: local directories or hub "
                   "names (e.g. EleutherAI/pythia-410m state-spaces/mamba-370m-hf)")
    add_level_flag(p, levels=tuple(LEVELS))  # quick: small sizes; paper: the paper's (a GPU)
    p.add_argument("--tasks", default=",".join(PROMPT_TASKS), help="phonebook,copy (default: both)")
    add_fields(p, PretrainedCopySettings, levels=True)
    p.add_argument("--text", default=None, help="a UTF-8 text file to copy windows of "
                   "(natural text; default: the suite's generated sentences, not natural)")
    p.add_argument("--shuffle", action="store_true", help="shuffle each window's words (Fig. 7b)")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="float32")


TOKENIZER_PROBE = "Mary Jones: 201-555-0142\n\nThe old house."  # the prompts' characters


def check_tokenizer(tokenizer, source: str) -> None:
    """The prompts are text: the tokenizer must encode them and decode them back.
    (``transformers`` builds an empty tokenizer for a directory without tokenizer files.)"""
    ids = list(tokenizer(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]) \
        if tokenizer is not None else []
    check(bool(ids), f"{source}: no usable tokenizer: it encodes text to no tokens (tokenizer "
          "files missing?); the prompts are text")
    back = decode(tokenizer, ids)
    check(back == TOKENIZER_PROBE, f"{source}: its tokenizer does not give the prompts' text "
          f"back: {TOKENIZER_PROBE!r} decodes back as {back!r}")


def load_models(sources: list[str], device: str, dtype: torch.dtype) -> dict:
    """{label: HFModel}; every source is checked to exist before any is loaded."""
    check(len(sources) >= 1, "give one or more HuggingFace causal LMs (directories or hub "
          "names), e.g. EleutherAI/pythia-410m state-spaces/mamba-370m-hf")
    for s in sources:
        check(not str(s).endswith(".pt") and not is_zoo_ref(s), f"{s}: a suite checkpoint; "
              "this analysis prompts pretrained HuggingFace language models with text")
    from models.hf import load_hf, resolve_source  # after the refusal that needs neither

    for s in sources:
        resolve_source(s)
        export = export_of_dir(s)
        check(export is None, f"{s}: a suite export (a {export and export.get('arch')} model "
              f"trained on {export and export['task'].get('name')}); this analysis prompts "
              "pretrained language models with text (names, numbers, words) that a task's "
              "vocabulary cannot write: run analyses.length_generalization or "
              "analyses.duplicated_ngrams on it, as on its checkpoint")
    models = {}
    for s in sources:
        m = load_hf(s, device, dtype=dtype)
        check_tokenizer(m.tokenizer, s)
        label = m.name
        while label in models:
            label += "'"
        models[label] = m
    return models


def _compute(args, _checkpoints) -> dict:
    s = settings_from_args(LEVELS[args.level], args)
    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    entries, lengths, n_examples = list(s.entries), list(s.lengths), s.n_examples
    check_sizes(tasks, entries, lengths, n_examples, s.batch_size)  # before any loading
    text = read_text(args.text) if args.text else None
    models = load_models(args.models, args.device, DTYPES[args.dtype])
    return compute(models, tasks, entries, lengths, n_examples, text, args.text, args.shuffle,
                   args.seed, s.batch_size)


# ---------------------------------------------------------------------------- the paper's claims
def paper_pair(d: dict) -> tuple[list[str], list[str]]:
    """The labels of the paper's two families in a result: Pythia (a GPT-NeoX transformer
    named pythia…) and Mamba (a Mamba / Mamba-2 model named mamba…)."""
    models = d.get("models", {})
    pythia = [k for k, v in models.items()
              if "pythia" in k.lower() and v.get("arch") == HF_TRANSFORMER]
    mamba = [k for k, v in models.items() if "mamba" in k.lower() and v.get("arch") in HF_SSM_ARCHS]
    return pythia, mamba


def _mean_acc(rows: list[dict], key: str, keep) -> float | None:
    accs = [r["acc"] for r in rows if keep(r[key]) and r.get("acc") is not None]
    return sum(accs) / len(accs) if accs else None


def _compare(d: dict, task: str, key: str, keep, where: str) -> Reading:
    """Each Pythia's mean accuracy over the kept sizes against each Mamba's."""
    pythia, mamba = paper_pair(d)
    curves = get(d, task, "curves", default={})
    if not (pythia and mamba):
        return Reading("n/a: needs a Pythia and a Mamba model (e.g. EleutherAI/pythia-410m "
                       "state-spaces/mamba-370m-hf); got "
                       + (", ".join(d.get("models", {})) or "none"), None)
    acc = {k: _mean_acc(curves.get(k, []), key, keep) for k in pythia + mamba}
    if any(v is None for v in acc.values()):
        return Reading(f"n/a: no {where} evaluated for every model", None)
    text = f"mean accuracy {where}: " + ", ".join(f"{k} {fmt(acc[k], '.2f')}" for k in acc)
    m = Margin("weakest Pythia's mean accuracy vs the best Mamba's",
               min(acc[k] for k in pythia), ">", max(acc[k] for k in mamba))
    return Reading(text, m.holds, m)


def claim_phonebook(d: dict) -> Reading:
    if "phonebook" not in d:
        return Reading("n/a: the phone-book task was not run", None)
    return _compare(d, "phonebook", "entries", lambda L: L >= PAPER_LONG_BOOK,
                    f"over books of >= {PAPER_LONG_BOOK} entries")


def claim_copy(d: dict) -> Reading:
    if "copy" not in d:
        return Reading("n/a: the copy task was not run", None)
    if not get(d, "copy", "text", "natural", default=False):
        return Reading("n/a: the copied text was the suite's generated sentences, not natural "
                       "text (give --text FILE)", None)
    return _compare(d, "copy", "tokens", lambda n: True, "over all copy lengths")


FIGURE = Figure(
    "Pretrained LMs: phone-book lookup and copying text", "Copy paper Fig. 1c and Fig. 7a/b",
    (Claim("Pythia beats Mamba on phone-book lookup once the book is long (L >= 70; there "
           "even Pythia-410m beats Mamba-2.8B)", claim_phonebook),
     Claim("Pythia copies natural text better than Mamba (even the smallest transformer beats "
           "the largest GSSM)", claim_copy)),
    trains=False)


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, checkpoints=False)

