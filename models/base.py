"""The base class every suite model shares: TransformerLens hooks plus the suite's contract.

A suite model is a ``transformer_lens.HookedRootModule`` whose ``cfg`` is a frozen config
dataclass with at least ``vocab_size`` and ``n_layers``. ``forward(tokens) -> logits`` maps
``[batch, pos]`` int64 tokens to ``[batch, pos, vocab]`` float logits (sequence
classifiers may return other shapes, documented on the class). Subclasses:

* set the class attribute ``arch`` (the name in :mod:`models.registry`) and ``config_cls``;
* build their modules, put ``HookPoint``s wherever an activation is worth reading, and call
  ``self.setup()`` last in ``__init__`` so ``run_with_cache`` / ``run_with_hooks`` see them;
* list their computation paths in ``scans`` (``"auto"`` first, then ``"plain"``, the path that
  fires every hook) and the fast ones among them in ``fast_scans``: every layer that can take
  more than one path holds a ``scan`` attribute, which :meth:`SuiteModel.set_scan` sets.

Models that are a plain stack (embedding -> blocks -> ln_final -> unembedding) inherit
:meth:`SuiteModel.forward`; the others override it.

TransformerLens' own tools (``transformer_lens.patching``, ``transformer_lens.head_detector``)
take a suite model as they take a ``HookedTransformer``. What they read of it:

* ``model.cfg``: ``device``, ``dtype``, ``n_layers``, ``n_heads``, ``n_key_value_heads``,
  ``n_ctx`` — read-only properties of :class:`TLConfigFields` (a mixin of every config
  dataclass) or fields, so ``config_to_dict`` and the checkpoints are unchanged;
* ``model.to_tokens`` (a string in the checkpoint's task vocabulary, ``<BOS>`` first as the
  tasks write it), ``run_with_cache`` / ``run_with_hooks``, the modules' ``training`` flags, and
  ``model.set_use_split_qkv_input`` (direct-path patching, refused with the reason);
* the cache under TL's hook names (``blocks.{i}.hook_resid_pre``, ``attn.hook_z``,
  ``hook_mlp_out`` …). A name this model has no hook for (``attn.hook_pattern`` of an SSM) is one
  :class:`ActivationNotFound` line naming the model's hooks instead of a bare ``KeyError``.
"""

from __future__ import annotations

import copy
import re
from typing import Any, ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.utilities import get_act_name

from tasks.base import TaskError, Vocab, check, config_to_dict
from tasks.registry import make_task

# TL's n_ctx bounds a model's positions (its W_pos). No suite model has a position table (NoPE,
# ALiBi, Hard-ALiBi, RoPE, recurrences, spectral filters of any length), so no bound applies;
# head_detector only asks that a sequence be shorter than it.
N_CTX_UNBOUNDED = 2**31 - 1
_SPECIAL = re.compile(r"(<[A-Za-z_][A-Za-z0-9_]*>)")  # how Vocab.decode writes a special token


