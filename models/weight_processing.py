"""TransformerLens' weight processing on a suite transformer, in place: ``fold_layer_norm``,
``center_writing_weights``, ``center_unembed``, ``fold_value_biases`` and ``process_weights``
(all four, in TL's order), so ``cache.logit_attrs``, ``decompose_resid`` and composition scores
read what TL's ``HookedTransformer`` (or ``TransformerBridge.enable_compatibility_mode()``)
reads: the numbers a TL user expects of "direct logit attribution".

Why it matters: TL's ``apply_ln_to_stack`` (what ``logit_attrs`` runs) centres each component
and divides it by the final norm's cached scale, but applies neither the norm's weight nor its
bias. On unprocessed weights the attributions therefore do not add up to the logit difference;
once the final norm's weight is folded into ``W_U`` (and its bias into ``b_U``) they do, up to
the difference of the folded ``b_U`` between the two tokens, which no residual component holds.

Each step changes the weights and not the function: the forward's logits stay the same (up to
float rounding, and a constant per position after ``center_unembed``, which the softmax does
not see). After folding, every LayerNorm keeps ``w = 1``, ``b = 0``: TL's ``LNPre``.

Only a model whose every norm is a LayerNorm read by TL-shaped weights can be folded this way
(the suite's transformers: NoPE, ALiBi, Hard-ALiBi, RoPE). Anything else gets one
:class:`~seqprobe.errors.InputError` line saying why (docs/tl_surface.md's table).
"""

from __future__ import annotations

import torch
from torch import Tensor

from models.layers import LayerNorm
from seqprobe.errors import InputError


def check_foldable(model, what: str) -> None:
    """One line where ``what`` cannot run on ``model``: it needs attention blocks with
    LayerNorms (``ln1``, ``ln2``, ``ln_final``) read by ``W_Q``/``W_K``/``W_V``, ``W_in`` and
    ``W_U``. A norm-free transformer (``normalization="none"``) has nothing to fold, and
    centring would change its function (no norm removes the mean)."""
    arch = getattr(model, "arch", type(model).__name__)
    blocks = list(getattr(model, "blocks", []))
    shaped = blocks and all(
        isinstance(getattr(b, "ln1", None), LayerNorm) and hasattr(getattr(b, "attn", None), "W_Q")
        and isinstance(getattr(b, "ln2", None), LayerNorm) and hasattr(getattr(b, "mlp", None),
                                                                       "W_in")
        for b in blocks) and isinstance(getattr(model, "ln_final", None), LayerNorm)
    if not shaped:
        raise InputError(
            f"{what} folds LayerNorms into the attention and MLP weights that read them, and "
            f"this {arch} model's blocks are not attention + MLP blocks with LayerNorms (its "
            "norms feed a recurrence or a filter): its weights stay as trained, and logit_attrs "
            "reads them unfolded (docs/tl_surface.md)")
    if not all(n.enabled for n in _norms(model)):
        raise InputError(
            f"{what} needs LayerNorms, and this {arch} model has none (normalization='none'): "
            "there is no norm to fold, and centring its weights would change what it computes")


def _norms(model) -> list[LayerNorm]:
    return [n for b in model.blocks for n in (b.ln1, b.ln2)] + [model.ln_final]


