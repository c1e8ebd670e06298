"""Probe examples for n-gram match scoring (copy paper §2.2, Fig. 3): batches in which the
token to output at a position was seen before, ``period`` positions back.

* copy examples ``<BOS> x <COPY> x`` of a copy checkpoint's task (period L + 1);
* the induction task's own flag-recall rows (one query per row, at the last flag);
* random strings of a task's letters repeated twice (period L): the induction-head setting
  for a model trained on another language-model task over letters;
* a pretrained LM's ``[BOS] r r``, with r random ordinary tokens of its tokenizer or a window
  of a text (period L).

Each builder returns ``[(PromptBatch, period)]``, one batch per length, which
:func:`probes.attention.pattern_scores` scores and :func:`probes.copying.accuracy_on` decodes.
"""

from __future__ import annotations

import numpy as np
import torch

from seqprobe.config import check
from tasks.base import PromptBatch, make_generator
from tasks.copy import COPY_TASKS, CopyConfig, CopyTask
from tasks.induction import InductionConfig, InductionHeadsTask
from tasks.registry import make_task

DATA = ("auto", "repeat", "task", "text")  # which probe examples (see :func:`data_name`)
# a pretrained LM: tokens per repeated segment (a few n-grams' worth, short enough for a CPU)
HF_LENGTHS = (10, 20, 40)
# the default lengths of a task without a max_len of its own
DEFAULT_MAX_LEN = 20
DEFAULT_D = 26  # a copy task's alphabet when its config does not say

# a probe batch and the distance back to where its answer tokens were seen: an int, or one per
# row ([batch, 1]) for the induction task's rows
ProbeData = list[tuple[PromptBatch, "int | torch.Tensor"]]


def own_task_rows(task_name: str | None, data: str) -> bool:
    """Probe on the induction task's own flag-recall rows: asked for (``task``), or by default
    (repeated letters are out of an induction model's distribution)."""
    return task_name == "induction" and data in ("task", "auto")


def data_name(task_name: str | None, data: str = "auto") -> str:
    """Which examples :func:`probe_batches` gives: ``copy``, ``repeat``, ``induction`` or
    ``text`` (a pretrained LM, ``task_name`` None: ``repeat`` or ``text``)."""
    if task_name is None:
        return "text" if data == "text" else "repeat"
    if data != "repeat" and task_name in COPY_TASKS:
        return "copy"
    return "induction" if own_task_rows(task_name, data) else "repeat"


def default_lengths(task_name: str | None, task_config: dict, data: str = "auto") -> list[int]:
    """The upper half of the training range (the induction task with ``data="task"``: its
    training length; a pretrained LM: :data:`HF_LENGTHS`)."""
    if task_name is None:
        return list(HF_LENGTHS)
    if own_task_rows(task_name, data):
        return [int(task_config.get("length", InductionConfig.length))]
    hi = int(task_config.get("max_len", DEFAULT_MAX_LEN))
    lo = max(int(task_config.get("min_len", 1)), hi // 2, 1)
    return sorted({int(round(v)) for v in np.linspace(lo, hi, 4)})


def letters_of(task_name: str, task_config: dict) -> int:
    """Size of a task's letter alphabet (its tokens 0..D − 1, before the special tokens)."""
    return make_task(task_name, task_config).vocab.D


def probe_batches(model, task_name: str, task_config: dict, lengths: list[int],
                  batch_size: int, seed: int, data: str = "auto") -> ProbeData:
    """A suite model's probe data: one batch per length; the answer token at sequence position
    i was seen before at i − period (copy: period L + 1; repeated random tokens: L; the
    induction task with ``data="task"``: one period per row, ``[batch, 1]``)."""
    check(data in DATA, f"data must be one of {DATA}, got {data!r}")
    g = make_generator(seed)
    if task_name in COPY_TASKS and data != "repeat":
        task = CopyTask(CopyConfig(D=int(task_config.get("D", DEFAULT_D))))
        check(task.vocab.size <= model.cfg.vocab_size, f"copy vocabulary ({task.vocab.size}) "
              f"does not fit the model ({model.cfg.vocab_size})")
        return [(task.eval_batch(batch_size, g, length=L), L + 1) for L in lengths]
    if own_task_rows(task_name, data):
        return induction_rows(InductionHeadsTask(InductionConfig(**task_config)), lengths,
                              batch_size, g)
    return repeated_batches(letters_of(task_name, task_config), lengths, batch_size, g)


def induction_rows(task: InductionHeadsTask, lengths: list[int], batch_size: int,
                   g: torch.Generator) -> ProbeData:
    """The induction task's rows: the query (last flag, position L − 1) copies the token after
    the first flag, so each row has its own period ``[batch, 1]``."""
    flag = task.vocab.id("FLAG")
    out: ProbeData = []
    for L in lengths:
        batch = task.eval_batch(batch_size, g, length=L)
        first = (batch.prompts == flag).int().argmax(1, keepdim=True)  # [batch, 1]
        out.append((batch, L - 1 - first))
    return out


def repeated_batches(D: int, lengths: list[int], batch_size: int, g: torch.Generator
                     ) -> ProbeData:
    """Random strings of ``D`` letters repeated twice: the answer is the second copy."""
    out: ProbeData = []
    for L in lengths:
        r = torch.randint(0, D, (batch_size, L), generator=g)
        out.append((PromptBatch(torch.cat([r, r[:, :1]], 1), r[:, 1:]), L))
    return out


def hf_batches(model, lengths: list[int], batch_size: int, g: torch.Generator, data: str,
               text: str | None = None) -> ProbeData:
    """A pretrained LM's probe data: ``[BOS] r r`` (the answer is the second copy of r) for
    segments r of L tokens drawn uniformly from the tokenizer's ordinary tokens
    (``data="repeat"``), or cut from ``text`` at random starts (``data="text"``)."""
    bos = torch.tensor(model.bos_ids(), dtype=torch.long)
    if data == "text":
        check(text is not None, "data='text' needs a text")
        ids = torch.tensor(model.text_ids(text), dtype=torch.long)
        check(len(ids) >= max(lengths), f"the text has {len(ids)} tokens, fewer than the "
              f"segment length {max(lengths)}")
        segments = [_windows(ids, L, batch_size, g) for L in lengths]
    else:
        vocab = model.ordinary_token_ids()
        segments = [vocab[torch.randint(0, len(vocab), (batch_size, L), generator=g)]
                    for L in lengths]
    prefix = bos.expand(batch_size, -1)
    return [(PromptBatch(torch.cat([prefix, r, r[:, :1]], 1), r[:, 1:]), L)
            for L, r in zip(lengths, segments, strict=True)]


def _windows(ids: torch.Tensor, L: int, batch_size: int, g: torch.Generator) -> torch.Tensor:
    """``batch_size`` windows of ``L`` tokens of ``ids`` at random starts: [batch, L]."""
    starts = torch.randint(0, len(ids) - L + 1, (batch_size,), generator=g)
    return torch.stack([ids[s : s + L] for s in starts.tolist()])
