"""What a model's forward returns: TransformerLens' ``return_type`` and the suite's one
``log_probs``.

Every model's forward gives logits whose softmax is its prediction (MambaZero's L1 prediction
included: its logits are log|v|, see :meth:`models.ssm.recurrent.SSMLanguageModel.compute_logits`),
so one function turns logits into log-probabilities for every model, suite or HuggingFace, and
the trainer's loss, the probes and ``return_type="log_probs"`` all read the same numbers.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

from seqprobe.config import check

# TransformerLens' return types ("logits", "loss", "both": (logits, loss), None: run for the
# hooks only) and the suite's "log_probs"
RETURN_TYPES = ("logits", "loss", "both", "log_probs", None)
LOSS_TYPES = ("loss", "both")


def check_return_type(return_type: str | None) -> None:
    check(return_type in RETURN_TYPES,
          f"return_type must be one of {', '.join(map(repr, RETURN_TYPES))}, got {return_type!r}")


def log_probs(logits: Float[Tensor, "*batch vocab"]) -> Float[Tensor, "*batch vocab"]:
    """Log-probabilities of logits: ``log_softmax`` over the last axis, in float32 at least
    (half-precision logits would round the small probabilities the Markov probes compare) and
    float64 kept for float64 models (the constructions are compared to rounding)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.log_softmax(logits, dim=-1)


def next_token_loss(lp: Float[Tensor, "batch pos vocab"], tokens: Int[Tensor, "batch pos"],
                    mask: Tensor | None = None, per_token: bool = False) -> Tensor:
    """TransformerLens' ``lm_cross_entropy_loss`` from log-probabilities: the mean negative
    log-probability of each next token over every position (``per_token``: ``[batch, pos - 1]``
    instead). ``mask`` ([batch, pos] bool, True = a real token) leaves out predictions of or
    from padding. This is the plain language-modelling loss; the trainer's loss counts the
    task's answer positions only (``Batch.targets``)."""
    check(tokens.shape[1] >= 2, f"the next-token loss needs sequences of at least 2 tokens, got "
                                f"{tokens.shape[1]}")
    picked = lp[:, :-1].gather(-1, tokens[:, 1:, None].to(lp.device))[..., 0]  # [batch, pos-1]
    if mask is None:
        return -picked if per_token else -picked.mean()
    keep = (mask[:, :-1] & mask[:, 1:]).to(lp.device)  # both ends of the prediction are tokens
    picked = picked.masked_fill(~keep, 0.0)
    return -picked if per_token else -picked.sum() / keep.sum()
