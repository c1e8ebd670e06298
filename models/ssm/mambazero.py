"""Hooked MambaZero (Markov paper, Bondaschi et al., §4.1): the smallest Mamba-2 that still
learns the add-β estimator.

    embedding -> x_t + MambaZero(x_1^t) -> Linear -> L1 normalisation

Its mixer is Mamba-2's (:mod:`models.ssm.ssd`) with no gate, no norm, no D and the identity
activation ("without ReLU and just the convolution"); :class:`MambaZeroConfig` holds these
defaults, every switch stays settable. The hand-set weights of Thm 1 (N = S, d = 2S, e = 1,
w = 2) go into this layout (see :func:`models.constructions.mambazero_add_beta`).

Glossary (code name -> §4.1 / App. C.2 symbol), with d = d_model, e = expand, N = d_state, one
head and one group:
    embed.weight                   [S, d]             e_x (rows = tokens)
    blocks.0.mixer.in_proj.weight  [e·d + 2N + 1, d]  rows W_X (e·d), W_B (N), W_C (N), w_Δ (1)
    blocks.0.mixer.conv1d.weight   [e·d + 2N, 1, w]   [:, 0, −1] current step, [:, 0, −2]
                                                      the previous one (Eq. (9))
    blocks.0.mixer.dt_bias         [1]                δ (softplus(δ) = 1: δ = log(e − 1))
    blocks.0.mixer.A_log           [1]                log a; a value whose exp underflows
                                                      to 0 gives a_t = 1 (``decay=False``:
                                                      no A_log at all, a_t = 1)
    blocks.0.mixer.out_proj.weight [d, e·d]           W_o
    unembed.weight                 [S, d]             W_ℓ
    unembed.bias                   [S]                only with ``unembed_bias``; starts at
                                                      ``unembed_bias_init`` when given
The block has no norm and the model no final norm, so the readout is v_t = W_ℓ(x_t + W_o y_t)
(``model.readout``); the L1 prediction reads p ∝ |v_t|, and forward's logits are log |v_t|
(:meth:`models.ssm.recurrent.SSMLanguageModel.compute_logits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from models.ssm.recurrent import SSMLanguageModel
from models.ssm.ssd import Mamba2Config, Mamba2Mixer


@dataclass(frozen=True)
class MambaZeroConfig(Mamba2Config):
    """MambaZero (§4.1): only the embedding, the conv-SSM and the Linear layer remain.

    Thm 1's dimensions for S symbols: ``d_model = 2S, expand = 1, d_state = S, d_conv = 2``
    (one head). Defaults here are those for S = 2.
    """

    d_model: int = 4
    expand: int = 1
    d_state: int = 2
    d_conv: int = 2
    activation: str = "identity"  # "without ReLU and just the convolution" (§4.1)
    gated: bool = False
    mixer_norm: bool = False
    use_D: bool = False
    conv_bias: bool = False
    block_norm: bool = False
    final_norm: bool = False
    prediction: str = "l1"


class MambaZeroLM(SSMLanguageModel):
    """MambaZero (§4.1): embedding -> x_t + conv-SSM(x_1^t) -> Linear -> L1 normalisation.

    The Mamba-2 LM with :class:`MambaZeroConfig`'s defaults (layout in the module docstring);
    paths as Mamba-2's: auto | plain | chunked | kernel.
    """

    arch = "mambazero"
    config_cls = MambaZeroConfig
    mixer_cls = Mamba2Mixer
    tiny_config = MappingProxyType(dict(chunk_size=4))  # Thm 1's size for S = 2 (the defaults)
    scans = Mamba2Config.SCANS
    fast_scans = ("chunked",)
