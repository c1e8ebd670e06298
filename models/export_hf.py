"""``python -m models.export_hf CKPT OUT_DIR [--overwrite]``: a suite checkpoint as a standard
HuggingFace model directory (``config.json``, ``model.safetensors``, tokenizer files), so our
trained models open in ``transformers``, TransformerLens, nnsight or SAELens, offline:

    AutoModelForCausalLM.from_pretrained(OUT_DIR); AutoTokenizer.from_pretrained(OUT_DIR)

Only classes that compute *exactly* our model are used; anything else is refused with one line:
    transformer, pe=rope / nope  -> ``GPTNeoXForCausalLM`` (pre-LN LayerNorm blocks with biases,
                                    NeoX rotate-half RoPE on a fraction of each head, sequential
                                    or parallel residual, untied embeddings, final LayerNorm;
                                    NoPE = a rotary fraction of 0). GPT-NeoX's unembedding has no
                                    bias, so ours is moved into the final LayerNorm's bias b':
                                    W·b' = W·b + c, solvable when the bias lies in the span of
                                    the unembedding's columns (always when vocab ≤ d_model and W
                                    has full rank); otherwise the checkpoint is refused.
    mamba2                       -> ``Mamba2ForCausalLM`` (same parameter names in the mixer);
                                    ``use_D=False`` as D = 0, ``decay=False`` as an A_log whose
                                    exp underflows to 0 (a_t = 1), ``conv=False`` as a width-1
                                    identity convolution.
    mamba                        -> ``MambaForCausalLM`` (same rewrites for D and conv).
    refused: Hard-ALiBi, ALiBi, encoders, classifier heads, normalization="none", STU, LSTM,
    MambaZero, SSMs with an MLP after the mixer, without block / final norm, without the gate,
    with a non-silu activation, an L1 prediction or a non-zero unembedding bias (see
    :func:`refusal`).

The tokenizer is a ``PreTrainedTokenizerFast`` over the checkpoint's task vocabulary (word-level,
one token per symbol, our ids; ``<BOS>``, ``<EOS>``, ``<PAD>`` declared as HF's bos / eos / pad
and the other specials as extra special tokens). It adds no token by itself: write ``<BOS>``
where our tasks put one. A one-character alphabet reads text character by character
("abc<COPY>abc"); a longer one reads whitespace-separated symbols ("s1 s0 s1"), the same strings
``Vocab.decode`` prints.

Provenance (arch, model config, task, training step, weights digest) is stored in the HF config
as ``seqprobe`` (:func:`read_provenance`). Weights keep the checkpoint's dtype. Before the
directory is published it is loaded back with ``from_pretrained`` and its logits compared with
ours on a batch of the checkpoint's task, both in float32 (eager attention); a difference beyond
rounding refuses the export. The configs also carry what transformers 4.x reads (``rotary_pct``,
``rotary_emb_base``, the tokenizer class by its old name), so older versions load them too.

Exit codes: 0 written, 2 bad input (one line on stderr, nothing written), 130 interrupted
(Ctrl-C or SIGTERM; the temp directory is removed and OUT_DIR is as it was).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import einops
import torch
import transformers as tf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers import models as tk_models
from torch import Tensor
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from models.checkpoint import (
    CheckpointError,
    check_path,
    model_from_checkpoint,
    read_checkpoint,
    short_path,
)
from models.cli import OneLineParser, run_cli
from models.loading import EXPORT_TEMP_SUFFIX
from models.recurrent import to_hf_state_dict
from models.registry import model_class
from tasks.atomic import exclusive_lock, umask
from tasks.base import TaskError, Vocab, check, config_from_dict, make_generator
from tasks.registry import make_task

HF_CLASSES = {"transformer": "GPTNeoXForCausalLM", "mamba2": "Mamba2ForCausalLM",
              "mamba": "MambaForCausalLM"}
# Mamba-2 with the Markov paper's MLP after each mixer (d_mlp > 0): Bamba's blocks are exactly
# resid + mixer(RMSNorm(resid)), then resid + down(act(gate(·)) ⊙ up(·))(RMSNorm(resid)); with
# no attention layer listed it is a pure Mamba-2 stack
BAMBA = "BambaForCausalLM"
# a_t = exp(−exp(A_log)·Δ_t): exp(−10⁴) is 0 in every float format, so a_t = 1 exactly
NO_DECAY_A_LOG = -1.0e4
# HF roles of our special tokens (the others become extra special tokens)
SPECIAL_ROLES = {"BOS": "bos_token", "EOS": "eos_token", "PAD": "pad_token"}
MIN_POSITIONS = 2048  # max_position_embeddings when the run's context is shorter (RoPE/NoPE
# have no learned positions, so it bounds nothing in the model; tools read it as n_ctx)
VERIFY_TOKENS = 256  # task tokens per row checked after the export
VERIFY_RTOL = 1e-4  # of the largest |logit|: float32 rounding is far below, a wrong map far above

REFUSED_ARCHS = {
    "mambazero": "MambaZero (Markov paper §4.1) has no block norm, no final norm, no gate and "
                 "an L1-normalised prediction; HF's Mamba2ForCausalLM always applies RMSNorms, "
                 "the silu gate and a softmax",
    "lstm": "transformers has no LSTM causal-LM class",
    "stu": "the Spectral Transform Unit's fixed spectral filters exist in no HF class",
}


class ExportError(TaskError):
    """A checkpoint that no HF class computes exactly, or an output directory that is refused."""


@dataclass
class HFExport:
    """What :func:`to_hf` maps a checkpoint to: the HF config, its state dict (HF names), the
    tokenizer, and notes on rewrites that keep the function but change a parameter."""

    config: Any  # transformers.PretrainedConfig
    state_dict: dict[str, Tensor]
    tokenizer: Any  # transformers.PreTrainedTokenizerFast
    notes: list[str] = field(default_factory=list)
    rounding: float = 0.0  # largest logit change the rewrites make by rounding in the dtype


# ---------------------------------------------------------------------------- refusals
def hf_class(arch: str, cfg) -> str:
    """The HF class an exportable ``arch`` model of config ``cfg`` becomes."""
    if arch == "mamba2" and cfg.d_mlp:
        return BAMBA
    return HF_CLASSES[arch]


def refusal(arch: str, cfg) -> str | None:
    """Why no HF class computes the ``arch`` model of config ``cfg`` exactly, or None.

    Decided from the config alone; :func:`to_hf` also refuses on weights (an unembedding bias
    that cannot be moved, see the module docstring)."""
    if arch in REFUSED_ARCHS:
        return f"arch={arch}: {REFUSED_ARCHS[arch]}"
    if arch == "transformer":
        if cfg.pe == "hard_alibi":
            return ("pe=hard_alibi: Hard-ALiBi's per-head windows (each masked head sees only "
                    "its last w tokens) exist in no HF attention class")
        if cfg.pe == "alibi":
            return ("pe=alibi: HF's ALiBi classes differ elsewhere (BLOOM and Falcon fix the "
                    "slopes to 2^(-8h/H) and BLOOM normalises the embeddings; MPT has no "
                    "biases), so none computes this model exactly")
        if not cfg.causal:
            return "causal=False: an encoder is not a causal LM (no HF class of this layout)"
        if cfg.head != "lm":
            return f"head={cfg.head}: a classifier head, not next-token logits"
        if cfg.normalization != "layernorm":
            return (f"normalization={cfg.normalization}: GPT-NeoX always applies its "
                    "LayerNorms; an identity norm has no HF equivalent")
        return None
    if arch in ("mamba2", "mamba"):
        name = hf_class(arch, cfg)
        if arch == "mamba2":  # the Markov paper's published model (models.mamba2) first
            if cfg.norm != "rms":
                return (f"norm={cfg.norm}: the Markov paper's bias-free LayerNorm subtracts the "
                        "mean; every HF Mamba-2 class normalises with RMSNorm")
            if cfg.norm_before_gate and cfg.mixer_norm:
                return ("norm_before_gate=True: HF's Mamba-2 mixers compute norm(y ⊙ silu(z)), "
                        "not the authors' norm(y) ⊙ silu(z)")
            if cfg.d_mlp and not cfg.mlp_gated:
                return (f"mlp_gated=False: the HF class with an MLP after a Mamba-2 mixer "
                        f"({BAMBA}) gates it, down(act(gate(u)) ⊙ up(u))")
            if cfg.d_mlp and cfg.mlp_act != cfg.activation:
                return (f"d_mlp={cfg.d_mlp} with mlp_act={cfg.mlp_act}: the HF class with an MLP "
                        f"after a Mamba-2 mixer ({BAMBA}) uses one activation (hidden_act) for "
                        f"the MLP and the mixer, and the mixer's is {cfg.activation}")
        elif cfg.d_mlp:
            return (f"d_mlp={cfg.d_mlp}: {name}'s blocks have no MLP after the mixer, and no HF "
                    "class puts one after a Mamba-1 mixer with its own norm")
        if not cfg.block_norm:
            return f"block_norm=False: {name} always applies an RMSNorm before the mixer"
        if not cfg.final_norm:
            return f"final_norm=False: {name} always applies its final RMSNorm"
        if not cfg.gated:
            return f"gated=False: {name} always multiplies the output by silu(z)"
        if cfg.activation != "silu":
            return (f"activation={cfg.activation}: {name} gates with silu whatever hidden_act "
                    "says, and its fused CUDA kernels take silu only")
        if cfg.prediction != "softmax":
            return (f"prediction={cfg.prediction}: HF causal LMs read their logits through a "
                    "softmax")
        if arch == "mamba2" and not cfg.mixer_norm:
            return f"mixer_norm=False: {name} always applies the gated RMSNorm"
        return None
    return f"arch={arch}: no HF class is known for it"


# ---------------------------------------------------------------------------- hook map
@dataclass(frozen=True)
class HFSite:
    """Where one of our hooks is in the exported HF model: the module at ``module`` (``{i}``:
    our block index, the same index in HF's layer list), read as its ``output`` (element
    ``item`` of a tuple) or its first positional ``input``. Values equal ours to float
    rounding, reshaped to HF's shape (our per-head axes are flattened there); ``note`` says
    where they are not."""

    module: str
    read: str = "output"  # output | input
    item: int = 0
    note: str = ""


_NEOX = "gpt_neox.layers.{i}."
_SSM = "backbone.layers.{i}."
_BAMBA_L = "model.layers.{i}."
LN_SHIFT_NOTE = ("plus seqprobe.ln_final_shift of config.json where the unembedding bias was "
                 "moved into this LayerNorm's bias (GPT-NeoX's lm_head has none)")
# our hook name -> HF module, per exported class (forward hooks on the module, or nnsight's
# .output / .input, read these). Activations with no module boundary of their own in the HF
# class (q, k, v, scores, Δ_t, B, C, the state) are not listed.
HOOK_MAP: dict[str, dict[str, HFSite]] = {
    "GPTNeoXForCausalLM": {
        "hook_embed": HFSite("gpt_neox.embed_in"),
        "blocks.{i}.hook_resid_pre": HFSite("gpt_neox.layers.{i}", "input"),
        "blocks.{i}.ln1.hook_normalized": HFSite(_NEOX + "input_layernorm"),
        "blocks.{i}.attn.hook_pattern": HFSite(_NEOX + "attention", item=1,
                                               note="eager attention only (others give None)"),
        "blocks.{i}.attn.hook_z": HFSite(_NEOX + "attention.dense", "input"),
        "blocks.{i}.hook_attn_out": HFSite(_NEOX + "attention"),
        # sequential blocks: the second LayerNorm reads resid_mid (parallel ones: resid_pre)
        "blocks.{i}.hook_resid_mid": HFSite(_NEOX + "post_attention_layernorm", "input"),
        "blocks.{i}.ln2.hook_normalized": HFSite(_NEOX + "post_attention_layernorm"),
        "blocks.{i}.mlp.hook_pre": HFSite(_NEOX + "mlp.dense_h_to_4h"),
        "blocks.{i}.mlp.hook_post": HFSite(_NEOX + "mlp.dense_4h_to_h", "input"),
        "blocks.{i}.hook_mlp_out": HFSite(_NEOX + "mlp"),
        "blocks.{i}.hook_resid_post": HFSite("gpt_neox.layers.{i}"),
        "ln_final.hook_normalized": HFSite("gpt_neox.final_layer_norm", note=LN_SHIFT_NOTE),
    },
    "Mamba2ForCausalLM": {
        "hook_embed": HFSite("backbone.embeddings"),
        "blocks.{i}.hook_resid_pre": HFSite("backbone.layers.{i}", "input"),
        "blocks.{i}.norm.hook_normalized": HFSite(_SSM + "norm"),
        "blocks.{i}.mixer.hook_in_proj": HFSite(_SSM + "mixer.in_proj"),
        "blocks.{i}.mixer.hook_y": HFSite(_SSM + "mixer.norm", "input"),
        "blocks.{i}.mixer.hook_ssm_out": HFSite(_SSM + "mixer"),
        "blocks.{i}.hook_resid_post": HFSite("backbone.layers.{i}"),
        "ln_final.hook_normalized": HFSite("backbone.norm_f"),
    },
    BAMBA: {
        "hook_embed": HFSite("model.embed_tokens"),
        "blocks.{i}.hook_resid_pre": HFSite("model.layers.{i}", "input"),
        "blocks.{i}.norm.hook_normalized": HFSite(_BAMBA_L + "input_layernorm"),
        "blocks.{i}.mixer.hook_in_proj": HFSite(_BAMBA_L + "mamba.in_proj"),
        "blocks.{i}.mixer.hook_y": HFSite(_BAMBA_L + "mamba.norm", "input"),
        "blocks.{i}.mixer.hook_ssm_out": HFSite(_BAMBA_L + "mamba"),
        "blocks.{i}.hook_resid_mid": HFSite(_BAMBA_L + "pre_ff_layernorm", "input"),
        "blocks.{i}.norm2.hook_normalized": HFSite(_BAMBA_L + "pre_ff_layernorm"),
        "blocks.{i}.mlp.hook_post": HFSite(_BAMBA_L + "feed_forward.down_proj", "input"),
        "blocks.{i}.hook_mlp_out": HFSite(_BAMBA_L + "feed_forward"),
        "blocks.{i}.hook_resid_post": HFSite("model.layers.{i}"),
        "ln_final.hook_normalized": HFSite("model.final_layernorm"),
    },
    "MambaForCausalLM": {
        "hook_embed": HFSite("backbone.embeddings"),
        "blocks.{i}.hook_resid_pre": HFSite("backbone.layers.{i}", "input"),
        "blocks.{i}.norm.hook_normalized": HFSite(_SSM + "norm"),
        "blocks.{i}.mixer.hook_in_proj": HFSite(_SSM + "mixer.in_proj"),
        "blocks.{i}.mixer.hook_x": HFSite(_SSM + "mixer.x_proj", "input"),
        "blocks.{i}.mixer.hook_ssm_out": HFSite(_SSM + "mixer"),
        "blocks.{i}.hook_resid_post": HFSite("backbone.layers.{i}"),
        "ln_final.hook_normalized": HFSite("backbone.norm_f"),
    },
}


def hook_sites(hf_class_name: str, n_layers: int) -> dict[str, HFSite]:
    """:data:`HOOK_MAP` of one exported class with ``{i}`` filled in for every block:
    ``{"blocks.0.hook_resid_post": HFSite("gpt_neox.layers.0"), ...}``."""
    check(hf_class_name in HOOK_MAP, f"no hook map for {hf_class_name!r}; exported classes: "
          f"{', '.join(sorted(HOOK_MAP))}")
    sites = {}
    for ours, site in HOOK_MAP[hf_class_name].items():
        for i in range(n_layers) if "{i}" in ours else [None]:
            sites[ours.format(i=i)] = (site if i is None else dataclasses.replace(
                site, module=site.module.format(i=i)))
    return sites


# ---------------------------------------------------------------------------- tokenizer
def hf_tokenizer(vocab: Vocab, n_tokens: int, max_len: int = MIN_POSITIONS):
    """A ``PreTrainedTokenizerFast`` whose ids are ``vocab``'s (``n_tokens`` ≥ vocab.size; extra
    ids of a wider embedding become ``<unused{i}>``), built with the ``tokenizers`` package.

    It reads text as our models' ``to_tokens`` does and adds ``<BOS>`` in front (its
    post-processor) when the vocabulary has one, as our tasks' sequences start. It has no
    unknown token: our models have no id for one, and mapping a foreign symbol onto a task
    token would be a silent wrong input, so a symbol outside the vocabulary is an error."""
    check(n_tokens >= vocab.size, f"the model has {n_tokens} token ids but its task vocabulary "
          f"{vocab.size}")
    specials = [f"<{s}>" for s in vocab.specials]
    unused = [f"<unused{i}>" for i in range(n_tokens - vocab.size)]
    symbols = [*vocab.alphabet, *specials, *unused]
    dup = sorted(s for s, n in Counter(symbols).items() if n > 1)
    check(not dup, f"the task vocabulary repeats the symbol(s) {dup[:3]}: no tokenizer can "
          "give them distinct ids")
    ids = {s: i for i, s in enumerate(symbols)}
    if all(len(a) == 1 for a in vocab.alphabet):
        # Unigram without unk_id: a character outside the vocabulary raises "Encountered an
        # unknown token but `unk_id` is missing" (WordLevel's error would name an unknown
        # token, "[UNK]", as if the file had lost it). Unigram needs every character of a
        # word to be a piece, so it serves one-character alphabets only.
        tok = Tokenizer(tk_models.Unigram([(s, -1.0) for s in symbols], unk_id=None,
                                          byte_fallback=False))
        isolate = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        if any(a.isspace() for a in vocab.alphabet):  # phone-book text: spaces are tokens
            tok.pre_tokenizer = isolate
        else:  # whitespace only separates, as in our to_tokens ("a b c" is "abc")
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                         isolate])
        tok.decoder = decoders.Fuse()
    else:
        check(not any(c.isspace() for a in vocab.alphabet for c in a),
              "the task vocabulary has multi-character symbols with whitespace in them: "
              "no text form tells them apart")
        # one word per symbol; a word outside the vocabulary raises WordLevel's "Missing
        # [UNK] token" (the tokenizers library has no model that both keeps multi-character
        # words whole and refuses an unknown one in other words)
        tok = Tokenizer(tk_models.WordLevel(vocab=ids, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # decode joins with spaces
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in specials + unused])
    bos = "BOS" in vocab.specials
    if bos:  # the single and pair templates transformers itself writes for add_bos_token
        tok.post_processor = processors.TemplateProcessing(
            single="<BOS>:0 $A:0", pair="<BOS>:0 $A:0 <BOS>:1 $B:1",
            special_tokens=[("<BOS>", vocab.id("BOS"))])
    roles = {SPECIAL_ROLES[s]: f"<{s}>" for s in vocab.specials if s in SPECIAL_ROLES}
    extra = [f"<{s}>" for s in vocab.specials if s not in SPECIAL_ROLES] + unused
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_len,
                                   clean_up_tokenization_spaces=False, add_bos_token=bos,
                                   extra_special_tokens=extra, **roles)


def special_token_ids(vocab: Vocab) -> dict[str, int | None]:
    """``bos_token_id`` / ``eos_token_id`` / ``pad_token_id`` for the HF config (None where the
    vocabulary has no such token)."""
    return {f"{role}_id": (vocab.id(s) if s in vocab.specials else None)
            for s, role in SPECIAL_ROLES.items()}


# ---------------------------------------------------------------------------- weights
def _transformer(cfg, sd: dict[str, Tensor], ids: dict, n_ctx: int, notes: list[str]):
    H, dh = cfg.n_heads, cfg.d_head
    n_rot = 2 * int(dh * cfg.rotary_frac / 2) if cfg.pe == "rope" else 0
    frac = n_rot / dh
    if int(dh * frac) != n_rot:  # HF rotates int(d_head · fraction) channels
        frac = math.nextafter(frac, 2.0)
    config = tf.GPTNeoXConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=H, intermediate_size=cfg.d_mlp_, hidden_act=cfg.act_fn,
        max_position_embeddings=n_ctx, layer_norm_eps=cfg.ln_eps,
        use_parallel_residual=cfg.parallel_residual, attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_base),
                         "partial_rotary_factor": frac},
        tie_word_embeddings=False, attention_dropout=0.0, hidden_dropout=0.0, **ids)
    # transformers 4.x reads these two (and would default the fraction to 0.25, silently); 5.x
    # reads rope_parameters and drops them
    config.rotary_pct, config.rotary_emb_base = frac, float(cfg.rope_base)
    out = {"gpt_neox.embed_in.weight": sd["embed.weight"]}
    for i in range(cfg.n_layers):
        p, q = f"blocks.{i}.", f"gpt_neox.layers.{i}."
        W = torch.stack([sd[p + "attn.W_Q"], sd[p + "attn.W_K"], sd[p + "attn.W_V"]], dim=1)
        b = torch.stack([sd[p + "attn.b_Q"], sd[p + "attn.b_K"], sd[p + "attn.b_V"]], dim=1)
        out |= {
            q + "input_layernorm.weight": sd[p + "ln1.w"],
            q + "input_layernorm.bias": sd[p + "ln1.b"],
            q + "post_attention_layernorm.weight": sd[p + "ln2.w"],
            q + "post_attention_layernorm.bias": sd[p + "ln2.b"],
            # NeoX's fused rows are per head: [q of head 0, k of head 0, v of head 0, q of 1…]
            q + "attention.query_key_value.weight": einops.rearrange(
                W, "h j d e -> (h j e) d"),  # [3·d_model, d_model]
            q + "attention.query_key_value.bias": b.reshape(-1),  # [3·d_model]
            q + "attention.dense.weight": sd[p + "attn.W_O"].reshape(H * dh, -1).T,
            q + "attention.dense.bias": sd[p + "attn.b_O"],
            q + "mlp.dense_h_to_4h.weight": sd[p + "mlp.W_in"].T,
            q + "mlp.dense_h_to_4h.bias": sd[p + "mlp.b_in"],
            q + "mlp.dense_4h_to_h.weight": sd[p + "mlp.W_out"].T,
            q + "mlp.dense_4h_to_h.bias": sd[p + "mlp.b_out"],
        }
    W_U, c, b_f = sd["unembed.weight"], sd["unembed.bias"], sd["ln_final.b"]
    rounding = 0.0
    if bool(c.any()):
        b_f, rounding = fold_unembed_bias(W_U, c, b_f)
        shift = float((b_f.double() - sd["ln_final.b"].double()).abs().max())
        notes.append("the unembedding bias was moved into gpt_neox.final_layer_norm.bias "
                     "(GPT-NeoX's lm_head has no bias; same logits"
                     + (f" up to {rounding:.2g}, the rounding of the moved bias in "
                        f"{str(b_f.dtype).removeprefix('torch.')}"
                        if b_f.dtype not in (torch.float32, torch.float64) else "")
                     + f"), so its output is ours + seqprobe.ln_final_shift (max |shift| "
                       f"{shift:.3g})")
    out |= {"gpt_neox.final_layer_norm.weight": sd["ln_final.w"],
            "gpt_neox.final_layer_norm.bias": b_f, "lm_head.weight": W_U}
    return config, out, rounding


def fold_unembed_bias(W_U: Tensor, c: Tensor, b: Tensor) -> tuple[Tensor, float]:
    """(b', rounding): b' with W_U·b' = W_U·b + c, the final LayerNorm's bias that makes an
    unembedding bias c unnecessary (logits = W_U(LN(x)·w + b) + c = W_U(LN(x)·w + b')), and
    max |W_U·b' − W_U·b − c| once b' is stored in b's dtype (its rounding: negligible in
    float32, a bfloat16 step in bfloat16).

    Solved in float64 by least squares (the minimum-norm change); refused when c is not in the
    span of W_U's columns, as then no b' reproduces the logits."""
    W, c64 = W_U.double(), c.double()
    delta = torch.linalg.lstsq(W, c64[:, None], driver="gelsd").solution[:, 0]
    off = float((W @ delta - c64).abs().max())
    if off > 1e-6 * (1.0 + float(c64.abs().max())):
        V, d = W_U.shape
        why = f"vocab {V} > d_model {d}" if V > d else "W_U is rank-deficient"
        raise ExportError(f"the unembedding bias cannot be moved into the final LayerNorm "
                          f"(GPT-NeoX's lm_head has no bias): {why}, and the bias is off the "
                          f"span of W_U's columns by {off:.2g}")
    b_new = (b.double() + delta).to(b.dtype)
    rounding = float((W @ (b_new.double() - b.double()) - c64).abs().max())
    return b_new, rounding


def _ssm_common(cfg, sd: dict[str, Tensor], arch: str) -> dict[str, Tensor]:
    """HF names for the LM wrapper, and the rewrites that keep the function: no D (D = 0), no
    conv (a width-1 identity conv). The mixer keeps our names."""
    if cfg.unembed_bias:
        check(not bool(sd["unembed.bias"].any()),
              f"refused: unembed_bias: {hf_class(arch, cfg)}'s lm_head has no bias and the final "
              "RMSNorm has none to move it into (the checkpoint's bias is non-zero)")
    out = to_hf_state_dict({k: v for k, v in sd.items() if k != "unembed.bias"})
    ref = sd["embed.weight"]
    for i in range(cfg.n_layers):
        p = f"backbone.layers.{i}.mixer."
        heads = cfg.n_heads if arch == "mamba2" else cfg.d_inner
        if not cfg.use_D:
            out[p + "D"] = ref.new_zeros(heads)
        if not cfg.conv:
            channels = cfg.conv_dim if arch == "mamba2" else cfg.d_inner
            out[p + "conv1d.weight"] = ref.new_ones(channels, 1, 1)
    return out


def _ssm_config_kwargs(cfg, ids: dict) -> dict[str, Any]:
    return dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, state_size=cfg.d_state,
        num_hidden_layers=cfg.n_layers, layer_norm_epsilon=cfg.norm_eps, expand=cfg.expand,
        conv_kernel=cfg.d_conv if cfg.conv else 1, use_bias=cfg.proj_bias,
        use_conv_bias=cfg.conv_bias and cfg.conv, hidden_act="silu",
        residual_in_fp32=False,  # ours adds in the model's dtype
        time_step_min=cfg.dt_min, time_step_max=cfg.dt_max, time_step_floor=cfg.dt_init_floor,
        tie_word_embeddings=False, **ids)


def _mamba2(cfg, sd: dict[str, Tensor], ids: dict, notes: list[str]):
    out = _ssm_common(cfg, sd, "mamba2")
    if not cfg.decay:
        for i in range(cfg.n_layers):
            out[f"backbone.layers.{i}.mixer.A_log"] = sd["embed.weight"].new_full(
                (cfg.n_heads,), NO_DECAY_A_LOG)
        notes.append(f"decay=False is written as A_log = {NO_DECAY_A_LOG:g} (a_t = 1 exactly)")
    if cfg.d_mlp:
        return _bamba(cfg, out, ids, notes)
    config = tf.Mamba2Config(num_heads=cfg.n_heads, head_dim=cfg.d_head, n_groups=cfg.n_groups,
                             chunk_size=cfg.chunk_size, time_step_limit=(0.0, float("inf")),
                             **_ssm_config_kwargs(cfg, ids))
    return config, out, 0.0


# our Mamba-2 block's names (after to_hf_state_dict) -> Bamba's; the MLP's fc1 is split below
_BAMBA_NAMES = (("backbone.embeddings.", "model.embed_tokens."),
                ("backbone.norm_f.", "model.final_layernorm."), ("lm_head.", "lm_head."))
_BAMBA_BLOCK = (("norm.", "input_layernorm."), ("mixer.", "mamba."),
                ("norm2.", "pre_ff_layernorm."), ("mlp.fc2.", "feed_forward.down_proj."))


def _bamba(cfg, hf_sd: dict[str, Tensor], ids: dict, notes: list[str]):
    """Mamba-2 with the gated MLP as ``BambaForCausalLM`` (no attention layer): ``hf_sd`` holds
    Mamba2ForCausalLM names; our fc1 = [value half; gate half] becomes up_proj and gate_proj."""
    config = tf.BambaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_mlp,
        num_hidden_layers=cfg.n_layers, attn_layer_indices=None, num_attention_heads=1,
        num_key_value_heads=1, hidden_act=cfg.activation, mlp_bias=False,
        rms_norm_eps=cfg.norm_eps, mamba_n_heads=cfg.n_heads, mamba_d_head=cfg.d_head,
        mamba_n_groups=cfg.n_groups, mamba_d_state=cfg.d_state,
        mamba_d_conv=cfg.d_conv if cfg.conv else 1, mamba_expand=cfg.expand,
        mamba_chunk_size=cfg.chunk_size, mamba_conv_bias=cfg.conv_bias and cfg.conv,
        mamba_proj_bias=cfg.proj_bias, time_step_limit=(0.0, float("inf")),
        # no cache: transformers 5 asks a Bamba cache for its length through an attention
        # layer, and this one has none (forward fails); generate() recomputes the prefix
        tie_word_embeddings=False, use_cache=False, **ids)
    out = {}
    for k, v in hf_sd.items():
        if k.startswith("backbone.layers."):
            i, rest = k.removeprefix("backbone.layers.").split(".", 1)
            p = f"model.layers.{i}."
            if rest == "mlp.fc1.weight":
                value, gate = v.chunk(2, dim=0)  # [d_mlp, d_model] each
                out |= {p + "feed_forward.up_proj.weight": value,
                        p + "feed_forward.gate_proj.weight": gate}
                continue
            old, new = next(pair for pair in _BAMBA_BLOCK if rest.startswith(pair[0]))
            out[p + new + rest.removeprefix(old)] = v
        else:
            old, new = next(pair for pair in _BAMBA_NAMES if k.startswith(pair[0]))
            out[new + k.removeprefix(old)] = v
    notes.append(f"the MLP after each mixer makes it a {BAMBA} with no attention layer")
    return config, out, 0.0


def _mamba(cfg, sd: dict[str, Tensor], ids: dict, notes: list[str]):
    config = tf.MambaConfig(time_step_rank=cfg.dt_rank_, time_step_scale=cfg.dt_scale,
                            use_mambapy=False, **_ssm_config_kwargs(cfg, ids))
    return config, _ssm_common(cfg, sd, "mamba"), 0.0


def to_hf(ckpt: dict) -> HFExport:
    """Map a checkpoint dict (:func:`models.read_checkpoint`) to an HF config, state dict and
    tokenizer; raise :class:`ExportError` (one line) where no HF class computes it exactly."""
    arch = ckpt["model"]["arch"]
    cfg = config_from_dict(model_class(arch).config_cls, ckpt["model"]["config"])
    why = refusal(arch, cfg)
    if why:
        raise ExportError(f"refused: {why}")
    task = make_task(ckpt["task"]["name"], ckpt["task"]["config"])
    train = ckpt.get("train", {})
    context = int((train.get("config") or {}).get("context", 0) or 0)
    n_ctx = max(MIN_POSITIONS, context)
    ids = special_token_ids(task.vocab)
    sd, notes = ckpt["state_dict"], []
    try:
        if arch == "transformer":
            config, state, rounding = _transformer(cfg, sd, ids, n_ctx, notes)
        elif arch == "mamba2":
            config, state, rounding = _mamba2(cfg, sd, ids, notes)
        else:
            config, state, rounding = _mamba(cfg, sd, ids, notes)
    except ExportError:
        raise
    except TaskError as e:
        raise ExportError(str(e)) from None
    config.architectures = [hf_class(arch, cfg)]
    config.dtype = str(sd["embed.weight"].dtype).removeprefix("torch.")
    config.seqprobe = {
        "arch": arch, "config": dict(ckpt["model"]["config"]),
        "task": {"name": ckpt["task"]["name"], "config": dict(ckpt["task"]["config"])},
        "step": train.get("step"), "digest": ckpt.get("digest"), "notes": notes,
    }
    if arch == "transformer" and bool(sd["unembed.bias"].any()):
        # the final LayerNorm's output is ours + this vector (HOOK_MAP's ln_final note): a
        # logit lens on the HF side subtracts it to read our ln_final
        shift = state["gpt_neox.final_layer_norm.bias"].double() - sd["ln_final.b"].double()
        config.seqprobe["ln_final_shift"] = shift.tolist()
    tokenizer = hf_tokenizer(task.vocab, cfg.vocab_size, n_ctx)
    return HFExport(config, {k: v.contiguous() for k, v in state.items()}, tokenizer, notes,
                    rounding)


def read_provenance(hf_dir: str | os.PathLike) -> dict | None:
    """The ``seqprobe`` entry an export stored in ``hf_dir``'s config.json (arch, model config,
    task, step, digest, notes), or None for a model this suite did not export."""
    path = Path(hf_dir) / "config.json"
    try:
        entry = json.loads(path.read_text()).get("seqprobe")
    except (OSError, ValueError, AttributeError) as e:
        raise ExportError(f"{short_path(path)}: not a readable HF config ({e})") from None
    return entry if isinstance(entry, dict) else None


# ---------------------------------------------------------------------------- writing
def check_out_dir(out_dir: str | os.PathLike, overwrite: bool,
                  keep: str | os.PathLike | None = None) -> Path:
    """Refuse (one line) an OUT_DIR that is a file, a link, non-empty without ``overwrite`` (or,
    with it, not one of our exports: :func:`not_an_export`), the working directory or one above
    it, one holding ``keep`` (the checkpoint: replacing the directory would delete it), or whose
    parent cannot be written; nothing is created here."""
    out = Path(os.path.abspath(check_path(out_dir)))  # "out/", "." and ".." by their names
    cwd = Path.cwd().resolve()
    check(out.resolve() not in (cwd, *cwd.parents), f"{short_path(out_dir)}: is the working "
          "directory or above it; name a new directory")
    if keep is not None:
        kept = Path(os.path.abspath(keep)).resolve()
        check(out.resolve() not in kept.parents, f"{short_path(out_dir)}: holds the checkpoint "
              f"{short_path(keep)}, which replacing the directory would delete")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    if st is not None:
        check(not stat.S_ISLNK(st.st_mode), f"{short_path(out)}: is a symbolic link; name the "
              "directory itself")
        check(stat.S_ISDIR(st.st_mode), f"{short_path(out)}: exists and is not a directory")
        if any(out.iterdir()):
            check(overwrite, f"{short_path(out)}: directory is not empty; pass --overwrite to "
                  "replace it")
            why = not_an_export(out)
            check(why is None, f"{short_path(out)}: --overwrite replaces only a model directory "
                  f"this command wrote, and this one {why}; remove it yourself or name another")
    parent = out.absolute().parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    check(existing is not None and existing.is_dir() and os.access(existing, os.W_OK | os.X_OK),
          f"{short_path(out)}: cannot write in {short_path(existing or parent)}")
    return out


# what save_pretrained writes for our exports (transformers 4.x adds special_tokens_map.json),
# shards of a large model included: a directory with anything else is not one --overwrite takes
EXPORT_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors",
                          "model.safetensors.index.json", "tokenizer.json",
                          "tokenizer_config.json", "special_tokens_map.json"})
SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")


def not_an_export(directory: Path) -> str | None:
    """Why ``directory`` is not a model directory this command wrote (a phrase), or None: only
    regular files an export writes, and a config.json with our provenance."""
    entries = sorted(os.scandir(directory), key=lambda e: e.name)
    for entry in entries:  # what --overwrite would lose most of first
        if entry.is_symlink() or not entry.is_file():
            kind = "a link" if entry.is_symlink() else "a subdirectory"
            return f"holds {kind} ({entry.name!r})"
    for entry in entries:
        if entry.name not in EXPORT_FILES and not SHARD.fullmatch(entry.name):
            return f"holds {entry.name!r}, which an export does not write"
    if not (directory / "config.json").is_file():
        return "has no config.json"
    try:
        prov = read_provenance(directory)
    except ExportError:
        prov = None
    return None if prov is not None else "has no seqprobe provenance in its config.json"


def stale_temp_dirs(out: Path) -> list[Path]:
    """The temp directories earlier exports into ``out`` left beside it (killed before their
    rename; :data:`models.loading.EXPORT_TEMP_DIR` names them)."""
    mine = re.compile(re.escape(f".{out.name}.") + EXPORT_TEMP_SUFFIX)
    return sorted(p for p in out.parent.iterdir()
                  if mine.fullmatch(p.name) and p.is_dir() and not p.is_symlink())


@contextlib.contextmanager
def export_lock(out: Path):
    """Hold ``.NAME.export.lock`` beside OUT_DIR for the whole export (removed at its end): a
    second export into the same directory at the same time, from another process or thread, is
    refused in one line (both used to report "wrote", the second silently replacing the first).
    Directories made here for OUT_DIR's parent are removed again if the export fails."""
    parent = out.parent
    new = [p for p in (parent, *parent.parents) if not p.exists()]
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"{short_path(parent)}: cannot create it ({e.strerror})") from None
    ok = False
    try:
        with exclusive_lock(
                parent / f".{out.name}.export.lock",
                busy=lambda who: ExportError(
                    f"{short_path(out)}: {who} is exporting into this directory now; wait for "
                    "it to finish (then --overwrite replaces its result)"),
                unusable=lambda why: ExportError(
                    f"{short_path(out)}: cannot lock it for the export ({why})")):
            yield
        ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                for p in new:
                    p.rmdir()  # only while empty


