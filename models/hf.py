"""HuggingFace causal language models, booted through TransformerLens' ``TransformerBridge``:
the one way a model the suite did not train enters it (DESIGN.md).

    >>> m = models.load("EleutherAI/pythia-410m")        # or a local directory with config.json
    >>> logits, cache = m.run_with_cache(m.to_tokens("a b c a b"))
    >>> cache["blocks.3.attn.hook_pattern"]               # TransformerLens hook names

:func:`load_hf` returns an :class:`HFModel`: the ``TransformerBridge`` itself (so every
TransformerLens tool that takes a bridge takes it: ``run_with_cache``, ``run_with_hooks``,
``hooks``, ``to_tokens`` / ``to_string``, ``generate``, patching, the SSM effective attention on
the cache) plus the small interface the analyses read on suite models:

* ``arch``: :data:`HF_TRANSFORMER`, :data:`HF_MAMBA`, :data:`HF_MAMBA2` or :data:`HF_HYBRID`
  (never a suite arch name, so an analysis that reads a suite config refuses an HF model in one
  line through its ``archs=`` list, and one that can use HF models says so by listing these);
* ``cfg.n_layers``, ``cfg.n_heads``, ``cfg.d_model``, ``cfg.vocab_size`` (the logits' width;
  TransformerLens calls it ``d_vocab``), ``cfg.head == "lm"``;
* ``device``, ``hook_names()``, ``log_probs(tokens)``, ``n_params()``, ``tokenizer``, ``name``
  (a short label: the directory's or the hub name's last part);
* ``checkpoint``: ``{"format": "hf", "model": {arch, name, source, hf_architecture, config},
  "task": None, "train": {}, "history": []}`` — a pretrained model has no training task.

Only decoder-only causal LMs are loaded (the analyses feed a prefix and read the next-token
logits); an encoder, an encoder-decoder, an offline hub name or a directory that is not a model
is one :class:`HFError` line.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
)
from transformers.utils import logging as hf_logging

from models.device import resolve_device
from models.registry import HF_ARCHS
from tasks.base import TaskError

# attention layers (GPT-NeoX / Pythia, GPT-2, Llama, …); MambaForCausalLM (selective scan, one
# "head" per layer); Mamba2ForCausalLM (SSD heads); attention and SSM layers in one stack
HF_TRANSFORMER, HF_MAMBA, HF_MAMBA2, HF_HYBRID = HF_ARCHS
SSM_TYPES = {"mamba": HF_MAMBA, "falcon_mamba": HF_MAMBA, "mamba2": HF_MAMBA2}
CAUSAL_CLASSES = frozenset(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
HUB_PROBE_S = 5.0  # seconds to wait for the hub before calling the machine offline


class HFError(TaskError):
    """A HuggingFace model that cannot be loaded (one line; a ``TaskError``, so CLIs exit 2)."""


class HFModel(TransformerBridge):
    """A ``TransformerBridge`` with the suite's model interface (see the module docstring).

    ``TransformerBridge.boot_transformers`` builds a plain bridge; :func:`load_hf` gives that
    object this class (no new state: only methods and the attributes it sets), so it stays the
    very bridge TransformerLens returned and nothing is wrapped or copied.
    """

    arch: str
    name: str
    checkpoint: dict[str, Any]

    @property
    def device(self) -> torch.device:
        return next(self.original_model.parameters()).device

    def hook_names(self) -> list[str]:
        """Every hook point's name (TransformerLens' names, aliases included)."""
        return list(self.hook_dict.keys())

    def log_probs(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """Log-probabilities of the next token, as on suite models."""
        return torch.log_softmax(self(tokens).float(), dim=-1)

    def text_ids(self, text: str) -> list[int]:
        """The token ids of ``text`` as a piece of a prompt (no BOS)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def bos_ids(self) -> list[int]:
        """What starts a prompt: the BOS token where TransformerLens prepends one for this
        model (``cfg.default_prepend_bos``), else nothing (Pythia's tokenizer adds none)."""
        bos = self.tokenizer.bos_token_id
        return [int(bos)] if bos is not None and self.cfg.default_prepend_bos else []

    def ordinary_token_ids(self) -> Int[Tensor, " n"]:
        """The tokens a random "string" is drawn from: every id of the tokenizer (within the
        logits) that is not a special token and decodes on its own to printable text with a
        non-space character and no newline (so it never looks like a separator, and no byte
        fragment of a multi-byte character is drawn). Ascending; computed once."""
        cached = self.__dict__.get("_ordinary_ids")
        if cached is not None:
            return cached
        n = min(len(self.tokenizer), int(self.cfg.d_vocab))
        special = set(self.tokenizer.all_special_ids)
        texts = self.tokenizer.batch_decode([[i] for i in range(n)])
        ids = [i for i, t in enumerate(texts)  # isprintable: no newline, no control char
               if i not in special and t.strip() and t.isprintable() and "\ufffd" not in t]
        if not ids:
            raise HFError(f"{self.name}: its tokenizer has no ordinary text tokens to draw "
                          "copy strings from")
        out = torch.tensor(ids, dtype=torch.long)
        self.__dict__["_ordinary_ids"] = out
        return out

    def n_params(self, embeddings: bool = True) -> int:
        """Parameters of the HF model; ``embeddings=False`` leaves out the (un)embeddings."""
        model = self.original_model
        skip = set()
        if not embeddings:
            for module in (model.get_input_embeddings(), model.get_output_embeddings()):
                if module is not None:
                    skip |= {id(p) for p in module.parameters()}
        return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_reachable(timeout: float = HUB_PROBE_S) -> bool:
    """Can this machine open a connection to the hub? (Behind a proxy: assume so; HF's own
    client then reports what goes wrong.) Asked once, before HF's client retries with backoff
    for half a minute and fills the terminal with warnings."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(hub_endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def offline_mode() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def resolve_source(path_or_name: str | os.PathLike) -> tuple[str, bool]:
    """``(source, local)``: a local model directory (which must hold ``config.json``) or a hub
    name; anything else is one line."""
    text = str(path_or_name)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise HFError(f"{text}: is a directory, but neither a HuggingFace model (no "
                          "config.json) nor a suite checkpoint file (.pt)")
        return str(path), True
    if path.exists():
        raise HFError(f"{text}: is a file; a HuggingFace model is a directory with config.json "
                      "(or a hub name such as EleutherAI/pythia-410m)")
    if not offline_mode() and not hub_reachable():
        raise HFError(f"{text}: no such file or directory, and the HuggingFace hub "
                      f"({hub_endpoint()}) cannot be reached to download it as a model name "
                      "(offline?); give a local model directory, or set HF_HUB_OFFLINE=1 to "
                      "use the HuggingFace cache")
    return text, False


def check_causal(config: PretrainedConfig, source: str) -> None:
    """Refuse what is not a decoder-only causal LM (the analyses read next-token logits)."""
    model_type = getattr(config, "model_type", "?")
    classes = list(getattr(config, "architectures", None) or [])
    if getattr(config, "is_encoder_decoder", False):
        raise HFError(f"{source}: a {model_type!r} encoder-decoder model; the suite needs a "
                      "decoder-only causal language model (GPT-NeoX, GPT-2, Llama, Mamba …)")
    encoder = model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(
        config, "is_decoder", False)
    causal = (classes[0] in CAUSAL_CLASSES) if classes else (
        model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if encoder or not causal:
        what = classes[0] if classes else model_type
        raise HFError(f"{source}: {what} is not a causal language model (an encoder or another "
                      "head); the suite needs a decoder-only causal LM (GPT-NeoX, GPT-2, Llama, "
                      "Mamba …)")


def arch_of(config: PretrainedConfig) -> str:
    """The suite-facing arch name of a causal LM's config (see :data:`HF_ARCHS`)."""
    return SSM_TYPES.get(getattr(config, "model_type", ""), HF_TRANSFORMER)


