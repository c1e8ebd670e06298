"""Architecture name -> model class: the ``[archs]`` table of seqprobe/registry.toml (a new
architecture is its file and one row there), read as :data:`ARCHS`. Listing or checking a
name imports no model; :func:`model_class` imports the one asked for. An optional fast path
such as mamba-ssm is imported by its model only when a forward pass asks for it."""

from __future__ import annotations

from collections.abc import Mapping

from seqprobe.config import config_from_dict
from seqprobe.errors import InputError
from seqprobe.registry import Registered, resolve

# name: "module:Class". Each class is a SuiteModel with ``arch`` and ``config_cls``.
ARCHS: Mapping[str, str] = Registered("archs")

# The arch names models.hf gives HuggingFace causal LMs booted through TransformerBridge:
# attention, Mamba, Mamba-2, hybrid. Never a suite arch name, so an analysis that reads a suite
# config refuses them through its ``archs=`` list; one that can use them lists them.
HF_ARCHS = ("hf_transformer", "hf_mamba", "hf_mamba2", "hf_hybrid")
# each by name (here, not in models.hf, so that naming one imports no transformers): attention
# layers (GPT-NeoX / Pythia, GPT-2, Llama, …); MambaForCausalLM (selective scan, one "head" per
# layer); Mamba2ForCausalLM (SSD heads); attention and SSM layers in one stack
HF_TRANSFORMER, HF_MAMBA, HF_MAMBA2, HF_HYBRID = HF_ARCHS

# suite models with a selective-SSM mixer (a recurrent state; an effective attention): the
# probes of both read them by this name
SSM_ARCHS = ("mamba2", "mamba")


class ArchError(InputError):
    """Unknown architecture or a config that does not fit it."""


def model_class(arch: str):
    if arch not in ARCHS:
        raise ArchError(f"unknown arch {arch!r}; allowed: {', '.join(sorted(ARCHS))}")
    return resolve(ARCHS[arch])


def build_model(arch: str, config: dict | object):
    """Instantiate ``arch`` from a config dict (unknown keys rejected) or config object."""
    cls = model_class(arch)
    cfg = (config if isinstance(config, cls.config_cls)
           else config_from_dict(cls.config_cls, dict(config)))
    return cls(cfg)