@contextlib.contextmanager
def _quiet_hf():
    """No progress bars or notices from transformers on the command's output (loading back on
    a CPU without mamba-ssm, every kernel announces its PyTorch fallback)."""
    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _save(exp: HFExport, directory: Path) -> None:
    """``save_pretrained`` of the HF model holding ``exp``'s weights, and its tokenizer."""
    cls = getattr(tf, exp.config.architectures[0])
    with torch.device("meta"):  # no random init of weights that are replaced at once
        model = cls(exp.config)
    model.load_state_dict(exp.state_dict, strict=True, assign=True)
    model.save_pretrained(directory)
    exp.tokenizer.save_pretrained(directory)
    _portable_tokenizer_config(directory / "tokenizer_config.json")


def _portable_tokenizer_config(path: Path) -> None:
    """The tokenizer config in the form transformers 4.x reads too: its class by the name both
    versions know, and the extra specials as ``additional_special_tokens`` (5.x renames them
    on load; 4.x expects a dict under ``extra_special_tokens``)."""
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    if json.loads(path.with_name("tokenizer.json").read_text()).get("post_processor"):
        # <BOS> in front: transformers 5 rebuilds the post-processor from this flag when it is
        # given, so it must agree with tokenizer.json's template (4.x reads the template)
        data["add_bos_token"] = True
    extra = data.pop("extra_special_tokens", [])
    if extra:
        data["additional_special_tokens"] = extra
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def verify_tokens(ckpt: dict, rows: int = 8, length: int = VERIFY_TOKENS) -> Tensor:
    """[rows, ≤ length] tokens of the checkpoint's own task (a training batch: real prompts)."""
    task = make_task(ckpt["task"]["name"], ckpt["task"]["config"])
    tokens = task.batch(rows, make_generator(0)).tokens
    return tokens[:, :length]  # [rows, pos]


