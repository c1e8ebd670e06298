"""What ngram_heads checks before it builds any example: the models it takes
(:data:`HEAD_ARCHS`, pretrained LMs of :data:`HF_HEAD_ARCHS`) and their kind of heads
(:func:`check_model`), n-grams no longer than the probe strings (:func:`check_n_max`), and the
probe sequences within the model's context and the attention budget (:func:`check_fits`), each
a one-line refusal.
"""

from __future__ import annotations

from models.registry import HF_MAMBA, HF_MAMBA2, HF_TRANSFORMER, SSM_ARCHS
from seqprobe import flags
from seqprobe.config import check

# The probes (and the model code they read, which imports TransformerLens and so transformers)
# are imported where a model is checked: the command's --help and its refusals read none.
HEAD_ARCHS = ("transformer", *SSM_ARCHS)
HF_HEAD_ARCHS = (HF_TRANSFORMER, HF_MAMBA, HF_MAMBA2)  # pretrained LMs booted by models.hf


def check_model(model) -> str:
    """The model's kind of heads (probes.effective_attention.kind); one line if it has none
    or is not a language model."""
    from probes import effective_attention as ea

    if getattr(model, "arch", None) not in (*HEAD_ARCHS, *HF_HEAD_ARCHS):
        ea.kind(model)  # the one-line refusal: no attention and no effective attention
        check(False, f"ngram_heads takes {', '.join(HEAD_ARCHS)} models, got {model.arch!r}")
    head = getattr(model.cfg, "head", "lm")
    check(head == "lm", f"ngram_heads needs a language-model head, got {head!r}")
    return ea.kind(model)


def check_n_max(n_max: int, lengths: list[int]) -> None:
    """One line when the n-grams are longer than every probe string (no match can exist)."""
    check(n_max <= max(lengths), f"--n-max {n_max} is longer than the probe strings (the "
          f"longest is L = {max(lengths)} tokens): an n-gram match needs n <= L; lower --n-max "
          "or raise --lengths")


def check_fits(model, lengths: list[int], batch_size: int, pretrained: bool,
               n_max: int = 1) -> None:
    """Before any example is built: n-grams no longer than the longest probe string, the
    longest probe sequence within the model's context, and a batch of them within the
    attention budget (the batch's patterns are held at once), or one line."""
    from probes.copying import ATTN_BUDGET

    check_n_max(n_max, lengths)
    fed = 2 * max(lengths) + (len(model.bos_ids()) if pretrained else 2)
    flags.check_context(model, [fed], f"the probe sequence at L = {max(lengths)} (two copies)",
                        getattr(model, "name", model.arch))
    check(batch_size * fed**2 <= ATTN_BUDGET, f"--batch-size {batch_size} at L = "
          f"{max(lengths)} holds {batch_size} x {fed}^2 attention entries per head, more than "
          f"{ATTN_BUDGET:.0e}; lower --batch-size or --lengths")
