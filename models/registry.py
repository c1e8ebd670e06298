"""Architecture name -> model class: every SuiteModel subclass in models/ and models/ssm/ that
sets ``arch`` (a new architecture is one new file), found on first use of :data:`ARCHS`. An
optional fast path such as mamba-ssm is imported by its model only when a forward pass asks
for it, so finding the classes never needs it."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from seqprobe.config import config_from_dict
from seqprobe.discovery import Discovered
from seqprobe.errors import InputError

# name: "module:Class". Each class is a SuiteModel with ``arch`` and ``config_cls``.
ARCHS: Mapping[str, str] = Discovered(
    ("models", "models.ssm"), lambda: importlib.import_module("models.base").SuiteModel, "arch",
    skip=("registry", "base", "layers", "outputs", "text", "generation", "loading",
          "constructions", "memory", "tokenizer"))

# The arch names models.hf gives HuggingFace causal LMs booted through TransformerBridge:
# attention, Mamba, Mamba-2, hybrid. Never a suite arch name, so an analysis that reads a suite
# config refuses them through its ``archs=`` list; one that can use them lists them.
HF_ARCHS = ("hf_transformer", "hf_mamba", "hf_mamba2", "hf_hybrid")
# each by name (here, not in models.hf, so that naming one imports no transformers): attention
# layers (GPT-NeoX / Pythia, GPT-2, Llama, …); MambaForCausalLM (selective scan, one "head" per
# layer); Mamba2ForCausalLM (SSD heads); attention and SSM layers in one stack
HF_TRANSFORMER, HF_MAMBA, HF_MAMBA2, HF_HYBRID = HF_ARCHS


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
