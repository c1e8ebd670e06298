"""A hooked decoder-only (or encoder) transformer, GPT-NeoX style, with four positional encodings.

Glossary (code name -> paper symbol; Jelassi et al. "Repeat After Me", §2.1, §2.2, App. A.1):
    d_model          dl, the residual width (l heads of dimension d)
    n_heads, d_head  l, d
    W_Q, W_K, W_V    W_q, W_k, W_v of each head; W_O the output projection of the heads
    hook_q, hook_k   q_i, k_i before the rotary embedding; hook_rot_q, hook_rot_k after it
                     (pe="rope" only), as TransformerLens names them
    hook_attn_scores K_i·q_i + b_i: scaled scores *with* the positional bias b_i added; a
                     masked score (b_i = −∞) reads torch.finfo(dtype).min, TransformerLens'
                     fill, so the hook holds finite numbers (the pattern is the same: 0 there)
    hook_pattern     softmax(K_i·q_i + b_i), the pattern actually used
    pe="nope"        no positional information (Fig. 8a)
    pe="alibi"       b_{i,j} = −m_h·(i − j), m_h = 2^(−h/2) (Fig. 8b, App. A.2)
    pe="hard_alibi"  Hard-ALiBi (§2.2, Fig. 8c): M masked heads, head h ∈ 1..M sees only its own
                     token and the h − 1 before it (b_{i,j} = −∞ for j ≤ i − h); others NoPE
    pe="rope"        rotary embedding of q and k (Su et al.)

Pre-LN blocks: resid_mid = resid_pre + attn(ln1(resid_pre)); resid_post = resid_mid +
mlp(ln2(resid_mid)); with ``parallel_residual`` (GPT-NeoX's option) both branches read
resid_pre. ``causal=False`` gives an encoder; ``head`` switches the unembedding between
next-token logits and token / sequence classification (memorization experiments).

Three attention paths give the same numbers (tested, outputs and gradients): plain (scores
and pattern materialised, every hook fires), PyTorch's fused ``scaled_dot_product_attention``,
and FlexAttention (``torch.nn.attention.flex_attention``), which adds the ALiBi slope and the
Hard-ALiBi / causal masks inside the kernel (``score_mod``) instead of reading a float bias.
A fused path is taken (``use_sdpa``, or ``set_scan``) only while no hook reads the scores or
pattern; ``auto`` picks FlexAttention for ALiBi and Hard-ALiBi on CUDA (where SDPA's float
mask keeps them off the flash kernel), SDPA otherwise. FlexAttention runs compiled on CUDA; on
the CPU it runs eager and forward only (PyTorch has no CPU backward for it), so there it is a
forced path for tests.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from types import MappingProxyType

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.nn.attention.flex_attention import flex_attention
from transformer_lens.hook_points import HookPoint

from models.base import SuiteModel, TLConfigFields
from models.contract import Shapes
from models.layers import MLP, LayerNorm, has_hooks
from seqprobe.config import check
from seqprobe.flags import (
    EPS_FIELD,
    INIT_STD_FIELD,
    LAYERS_FIELD,
    MAX_DIM,
    MAX_HEADS,
    MAX_LENGTH,
    MAX_SCALE,
    MLP_FIELD,
    VOCAB_FIELD,
    WIDTH_FIELD,
    bound,
)

PES = ("nope", "alibi", "hard_alibi", "rope")
HEADS = ("lm", "token_cls", "seq_cls")


@dataclass(frozen=True)
class TransformerConfig(TLConfigFields):
    vocab_size: int = field(default=30, metadata=VOCAB_FIELD)
    d_model: int = field(default=128, metadata=WIDTH_FIELD)
    n_layers: int = field(default=2, metadata=LAYERS_FIELD)
    n_heads: int = field(
        default=8, metadata=bound(1, MAX_HEADS, "heads per layer; papers: up to 16"))
    d_mlp: int = field(default=0, metadata=MLP_FIELD)  # 0 -> 4 * d_model
    pe: str = "hard_alibi"
    # ALiBi slopes m_h; empty -> m_h = 2^(−h/2), h = 1..H (paper A.2)
    alibi_slopes: tuple[float, ...] = field(
        default=(), metadata=bound(0.0, MAX_SCALE, "ALiBi slopes", allow_empty=True))
    # Hard-ALiBi: number M of masked heads (−1 -> n_heads // 2) and their windows (empty -> 1..M)
    hard_alibi_heads: int = field(
        default=-1, metadata=bound(-1, MAX_HEADS, "Hard-ALiBi heads; -1: the default"))
    hard_alibi_windows: tuple[int, ...] = field(
        default=(), metadata=bound(1, MAX_LENGTH, "windows in tokens", allow_empty=True))
    rope_base: float = field(
        default=10000.0, metadata=bound(0.0, 1e12, "RoPE's base; papers: 10^4", open_lo=True))
    rotary_frac: float = field(  # fraction of d_head rotated (NeoX's rotary_pct)
        default=1.0, metadata=bound(0.0, 1.0, "the rotated fraction of a head"))
    parallel_residual: bool = False
    causal: bool = True
    head: str = "lm"  # lm | token_cls | seq_cls
    n_classes: int = field(  # for token_cls / seq_cls
        default=0, metadata=bound(0, MAX_DIM, "classes of a classification head; 0: none"))
    act_fn: str = "gelu"
    # "none": every LayerNorm is the identity (hand-set constructions, App. C; w/b unused)
    normalization: str = "layernorm"
    ln_eps: float = field(default=1e-5, metadata=EPS_FIELD)
    init_std: float = field(default=0.02, metadata=INIT_STD_FIELD)
    use_sdpa: bool = True  # fast path when no hook needs the attention pattern

    def __post_init__(self):
        check(self.pe in PES, f"pe must be one of {PES}, got {self.pe!r}")
        check(self.head in HEADS, f"head must be one of {HEADS}, got {self.head!r}")
        check(self.d_model % self.n_heads == 0,
              f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        check(self.act_fn in ("gelu", "relu"), f"act_fn must be gelu or relu, got {self.act_fn!r}")
        check(self.normalization in ("layernorm", "none"),
              f"normalization must be layernorm or none, got {self.normalization!r}")
        if self.head != "lm":
            check(self.n_classes >= 1, f"head={self.head} needs n_classes >= 1")
        if self.alibi_slopes:
            check(len(self.alibi_slopes) == self.n_heads,
                  f"alibi_slopes needs {self.n_heads} values, got {len(self.alibi_slopes)}")
        M = self.M
        check(0 <= M <= self.n_heads, f"hard_alibi_heads must be in [0, {self.n_heads}], got {M}")
        if self.hard_alibi_windows:
            check(len(self.hard_alibi_windows) == M,
                  f"hard_alibi_windows needs M={M} values, got {len(self.hard_alibi_windows)}")
        check(0.0 < self.rotary_frac <= 1.0,
              f"rotary_frac must be in (0, 1], got {self.rotary_frac}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def d_mlp_(self) -> int:
        return self.d_mlp or 4 * self.d_model

    @property
    def M(self) -> int:
        return self.n_heads // 2 if self.hard_alibi_heads < 0 else self.hard_alibi_heads

    @property
    def windows(self) -> tuple[int, ...]:
        return self.hard_alibi_windows or tuple(range(1, self.M + 1))

    @property
    def slopes(self) -> tuple[float, ...]:
        return self.alibi_slopes or tuple(2.0 ** (-h / 2) for h in range(1, self.n_heads + 1))

    @property
    def d_vocab_out(self) -> int:
        return self.vocab_size if self.head == "lm" else self.n_classes

    @property
    def normalization_type(self) -> str | None:
        return "LN" if self.normalization == "layernorm" else None

    @property
    def positional_embedding_type(self) -> str:
        """TL's name where it has one (``rotary``, ``alibi``); ``none`` (NoPE) and
        ``hard_alibi`` otherwise. No value is TL's ``standard``: no suite model has a W_pos."""
        return {"rope": "rotary", "nope": "none"}.get(self.pe, self.pe)


