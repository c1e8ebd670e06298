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
* ``device``, ``hook_names()``, ``log_probs(input)``, ``n_params()``, ``tokenizer``, ``name``
  (a short label: the directory's or the hub name's last part);
* the model object's attributes (:mod:`models.base`): ``task`` (None, or the task an export
  by ``models.hf.export`` was trained on), ``config`` (TL's ``cfg``), ``train_config`` (None),
  ``provenance`` (``source``; ``pretrained``: name, local, hf_architecture, config.json),
  ``return_type="log_probs"`` beside TransformerLens' own, and ``save`` refused in one line
  (see :meth:`HFModel.save`); ``checkpoint`` is a deprecated dict of the same.

Only decoder-only causal LMs are loaded (the analyses feed a prefix and read the next-token
logits); an encoder, an encoder-decoder, an offline hub name or a directory that is not a model
is one :class:`HFError` line.

A model directory is data, never code, and is checked before any weight is allocated (each
failure is one :class:`HFError` line):

* ``trust_remote_code=False`` wherever a config, tokenizer or model is loaded, and a config that
  names Python files of the directory (``auto_map``) for a model type transformers does not know
  is refused before transformers sees it;
* ``config.json`` must be a bounded JSON object; wrong-typed fields are refused by the config
  class; the provenance our exports store (``seqprobe``: the task a model was trained on) is
  checked like a ``.pt`` file's task (:func:`models.checkpoint.check_task_bounds`);
* weight files are read by their headers first: safetensors through ``safe_open`` (a truncated,
  empty or oversized header is one line), ``pytorch_model.bin`` only through
  ``torch.load(weights_only=True)``; the model the config describes is built on the meta device
  (deep stacks extrapolated from one and two layers, as for ``.pt`` files) and must be covered by
  the stored values (nothing left to random initialisation), fit in memory, and rebuild no more
  than :data:`models.checkpoint.MAX_REBUILT_BYTES` of unstored buffers;
* after loading: no missing, unexpected or mis-shaped weight (named), and no NaN / inf weight.

Those checks are :mod:`models.hf.checks`; this module loads and wraps, and every name of the
checks is also found here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import warnings
from pathlib import Path
from typing import Any, NoReturn
from unittest import mock
from urllib.parse import urlparse

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.model_bridge.sources import _bridge_builder
from transformer_lens.model_bridge.sources.transformers import (
    determine_architecture_from_hf_config,
    get_hf_model_class_for_architecture,
)
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig
from transformers.utils import logging as hf_logging

from models.checkpoint.paths import HUB_NAME
from models.hf.checks import (
    HFError,
    _first_line,
    _kind,
    check_archs,
    check_causal,
    check_finite,
    check_footprint,
    check_forward,
    check_loaded,
    check_local_dir,
    check_provenance,
    stored_shapes,
)
from models.outputs import log_probs
from models.provenance import Provenance
from models.registry import HF_HYBRID, HF_MAMBA, HF_MAMBA2, HF_TRANSFORMER
from seqprobe.device import resolve_device
from tasks.registry import Task, make_task

SSM_TYPES = {"mamba": HF_MAMBA, "falcon_mamba": HF_MAMBA, "mamba2": HF_MAMBA2}
HUB_PROBE_S = 5.0  # seconds to wait for the hub before calling the machine offline


class HFModel(TransformerBridge):
    """A ``TransformerBridge`` with the suite's model interface (see the module docstring).

    ``TransformerBridge.boot_transformers`` builds a plain bridge; :func:`load_hf` gives that
    object this class (no new state: only methods and the attributes it sets), so it stays the
    very bridge TransformerLens returned and nothing is wrapped or copied.
    """

    arch: str
    name: str
    provenance: Provenance  # source, and ``pretrained``: name, hf_architecture, config.json
    train_config = None  # a pretrained model's training is not ours to know

    @property
    def device(self) -> torch.device:
        return next(self.original_model.parameters()).device

    @property
    def task(self) -> Task | None:
        """The task a model exported by ``models.hf.export`` was trained on (from its config's
        ``seqprobe`` provenance); None for any other pretrained LM. Text still goes through the
        HF tokenizer (an export's tokenizer keeps the task's token ids)."""
        return self.__dict__.get("_task")

    @property
    def config(self):
        """TransformerLens' config of the bridge (``cfg``), as ``config`` is on suite models."""
        return self.cfg

    def forward(self, input, return_type: str | None = "logits", *args: Any, **kwargs: Any):
        """``TransformerBridge.forward`` (text through the HF tokenizer, ``return_type``
        ``"logits"``, ``"loss"``, ``"both"``, None …) plus the suite's ``"log_probs"``
        (:func:`models.outputs.log_probs`, as on suite models)."""
        if return_type == "log_probs":
            return log_probs(super().forward(input, "logits", *args, **kwargs))
        return super().forward(input, return_type, *args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any):
        """``TransformerBridge.generate``; an SSM or hybrid model decodes on TransformerLens'
        plain loop, each step a forward of the whole sequence (whose logits are the model's,
        as the export checks them). Its stateful-cache path gives an exported Mamba-2 other
        tokens than its checkpoint (it prefills the cache as Mamba-1's conv window), and the
        HF ``generate`` it falls back to without the cache fails on an attention-free Bamba
        (transformers asks its cache for an attention layer's length)."""
        if self.arch == HF_TRANSFORMER:
            return super().generate(*args, **kwargs)
        kwargs["use_past_kv_cache"] = False
        stateful = getattr(self.cfg, "is_stateful", False)
        self.cfg.is_stateful = False  # read by generate() only: its choice of loop
        try:
            return super().generate(*args, **kwargs)
        finally:
            self.cfg.is_stateful = stateful

    def hook_names(self) -> list[str]:
        """Every hook point's name (TransformerLens' names, aliases included)."""
        return list(self.hook_dict.keys())

    def log_probs(self, input) -> Float[Tensor, "batch pos vocab"]:
        """Log-probabilities of the next token, as on suite models."""
        return self(input, return_type="log_probs")

    def save(self, path: str | os.PathLike) -> NoReturn:
        """Refused, in one line that says what to do instead: the suite's checkpoint format holds
        suite models, and ``save_pretrained`` of this object would write the bridge's module
        names (``TransformerBridge`` wraps the HF modules in place), not a model HF can load."""
        raise HFError(f"{path}: a HuggingFace model is not saved by the suite (its checkpoint "
                      "format holds suite models, and TransformerBridge has wrapped this one's "
                      "modules): save it with transformers (AutoModelForCausalLM.from_pretrained"
                      f"({self.provenance.source!r}).save_pretrained(dir)), or export a suite "
                      "model with python -m models.hf.export")

    @property
    def checkpoint(self) -> dict[str, Any]:
        """Deprecated: ``{"format": "hf", "model": {arch, source, name, local, hf_architecture,
        config}, "task": None, "train": {}, "history": []}``. Read ``provenance`` instead."""
        warnings.warn("model.checkpoint is deprecated: read model.task and model.provenance",
                      DeprecationWarning, stacklevel=2)
        return {"format": "hf", "model": {"arch": self.arch, "source": self.provenance.source,
                                          **(self.provenance.pretrained or {})},
                "task": None, "train": {}, "history": []}

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


def resolve_source(path_or_name: str | os.PathLike) -> tuple[str, bool]:
    """``(source, local)``: a local model directory (which must hold ``config.json``) or a hub
    name; anything else is one line. What exists on disk is never taken for a hub name (a
    symbolic link that loops or leads nowhere included)."""
    text = str(path_or_name)
    path = Path(text).expanduser()
    try:
        os.lstat(path)
        on_disk = True
    except FileNotFoundError:
        on_disk = False
    except (OSError, ValueError) as e:  # a loop in a parent, a name too long, a NUL byte
        raise HFError(f"{text}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if on_disk:
        try:
            st = os.stat(path)
        except OSError as e:
            raise HFError(f"{text}: a symbolic link that cannot be followed ({e.strerror}: it "
                          "loops, or what it points to is gone)") from None
        if stat.S_ISDIR(st.st_mode):
            if not (path / "config.json").is_file():
                raise HFError(f"{text}: is a directory, but neither a HuggingFace model (no "
                              "config.json) nor a suite checkpoint file (.pt)")
            return str(path), True
        what = "a file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
        raise HFError(f"{text}: is {what}; a HuggingFace model is a directory with config.json "
                      "(or a hub name such as EleutherAI/pythia-410m)")
    if not HUB_NAME.match(text):
        raise HFError(f"{text}: no such file or directory (nor a HuggingFace hub name such as "
                      "EleutherAI/pythia-410m)")
    if not offline_mode() and not hub_reachable():
        raise HFError(f"{text}: no such file or directory, and the HuggingFace hub "
                      f"({hub_endpoint()}) cannot be reached to download it as a model name "
                      "(offline?); give a local model directory, or set HF_HUB_OFFLINE=1 to "
                      "use the HuggingFace cache")
    return text, False



class _CheckedLoad:
    """The model class the bridge loads through: transformers' own, with remote code off,
    the loading report kept (see :func:`check_loaded`) and mis-shaped weights reported by
    name rather than by "look at the above report"."""

    def __init__(self, cls):
        self.cls = cls
        self.info: dict = {}

    def from_pretrained(self, name, **kwargs):
        kwargs.update(trust_remote_code=False, output_loading_info=True,
                      ignore_mismatched_sizes=True)
        model, self.info = self.cls.from_pretrained(name, **kwargs)
        return model


def arch_of(config: PretrainedConfig) -> str:
    """The suite-facing arch name of a causal LM's config (see :data:`HF_ARCHS`)."""
    return SSM_TYPES.get(getattr(config, "model_type", ""), HF_TRANSFORMER)



@contextlib.contextmanager
def _probe_in_vocabulary(tokenizer):
    """TransformerBridge's boot encodes ``"a"`` to learn whether the tokenizer puts a BOS
    first. An export's tokenizer reads its task's vocabulary only and has no unknown token (a
    symbol outside it is an error, as for our models), and a task may have no ``a`` (a Markov
    chain's symbols are digits): for such a tokenizer the boot asks with the first symbol of
    its own vocabulary instead. Any other tokenizer boots untouched."""
    try:
        tokenizer.encode("a")
        yield
        return
    except Exception:  # noqa: BLE001 - the tokenizers library raises bare Exception
        pass
    special = set(tokenizer.all_special_tokens)
    symbol = next((t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
                   if t not in special), None)
    if symbol is None:
        yield  # nothing to ask with: the boot says what is wrong
        return

    class Probe:  # the tokenizer, with the boot's probe text read as ``symbol``
        def __init__(self, tok):
            self.tok = tok

        def __getattr__(self, name):
            return getattr(self.tok, name)

        def encode(self, text, *args, **kwargs):
            return self.tok.encode(symbol if text == "a" else text, *args, **kwargs)

    detect = _bridge_builder.detect_tokenizer_bos_eos
    with mock.patch.object(_bridge_builder, "detect_tokenizer_bos_eos",
                           lambda tok: detect(Probe(tok))):
        yield


def short_name(source: str) -> str:
    """``out/pythia-410m/`` or ``EleutherAI/pythia-410m`` -> ``pythia-410m``."""
    return Path(source.rstrip("/")).name or source


@contextlib.contextmanager
def _offline_as_the_environment_says():
    """huggingface_hub reads ``HF_HUB_OFFLINE`` once, when it is imported: a process that set
    it later (a notebook cell, a test) would still ask the hub, and wait out its retries. While
    a model loads, the library's flag follows the environment as it is now."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = before or offline_mode()
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def load_hf(path_or_name: str | os.PathLike, device: str | torch.device = "cpu", *,
            archs=None, dtype: torch.dtype = torch.float32) -> HFModel:
    """Boot a HuggingFace causal LM (local directory or hub name) as an :class:`HFModel` on
    ``device``, in eval mode. ``archs``: the arch names the caller can use (from
    :data:`HF_ARCHS` and the suite's); any other is refused before the weights are read."""
    with _offline_as_the_environment_says():
        return _load_hf(path_or_name, device, archs=archs, dtype=dtype)


def _load_hf(path_or_name: str | os.PathLike, device: str | torch.device, *, archs,
             dtype: torch.dtype) -> HFModel:
    device = resolve_device(device)
    source, local = resolve_source(path_or_name)
    if local:
        check_local_dir(source)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - OSError, a wrong-typed field (TypeError), …
        if not local and offline_mode() and isinstance(e, (OSError, ValueError, KeyError)):
            raise HFError(f"{source}: no such file or directory, and not in the HuggingFace "
                          "cache (HF_HUB_OFFLINE is set, so the hub is not asked)") from None
        raise HFError(f"{source}: cannot read the model's config: {_first_line(e)}") from None
    check_causal(config, source)
    arch = arch_of(config)
    check_archs(arch, archs, source)
    check_provenance(config, source)
    try:  # the class the bridge will load (the meta build below uses the same)
        cls = get_hf_model_class_for_architecture(determine_architecture_from_hf_config(config))
    except Exception as e:  # noqa: BLE001 - an architecture the bridge does not know
        raise HFError(f"{source}: TransformerBridge cannot boot it: {_first_line(e)}") from None
    check_footprint(cls, config, stored_shapes(source) if local else None, source, dtype, device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises bare Exception
        raise HFError(f"{source}: cannot load its tokenizer (the analyses build their prompts "
                      f"with it): {_first_line(e)}") from None
    progress = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # per-tensor "Loading weights" bars say nothing here
    try:
        loader = _CheckedLoad(cls)
        with _probe_in_vocabulary(tokenizer):
            bridge = TransformerBridge.boot_transformers(source, device=device, dtype=dtype,
                                                         tokenizer=tokenizer,
                                                         model_class=loader,
                                                         trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - a config value or file no check anticipated
        raise HFError(f"{source}: TransformerBridge cannot boot it: {_first_line(e)}") from None
    finally:
        if progress:
            hf_logging.enable_progress_bar()
    check_loaded(loader.info, source)
    check_finite(bridge.original_model, source)
    check_forward(bridge.original_model, config, source)
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
    model.provenance = Provenance(
        source=source,
        pretrained={"name": model.name, "local": local,
                    "hf_architecture": (config.architectures or [type(bridge.original_model)
                                                                 .__name__])[0],
                    "config": config.to_dict()})
    task = (getattr(config, "seqprobe", None) or {}).get("task")  # checked: check_provenance
    model.__dict__["_task"] = make_task(task["name"], task["config"]) if task else None
    if task:  # an export: its tokenizer puts <BOS> first, as the task writes its sequences, but
        # TL's to_tokens / generate strip it unless default_prepend_bos says otherwise
        tok = model.tokenizer
        model.cfg.default_prepend_bos = bool(getattr(tok, "add_bos_token", False)
                                             and getattr(tok, "bos_token_id", None) is not None)
    return model