@torch.no_grad()
def fold_layer_norm(model, fold_biases: bool = True, center_weights: bool = True) -> None:
    """Fold each LayerNorm's weight (and, with ``fold_biases``, its bias) into the weights
    that read its output: ``ln1`` into ``W_Q``, ``W_K``, ``W_V`` (``b_Q`` …), ``ln2`` into
    ``W_in`` (``b_in``), ``ln_final`` into ``W_U`` (``b_U``); with ``center_weights`` those
    weights lose their mean over ``d_model`` (their input is centred by the norm, so the mean
    reads nothing). TL's ``fold_layer_norm``."""
    check_foldable(model, "fold_layer_norm")
    for block in model.blocks:
        w, b = block.ln1.w, block.ln1.b
        attn = block.attn
        for W, bias in ((attn.W_Q, attn.b_Q), (attn.W_K, attn.b_K), (attn.W_V, attn.b_V)):
            # W [head, d_model, d_head]
            if fold_biases:
                bias += (W * b[None, :, None]).sum(-2)
            W *= w[None, :, None]
            if center_weights:
                W -= W.mean(-2, keepdim=True)
        w, b = block.ln2.w, block.ln2.b
        mlp = block.mlp
        if fold_biases:
            mlp.b_in += (mlp.W_in * b[:, None]).sum(-2)
        mlp.W_in *= w[:, None]
        if center_weights:
            mlp.W_in -= mlp.W_in.mean(-2, keepdim=True)
        _reset_if(block.ln1, fold_biases)
        _reset_if(block.ln2, fold_biases)
    w, b = model.ln_final.w, model.ln_final.b
    unembed = model.unembed  # nn.Linear: weight [d_vocab_out, d_model] = W_Uᵀ
    if fold_biases:
        if unembed.bias is None:
            raise InputError("fold_layer_norm(fold_biases=True) moves the final norm's bias "
                             "into b_U, and this model's unembedding has no bias")
        unembed.bias += unembed.weight @ b
    unembed.weight *= w[None, :]
    if center_weights:
        unembed.weight -= unembed.weight.mean(-1, keepdim=True)
    _reset_if(model.ln_final, fold_biases)


def _reset_if(norm: LayerNorm, biases_folded: bool) -> None:
    norm.w.fill_(1.0)
    if biases_folded:
        norm.b.zero_()


@torch.no_grad()
def center_writing_weights(model) -> None:
    """Every weight that writes to the residual stream (``W_E``, ``W_O``, ``b_O``, ``W_out``,
    ``b_out``) loses its mean over ``d_model``: each reader is a LayerNorm, which removes it
    anyway. TL's ``center_writing_weights``."""
    check_foldable(model, "center_writing_weights")
    model.embed.weight -= model.embed.weight.mean(-1, keepdim=True)
    for block in model.blocks:
        attn, mlp = block.attn, block.mlp
        attn.W_O -= attn.W_O.mean(-1, keepdim=True)
        attn.b_O -= attn.b_O.mean()
        mlp.W_out -= mlp.W_out.mean(-1, keepdim=True)
        mlp.b_out -= mlp.b_out.mean()


@torch.no_grad()
def center_unembed(model) -> None:
    """``W_U`` and ``b_U`` lose their mean over the vocabulary: each position's logits move by
    one constant, which the softmax does not see. TL's ``center_unembed``."""
    check_foldable(model, "center_unembed")
    unembed = model.unembed
    unembed.weight -= unembed.weight.mean(0, keepdim=True)
    if unembed.bias is not None:
        unembed.bias -= unembed.bias.mean()


@torch.no_grad()
def fold_value_biases(model) -> None:
    """Each head's ``b_V`` moves into ``b_O`` (``b_O += Σ_h b_V[h] W_O[h]``, ``b_V = 0``): a
    pattern's row sums to one, so the value bias reaches the output unchanged by attention.
    TL's ``fold_value_biases``."""
    check_foldable(model, "fold_value_biases")
    for block in model.blocks:
        attn = block.attn
        attn.b_O += torch.einsum("he,hed->d", attn.b_V, attn.W_O)
        attn.b_V.zero_()


def process_weights(model, fold_ln: bool = True, center_writing: bool = True,
                    center_unembed_: bool = True, fold_value_biases_: bool = True) -> None:
    """TL's ``process_weights`` in its order: fold the norms, centre the writing weights and
    the unembedding, fold the value biases (and centre ``b_O`` again, as TL does after it)."""
    check_foldable(model, "process_weights")
    if fold_ln:
        fold_layer_norm(model)
    if center_writing:
        center_writing_weights(model)
    if center_unembed_:
        center_unembed(model)
    if fold_value_biases_:
        fold_value_biases(model)
        if center_writing:
            with torch.no_grad():
                for block in model.blocks:
                    block.attn.b_O -= block.attn.b_O.mean()


def composition_mask(n_layers: int, device=None) -> Tensor:
    """[layer, 1, layer, 1]: True where the left head's layer is before the right head's."""
    idx = torch.arange(n_layers, device=device)
    return idx[:, None, None, None] < idx[None, None, :, None]
