"""Hooked LSTM language model — the copy paper's recurrent baseline (Jelassi et al., "Repeat After
Me", §3, App. A.2: 4 layers of width 1024 at paper scale; Hochreiter & Schmidhuber 1997).

    x_t = embed(token_t);  for each layer ℓ:  (i, f, g, o) = W_ih·x_t + b_ih + W_hh·h_{t−1} + b_hh
    c_t = σ(f) ⊙ c_{t−1} + σ(i) ⊙ tanh(g),   h_t = σ(o) ⊙ tanh(c_t)   (h_t feeds layer ℓ + 1)
    logits_t = unembed(ln_final(h_t of the last layer))

Glossary (code name -> symbol):
    d_model                  width of the embedding, of h_t and of c_t (the paper's "width")
    blocks.{i}.lstm          a one-layer ``torch.nn.LSTM``; weight_ih_l0 / weight_hh_l0 are
                             [4·d_model, d_model] with the gate rows in PyTorch's order i, f, g, o
    blocks.{i}.hook_resid_pre the layer's input [batch, pos, d_model]: the embedding, or h_t of
                             the layer below (TransformerLens' name, so its residual patching runs)
    blocks.{i}.hook_h        h_t   [batch, pos, d_model] (the layer's output)
    blocks.{i}.hook_c        c_t   [batch, pos, d_model] (the cell state: the GSSM's memory)
    blocks.{i}.hook_gates    (i, f, g, o) pre-activations [batch, pos, 4, d_model]

Two paths, same numbers (tests compare them in float64): the fused ``nn.LSTM`` call (cuDNN on
CUDA), which returns h_t but not c_t, and a plain loop over positions that exposes c_t and the
gates; the plain loop runs whenever a hook is attached to hook_c or hook_gates (run_with_cache
attaches all). As with the SSMs, c_t and h_t are computed by the recurrence and then passed
through their hooks: patching hook_h changes what the next layer reads, not layer ℓ's own
recurrence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

import torch
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from models.base import SuiteModel, TLConfigFields
from models.contract import Shapes
from models.layers import RMSNorm, has_hooks
from seqprobe.config import check
from seqprobe.flags import (
    EPS_FIELD,
    INIT_STD_FIELD,
    LAYERS_FIELD,
    MAX_SCALE,
    VOCAB_FIELD,
    WIDTH_FIELD,
    bound,
)

SCANS = ("auto", "plain", "fused")


@dataclass(frozen=True)
class LSTMConfig(TLConfigFields):
    vocab_size: int = field(default=30, metadata=VOCAB_FIELD)
    d_model: int = field(default=256, metadata=WIDTH_FIELD)
    n_layers: int = field(default=2, metadata=LAYERS_FIELD)
    final_norm: bool = False  # RMSNorm before the unembedding
    norm_eps: float = field(default=1e-5, metadata=EPS_FIELD)
    forget_bias: float = field(  # added to b_ih's forget rows at init (keeps c_t early in training)
        default=1.0, metadata=bound(-MAX_SCALE, MAX_SCALE, "the LSTM forget gate's bias"))
    init_std: float = field(default=0.02, metadata=INIT_STD_FIELD)  # embedding init
    scan: str = "auto"  # auto | plain | fused

    def __post_init__(self):
        check(self.scan in SCANS, f"scan must be auto, plain or fused, got {self.scan!r}")
        check(self.init_std > 0, f"init_std must be > 0, got {self.init_std}")

    @property
    def normalization_type(self) -> str | None:
        return "RMS" if self.final_norm else None  # TL's (ActivationCache's apply_ln)

    @property
    def n_heads(self) -> int:
        """TransformerLens reads ``cfg.n_heads`` in every patching sweep, residual ones too.
        This model has no attention heads; 1 lets TL's head tools reach the cache lookup, which
        says so (:class:`models.base.ActivationNotFound`)."""
        return 1


class LSTMBlock(nn.Module):
    """One LSTM layer with h_t, c_t and the gates hooked (the plain loop computes c_t and the
    gates, which the fused call keeps inside cuDNN)."""

    def __init__(self, cfg: LSTMConfig):
        super().__init__()
        self.cfg = cfg
        self.scan = cfg.scan
        d = cfg.d_model
        self.lstm = nn.LSTM(d, d, num_layers=1, batch_first=True)
        with torch.no_grad():
            self.lstm.bias_ih_l0[d : 2 * d].add_(cfg.forget_bias)
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model] the layer's input (TL's name)
        self.hook_gates = HookPoint()  # [batch, pos, 4, d_model]  i, f, g, o pre-activations
        self.hook_c = HookPoint()  # [batch, pos, d_model]
        self.hook_h = HookPoint()  # [batch, pos, d_model]

    def forward(self, x: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d"]:
        x = self.hook_resid_pre(x)
        plain = self.scan == "plain" or (
            self.scan == "auto" and (has_hooks(self.hook_c) or has_hooks(self.hook_gates)))
        if not plain:
            h, _ = self.lstm(x)
            return self.hook_h(h)
        L = self.lstm
        B, T, d = x.shape
        xw = x @ L.weight_ih_l0.T + L.bias_ih_l0 + L.bias_hh_l0  # [batch, pos, 4·d], all t at once
        h = x.new_zeros(B, d)
        c = x.new_zeros(B, d)
        hs, cs, gs = [], [], []
        for xw_t in xw.unbind(1):  # unbind: xw[:, t]'s backward would be quadratic in T
            gates = xw_t + h @ L.weight_hh_l0.T  # [batch, 4·d]
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
            cs.append(c)
            gs.append(gates)
        self.hook_gates(torch.stack(gs, 1).reshape(B, T, 4, d))
        self.hook_c(torch.stack(cs, 1))
        return self.hook_h(torch.stack(hs, 1))


class LSTMLM(SuiteModel):
    """LSTM language model: embedding -> n LSTM layers -> ln_final -> unembedding.

    forward(tokens [batch, pos]) -> logits [batch, pos, vocab]. Paths: auto | plain | fused.
    """

    arch = "lstm"
    config_cls = LSTMConfig
    scans = SCANS
    fast_scans = ("fused",)
    ensemble_scan = "plain"  # aten::lstm has no vmap rule
    tiny_config = MappingProxyType(dict(vocab_size=7, d_model=8, n_layers=2))

    @classmethod
    def block_hook_shapes(cls, cfg: LSTMConfig, batch: int, pos: int) -> Shapes:
        B, T, d = batch, pos, cfg.d_model
        return {"hook_h": (B, T, d), "hook_c": (B, T, d), "hook_gates": (B, T, 4, d)}

    def __init__(self, cfg: LSTMConfig):
        super().__init__(cfg)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=cfg.init_std)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([LSTMBlock(cfg) for _ in range(cfg.n_layers)])
        self.ln_final = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.final_norm)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.setup()
