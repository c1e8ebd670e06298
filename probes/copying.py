"""Copy-style accuracy of a model on a prompt task (copy, duplicated n-gram copy, lookup,
phone-book): string-level and character-level, from one teacher-forced pass per batch, which
gives exactly greedy decoding's string accuracy (``models.generation.teacher_forced_argmax``)."""

from __future__ import annotations

import torch

from models.generation import copy_accuracy, teacher_forced_argmax
from tasks.base import make_generator

ATTN_BUDGET = 6e7  # attention entries (batch·T²) per forward pass: bounds eval memory


def eval_batch_size(T: int, batch_size: int) -> int:
    """Rows per forward pass so that batch·T² stays under ATTN_BUDGET."""
    return max(1, min(batch_size, int(ATTN_BUDGET // (T * T))))


@torch.no_grad()
def accuracy_at(model, task, L: int, n_examples: int, seed: int, example_len: int,
                batch_size: int = 128) -> dict[str, float]:
    """String / char accuracy on ``n_examples`` prompts of ``task.eval_batch(length=L)``;
    ``example_len`` (prompt + answer tokens) sizes the batches."""
    g = make_generator(seed)
    bs = eval_batch_size(example_len, batch_size)
    s = c = 0.0
    done = 0
    while done < n_examples:
        b = min(bs, n_examples - done)
        batch = task.eval_batch(b, g, length=L).to(model.device)
        acc = copy_accuracy(teacher_forced_argmax(model, batch.prompts, batch.answers),
                            batch.answers)
        s, c, done = s + acc["string_acc"] * b, c + acc["char_acc"] * b, done + b
    return {"string_acc": s / done, "char_acc": c / done}
