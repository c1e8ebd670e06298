"""Hooked Mamba-2 language model (Markov paper, Bondaschi et al., Fig. 2 / App. B; HF layout).

    embedding -> n × [resid + Mamba2Mixer(RMSNorm(resid)) (+ resid + GatedMLP(RMSNorm(resid)))]
              -> RMSNorm (ln_final) -> unembed

The mixer, its config, hooks and scan paths live in :mod:`models.ssm.ssd`; the LM wrapper shared
with Mamba and MambaZero in :mod:`models.ssm.recurrent`.

Glossary (code name -> Markov paper symbol, §2.2 / Table 6):
    d_model, expand, d_state, n_heads, d_conv   d, e, N, heads, w (see models.ssm.ssd)
    d_mlp                                       width of the gated MLP after each mixer (0: none)
    unembed.weight                              W_ℓ (the Linear layer), logits = W_ℓ·v_t

Parameter names and shapes equal HF ``Mamba2ForCausalLM`` / mamba-ssm's ``MambaLMHeadModel``
up to the renaming done by :func:`to_hf_state_dict` / :func:`from_hf_state_dict`.

The Markov paper's published model (the authors' code, Bond1995/Markov-Mamba, run with
``--layernorm --conv --conv_act --gate --activation silu``) is this LM with
:data:`MARKOV_PAPER_MODEL`: bias-free LayerNorm before the mixer, before the MLP, on y_t and
before the unembedding (``norm="layernorm"``); o_t = out_proj(LN(y_t) ⊙ act(z_t))
(``norm_before_gate``); no D (``use_D=False``); the gated MLP with SiLU; the authors' init
(``paper_init``). Without ``--gate`` their runs drop both gates: the MLP is ungated
(``mlp_gated=False``) and the mixer has no act(z_t) gate either, o_t = out_proj(LN(y_t))
(``gated=False`` too); their in_proj still computes z_t, so its W_z rows are there, unused
(as the authors' code reads; not checked here against it).
:func:`from_markov_paper_state_dict` renames their state dict to ours, and with
``gated=False`` drops those rows.

This module also re-exports the names other code imports from it (the SSD scans, the config,
MambaZero), so they keep one import path.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import torch
from torch import Tensor, nn

from models.layers import BiasFreeLayerNorm, PlainMLP
from models.ssm.mambazero import MambaZeroConfig, MambaZeroLM
from models.ssm.recurrent import (
    SSMLanguageModel,
    from_hf_state_dict,
    rename_prefixes,
    to_hf_state_dict,
)
from models.ssm.ssd import Mamba2Config, Mamba2Mixer, mamba_ssm_chunk_scan, ssd_chunked, ssd_plain
from seqprobe.config import check

__all__ = [
    "MARKOV_PAPER_MODEL", "Mamba2Config", "Mamba2LM", "Mamba2Mixer", "MambaZeroConfig",
    "MambaZeroLM", "from_hf_state_dict", "from_markov_paper_state_dict", "mamba_ssm_chunk_scan",
    "ssd_chunked", "ssd_plain", "to_hf_state_dict",
]

# The Markov paper's model as the authors ran it (module docstring): the config fields that
# differ from our defaults. Sizes (d_model, d_state, d_conv, d_mlp = 4·d_model) come separately.
MARKOV_PAPER_MODEL = {"norm": "layernorm", "norm_before_gate": True, "use_D": False,
                      "activation": "silu", "mlp_act": "silu", "paper_init": True}

# the authors' parameter names -> ours (mixer and MLP parameters keep their names)
_MARKOV_PAPER_PREFIXES = (("embedding.", "embed."), ("layers.", "blocks."),
                          ("norm_f.", "ln_final."), ("lm_head.", "unembed."))


def from_markov_paper_state_dict(sd: dict[str, Tensor], gated: bool = True
                                 ) -> dict[str, Tensor]:
    """The authors' ``MambaLMHeadModel`` state dict (Bond1995/Markov-Mamba) -> ours, for a
    :class:`Mamba2LM` with :data:`MARKOV_PAPER_MODEL` (their block's ``norm``, ``mixer``,
    ``norm2``, ``mlp`` names are ours already).

    ``gated=False``: a run without ``--gate``, for our model with ``gated=False`` and
    ``mlp_gated=False`` (module docstring): each mixer's in_proj loses its W_z rows, the first
    ed of mamba-ssm's [W_z; W_X; W_B; W_C; w_Δ] order (ed read from out_proj's columns), which
    the authors' model computes and never uses."""
    out = rename_prefixes(sd, _MARKOV_PAPER_PREFIXES)
    if gated:
        return out
    for key in [k for k in out if k.endswith("mixer.in_proj.weight")]:
        mixer = key[: -len("in_proj.weight")]
        d_inner = out[mixer + "out_proj.weight"].shape[1]  # ed
        conv = out.get(mixer + "conv1d.weight")  # [ed + 2·G·N, 1, w]
        heads = out[mixer + "dt_bias"].shape[0]
        rows = out[key].shape[0]
        want = None if conv is None else d_inner + conv.shape[0] + heads  # z + xBC + dt
        check(rows > d_inner and (want is None or rows == want),
              f"{key}: {rows} rows, not a gated in_proj of ed = {d_inner} (W_z; W_X; W_B; W_C; "
              f"w_Δ{'' if want is None else f': {want} rows'}); was the run made with --gate?")
        for name in ("in_proj.weight", "in_proj.bias"):
            if mixer + name in out:
                out[mixer + name] = out[mixer + name][d_inner:]
    return out