def positional_bias(cfg: TransformerConfig, q_len: int, k_len: int, device
                    ) -> Float[Tensor, "head q_pos k_pos"]:
    """Additive bias ``b[head, q, k]`` (causal mask included; zeros for NoPE / RoPE encoders).

    Queries are the last ``q_len`` of ``k_len`` positions. ``-inf`` marks forbidden keys.
    """
    q_pos = torch.arange(k_len - q_len, k_len, device=device)
    k_pos = torch.arange(k_len, device=device)
    dist = q_pos[:, None] - k_pos[None, :]  # [q, k], i − j
    bias = torch.zeros(cfg.n_heads, q_len, k_len, device=device)
    if cfg.pe == "alibi":
        slopes = torch.tensor(cfg.slopes, device=device)
        bias = bias - slopes[:, None, None] * dist.abs()
    elif cfg.pe == "hard_alibi":
        for h, w in enumerate(cfg.windows):  # head h sees its own token and the w − 1 before it
            bias[h] = bias[h].masked_fill(dist.abs() >= w, float("-inf"))
    if cfg.causal:
        bias = bias.masked_fill(dist < 0, float("-inf"))
    return bias


def alibi_score_mod(cfg: TransformerConfig, device: torch.device):
    """FlexAttention's ``score_mod`` adding :func:`positional_bias` to each scaled score:
    −m_h·|i − j| (ALiBi), −∞ beyond head h's window (Hard-ALiBi) and −∞ for j > i (causal).
    The slopes are the float32 numbers :func:`positional_bias` uses, so float32 and float64
    scores get the same bias as the plain path."""
    H = cfg.n_heads
    slopes = torch.tensor(cfg.slopes if cfg.pe == "alibi" else (0.0,) * H, device=device)
    windows = torch.full((H,), float("inf"), device=device)  # unmasked heads: no window
    if cfg.pe == "hard_alibi":
        windows[: len(cfg.windows)] = torch.tensor(cfg.windows, dtype=torch.float32)
    alibi, hard, causal = cfg.pe == "alibi", cfg.pe == "hard_alibi", cfg.causal

    # FlexAttention calls this under vmap and its own dynamo trace, where a runtime type
    # check (the test suite's import hook) cannot run: jaxtyping skips a no_type_check function
    @typing.no_type_check
    def score_mod(score, b, h, q_idx, k_idx):
        dist = q_idx - k_idx  # i − j
        if alibi:
            score = score - slopes[h] * dist.abs()
        if hard:
            score = torch.where(dist.abs() >= windows[h], float("-inf"), score)
        if causal:
            score = torch.where(dist < 0, float("-inf"), score)
        return score

    return score_mod


