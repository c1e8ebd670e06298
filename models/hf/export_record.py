"""What an export's record (config.json ``seqprobe``: arch, model config, task, step, digest)
must agree with before an analysis believes it: itself, and the HF model it sits in.

The record is what analyses label a model by (its arch names the figure's line, its task is
rebuilt to probe the model), so a record that disagrees with the model is refused in one line
(:func:`record_problem`, raised by :func:`models.hf.checks.check_provenance`), never shown.
"""

from __future__ import annotations

import re

from transformers import PretrainedConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from models.hf.export_hooks import BAMBA
from models.registry import model_class
from seqprobe.config import config_from_dict
from seqprobe.errors import InputError
from seqprobe.flags import MAX_STEPS

DIGEST = re.compile(r"sha256:[0-9a-f]{16,64}")
# transformers reads a config.json whole; real ones are a few kB (ours hold a few numbers per
# d_model, ln_final_shift), so a larger file is not a config: refused before it is read
MAX_CONFIG_BYTES = 1 << 24
# the HF class each exportable suite arch becomes (models.hf.export_map.hf_class; Mamba-2 with
# an MLP after each mixer is Bamba). Here, below the exporter, so that the loader's checks read
# it without importing the exporter (which imports the models)
HF_CLASSES = {"transformer": "GPTNeoXForCausalLM", "mamba2": "Mamba2ForCausalLM",
              "mamba": "MambaForCausalLM"}


def model_types(arch: str) -> tuple[str, ...]:
    """The HF ``model_type`` values an export of ``arch`` has: its class's
    (:data:`HF_CLASSES`; Mamba-2 with an MLP is Bamba)."""
    classes = {HF_CLASSES[arch], *([BAMBA] if arch == "mamba2" else [])}
    return tuple(sorted(t for t, c in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items() if c in classes))


def record_problem(prov: dict, config: PretrainedConfig) -> str | None:
    """Why an export record ``prov`` cannot be believed for the model ``config`` builds, or
    None: its arch is one the exporter writes and the HF class the config builds is that
    arch's (a ``mamba2`` record on a GPT-NeoX model would label the figures Mamba-2); its model
    config is that arch's, each number within its field's bound
    (:func:`seqprobe.flags.field_bound`: the bounds a run has); ``step`` a step count; ``digest`` a
    sha256 or absent. A record of a task alone (no arch, no config) has nothing of these."""
    arch = prov.get("arch")
    if arch is None and "config" not in prov:
        return None
    if arch not in HF_CLASSES:
        return f"arch {str(arch)[:40]!r} is none the exporter writes ({', '.join(HF_CLASSES)})"
    model_type = getattr(config, "model_type", "")
    if model_type not in model_types(arch):
        return (f"says a {arch} model, but config.json builds a {model_type or 'untyped'} one "
                f"(an export of {arch} is {' or '.join(model_types(arch))})")
    cfg = prov.get("config")
    if not isinstance(cfg, dict):
        return f"'config' must be the {arch} model's config (an object)"
    try:
        # each number within its field's bound (the bounds its flags take): the config
        # checks them when it is built (seqprobe.flags.Config)
        config_from_dict(model_class(arch).config_cls, cfg)
    except InputError as e:
        return " ".join(str(e).split())[:200]
    except Exception as e:  # noqa: BLE001 - a config value no check anticipated
        return f"invalid model config ({type(e).__name__}: {' '.join(str(e).split())[:120]})"
    step = prov.get("step")
    if step is not None and not (isinstance(step, int) and not isinstance(step, bool)
                                 and 0 <= step <= MAX_STEPS):
        return f"step {str(step)[:40]} is not a step count (0..{MAX_STEPS})"
    digest = prov.get("digest")
    if digest is not None and not (isinstance(digest, str) and DIGEST.fullmatch(digest)):
        return f"digest {str(digest)[:40]!r} is not 'sha256:<hex>'"
    return None
