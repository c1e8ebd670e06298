"""Copy-paper instruments: accuracy of a model on a prompt task (copy, duplicated n-gram copy,
lookup, phone-book), the per-string errors behind it, and the size of a recurrent model's
state (the bits of Thm 2.7).

Accuracy is string-level and character-level (§3.1). The default is one teacher-forced pass
per batch (``models.generation.teacher_forced_argmax``), as the copy paper scores its synthetic
tasks (the authors' evaluation takes the argmax of one forward pass over the prompt and the
true answer): its string accuracy is exactly greedy decoding's, its character accuracy counts
tokens right given the true prefix, as the paper's does. ``greedy=True`` decodes instead
(character accuracy then over the model's own continuation).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from jaxtyping import Bool, Int
from torch import Tensor

from models.generation import evaluate_prompts, teacher_forced_argmax
from seqprobe.errors import InputError
from tasks.base import PromptBatch, make_generator

ATTN_BUDGET = 6e7  # attention entries (batch·T²) per forward pass: bounds eval memory


def eval_batch_size(T: int, batch_size: int) -> int:
    """Rows per forward pass so that batch·T² stays under ATTN_BUDGET."""
    return max(1, min(batch_size, int(ATTN_BUDGET // (T * T))))


@torch.no_grad()
def accuracy_on(model, batches: Iterable[PromptBatch], greedy: bool = False) -> dict[str, float]:
    """String / char accuracy over ``batches``, each weighted by its rows."""
    s = c = 0.0
    done = 0
    for batch in batches:
        b = batch.prompts.shape[0]
        acc = evaluate_prompts(model, batch.to(model.device), greedy=greedy)
        s, c, done = s + acc["string_acc"] * b, c + acc["char_acc"] * b, done + b
    if done == 0:
        raise InputError("accuracy over no examples")
    return {"string_acc": s / done, "char_acc": c / done}


def accuracy_at(model, task, L: int, n_examples: int, seed: int, example_len: int,
                batch_size: int = 128, greedy: bool = False) -> dict[str, float]:
    """String / char accuracy on ``n_examples`` prompts of ``task.eval_batch(length=L)``, drawn
    from ``seed`` (every model sees the same strings); ``example_len`` (prompt + answer tokens)
    sizes the batches."""
    g = make_generator(seed)
    bs = eval_batch_size(example_len, batch_size)
    sizes = [min(bs, n_examples - done) for done in range(0, n_examples, bs)]
    return accuracy_on(model, (task.eval_batch(b, g, length=L) for b in sizes), greedy)


@torch.no_grad()
def string_errors(model, prompts: Int[Tensor, "batch prompt"], answers: Int[Tensor, "batch ans"],
                  batch_size: int = 8) -> Bool[Tensor, " batch"]:
    """Per row: does the model's copy of ``answers`` differ anywhere (exact, teacher forced)?"""
    out = [torch.zeros(0, dtype=torch.bool)]
    for i in range(0, prompts.shape[0], batch_size):
        p = prompts[i : i + batch_size].to(model.device)
        a = answers[i : i + batch_size].to(model.device)
        out.append((teacher_forced_argmax(model, p, a) != a).any(dim=1).cpu())
    return torch.cat(out)


@torch.no_grad()
def state_floats(model) -> int:
    """Floats a recurrent model carries from one token to the next (per sequence), read off
    its hooks: SSM states H_t, the d_conv − 1 inputs the causal convolution keeps, LSTM (h, c).
    Thm 2.7 counts the states such a model can be in: 2^(floats × bits per float)."""
    tokens = torch.zeros(1, 2, dtype=torch.long, device=model.device)
    _, cache = model.run_with_cache(tokens)
    d_conv = int(getattr(model.cfg, "d_conv", 0) or 0)
    total = 0
    for name in cache.keys():
        t = cache[name]
        per_pos = int(np.prod(t.shape[2:])) if t.dim() >= 2 else 0
        if name.endswith("hook_ssm_state") or name.endswith(("hook_h", "hook_c")):
            total += per_pos
        elif name.endswith("mixer.hook_conv") and d_conv > 1:
            total += (d_conv - 1) * per_pos
    if total == 0:
        raise InputError(f"cannot find the recurrent state of a {model.arch!r} model in its hooks")
    return total