def compare_logits(model, hf_dir: str | os.PathLike, tokens: Tensor) -> float:
    """max |ours − HF's| over the logits of ``tokens`` ([batch, pos]), HF loaded from
    ``hf_dir`` with eager attention, both in float32: the check is of the mapping, so a
    half-precision checkpoint is compared without HF's and our different upcasts in between."""
    model = model.float()
    hf = tf.AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    with torch.no_grad():
        ours = model(tokens)  # [batch, pos, vocab]
        theirs = hf(tokens).logits  # [batch, pos, vocab]
    return float((ours - theirs).abs().max())


@dataclass
class ExportReport:
    out_dir: Path
    hf_class: str
    n_tensors: int
    max_logit_diff: float
    max_logit: float
    tokens_checked: int
    notes: list[str]
    rounding: float  # HFExport.rounding


def export(ckpt_path: str | os.PathLike, out_dir: str | os.PathLike, overwrite: bool = False,
           verify: bool = True) -> ExportReport:
    """Write checkpoint ``ckpt_path`` as an HF model directory ``out_dir`` (atomically: built in
    a temp directory beside it, checked, then renamed into place), holding :func:`export_lock`
    throughout; temp directories a killed export left for the same OUT_DIR are removed first.
    Every refusal comes before anything is written."""
    out = check_out_dir(out_dir, overwrite, keep=ckpt_path)
    ckpt = read_checkpoint(ckpt_path)
    exp = to_hf(ckpt)
    model = model_from_checkpoint(ckpt, ckpt_path).float().eval() if verify else None
    parent = out.absolute().parent
    with export_lock(out):
        # again under the lock: an export that finished meanwhile made OUT_DIR non-empty
        check_out_dir(out_dir, overwrite, keep=ckpt_path)
        for stale in stale_temp_dirs(out):  # ours to remove: no live export holds the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".export.tmp", dir=parent))
        try:
            with _quiet_hf():
                _save(exp, tmp)
                diff, top, n = 0.0, 0.0, 0
                if model is not None:
                    tokens = verify_tokens(ckpt)
                    with torch.no_grad():
                        top = float(model(tokens).abs().max())
                    diff = compare_logits(model, tmp, tokens)
                    n = tokens.numel()
                    if not diff <= VERIFY_RTOL * max(1.0, top) + 2 * exp.rounding:
                        raise ExportError(f"refused: the exported {exp.config.architectures[0]} "
                                          f"gives logits {diff:.3g} away from the checkpoint's "
                                          f"(largest |logit| {top:.3g}); nothing written")
            mask = umask()  # mkdtemp's directory is private, and some writers' files are too
            os.chmod(tmp, 0o777 & ~mask)
            for f in tmp.iterdir():
                os.chmod(f, 0o666 & ~mask)
            if out.exists():  # an empty directory, or --overwrite: swap, remove the old one
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".export.old",
                                            dir=parent))
                os.replace(out, old)
                try:
                    os.replace(tmp, out)
                except BaseException:
                    os.replace(old, out)
                    raise
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return ExportReport(out, exp.config.architectures[0], len(exp.state_dict), diff, top, n,
                        exp.notes, exp.rounding)