def check_tokens(tokens: Tensor) -> None:
    """Refuse anything but ``[batch, pos]`` tokens with a message that says so (a 1-D tensor
    would otherwise be read as one batch of scalars and fail deep inside a layer)."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")


class TLConfigFields:
    """TransformerLens' config names on a suite config dataclass, read-only (a mixin).

    Properties, not dataclass fields, so ``config_to_dict`` and every checkpoint stay as they
    were. ``device`` and ``dtype`` belong to the model, not the architecture: a
    :class:`SuiteModel` keeps its own copy of the config and records there where its parameters
    live whenever they move (``.to``, ``.cuda``, ``.double``); a config that belongs to no model
    has neither. Configs whose architecture has no ``n_heads`` field define it as a property.
    """

    @property
    def device(self) -> torch.device:
        return self._placement("device")

    @property
    def dtype(self) -> torch.dtype:
        return self._placement("dtype")

    @property
    def n_ctx(self) -> int:
        return N_CTX_UNBOUNDED

    @property
    def d_vocab(self) -> int:
        return self.vocab_size

    @property
    def n_key_value_heads(self) -> None:
        return None  # every attention head has its own keys and values (no GQA / MQA)

    def _placement(self, what: str):
        try:
            return self.__dict__["_tl_" + what]
        except KeyError:
            raise AttributeError(f"{type(self).__name__}.{what} is the {what} of the model the "
                                 "config belongs to, and this config belongs to none (read "
                                 f"model.cfg.{what})") from None


class ActivationNotFound(TaskError, KeyError):
    """A cache lookup of an activation this model does not have (or that was not cached).

    A :class:`KeyError` still (code that catches one keeps working), with a message that says
    what the model has instead."""

    __str__ = BaseException.__str__  # KeyError's would print the message as a quoted repr


class SuiteActivationCache(ActivationCache):
    """TransformerLens' ``ActivationCache`` whose failed lookups say why (one line)."""

    def __getitem__(self, key) -> Tensor:
        try:
            return super().__getitem__(key)
        except KeyError:
            pass
        name = self._name(key)
        model = self.model
        arch = getattr(model, "arch", "") or type(model).__name__
        if name in getattr(model, "hook_dict", {}):
            raise ActivationNotFound(
                f"{name!r} is not in this cache: the hook exists but did not fire (the path "
                "this config takes skips it) or names_filter left it out") from None
        # the block-level hooks, the ones TL's residual / MLP sweeps address
        layer_hooks = sorted({n.split(".", 2)[2] for n in getattr(model, "hook_dict", {})
                              if n.startswith("blocks.0.hook_")})
        why = (f"this {arch} model has no attention heads, and TransformerLens' head tools "
               "(head patching, detect_head) need them"
               if ".attn." in name and not any(".attn." in n for n in model.hook_dict)
               else f"this {arch} model has no hook {name!r}")
        raise ActivationNotFound(f"{why}; its blocks have blocks.{{i}}."
                                 f"{{{', '.join(layer_hooks)}}} (every hook: "
                                 "model.hook_names())") from None

    def _name(self, key) -> str:
        """The hook name TL's ``__getitem__`` looks up for ``key`` (see ``get_act_name``)."""
        try:
            if isinstance(key, str):
                return get_act_name(key)
            key = tuple(key)
            if len(key) > 1 and key[1] is not None and key[1] < 0:
                key = (key[0], self.model.cfg.n_layers + key[1], *key[2:])
            return get_act_name(*key)
        except Exception:  # noqa: BLE001 - an unparsable key is reported as given
            return str(key)


def encode_text(vocab: Vocab, text: str) -> list[int]:
    """Token ids of ``text`` in ``vocab``, the inverse of ``Vocab.decode``.

    Special tokens are written ``<NAME>`` (``<BOS>``, ``<COPY>``); alphabet symbols follow each
    other directly when they are all one character long (``"abc"``) and are separated by
    whitespace otherwise (``"s10 s11"``). Whitespace that is not a symbol only separates."""
    index = {sym: i for i, sym in enumerate(vocab.alphabet)}
    single = all(len(sym) == 1 for sym in vocab.alphabet)
    ids: list[int] = []
    for part in _SPECIAL.split(text):
        if _SPECIAL.fullmatch(part) and part[1:-1] in vocab.specials:
            ids.append(vocab.id(part[1:-1]))
            continue
        pieces = list(part) if single else part.split()
        for piece in pieces:
            if piece in index:
                ids.append(index[piece])
            elif not (single and piece.isspace()):
                shown = ", ".join(vocab.symbols[:12]) + (" …" if vocab.size > 12 else "")
                raise TaskError(f"{piece!r} is not a token of this model's task vocabulary "
                                f"({shown})")
    return ids


