"""The copy paper's models as the copy analyses read them: the tasks and architectures they
open (:data:`COPY_TASKS`, :data:`COPY_ARCHS`, with pretrained LMs :data:`COPY_OR_HF_ARCHS`),
the zoo's copy recipes a level trains (:data:`COPY_LABELS`, :func:`copy_recipes`,
``--models``), a model's label (:func:`label_for`), loading checkpoints that share one alphabet
(:func:`load_copy_models`), and a copy task as a model reads it (:func:`copy_prompts`: a
pretrained LM gets the same strings in its own tokens).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Sequence

from analyses.common import export_of, is_pretrained, load_model
from models.registry import HF_ARCHS
from seqprobe.config import check, config_to_dict
from tasks.copy import COPY_TASKS, CopyTask, TokenCopyPrompts

COPY_ARCHS = ("transformer", "mamba", "mamba2", "lstm", "stu")  # what the copy analyses open
# ... and those that also run on pretrained LMs (copy prompts built from the tokenizer)
COPY_OR_HF_ARCHS = (*COPY_ARCHS, *HF_ARCHS)
PRETRAINED_SEP = "\n\n"  # between the copies of a pretrained prompt (tasks.prompts' copy format)
# The copy models of Fig. 1 (length_generalization, copy_efficiency), as zoo labels
# (``copy/{label}``). Quick has one GSSM of the paper's, Mamba-2: the comparison Fig. 1 makes
# is transformers against GSSMs, and the quick Mamba-2 (one layer, d 32) costs about a tenth
# of the LSTM's step (models/train/step_costs.json), where the quick Mamba costs more than a
# transformer's; like the LSTM it stays far from copying at this budget.
COPY_LABELS = {"quick": ("hard_alibi", "nope", "rope", "lstm", "mamba2"),
               "paper": ("hard_alibi", "nope", "alibi", "rope", "mamba", "lstm")}


def copy_recipes(level: str, labels: Sequence[str] | None = None) -> list[str]:
    """The zoo's copy recipes of ``labels`` (default: :data:`COPY_LABELS` of the level)."""
    from analyses.zoo import copy as zoo_copy  # a paper module of the zoo: imports training

    labels = labels or COPY_LABELS[level]
    for label in labels:
        check(label in zoo_copy.COPY_MODELS,
              f"unknown model {label!r}; allowed: {', '.join(zoo_copy.COPY_MODELS)}")
    return [f"copy/{label}" for label in labels]


def add_copy_models_argument(p: argparse.ArgumentParser) -> None:
    """``--models a,b``: with ``--train``, which of the zoo's copy models (see
    :func:`copy_models_recipes`)."""
    from analyses.zoo import copy as zoo_copy

    p.add_argument("--models", default=None,
                   help=f"with --train: which of {', '.join(zoo_copy.COPY_MODELS)} "
                   "(default: level's)")


def copy_models_recipes(args: argparse.Namespace) -> list[str]:
    """The copy recipes of ``--train LEVEL [--models ...]``."""
    return copy_recipes(args.train, args.models.split(",") if args.models else None)


def label_for(model) -> str:
    """``hard_alibi`` / ``nope`` / … for transformers, the arch name otherwise (the zoo's copy
    labels, which are also colour keys of figures.style); hand-set constructions
    (models/constructions.py) are labelled as such, HuggingFace models by their name, and a
    suite export as the checkpoint it came from."""
    export = export_of(model)
    if export is not None:
        cfg = export.get("config") or {}
        return cfg.get("pe", "nope") if export.get("arch") == "transformer" else export["arch"]
    if model.arch in HF_ARCHS:
        return model.name
    train = model.provenance.train
    if train.get("construction"):
        return f"construction {train['construction']} n={train.get('n')}"
    return model.cfg.pe if model.arch == "transformer" else model.arch


def load_copy_models(paths: Sequence[str], device, archs: Iterable[str] = COPY_ARCHS,
                     tasks: Iterable[str] = COPY_TASKS) -> tuple[dict, dict, int]:
    """Load copy-style checkpoints that share one alphabet: ``({label: model}, {label: train
    info}, D)``; a repeated label gets a ``'``. Pretrained LMs (where ``archs`` admits
    HF_ARCHS) bring their own tokens (:func:`copy_prompts`) and leave D alone. A suite export
    is its checkpoint's model: its task's alphabet, its step (an export keeps no training
    config: steps, context and samples seen are None)."""
    models, info, D = {}, {}, None
    for path in paths:
        m = load_model(path, archs=archs, device=device, tasks=tasks)
        label = label_for(m)
        while label in models:
            label += "'"
        if is_pretrained(m):  # a pretrained LM: no alphabet of ours (see copy_prompts)
            models[label] = m
            info[label] = {"path": path, "pretrained": m.provenance.source,
                           "max_len": None, "context": None, "steps": None,
                           "greedy_eval": True, "samples_seen": None}
            continue
        if export_of(m) is not None:  # a suite export: the task its checkpoint was trained on
            task = config_to_dict(m.task.cfg)
        else:
            task = config_to_dict(m.require_task("a copy analysis").cfg)
        d = int(task.get("D", 26))
        check(D is None or d == D, f"{path}: alphabet D={d} differs from the others (D={D})")
        D = d
        models[label] = m
        # the stored record, not train_config: a key an older checkpoint lacks keeps the
        # default this reader always gave it (greedy_eval True), not today's dataclass default
        tc = m.provenance.train.get("config") or {}  # an export's: {} (it keeps none)
        info[label] = {"path": path, "max_len": task.get("max_len"),
                       "context": tc.get("context", None if export_of(m) else 0),
                       "steps": tc.get("steps"),
                       "greedy_eval": tc.get("greedy_eval", True),
                       "samples_seen": (m.provenance.samples_seen if export_of(m) is None
                                        else None)}
    return models, info, D if D is not None else 26


def copy_prompts(model, task: CopyTask, lengths: Iterable[int] = ()):
    """``task`` as ``model`` reads it. A suite model speaks the task's vocabulary: the task
    itself. A pretrained LM (HF_ARCHS) gets the same kind of strings, uniform over the ordinary
    tokens of its tokenizer (``model.ordinary_token_ids()``), in the copy paper's prompt format
    for pretrained models (:class:`tasks.copy.TokenCopyPrompts`).

    Tokens rather than characters: the length L, the n of a duplicated n-gram and the
    n-gram lookup the copy paper describes are all counted in the tokens the model reads; a
    random character string would be cut into tokens differently in each copy by a BPE
    tokenizer, so neither L nor the answer's tokens would be defined.

    ``lengths``: the string lengths to be asked for, checked here so that a prompt longer than
    a pretrained LM's context is one line before any work. A suite export
    (:func:`export_of`) reads its task's token ids, as its checkpoint does: the task itself."""
    if not is_pretrained(model):
        return task
    alphabet = model.ordinary_token_ids()
    sep = model.text_ids(PRETRAINED_SEP)
    check(model.tokenizer.unk_token_id not in sep,
          f"{model.name}: its tokenizer cannot write the separator {PRETRAINED_SEP!r}")
    stateful = bool(getattr(model.cfg, "is_stateful", False))  # an SSM has no context limit
    prompts = TokenCopyPrompts(type(task)(dataclasses.replace(task.cfg, D=len(alphabet))),
                               alphabet, sep, model.bos_ids(),
                               n_ctx=None if stateful else int(model.cfg.n_ctx))
    for L in lengths:
        prompts.check_length(L)
    return prompts
