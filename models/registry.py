"""Architecture name -> model class, imported lazily so that no model's dependencies (or an
optional fast path such as mamba-ssm) load before they are asked for."""

from __future__ import annotations

import importlib

from seqprobe.config import config_from_dict
from seqprobe.errors import InputError

# name: "module:Class". Each class is a SuiteModel with ``config_cls``.
ARCHS: dict[str, str] = {
    "transformer": "models.transformer:HookedTransformerLM",
    "mamba2": "models.ssm.mamba2:Mamba2LM",
    "mambazero": "models.ssm.mambazero:MambaZeroLM",
    "mamba": "models.ssm.mamba:MambaLM",
    "lstm": "models.lstm:LSTMLM",
    "stu": "models.stu:STULM",
}

# The arch names models.hf gives HuggingFace causal LMs booted through TransformerBridge:
# attention, Mamba, Mamba-2, hybrid. Never a suite arch name, so an analysis that reads a suite
# config refuses them through its ``archs=`` list; one that can use them lists them.
HF_ARCHS = ("hf_transformer", "hf_mamba", "hf_mamba2", "hf_hybrid")


class ArchError(InputError):
    """Unknown architecture or a config that does not fit it."""


def model_class(arch: str):
    if arch not in ARCHS:
        raise ArchError(f"unknown arch {arch!r}; allowed: {', '.join(sorted(ARCHS))}")
    module, name = ARCHS[arch].split(":")
    return getattr(importlib.import_module(module), name)


def build_model(arch: str, config: dict | object):
    """Instantiate ``arch`` from a config dict (unknown keys rejected) or config object."""
    cls = model_class(arch)
    cfg = (config if isinstance(config, cls.config_cls)
           else config_from_dict(cls.config_cls, dict(config)))
    return cls(cfg)