class SuiteModel(HookedRootModule):
    arch: ClassVar[str] = ""
    config_cls: ClassVar[type] = object
    scans: ClassVar[tuple[str, ...]] = ()  # the paths set_scan accepts; () = one path only
    fast_scans: ClassVar[tuple[str, ...]] = ()  # paths tested against "plain" (CPU ones)

    def __init__(self, cfg):
        super().__init__()
        if not isinstance(cfg, self.config_cls):
            raise TypeError(f"{type(self).__name__} needs a {self.config_cls.__name__}, "
                            f"got {cfg!r}")
        # This model's own copy: it records the model's device and dtype (TL reads cfg.device),
        # which a config shared with a model elsewhere would get wrong.
        self.cfg = copy.copy(cfg)

    def setup(self) -> None:
        """TransformerLens' hook registry (subclasses call this last in ``__init__``)."""
        super().setup()
        self._record_placement()

    def _apply(self, fn, recurse=True):
        # every .to / .cuda / .double goes through here: keep cfg.device and cfg.dtype true
        out = super()._apply(fn, recurse)
        self._record_placement()
        return out

    def _record_placement(self) -> None:
        p = next((p for p in self.parameters() if p.is_floating_point()), None)
        if p is not None and isinstance(self.cfg, TLConfigFields):
            object.__setattr__(self.cfg, "_tl_device", p.device)
            object.__setattr__(self.cfg, "_tl_dtype", p.dtype)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """Logits of the stack embed -> blocks -> ln_final -> unembed."""
        check_tokens(tokens)
        resid = self.hook_embed(self.embed(tokens))  # [batch, pos, d_model]
        for block in self.blocks:
            resid = block(resid)
        return self.unembed(self.ln_final(resid))

    def set_scan(self, scan: str) -> None:
        """Force every layer's computation path (one of ``scans``; ``cfg`` is unchanged).

        Under ``"auto"`` a fast path gives way to the plain one whenever a hook asks for an
        activation only the plain path computes; forcing a path is for tests and benchmarks.
        """
        check(bool(self.scans), f"{type(self).__name__} has a single computation path")
        check(scan in self.scans, f"scan must be one of {self.scans}, got {scan!r}")
        for module in self.modules():
            if "scan" in vars(module):
                module.scan = scan

    # ------------------------------------------------------------------ conveniences
    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def n_params(self, embeddings: bool = True) -> int:
        """Number of trainable parameters; ``embeddings=False`` leaves out ``embed``/``unembed``."""
        total = 0
        for name, p in self.named_parameters():
            if not embeddings and (name.startswith("embed") or name.startswith("unembed")):
                continue
            total += p.numel()
        return total

    def run_with_cache(self, *args: Any, **kwargs: Any):
        """``(output, ActivationCache)``: TransformerLens' cache, keyed by this model's hook names.

        ``HookedRootModule.run_with_cache`` returns a plain dict; users index TransformerLens'
        ``ActivationCache`` (``cache["pattern", 0]``, ``cache.keys()`` …), so wrap it.
        """
        return_cache_object = kwargs.pop("return_cache_object", True)
        out, cache = super().run_with_cache(*args, **kwargs)
        if return_cache_object and not isinstance(cache, ActivationCache):
            cache = SuiteActivationCache(cache, self,
                                         has_batch_dim=not kwargs.get("remove_batch_dim", False))
        return out, cache

    def log_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the next token (or class). The trainer's loss is their NLL.

        Models whose output is already a distribution (MambaZero's L1-normalised prediction)
        override this; everyone else returns ``log_softmax(forward(tokens))``.
        """
        return torch.log_softmax(self(tokens).float(), dim=-1)

    def hook_names(self) -> list[str]:
        """Every hook point's name, in module order."""
        return list(self.hook_dict.keys())

    # ------------------------------------------------------------------ TransformerLens' names
    def set_task(self, name: str, config: dict[str, Any] | None = None) -> None:
        """Give this model the task whose vocabulary :meth:`to_tokens` reads. A model loaded
        from a checkpoint has its task already; one built in code needs this (or token ids)."""
        self._tl_task = {"name": name, "config": dict(config or {})}
        self._tl_vocab = None

    @property
    def task_vocab(self) -> Vocab:
        """The vocabulary of the task this model was trained on (``checkpoint["task"]``, or
        :meth:`set_task`): what :meth:`to_tokens` and :meth:`to_str_tokens` read."""
        vocab = self.__dict__.get("_tl_vocab")
        if vocab is not None:
            return vocab
        task = self.__dict__.get("_tl_task")
        if task is None:
            task = (getattr(self, "checkpoint", None) or {}).get("task")
        check(task is not None,
              f"this {self.arch} model has no task vocabulary (it was not loaded from a "
              "checkpoint): pass token ids as a [batch, pos] tensor, or call "
              "model.set_task(name, config) first")
        vocab = make_task(task["name"], task.get("config") or {}).vocab
        check(vocab.size == self.cfg.vocab_size,
              f"the {task['name']!r} task has {vocab.size} tokens but the model "
              f"{self.cfg.vocab_size}: the task config does not belong to this model")
        self._tl_vocab = vocab
        return vocab

    def to_tokens(self, input: str | list[str] | Tensor, prepend_bos: bool | None = None,
                  padding_side: str | None = None, move_to_device: bool = True,
                  truncate: bool = True) -> Int[Tensor, "batch pos"]:
        """TransformerLens' ``to_tokens``: ``[batch, pos]`` ids of a string (or a list of them,
        padded with ``<PAD>``) in the task vocabulary (:func:`encode_text`).

        ``prepend_bos=None`` writes the sequence the way the task does: ``<BOS>`` first when the
        vocabulary has one (not twice when the text starts with it); ``True`` insists on it,
        ``False`` leaves the text as written. A tensor of ids passes through (a 1-D one gains the
        batch axis). ``truncate`` is accepted for TL's signature: nothing has a context bound.
        """
        if isinstance(input, Tensor):
            check(not input.is_floating_point() and not input.is_complex()
                  and input.dim() in (1, 2),
                  f"token ids must be a 1-D or [batch, pos] integer tensor, got "
                  f"{input.dtype} of shape {tuple(input.shape)}")
            tokens = input if input.dim() == 2 else input[None]
            return tokens.to(self.cfg.device) if move_to_device else tokens
        vocab = self.task_vocab
        texts = [input] if isinstance(input, str) else list(input)
        check(len(texts) >= 1, "to_tokens needs at least one string")
        bos = vocab.id("BOS") if "BOS" in vocab.specials else None
        check(not (prepend_bos and bos is None),
              "prepend_bos=True, but this task's vocabulary has no <BOS>")
        rows = []
        for text in texts:
            ids = encode_text(vocab, text)
            if prepend_bos is not False and bos is not None and ids[:1] != [bos]:
                ids = [bos, *ids]
            rows.append(ids)
        width = max(len(r) for r in rows)
        side = padding_side or "right"
        check(side in ("left", "right"), f"padding_side must be left or right, got {side!r}")
        if any(len(r) != width for r in rows):
            check("PAD" in vocab.specials,
                  "strings of different lengths need a <PAD> token, and this task has none")
            pad = [vocab.id("PAD")]
            rows = [r + pad * (width - len(r)) if side == "right" else pad * (width - len(r)) + r
                    for r in rows]
        tokens = torch.tensor(rows, dtype=torch.long).reshape(len(rows), width)
        return tokens.to(self.cfg.device) if move_to_device else tokens

    def to_str_tokens(self, input: str | list[str] | Tensor, prepend_bos: bool | None = None
                      ) -> list[str] | list[list[str]]:
        """TransformerLens' ``to_str_tokens``: each token as its symbol (``<BOS>``, ``a`` …).
        One string or one row of ids gives a list; a batch gives a list per row."""
        tokens = self.to_tokens(input, prepend_bos=prepend_bos, move_to_device=False)
        syms = self.task_vocab.symbols
        rows = [[syms[int(i)] for i in row] for row in tokens.tolist()]
        single = isinstance(input, str) or (isinstance(input, Tensor) and
                                            (input.dim() == 1 or input.shape[0] == 1))
        return rows[0] if single else rows

    def to_string(self, tokens: Tensor) -> str | list[str]:
        """TransformerLens' ``to_string``: ``Vocab.decode`` of a 1-D sequence, or of each row."""
        check(tokens.dim() in (1, 2), f"tokens must be 1-D or [batch, pos], got "
                                      f"{tuple(tokens.shape)}")
        vocab = self.task_vocab
        return vocab.decode(tokens) if tokens.dim() == 1 else [vocab.decode(r) for r in tokens]

    def to_single_token(self, string: str) -> int:
        """The id of a string that is exactly one token (``"a"``, ``"<COPY>"``)."""
        ids = encode_text(self.task_vocab, string)
        check(len(ids) == 1, f"{string!r} is {len(ids)} tokens, not one")
        return ids[0]

    def set_use_split_qkv_input(self, use_split_qkv_input: bool) -> None:
        """TL's switch for per-head Q/K/V inputs (``attn.hook_q_input``), which direct-path
        patching needs; suite models have no such fork, so turning it on is refused."""
        check(not use_split_qkv_input,
              f"a suite {self.arch} model has no per-head Q/K/V inputs (hook_q_input), so "
              "get_act_patch_direct_path cannot run on it; export it to HF "
              "(python -m models.export_hf) and use TransformerBridge")

    def set_use_attn_in(self, use_attn_in: bool) -> None:
        """TL's switch for per-head attention inputs (``attn.hook_attn_in``): refused on."""
        check(not use_attn_in, f"a suite {self.arch} model has no per-head attention inputs "
                               "(hook_attn_in)")

    def to_checkpoint_dict(self) -> dict[str, Any]:
        """``{"arch": ..., "config": {...}}``: what a checkpoint needs to rebuild this model."""
        return {"arch": self.arch, "config": config_to_dict(self.cfg)}
