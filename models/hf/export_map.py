"""What a suite checkpoint becomes as a HuggingFace model (:mod:`models.hf.export` writes it):
the HF class, config and state dict (:func:`to_hf`), the refusals where no HF class computes our
model exactly (:func:`refusal`), and the hook map (:mod:`models.hf.export_hooks`).

Only classes that compute *exactly* our model are used; anything else is refused with one line:
    transformer, pe=rope / nope  -> ``GPTNeoXForCausalLM`` (pre-LN LayerNorm blocks with biases,
                                    NeoX rotate-half RoPE on a fraction of each head, sequential
                                    or parallel residual, untied embeddings, final LayerNorm;
                                    NoPE = a rotary fraction of 0). GPT-NeoX's unembedding has no
                                    bias, so ours is moved into the final LayerNorm's bias b':
                                    W·b' = W·b + c, solvable when the bias lies in the span of
                                    the unembedding's columns (always when vocab ≤ d_model and W
                                    has full rank); otherwise the checkpoint is refused. The
                                    final LayerNorm's output is then ours + (b' − b), stored as
                                    ``seqprobe.ln_final_shift`` (no HF class with GPT-NeoX's
                                    blocks has an lm_head bias).
    mamba2                       -> ``Mamba2ForCausalLM`` (same parameter names in the mixer);
                                    ``use_D=False`` as D = 0, ``decay=False`` as an A_log whose
                                    exp underflows to 0 (a_t = 1), ``conv=False`` as a width-1
                                    identity convolution; ``paper_init`` changes only the
                                    initial weights.
    mamba2 with d_mlp > 0        -> ``BambaForCausalLM`` with no attention layer, when the MLP
                                    is gated and its activation is the mixer's (SiLU).
    mamba                        -> ``MambaForCausalLM`` (same rewrites for D and conv).
    refused: Hard-ALiBi, ALiBi, encoders, classifier heads, normalization="none", STU, LSTM,
    MambaZero, the Markov paper's bias-free LayerNorm and norm-before-gate, a Mamba-2 MLP with
    another activation than the mixer's (the quick ReLU one) or ungated, Mamba-1 with an MLP,
    SSMs without block / final norm, without the gate, with a non-silu activation, an L1
    prediction or a non-zero unembedding bias (see :func:`refusal`).

Provenance (arch, model config, task, training step, weights digest, notes) is stored in the HF
config as ``seqprobe`` (:func:`read_provenance`). Weights keep the checkpoint's dtype. The
configs also carry what transformers 4.x reads (``rotary_pct``, ``rotary_emb_base``), so older
versions load them too.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import einops
import torch
import transformers as tf
from torch import Tensor

from models.checkpoint.paths import short_path
from models.hf.export_hooks import BAMBA
from models.hf.export_record import HF_CLASSES, MAX_CONFIG_BYTES
from models.registry import model_class
from models.ssm.recurrent import to_hf_state_dict
from models.tokenizer import MIN_POSITIONS, SPECIAL_ROLES, hf_tokenizer
from seqprobe.config import check, config_from_dict
from seqprobe.errors import InputError
from tasks.base import Vocab
from tasks.registry import make_task

# Mamba-2 with the Markov paper's MLP after each mixer (d_mlp > 0): Bamba's blocks are exactly
# resid + mixer(RMSNorm(resid)), then resid + down(act(gate(·)) ⊙ up(·))(RMSNorm(resid)); with
# no attention layer listed it is a pure Mamba-2 stack
# a_t = exp(−exp(A_log)·Δ_t): exp(−10⁴) is 0 in every float format, so a_t = 1 exactly
NO_DECAY_A_LOG = -1.0e4

REFUSED_ARCHS = {
    "mambazero": "MambaZero (Markov paper §4.1) has no block norm, no final norm, no gate and "
                 "an L1-normalised prediction; HF's Mamba2ForCausalLM always applies RMSNorms, "
                 "the silu gate and a softmax",
    "lstm": "transformers has no LSTM causal-LM class",
    "stu": "the Spectral Transform Unit's fixed spectral filters exist in no HF class",
}


class ExportError(InputError):
    """A checkpoint that no HF class computes exactly, or an output directory that is refused."""


@dataclass(frozen=True)
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
        if arch == "mamba2":  # the Markov paper's published model (models.ssm.mamba2) first
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
    """Map a checkpoint dict (:func:`models.checkpoint.io.read_checkpoint`) to an HF config,
    state dict and tokenizer; raise :class:`ExportError` (one line) where no HF class computes
    it exactly."""
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
    except InputError as e:
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
        st = os.stat(path)
        # read only a regular file of a config's size: a FIFO would block, a 1 GB one is
        # no config (and would be read whole before the loader's own check refused it)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONFIG_BYTES:
            raise ExportError(f"{short_path(path)}: not a readable HF config ("
                              + ("not a regular file" if not stat.S_ISREG(st.st_mode) else
                                 f"{st.st_size:,} bytes, more than any config") + ")")
        entry = json.loads(path.read_text()).get("seqprobe")
    except (OSError, ValueError, AttributeError, RecursionError) as e:
        raise ExportError(f"{short_path(path)}: not a readable HF config "
                          f"({' '.join(str(e).split())[:160] or type(e).__name__})") from None
    return entry if isinstance(entry, dict) else None