# ---------------------------------------------------------------------------- command line
def _main(argv: list[str] | None) -> int:
    p = OneLineParser(prog="python -m models.export_hf",
                      description="Write a suite checkpoint as a HuggingFace model directory "
                                  "(config, safetensors weights, tokenizer).")
    p.add_argument("checkpoint", help="a suite checkpoint (.pt)")
    p.add_argument("out_dir", help="the HF model directory to write (must be new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    args = p.parse_args(argv)
    try:
        r = export(args.checkpoint, args.out_dir, overwrite=args.overwrite)
    except OSError as e:  # disk full, permissions changed under us: nothing was published
        raise CheckpointError(f"{short_path(args.out_dir)}: cannot write ({e.strerror or e})"
                              ) from None
    print(f"wrote {args.out_dir} ({r.hf_class}, {r.n_tensors} tensors, tokenizer)")
    for note in r.notes:
        print(f"note: {note}")
    print(f"checked: logits of from_pretrained({args.out_dir}) equal the checkpoint's on "
          f"{r.tokens_checked} task tokens: max |diff| = {r.max_logit_diff:.2e} "
          f"(largest |logit| {r.max_logit:.3g})")
    return 0


def _sigterm_as_ctrl_c(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The command; SIGTERM is Ctrl-C here (one line, exit 130, the temp directory removed)."""
    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGTERM, _sigterm_as_ctrl_c)
    try:
        return run_cli(_main, argv)
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main())