class Mamba2LM(SSMLanguageModel):
    """Mamba-2 language model (Markov paper Fig. 2 with ``d_mlp > 0``; HF Mamba2 layout).

    Paths (``scans``, :meth:`set_scan`): auto | plain | chunked | kernel, as in models.ssm.ssd.
    """

    arch = "mamba2"
    config_cls = Mamba2Config
    mixer_cls = Mamba2Mixer
    tiny_config = MappingProxyType(dict(vocab_size=7, d_model=8, n_layers=2, n_heads=2,
                                        d_state=4, d_conv=3, chunk_size=4))
    scans = Mamba2Config.SCANS
    fast_scans = ("chunked",)

    @torch.no_grad()
    def _init_weights(self):
        """Swap in the paper's layers (bias-free LayerNorm, ungated MLP) where the config asks,
        then initialise: here because it runs after the blocks are built and before the hook
        registry is (SSMLanguageModel.__init__)."""
        cfg = self.cfg
        if cfg.norm == "layernorm":
            for block in self.blocks:
                if cfg.block_norm:
                    block.norm = BiasFreeLayerNorm(cfg.d_model, cfg.norm_eps)
                    if cfg.d_mlp:
                        block.norm2 = BiasFreeLayerNorm(cfg.d_model, cfg.norm_eps)
            if cfg.final_norm:
                self.ln_final = BiasFreeLayerNorm(cfg.d_model, cfg.norm_eps)
        if cfg.d_mlp and not cfg.mlp_gated:
            for block in self.blocks:
                block.mlp = PlainMLP(cfg.d_model, cfg.d_mlp, cfg.mlp_act)
        if not cfg.paper_init:
            super()._init_weights()
            return
        # the authors' MambaLMHeadModel._init_weights: every Linear N(0, init_std) (bias 0),
        # the embedding too; then out_proj / fc2 torch's default, ÷ √(2 · n_layers)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=cfg.init_std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=cfg.init_std)
        for name, p in self.named_parameters():
            if name.endswith(("out_proj.weight", "fc2.weight")):
                nn.init.kaiming_uniform_(p, a=math.sqrt(5))
                p.div_(math.sqrt(2 * cfg.n_layers))
        if cfg.unembed_bias_init is not None:
            self.unembed.bias.fill_(cfg.unembed_bias_init)
