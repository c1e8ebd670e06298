"""Greedy decoding and the copy-paper accuracies (§3.1: string-level and character-level)."""

from __future__ import annotations

import torch
from jaxtyping import Int
from torch import Tensor


@torch.no_grad()
def greedy_decode(model, prompts: Int[Tensor, "batch prompt"], n_new: int
                  ) -> Int[Tensor, "batch n_new"]:
    """Generate ``n_new`` tokens by argmax (temperature 0, copy paper App. A.2; the authors
    decode so for the pretrained models of §4), feeding each back in.

    No KV cache: every step re-runs the model on the whole sequence, so hooks see ordinary
    full-sequence activations and every architecture decodes the same way.
    """
    seq = prompts
    out = []
    for _ in range(n_new):
        nxt = model(seq)[:, -1].argmax(dim=-1, keepdim=True)  # [batch, 1]
        out.append(nxt)
        seq = torch.cat([seq, nxt], dim=1)
    return torch.cat(out, dim=1) if out else prompts.new_zeros(prompts.shape[0], 0)


@torch.no_grad()
def teacher_forced_argmax(model, prompts: Int[Tensor, "batch prompt"],
                          answers: Int[Tensor, "batch answer"]) -> Int[Tensor, "batch answer"]:
    """Argmax prediction at each answer position given the *true* prefix.

    One forward pass. Row-wise, "all argmax predictions right" is exactly "greedy decoding
    reproduces the answer" (both see the same prefix until the first mistake), so string-level
    accuracy from this is exact and much cheaper than decoding for long strings.
    """
    seq = torch.cat([prompts, answers[:, :-1]], dim=1)
    logits = model(seq)[:, prompts.shape[1] - 1 :]  # [batch, answer_len, vocab]
    return logits.argmax(dim=-1)


def copy_accuracy(pred: Int[Tensor, "batch answer"], answers: Int[Tensor, "batch answer"]
                  ) -> dict[str, float]:
    """String-level (whole answer right) and character-level (fraction of tokens right)."""
    right = pred == answers  # [batch, answer_len]
    return {"string_acc": right.all(dim=1).float().mean().item(),
            "char_acc": right.float().mean().item()}


@torch.no_grad()
def evaluate_prompts(model, batch, greedy: bool = True) -> dict[str, float]:
    """Accuracies of ``model`` on a :class:`~tasks.base.PromptBatch`.

    ``greedy=True`` decodes autoregressively; ``greedy=False`` uses one teacher-forced pass,
    which is how the copy paper scores its synthetic tasks (the authors' evaluation,
    ``synthetic_exps/test_utils.py``, takes the argmax of one forward pass over the prompt and
    the true answer; App. A.2 calls it greedy decoding): string accuracy is identical,
    character accuracy then counts tokens right given the true prefix, as the paper's does.
    Only the pretrained models (§4) are decoded autoregressively there.
    """
    was_training = model.training
    model.eval()
    try:
        if greedy:
            pred = greedy_decode(model, batch.prompts, batch.answers.shape[1])
        else:
            pred = teacher_forced_argmax(model, batch.prompts, batch.answers)
    finally:
        model.train(was_training)
    return copy_accuracy(pred, batch.answers)