_FLEX: list = []  # the compiled flex_attention, made on first use (compiling costs seconds)


def _compiled_flex():
    """flex_attention through torch.compile: on CUDA its eager form materialises the scores;
    compiled it is one fused kernel (inside a compiled model dynamo inlines it)."""
    if not _FLEX:
        _FLEX.append(torch.compile(flex_attention))
    return _FLEX[0]


def rope_cos_sin(n_rot: int, positions: Int[Tensor, " pos"], base: float
                 ) -> tuple[Float[Tensor, "pos rot"], Float[Tensor, "pos rot"]]:
    """cos and sin of the rotation angles pos·θ_i, θ_i = base^(−2i / n_rot), NeoX layout."""
    inv_freq = 1.0 / base ** (torch.arange(0, n_rot, 2, device=positions.device).float() / n_rot)
    angles = positions.float()[:, None] * inv_freq[None, :]  # [pos, n_rot/2]
    angles = torch.cat([angles, angles], dim=-1)  # [pos, n_rot] (NeoX rotate-half layout)
    return angles.cos(), angles.sin()


def apply_rope(x: Float[Tensor, "batch pos head d_head"], cos: Float[Tensor, "pos rot"],
               sin: Float[Tensor, "pos rot"], n_rot: int) -> Float[Tensor, "batch pos head d_head"]:
    """Rotate the first ``n_rot`` channels of every head by the angles of its position."""
    whole = n_rot == x.shape[-1]  # the usual case: no unrotated rest to copy back in
    rot = x if whole else x[..., :n_rot]
    x1, x2 = rot.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    rot = rot * cos[None, :, None, :] + rotated * sin[None, :, None, :]
    return rot if whole else torch.cat([rot, x[..., n_rot:]], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        H, d, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.empty(H, d, dh))
        self.W_K = nn.Parameter(torch.empty(H, d, dh))
        self.W_V = nn.Parameter(torch.empty(H, d, dh))
        self.W_O = nn.Parameter(torch.empty(H, dh, d))
        self.b_Q = nn.Parameter(torch.zeros(H, dh))
        self.b_K = nn.Parameter(torch.zeros(H, dh))
        self.b_V = nn.Parameter(torch.zeros(H, dh))
        self.b_O = nn.Parameter(torch.zeros(d))
        # TransformerLens' meaning: hook_q / hook_k before RoPE, hook_rot_q / hook_rot_k after
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()  # [batch, pos, head, d_head]
        if cfg.pe == "rope":
            self.hook_rot_q = HookPoint()  # [batch, pos, head, d_head]
            self.hook_rot_k = HookPoint()  # [batch, pos, head, d_head]
        self.hook_v = HookPoint()  # [batch, pos, head, d_head]
        # [batch, head, q_pos, k_pos], bias added, masked scores finfo(dtype).min
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()  # [batch, head, q_pos, k_pos]
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]
        self.hook_result = HookPoint()  # [batch, pos, head, d_model] per-head output
        self._cache: dict = {}
        self.scan = "auto"  # auto | plain | sdpa | flex (SuiteModel.set_scan)

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        cfg = self.cfg
        B, T, _ = x.shape
        H, dh = cfg.n_heads, cfg.d_head
        # One fused matmul for q, k, v (the per-head [head, d_model, d_head] layout is kept for
        # users and checkpoints; flattening it per call copies the weights, far less work than
        # three matmuls).
        W = torch.cat([self.W_Q, self.W_K, self.W_V], dim=0)  # [3·head, d_model, d_head]
        W = W.permute(1, 0, 2).reshape(cfg.d_model, 3 * H * dh)  # [d_model, 3·head·d_head]
        b = torch.cat([self.b_Q, self.b_K, self.b_V], dim=0).flatten()
        qkv = F.linear(x, W.T, b).view(B, T, 3 * H, dh)  # [batch, pos, 3·head, d_head]
        q0, k0, v = qkv.split(H, dim=2)  # each [batch, pos, head, d_head]
        q, k, v = self.hook_q(q0), self.hook_k(k0), self.hook_v(v)
        if cfg.pe == "rope":
            n_rot = 2 * int(dh * cfg.rotary_frac / 2)
            # float32 angles cast to qkv's dtype (a bf16 q must stay bf16 for SDPA)
            cos, sin = self._cached("rope", T, x.device, qkv.dtype, lambda: tuple(
                t.to(qkv.dtype) for t in rope_cos_sin(
                    n_rot, torch.arange(T, device=x.device), cfg.rope_base)))
            # q and k sit side by side in qkv: one rotation for both (elementwise, same numbers),
            # unless a hook replaced one of them
            qk = qkv[:, :, :2 * H] if (q is q0 and k is k0) else torch.cat([q, k], dim=2)
            qk = apply_rope(qk, cos, sin, n_rot)  # [batch, pos, 2·head, d_head]
            q, k = qk.split(H, dim=2)
            q, k = self.hook_rot_q(q), self.hook_rot_k(k)
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # [batch, head, pos, d_head]

        path = self._path(x.device)
        if path == "flex":
            # the bias is computed per score inside the kernel: nothing of [head, T, T] is read
            flex = _compiled_flex() if qh.device.type == "cuda" else flex_attention
            score_mod = self._cached("score_mod", 0, x.device, None,
                                     lambda: alibi_score_mod(cfg, x.device))
            z = flex(qh, kh, vh, score_mod=score_mod).transpose(1, 2)  # [batch, pos, head, d_head]
        elif path == "sdpa":
            # Fast path: same maths in one fused call; taken only when no hook reads the pattern.
            # No positional bias (NoPE, RoPE) -> is_causal, which lets PyTorch pick its fastest
            # kernel (flash on GPU); ALiBi / Hard-ALiBi -> the bias as a float mask in q's dtype
            # (memory-efficient kernel on GPU), built once per length, device and dtype. 4-D:
            # PyTorch's CPU flash kernel takes a 2-D or 4-D mask only (3-D falls back to the
            # path that materialises the scores).
            mask = None if cfg.pe in ("nope", "rope") else self._bias(T, qh)[None]
            z = F.scaled_dot_product_attention(
                qh, kh, vh, attn_mask=mask, is_causal=cfg.causal and mask is None,
            ).transpose(1, 2)  # [batch, pos, head, d_head]
        else:
            scores = qh @ kh.transpose(-1, -2) / math.sqrt(dh)  # [batch, head, q_pos, k_pos]
            scores = (scores + self._bias(T, scores)).masked_fill(
                self._masked(T, scores), torch.finfo(scores.dtype).min)  # TL's fill
            scores = self.hook_attn_scores(scores)
            pattern = self.hook_pattern(torch.softmax(scores, dim=-1))
            z = (pattern @ vh).transpose(1, 2)  # [batch, pos, head, d_head]
        z = self.hook_z(z)
        if has_hooks(self.hook_result):  # per-head outputs cost memory: only when asked for
            result = self.hook_result(einops.einsum(z, self.W_O, "b p h e, h e d -> b p h d"))
            return result.sum(dim=2) + self.b_O
        return F.linear(z.reshape(B, T, H * dh), self.W_O.reshape(H * dh, -1).T, self.b_O)

    def _fast(self) -> bool:
        """A fused path (SDPA or FlexAttention) unless the plain path is forced or a hook reads
        scores / pattern (which neither materialises)."""
        if self.scan == "plain" or has_hooks(self.hook_attn_scores) or has_hooks(self.hook_pattern):
            return False
        return self.scan in ("sdpa", "flex") or self.cfg.use_sdpa

    def _path(self, device: torch.device) -> str:
        """``plain``, ``sdpa`` or ``flex`` for inputs on ``device`` (module docstring)."""
        if not self._fast():
            return "plain"
        if self.scan in ("sdpa", "flex"):
            return self.scan
        return "flex" if device.type == "cuda" and self.cfg.pe in ("alibi", "hard_alibi") \
            else "sdpa"

    def _bias(self, T: int, like: Tensor) -> Float[Tensor, "head q_pos k_pos"]:
        """Positional bias + mask for T positions in ``like``'s dtype and device (SDPA refuses a
        float mask of another dtype, a bf16 matmul a float32 pattern), cached per length,
        device and dtype. Built in float32 and cast, so float32 / float64 numbers stay those the
        plain path has always added."""
        return self._cached("bias", T, like.device, like.dtype, lambda: positional_bias(
            self.cfg, T, T, like.device).to(like.dtype))

    def _masked(self, T: int, like: Tensor) -> Tensor:
        """[head, q_pos, k_pos] bool: where :meth:`_bias` is −∞ (causal and Hard-ALiBi masks)."""
        return self._cached("masked", T, like.device, None, lambda: torch.isneginf(
            positional_bias(self.cfg, T, T, like.device)))

    def _cached(self, name: str, T: int, device, dtype, make):
        key = (name, T, str(device), dtype)
        if key not in self._cache:
            if len(self._cache) > 8:  # many lengths seen (length-generalisation sweeps)
                self._cache.clear()
            with torch.inference_mode(False):  # a cached tensor must serve autograd later too
                self._cache[key] = make()
        return self._cache[key]


