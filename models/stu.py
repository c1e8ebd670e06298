"""A hooked Spectral Transform Unit (STU) language model.

STU (Agarwal et al. 2023, "Spectral state space models"; Liu et al. 2024, "Flash STU"), as
used in the spectral-filtering length-generalisation paper §4.2: embedding, ``n_layers``
pre-norm blocks of [STU layer, ReLU MLP] with residual connections, final norm, output
projection. No autoregressive components (paper §4.2), so whatever length generalisation the
model shows comes from the fixed filters alone.

Glossary (code name -> paper symbol):
    filter_len        T, the length of the spectral filters (paper Fig. 5: T = 256)
    num_filters       K (= k), the number of filters φ_1..φ_K
    filters [T, K]    σ_k^{1/4} φ_k: the top-K eigenvectors of H_T (models.spectral, Eq. 3) scaled
                      by the fourth root of their eigenvalues (fixed buffers, never trained)
    U⁺, U⁻            U⁺_t = Σ_j φ[j] x_{t−j} and U⁻_t = Σ_j (−1)^j φ[j] x_{t−j}: the "positive"
                      and "negative" spectral features (the negative branch covers eigenvalues
                      of A in [−1, 0], Agarwal et al. App. D); j = 0 is the current token
    param="full"      y_t = Σ_k M⁺_k U⁺_{t,k} + Σ_k M⁻_k U⁻_{t,k}, M^± : [K, d_in, d_out] —
                      the per-filter matrices M_k of Eq. 2, contracted with torch.tensordot
    param="tensordot" Flash STU's tensordot approximation M^±_k ≈ M_in · diag(M^±_filters[k]):
                      x̃ = x M_in, then each channel o is convolved with one learned mixture of
                      filters Σ_k M^±_filters[k, o] σ_k^{1/4} φ_k (K·d + d² parameters, not K·d²)
    mixture           tensordot only: "per_branch" (default) gives U⁺ and U⁻ their own
                      M^±_filters; "shared" is Flash STU's code (hazan-lab/flash-stu-2,
                      ``use_approx``): one M_filters for both branches, so with
                      ψ = φ M_filters, y_t = Σ_j (1 + (−1)^j) ψ[j] x̃_{t−j}: even lags only
    zero_embed        token ids whose embedding rows are held at zero (never trained): with
                      normalization="none" such a token (the induction task's BLANK) adds
                      nothing to any filtered sum of the first layer, so a window of BLANKs
                      and a window of positions before the sequence start are the same to it

Hooks (``blocks.{i}.``): ``hook_resid_pre / hook_resid_mid / hook_mlp_out / hook_resid_post``,
``stu.hook_features`` (tensordot: [batch, pos, 2, d_model], the + and − branch outputs whose
sum is the layer output; full: [batch, pos, 2, K, d_model], U⁺ and U⁻ per filter),
``stu.hook_out`` [batch, pos, d_model], ``mlp.hook_pre / hook_post`` [batch, pos, d_mlp];
model-level ``hook_embed`` and ``ln_final.hook_normalized``.

Deviation from Flash STU's code (by default): in the tensordot approximation Flash STU shares
one M_filters between the + and − branches, so their sum cancels every odd lag; here each
branch has its own mixture (a lag-1 "previous token" read-out is needed for induction heads).
``mixture="shared"`` is Flash STU's form. It only ever mixes positions of the same parity —
every STU layer reads even lags only, MLPs and norms are per position — so a stack of such
layers cannot read a recalled token at an odd lag from the query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType

import einops
import torch
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from models.base import SuiteModel, TLConfigFields
from models.contract import Shapes
from models.layers import MLP, LayerNorm
from models.spectral import spectral_filters
from seqprobe.config import check
from seqprobe.flags import (
    EPS_FIELD,
    LAYERS_FIELD,
    MAX_DIM,
    MAX_HORIZON,
    MLP_FIELD,
    VOCAB_FIELD,
    WIDTH_FIELD,
    bound,
)

PARAMS = ("tensordot", "full")
MIXTURES = ("per_branch", "shared")


@dataclass(frozen=True)
class STUConfig(TLConfigFields):
    vocab_size: int = field(default=6, metadata=VOCAB_FIELD)
    d_model: int = field(default=64, metadata=WIDTH_FIELD)
    n_layers: int = field(default=2, metadata=LAYERS_FIELD)
    filter_len: int = field(  # T of H_T (paper Fig. 5)
        default=256, metadata=bound(1, MAX_HORIZON, "a spectral filter's length; STU paper: 2^14"))
    num_filters: int = field(  # K
        default=24, metadata=bound(1, MAX_DIM, "spectral filters K; the STU paper: 24"))
    param: str = "tensordot"  # tensordot | full
    negative_branch: bool = True  # U⁻ features (eigenvalues in [−1, 0])
    d_mlp: int = field(default=0, metadata=MLP_FIELD)  # 0 -> 4 * d_model
    act_fn: str = "relu"  # paper: "MLPs and ReLU nonlinearities"
    normalization: str = "layernorm"  # layernorm | none
    ln_eps: float = field(default=1e-5, metadata=EPS_FIELD)
    mixture: str = "per_branch"  # tensordot: per_branch | shared (Flash STU's one M_filters)
    zero_embed: tuple[int, ...] = field(  # token ids whose embeddings are held at zero
        default=(), metadata=bound(0, MAX_DIM, "token ids", allow_empty=True))

    def __post_init__(self):
        check(self.num_filters <= self.filter_len,
              f"num_filters ({self.num_filters}) must be <= filter_len ({self.filter_len})")
        check(self.param in PARAMS, f"param must be one of {PARAMS}, got {self.param!r}")
        check(self.act_fn in ("relu", "gelu"), f"act_fn must be relu or gelu, got {self.act_fn!r}")
        check(self.normalization in ("layernorm", "none"),
              f"normalization must be layernorm or none, got {self.normalization!r}")
        check(self.mixture in MIXTURES, f"mixture must be one of {MIXTURES}, got {self.mixture!r}")
        check(self.mixture == "per_branch" or self.param == "tensordot",
              "mixture='shared' is a tensordot option (param='full' has no filter mixture)")
        check(all(0 <= i < self.vocab_size for i in self.zero_embed),
              f"zero_embed ids must be in [0, {self.vocab_size}), got {self.zero_embed}")

    @property
    def n_mixtures(self) -> int:
        """Filter mixtures of a tensordot layer: one per branch, or one shared by both."""
        return 1 if self.mixture == "shared" else self.n_branches

    @property
    def d_mlp_(self) -> int:
        return self.d_mlp or 4 * self.d_model

    @property
    def normalization_type(self) -> str | None:
        return "LN" if self.normalization == "layernorm" else None  # TL's (ActivationCache)

    @property
    def n_branches(self) -> int:
        return 2 if self.negative_branch else 1

    @property
    def n_heads(self) -> int:
        """TransformerLens reads ``cfg.n_heads`` in every patching sweep, residual ones too.
        This model has no attention heads; 1 lets TL's head tools reach the cache lookup, which
        says so (:class:`models.base.ActivationNotFound`)."""
        return 1


def scaled_filters(T: int, K: int) -> Float[Tensor, "T K"]:
    """σ_k^{1/4} φ_k for the top-K eigenpairs of H_T (float64, cached in models.spectral)."""
    sigma, phi = spectral_filters(T, K, "H")
    return phi * sigma.clamp(min=0) ** 0.25


def causal_conv(x: Float[Tensor, "batch pos *#channels"], v: Float[Tensor, " taps *#channels"],
                ) -> Float[Tensor, "batch pos *#channels"]:
    """``out[b, t] = Σ_{j=0}^{taps−1} v[j] ⊙ x[b, t − j]`` (channels broadcast), by FFT."""
    L, n = x.shape[1], v.shape[0]
    size = 1 << math.ceil(math.log2(max(2, L + n - 1)))
    X = torch.fft.rfft(x, n=size, dim=1)
    V = torch.fft.rfft(v, n=size, dim=0)
    return torch.fft.irfft(X * V.unsqueeze(0), n=size, dim=1)[:, :L]


class STULayer(nn.Module):
    """One STU layer: spectral filtering of the sequence (FFT convolution) and a learned
    read-out of the features (tensordot approximation or full per-filter matrices)."""

    def __init__(self, cfg: STUConfig):
        super().__init__()
        self.cfg = cfg
        d, K, nb = cfg.d_model, cfg.num_filters, cfg.n_branches
        self.register_buffer("filters", scaled_filters(cfg.filter_len, K).float(),
                             persistent=False)  # [T, K], rebuilt from the config on load
        if cfg.param == "tensordot":
            self.M_inputs = nn.Parameter(torch.randn(d, d) / math.sqrt(d))
            self.M_filters = nn.Parameter(torch.randn(cfg.n_mixtures, K, d) / math.sqrt(K))
        else:
            self.M_phi = nn.Parameter(torch.randn(nb, K, d, d) / math.sqrt(K * d))
        self.hook_features = HookPoint()  # tensordot: [batch, pos, sign, d_model]
        #                                   full: [batch, pos, sign, K, d_model]
        self.hook_out = HookPoint()  # [batch, pos, d_model]

    def _signs(self, n: int, like: Tensor) -> Tensor:
        return torch.where(torch.arange(n, device=like.device) % 2 == 0, 1.0, -1.0).to(like.dtype)

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        cfg = self.cfg
        L = x.shape[1]
        n = min(L, cfg.filter_len)  # filter taps beyond the sequence never touch it
        phi = self.filters[:n].to(x.dtype)  # [n, K]
        sgn = self._signs(n, x)  # (−1)^j
        if cfg.param == "tensordot":
            xp = x @ self.M_inputs  # [batch, pos, d_model]
            mixed = einops.einsum(phi, self.M_filters, "n k, s k d -> s n d")  # [mix, n, d]
            if cfg.negative_branch:  # (−1)^j on U⁻ taps; shared: both from the one mixture
                mixed = torch.stack([mixed[0], mixed[-1] * sgn[:, None]])  # [sign, n, d]
            feats = torch.stack([causal_conv(xp, m) for m in mixed], dim=2)  # [b, pos, sign, d]
            feats = self.hook_features(feats)
            return self.hook_out(feats.sum(dim=2))
        taps = [phi] + ([phi * sgn[:, None]] if cfg.negative_branch else [])
        # U^± [batch, pos, K, d_model]: every filter applied to every channel
        feats = torch.stack([causal_conv(x.unsqueeze(2), t.unsqueeze(-1)) for t in taps], dim=2)
        feats = self.hook_features(feats)  # [batch, pos, sign, K, d_model]
        out = torch.tensordot(feats, self.M_phi, dims=([2, 3, 4], [0, 1, 2]))  # [b, pos, d]
        return self.hook_out(out)


class STUBlock(nn.Module):
    hook_out_is_single_residual_stream = True  # what TL's logit lens asks (see TransformerBlock)

    def __init__(self, cfg: STUConfig):
        super().__init__()
        on = cfg.normalization == "layernorm"
        self.ln1 = LayerNorm(cfg.d_model, cfg.ln_eps, on)
        self.ln2 = LayerNorm(cfg.d_model, cfg.ln_eps, on)
        self.stu = STULayer(cfg)
        self.mlp = MLP(cfg.d_model, cfg.d_mlp_, cfg.act_fn)
        with torch.no_grad():  # N(0, 1/fan_in) in, and the residual write shrunk with depth
            self.mlp.W_in.copy_(torch.randn(cfg.d_model, cfg.d_mlp_) / math.sqrt(cfg.d_model))
            self.mlp.W_out.copy_(torch.randn(cfg.d_mlp_, cfg.d_model)
                                 / math.sqrt(cfg.d_mlp_ * 2 * cfg.n_layers))
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(self, resid: Float[Tensor, "batch pos d_model"],
                ) -> Float[Tensor, "batch pos d_model"]:
        resid = self.hook_resid_pre(resid)
        resid = self.hook_resid_mid(resid + self.stu(self.ln1(resid)))
        return self.hook_resid_post(resid + self.hook_mlp_out(self.mlp(self.ln2(resid))))


class HeldZeroEmbedding(nn.Embedding):
    """An embedding whose rows ``zero_ids`` are zero in every forward (so they get no gradient
    and stay zero under AdamW): the token adds nothing to the residual stream it starts."""

    def __init__(self, num_embeddings: int, embedding_dim: int, zero_ids: tuple[int, ...]):
        super().__init__(num_embeddings, embedding_dim)
        keep = torch.ones(num_embeddings, 1)
        keep[list(zero_ids)] = 0.0
        self.register_buffer("keep", keep, persistent=False)  # [vocab, 1], rebuilt from cfg
        with torch.no_grad():
            self.weight.mul_(keep)  # the stored rows say what the model uses

    def forward(self, tokens: Tensor) -> Float[Tensor, "batch pos d_model"]:
        return nn.functional.embedding(tokens, self.weight * self.keep.to(self.weight.dtype))


class STULM(SuiteModel):
    """STU language model: forward(tokens [batch, pos]) -> logits [batch, pos, vocab]."""

    arch = "stu"
    config_cls = STUConfig
    tiny_config = MappingProxyType(dict(vocab_size=7, d_model=8, n_layers=2, filter_len=32,
                                        num_filters=6, d_mlp=16))

    @classmethod
    def block_hook_shapes(cls, cfg: STUConfig, batch: int, pos: int) -> Shapes:
        B, T, d, sign = batch, pos, cfg.d_model, cfg.n_branches
        return {"stu.hook_features": ((B, T, sign, d) if cfg.param == "tensordot"
                                      else (B, T, sign, cfg.num_filters, d)),
                "stu.hook_out": (B, T, d), "hook_resid_mid": (B, T, d),
                "mlp.hook_pre": (B, T, cfg.d_mlp_), "mlp.hook_post": (B, T, cfg.d_mlp_),
                "hook_mlp_out": (B, T, d), "hook_resid_post": (B, T, d)}

    def __init__(self, cfg: STUConfig):
        super().__init__(cfg)
        self.embed = (HeldZeroEmbedding(cfg.vocab_size, cfg.d_model, cfg.zero_embed)
                      if cfg.zero_embed else nn.Embedding(cfg.vocab_size, cfg.d_model))
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([STUBlock(cfg) for _ in range(cfg.n_layers)])
        self.ln_final = LayerNorm(cfg.d_model, cfg.ln_eps, cfg.normalization == "layernorm")
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size)
        nn.init.normal_(self.unembed.weight, std=1 / math.sqrt(cfg.d_model))
        nn.init.zeros_(self.unembed.bias)
        self.setup()
