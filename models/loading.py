"""``models.load``: the one entry point that opens a model — a suite checkpoint file
(:mod:`models.checkpoint`) or a HuggingFace model directory / hub name (:mod:`models.hf`).
Its own module so that the checkpoint code and the HF code need not import each other."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import torch

from models.checkpoint.io import read_checkpoint, read_once
from models.checkpoint.paths import is_hf_source
from models.checkpoint.rebuild import model_from_checkpoint
from models.checkpoint.untrusted import need as _need
from seqprobe.errors import CheckpointError
from seqprobe.paths import NAME_RESOLVERS, register_name_resolver  # noqa: F401 - re-exported

# the temp directories models.hf.export builds an export in (``.NAME.XXXXXXXX.export.tmp``) and
# moves an old one aside to (``.export.old``; before the suffix had ``.export``, ``.tmp`` /
# ``.old`` alone): complete-looking model directories that a killed export leaves behind
EXPORT_TEMP_SUFFIX = r"[a-z0-9_]{8}(\.export)?\.(tmp|old)"  # after ".NAME." (tempfile's 8)
EXPORT_TEMP_DIR = re.compile(r"\..+\." + EXPORT_TEMP_SUFFIX)


def interrupted_swap(out: str | os.PathLike) -> Path | None:
    """The previous export of ``out`` that ``python -m models.hf.export --overwrite`` moved
    aside (``.NAME.XXXXXXXX.export.old``) and was stopped before moving the new one in: where
    ``out`` is missing and such a directory is beside it (the newest), else None."""
    out = Path(os.path.abspath(out))
    aside = re.compile(re.escape(f".{out.name}.") + r"[a-z0-9_]{8}\.export\.old")
    try:
        if os.path.lexists(out) or not out.parent.is_dir():
            return None
        found = [p for p in out.parent.iterdir()
                 if aside.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
                 and (p / "config.json").is_file()]
        return max(found, key=lambda p: p.stat().st_mtime, default=None)
    except OSError:  # a name too long, a parent that cannot be listed: the loader says why
        return None


# A zoo name (``zoo:NAME[@LEVEL]``) is a recipe of analyses.zoo, a layer above this one. The
# loader never reaches up for it: the layer that knows such names registers a resolver
# (seqprobe.paths.register_name_resolver; analyses.zoo does when imported), so
# models.load("zoo:NAME") opens the cached checkpoint once the zoo is imported, and says how to
# make it do so before.
ZOO_PREFIX = "zoo:"


def resolve_name(path: str | os.PathLike) -> str | os.PathLike:
    """``path`` itself, or the path a registered resolver gives for a name
    (:func:`register_name_resolver`); a zoo name with no resolver yet is one line."""
    if isinstance(path, str):
        for prefix, resolve in NAME_RESOLVERS.items():
            if path.startswith(prefix):
                return resolve(path)
    refuse_zoo_name(path)
    return path


def refuse_zoo_name(path: str | os.PathLike) -> None:
    """One line for ``models.load("zoo:NAME[@LEVEL]")`` before analyses.zoo is imported: how
    to open it."""
    ref = str(path)
    if not ref.startswith(ZOO_PREFIX):
        return
    name, _, level = ref[len(ZOO_PREFIX):].partition("@")
    args = f"{name!r}" + (f", {level!r}" if level else "")
    raise CheckpointError(f"{ref}: a zoo name, which the zoo resolves: `from analyses import "
                          f"zoo` once, then models.load({ref!r}) (or models.load(zoo.path("
                          f"{args}))), or give it to an analysis as it is")


def load(path: str | os.PathLike, device: str | torch.device = "cpu", eval_mode: bool = True,
         archs: Iterable[str] | None = None):
    """``models.load(path)``: a suite model rebuilt from a checkpoint file alone, or a
    HuggingFace causal LM (a model directory or a hub name) booted through TransformerLens'
    ``TransformerBridge`` (:func:`models.hf.load_hf`), with the same small interface.

    The model comes back on ``device`` in eval mode with the rest of the file as typed
    attributes: ``model.task`` (the task object), ``model.train_config`` and
    ``model.provenance`` (source, training record, history); see :mod:`models.base`.
    ``archs``: the architectures the caller can use; any other is refused before the model is
    built.

    A zoo name (``"zoo:copy/rope"``, ``"zoo:NAME@LEVEL"``) opens the recipe's cached
    checkpoint once :mod:`analyses.zoo` (a layer above, which registers its resolver) is
    imported; before, it is one line saying so. ``models.load(zoo.path(NAME, LEVEL))`` too.
    The file is read once (:func:`~models.checkpoint.io.read_once`), a zoo name's check of
    its cache entry included.
    """
    with read_once():
        return _load(path, device, eval_mode, archs)


def _load(path: str | os.PathLike, device: str | torch.device, eval_mode: bool,
          archs: Iterable[str] | None):
    path = resolve_name(path)
    aside = interrupted_swap(path)
    if aside is not None:
        raise CheckpointError(f"{path}: missing: an export into it was stopped while replacing "
                              f"it, and the previous export is at {aside}; export again (it "
                              "restores that one first) or move it back")
    if EXPORT_TEMP_DIR.fullmatch(Path(os.path.abspath(path)).name) and Path(path).is_dir():
        raise CheckpointError(f"{path}: is the temp directory of an export that did not finish "
                              "(python -m models.hf.export was stopped before moving it into "
                              "place); export the checkpoint again")
    if is_hf_source(path):
        # deferred: transformers and the bridge take seconds to import, and a suite
        # checkpoint (every training run, every test) never needs them
        from models.hf import load_hf

        model = load_hf(path, device, archs=archs)
        check_task_fits(model, path)  # an export's task (its provenance) against the model
        return model if eval_mode else model.train()
    if Path(path).is_dir():
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file (nor a "
                              "HuggingFace model: it has no config.json)")
    ckpt = read_checkpoint(path)
    if archs is not None:
        allowed = sorted(set(archs))
        _need(ckpt["model"]["arch"] in allowed, path,
              f"this analysis needs a {' or '.join(allowed)} checkpoint, but the file holds "
              f"a {ckpt['model']['arch']!r} model")
    model = model_from_checkpoint(ckpt, path).to(device)
    if eval_mode:
        model.eval()
    model.load_records(ckpt, source=path)
    check_task_fits(model, path, ckpt.get("train", {}).get("task_vocab"))
    return model


def check_task_fits(model, path: str | os.PathLike, trained_vocab: int | None = None) -> None:
    """The task a checkpoint records must fit its model: every token id of the task's
    vocabulary is a row of the model's embedding (a 30-token model given a 62-token task would
    index past it; training refuses the same run, models.train.build.validate_run_config)."""
    task, vocab = getattr(model, "task", None), getattr(model.cfg, "vocab_size", None)
    if task is None or vocab is None or getattr(model.cfg, "head", "lm") != "lm":
        return
    size = getattr(getattr(task, "vocab", None), "size", None)
    _need(size is None or size <= vocab, path,
          f"its {task.name} task has {size} tokens, more than the model's vocab_size {vocab}: "
          "the task is not the one the model was trained on")
    # fewer is as wrong where the training recorded its task's size: a task with fewer tokens
    # (a copy alphabet D=2 for D=26) numbers its <BOS>, <COPY>, ... otherwise
    _need(size is None or not isinstance(trained_vocab, int) or size == trained_vocab, path,
          f"its {task.name} task has {size} tokens, but the model was trained on a task of "
          f"{trained_vocab}: the task config is not the one the model was trained on")