class TransformerBlock(nn.Module):
    # TL's logit lens reads hook_resid_post as the one stream ln_final and unembed turn into
    # logits (the bridge's blocks declare it so); every block here writes exactly that
    hook_out_is_single_residual_stream = True

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.ln1 = LayerNorm(cfg.d_model, cfg.ln_eps, cfg.normalization == "layernorm")
        self.ln2 = LayerNorm(cfg.d_model, cfg.ln_eps, cfg.normalization == "layernorm")
        self.attn = Attention(cfg)
        self.mlp = MLP(cfg.d_model, cfg.d_mlp_, cfg.act_fn)
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(self, resid: Float[Tensor, "batch pos d_model"]
                ) -> Float[Tensor, "batch pos d_model"]:
        resid_pre = self.hook_resid_pre(resid)
        attn_out = self.hook_attn_out(self.attn(self.ln1(resid_pre)))
        if self.cfg.parallel_residual:
            mlp_out = self.hook_mlp_out(self.mlp(self.ln2(resid_pre)))
            return self.hook_resid_post(resid_pre + attn_out + mlp_out)
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)
        mlp_out = self.hook_mlp_out(self.mlp(self.ln2(resid_mid)))
        return self.hook_resid_post(resid_mid + mlp_out)


class HookedTransformerLM(SuiteModel):
    """Transformer language model (or classifier) with TransformerLens hook names.

    forward(tokens [batch, pos]) -> logits [batch, pos, vocab] (``head="lm"``),
    [batch, pos, n_classes] (``token_cls``) or [batch, n_classes] (``seq_cls``, read from the
    last position when causal, mean-pooled otherwise).
    """

    arch = "transformer"
    config_cls = TransformerConfig
    scans = ("auto", "plain", "sdpa", "flex")
    fast_scans = ("sdpa",)
    ensemble_scan = "plain"  # PyTorch has no vmap rule for CPU SDPA: it would loop over members
    tiny_config = MappingProxyType(dict(vocab_size=11, d_model=16, n_layers=2, n_heads=4,
                                        d_mlp=32))

    @classmethod
    def block_hook_shapes(cls, cfg: TransformerConfig, batch: int, pos: int) -> Shapes:
        B, T, d, H, dh = batch, pos, cfg.d_model, cfg.n_heads, cfg.d_head
        return {**{f"attn.hook_{n}": (B, T, H, dh) for n in ("q", "k", "v", "z")},
                "attn.hook_attn_scores": (B, H, T, T), "attn.hook_pattern": (B, H, T, T),
                "attn.hook_result": (B, T, H, d), "hook_resid_mid": (B, T, d),
                "mlp.hook_pre": (B, T, cfg.d_mlp_), "mlp.hook_post": (B, T, cfg.d_mlp_),
                "hook_resid_post": (B, T, d)}

    @classmethod
    def flops_per_token(cls, cfg: TransformerConfig, n_params: int, length: int) -> float:
        """6·N plus attention's scores and mixing: 12·n_layers·d_model·length (the forward's
        2·2·n_layers·d_model·length, tripled for the backward)."""
        return 6.0 * n_params + 12.0 * cfg.n_layers * cfg.d_model * length

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg.n_layers)])
        self.ln_final = LayerNorm(cfg.d_model, cfg.ln_eps, cfg.normalization == "layernorm")
        self.hook_pooled = HookPoint()  # [batch, d_model] (seq_cls only)
        self.unembed = nn.Linear(cfg.d_model, cfg.d_vocab_out)
        self._init_weights()
        self.setup()

    def _init_weights(self):
        std = self.cfg.init_std
        out_std = std / math.sqrt(2 * self.cfg.n_layers)  # GPT-2: residual writes shrink with depth
        for name, p in self.named_parameters():
            if name.endswith(("W_O", "W_out")):
                nn.init.normal_(p, std=out_std)
            elif p.dim() >= 2:
                nn.init.normal_(p, std=std)
            elif name.endswith("unembed.bias"):
                nn.init.zeros_(p)

    def compute_logits(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch ..."]:
        """Logits [batch, pos, vocab | n_classes], or [batch, n_classes] for ``seq_cls``."""
        resid = self.hook_embed(self.embed(tokens))  # [batch, pos, d_model]
        x = self.ln_final(self.run_blocks(resid))
        if self.cfg.head == "seq_cls":
            x = self.hook_pooled(x[:, -1] if self.cfg.causal else x.mean(dim=1))  # [batch, d_model]
        return self.unembed(x)