def check_archs(arch: str, archs, source: str) -> None:
    if archs is None:
        return
    allowed = sorted(set(archs))
    if arch not in allowed:
        raise HFError(f"{source}: this analysis needs a {' or '.join(allowed)} model, but this "
                      f"HuggingFace model is a {arch!r} (see models.hf.HF_ARCHS)")


def short_name(source: str) -> str:
    """``out/pythia-410m/`` or ``EleutherAI/pythia-410m`` -> ``pythia-410m``."""
    return Path(source.rstrip("/")).name or source


def load_hf(path_or_name: str | os.PathLike, device: str | torch.device = "cpu", *,
            archs=None, dtype: torch.dtype = torch.float32) -> HFModel:
    """Boot a HuggingFace causal LM (local directory or hub name) as an :class:`HFModel` on
    ``device``, in eval mode. ``archs``: the arch names the caller can use (from
    :data:`HF_ARCHS` and the suite's); any other is refused before the weights are read."""
    device = resolve_device(device)
    source, local = resolve_source(path_or_name)
    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError, KeyError) as e:
        if not local and offline_mode():
            raise HFError(f"{source}: no such file or directory, and not in the HuggingFace "
                          "cache (HF_HUB_OFFLINE is set, so the hub is not asked)") from None
        raise HFError(f"{source}: cannot read the model's config: {_first_line(e)}") from None
    check_causal(config, source)
    arch = arch_of(config)
    check_archs(arch, archs, source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise HFError(f"{source}: cannot load its tokenizer (the analyses build their prompts "
                      f"with it): {_first_line(e)}") from None
    progress = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # per-tensor "Loading weights" bars say nothing here
    try:
        bridge = TransformerBridge.boot_transformers(source, device=device, dtype=dtype,
                                                     tokenizer=tokenizer)
    except (OSError, ValueError, KeyError, RuntimeError, NotImplementedError) as e:
        raise HFError(f"{source}: TransformerBridge cannot boot it: {_first_line(e)}") from None
    finally:
        if progress:
            hf_logging.enable_progress_bar()
    if arch == HF_TRANSFORMER and getattr(bridge.cfg, "is_stateful", False):
        arch = HF_HYBRID  # a recurrent state beside attention (Jamba, Falcon-H1, …)
        check_archs(arch, archs, source)
    bridge.__class__ = HFModel  # same object, the suite's interface on top (see HFModel)
    model: HFModel = bridge  # type: ignore[assignment]
    model.eval()
    model.arch = arch
    model.name = short_name(source)
    # the config fields analyses read on suite models, under the suite's names
    model.cfg.vocab_size = int(model.cfg.d_vocab)
    model.cfg.head = "lm"
    model.checkpoint = {
        "format": "hf",
        "model": {"arch": arch, "name": model.name, "source": source, "local": local,
                  "hf_architecture": (config.architectures or [type(bridge.original_model)
                                                               .__name__])[0],
                  "config": config.to_dict()},
        "task": None, "train": {}, "history": []}
    return model
