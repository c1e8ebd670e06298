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
import json
import math
import os
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
from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
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
from models.recurrent import to_hf_state_dict
from models.registry import model_class
from tasks.atomic import umask
from tasks.base import TaskError, Vocab, check, config_from_dict, make_generator
from tasks.registry import make_task

HF_CLASSES = {"transformer": "GPTNeoXForCausalLM", "mamba2": "Mamba2ForCausalLM",
              "mamba": "MambaForCausalLM"}
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
        name = HF_CLASSES[arch]
        if cfg.d_mlp:
            return (f"d_mlp={cfg.d_mlp}: {name}'s blocks have no MLP after the mixer (the HF "
                    "hybrids that have one use another MLP or one activation for both)")
        if not cfg.block_norm:
            return f"block_norm=False: {name} always applies an RMSNorm before the mixer"
        if not cfg.final_norm:
            return f"final_norm=False: {name} always applies its final RMSNorm (norm_f)"
        if not cfg.gated:
            return f"gated=False: {name} always multiplies the output by silu(z)"
        if cfg.activation != "silu":
            return (f"activation={cfg.activation}: {name} gates with silu whatever hidden_act "
                    "says, and its fused CUDA kernels take silu only")
        if cfg.prediction != "softmax":
            return (f"prediction={cfg.prediction}: HF causal LMs read their logits through a "
                    "softmax")
        if arch == "mamba2" and not cfg.mixer_norm:
            return "mixer_norm=False: Mamba2ForCausalLM always applies the gated RMSNorm"
        return None
    return f"arch={arch}: no HF class is known for it"


# ---------------------------------------------------------------------------- tokenizer
def hf_tokenizer(vocab: Vocab, n_tokens: int, max_len: int = MIN_POSITIONS):
    """A ``PreTrainedTokenizerFast`` whose ids are ``vocab``'s (``n_tokens`` ≥ vocab.size; extra
    ids of a wider embedding become ``<unused{i}>``), built with the ``tokenizers`` package."""
    check(n_tokens >= vocab.size, f"the model has {n_tokens} token ids but its task vocabulary "
          f"{vocab.size}")
    specials = [f"<{s}>" for s in vocab.specials]
    unused = [f"<unused{i}>" for i in range(n_tokens - vocab.size)]
    symbols = [*vocab.alphabet, *specials, *unused]
    dup = sorted(s for s, n in Counter(symbols).items() if n > 1)
    check(not dup, f"the task vocabulary repeats the symbol(s) {dup[:3]}: no tokenizer can "
          "give them distinct ids")
    ids = {s: i for i, s in enumerate(symbols)}
    tok = Tokenizer(tk_models.WordLevel(vocab=ids, unk_token=None))
    if all(len(a) == 1 for a in vocab.alphabet):
        # one token per character, whitespace and newlines included (phone-book text)
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tok.decoder = decoders.Fuse()
    else:
        check(not any(c.isspace() for a in vocab.alphabet for c in a),
              "the task vocabulary has multi-character symbols with whitespace in them: "
              "no text form tells them apart")
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # decode joins with spaces
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in specials + unused])
    roles = {SPECIAL_ROLES[s]: f"<{s}>" for s in vocab.specials if s in SPECIAL_ROLES}
    extra = [f"<{s}>" for s in vocab.specials if s not in SPECIAL_ROLES] + unused
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_len,
                                   clean_up_tokenization_spaces=False,
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
        notes.append("the unembedding bias was moved into gpt_neox.final_layer_norm.bias "
                     "(GPT-NeoX's lm_head has no bias; same logits"
                     + (f" up to {rounding:.2g}, the rounding of the moved bias in "
                        f"{str(b_f.dtype).removeprefix('torch.')}"
                        if b_f.dtype not in (torch.float32, torch.float64) else "") + ")")
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
              f"refused: unembed_bias: {HF_CLASSES[arch]}'s lm_head has no bias and the final "
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
    config = tf.Mamba2Config(num_heads=cfg.n_heads, head_dim=cfg.d_head, n_groups=cfg.n_groups,
                             chunk_size=cfg.chunk_size, time_step_limit=(0.0, float("inf")),
                             **_ssm_config_kwargs(cfg, ids))
    out = _ssm_common(cfg, sd, "mamba2")
    if not cfg.decay:
        for i in range(cfg.n_layers):
            out[f"backbone.layers.{i}.mixer.A_log"] = sd["embed.weight"].new_full(
                (cfg.n_heads,), NO_DECAY_A_LOG)
        notes.append(f"decay=False is written as A_log = {NO_DECAY_A_LOG:g} (a_t = 1 exactly)")
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
    config.architectures = [HF_CLASSES[arch]]
    config.dtype = str(sd["embed.weight"].dtype).removeprefix("torch.")
    config.seqprobe = {
        "arch": arch, "config": dict(ckpt["model"]["config"]),
        "task": {"name": ckpt["task"]["name"], "config": dict(ckpt["task"]["config"])},
        "step": train.get("step"), "digest": ckpt.get("digest"), "notes": notes,
    }
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
    """Refuse (one line) an OUT_DIR that is a file, a link, non-empty without ``overwrite``,
    the working directory or one above it, one holding ``keep`` (the checkpoint: replacing the
    directory would delete it), or whose parent cannot be written; nothing is created here."""
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
        check(overwrite or not any(out.iterdir()), f"{short_path(out)}: directory is not "
              "empty; pass --overwrite to replace it")
    parent = out.absolute().parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    check(existing is not None and existing.is_dir() and os.access(existing, os.W_OK | os.X_OK),
          f"{short_path(out)}: cannot write in {short_path(existing or parent)}")
    return out


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
    a temp directory beside it, checked, then renamed into place). Every refusal comes before
    anything is written."""
    out = check_out_dir(out_dir, overwrite, keep=ckpt_path)
    ckpt = read_checkpoint(ckpt_path)
    exp = to_hf(ckpt)
    model = model_from_checkpoint(ckpt, ckpt_path).float().eval() if verify else None
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
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
        if out.exists():  # an empty directory, or --overwrite: swap, then remove the old one
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=parent))
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
