"""Hooked Mamba-2 language model (Markov paper, Bondaschi et al., Fig. 2 / App. B; HF layout).

    embedding -> n × [resid + Mamba2Mixer(RMSNorm(resid)) (+ resid + GatedMLP(RMSNorm(resid)))]
              -> RMSNorm (ln_final) -> unembed

The mixer, its config, hooks and scan paths live in :mod:`models.ssd`; the LM wrapper shared
with Mamba and MambaZero in :mod:`models.recurrent`.

Glossary (code name -> Markov paper symbol, §2.2 / Table 6):
    d_model, expand, d_state, n_heads, d_conv   d, e, N, heads, w (see models.ssd)
    d_mlp                                       width of the gated MLP after each mixer (0: none)
    unembed.weight                              W_ℓ (the Linear layer), logits = W_ℓ·v_t

Parameter names and shapes equal HF ``Mamba2ForCausalLM`` / mamba-ssm's ``MambaLMHeadModel``
up to the renaming done by :func:`to_hf_state_dict` / :func:`from_hf_state_dict`.

This module also re-exports the names other code imports from it (the SSD scans, the config,
MambaZero), so they keep one import path.
"""

from __future__ import annotations

from models.mambazero import MambaZeroConfig, MambaZeroLM
from models.recurrent import SSMLanguageModel, from_hf_state_dict, to_hf_state_dict
from models.ssd import Mamba2Config, Mamba2Mixer, mamba_ssm_chunk_scan, ssd_chunked, ssd_plain

__all__ = [
    "Mamba2Config", "Mamba2LM", "Mamba2Mixer", "MambaZeroConfig", "MambaZeroLM",
    "from_hf_state_dict", "mamba_ssm_chunk_scan", "ssd_chunked", "ssd_plain", "to_hf_state_dict",
]


class Mamba2LM(SSMLanguageModel):
    """Mamba-2 language model (Markov paper Fig. 2 with ``d_mlp > 0``; HF Mamba2 layout).

    Paths (``scans``, :meth:`set_scan`): auto | plain | chunked | kernel, as in models.ssd.
    """

    arch = "mamba2"
    config_cls = Mamba2Config
    mixer_cls = Mamba2Mixer
    scans = Mamba2Config.SCANS
    fast_scans = ("chunked",)
