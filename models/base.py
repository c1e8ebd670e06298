"""The base class every suite model shares: TransformerLens hooks plus the suite's contract.

A suite model is a ``transformer_lens.HookedRootModule`` whose ``cfg`` is a frozen config
dataclass with at least ``vocab_size`` and ``n_layers``. Subclasses:

* declare what the suite needs to know of them (:class:`~models.contract.ModelContract`):
  ``arch`` (the name in :mod:`models.registry`), ``config_cls``, ``tiny_config``, the shapes
  of their hooks, their FLOPs per token;
* build their modules, put ``HookPoint``s wherever an activation is worth reading, and call
  ``self.setup()`` last in ``__init__`` so ``run_with_cache`` / ``run_with_hooks`` see them;
* compute in :meth:`SuiteModel.compute_logits` (``[batch, pos]`` int64 tokens to ``[batch,
  pos, vocab]`` logits whose softmax is the prediction; sequence classifiers may return other
  shapes, documented on the class), never in ``forward``: ``forward`` is the base class's, so
  every model takes strings and ``return_type`` alike. Plain stacks (embedding -> blocks ->
  ln_final -> unembedding) inherit the base ``compute_logits``;
* list their computation paths in ``scans`` (``"auto"`` first, then ``"plain"``, the path that
  fires every hook) and the fast ones among them in ``fast_scans``: every layer that can take
  more than one path holds a ``scan`` attribute, which :meth:`SuiteModel.set_scan` sets.

The model object (what a researcher holds in IPython):

* ``model(input, return_type="logits")``: ``input`` is token ids or text in the task's
  vocabulary (:class:`models.text.TaskText`); ``return_type`` as TransformerLens has it
  (``"logits"``, ``"loss"``, ``"both"``, ``None``) and ``"log_probs"`` (:mod:`models.outputs`,
  the suite's one log-probability function). ``run_with_cache`` / ``run_with_hooks`` take the
  same arguments.
* ``model.task`` (the task object it was trained on, None when built in code), ``model.config``
  (the model config dataclass, TransformerLens' ``cfg``), ``model.train_config``
  (:class:`~models.train_config.TrainConfig` or None) and ``model.provenance``
  (:class:`Provenance`: source file, training record, history): the three sections of a
  :class:`~models.train.runconfig.RunConfig`.
* ``model.save(path)``: the one checkpoint format, written atomically
  (:func:`models.checkpoint.write.save_checkpoint`), which ``models.load`` reads back.

TransformerLens' own tools (``transformer_lens.patching``, ``transformer_lens.head_detector``)
take a suite model as they take a ``HookedTransformer``. What they read of it:

* ``model.cfg``: ``device``, ``dtype``, ``n_layers``, ``n_heads``, ``n_key_value_heads``,
  ``n_ctx`` — read-only properties of :class:`TLConfigFields` (a mixin of every config
  dataclass) or fields, so ``config_to_dict`` and the checkpoints are unchanged;
* ``model.to_tokens`` (a string in the task's vocabulary, ``<BOS>`` first as the tasks write
  it), ``run_with_cache`` / ``run_with_hooks``, the modules' ``training`` flags, and
  ``model.set_use_split_qkv_input`` (direct-path patching, refused with the reason);
* the cache under TL's hook names (``blocks.{i}.hook_resid_pre``, ``attn.hook_z``,
  ``hook_mlp_out`` …). A name this model has no hook for (``attn.hook_pattern`` of an SSM) is one
  :class:`ActivationNotFound` line naming the model's hooks instead of a bare ``KeyError``.

``HookedTransformer``'s own names (``W_Q`` … ``W_U``, ``OV``, ``generate``, ``tokenizer`` …) are
:class:`models.tl_surface.TLSurface`'s; docs/tl_surface.md tabulates what works where.
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.utils.checkpoint
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.utilities import get_act_name

from models.checkpoint.layout import FORMAT, make_checkpoint
from models.checkpoint.write import save_checkpoint
from models.contract import ModelContract
from models.outputs import check_return_type, log_probs, next_token_loss
from models.provenance import Provenance
from models.text import TaskText
from models.tl_surface import TLSurface, cache_refusal, near_matches, neuron_width
from models.train_config import TrainConfig
from seqprobe.config import check, config_from_dict, config_to_dict
from seqprobe.errors import InputError
from seqprobe.flags import N_CTX_UNBOUNDED, Config

# TL's n_ctx bounds a model's positions (its W_pos). No suite model has a position table (NoPE,
# ALiBi, Hard-ALiBi, RoPE, recurrences, spectral filters of any length), so no bound applies;
# head_detector only asks that a sequence be shorter than it.


def check_tokens(tokens: Tensor) -> None:
    """Refuse anything but ``[batch, pos]`` tokens with a message that says so (a 1-D tensor
    would otherwise be read as one batch of scalars and fail deep inside a layer)."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")


class TLConfigFields(Config):
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

    @property
    def d_vocab_out(self) -> int:
        return self.vocab_size

    @property
    def normalization_type(self) -> str | None:
        """TL's kind of norm before each sublayer and the unembedding (``"LN"``, ``"RMS"``, None
        for none), which ``ActivationCache``'s ``apply_ln`` reads; configs with norms say theirs."""
        return None

    @property
    def attn_only(self) -> bool:
        return False  # TL's "no MLPs"; decompose_resid reads it (an SSM's is refused there)

    def _placement(self, what: str):
        try:
            return self.__dict__["_tl_" + what]
        except KeyError:
            raise AttributeError(f"{type(self).__name__}.{what} is the {what} of the model the "
                                 "config belongs to, and this config belongs to none (read "
                                 f"model.cfg.{what})") from None


class ActivationNotFound(InputError, KeyError):
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
               else f"this {arch} model has no hook {name!r}"
               + near_matches(name, getattr(model, "hook_dict", {})))
        raise ActivationNotFound(f"{why}; its blocks have blocks.{{i}}."
                                 f"{{{', '.join(layer_hooks)}}} (every hook: "
                                 "model.hook_names())") from None

    # TL's where it means the same here, else one line why (models.tl_surface.cache_refusal)
    def decompose_resid(self, *args: Any, **kwargs: Any):
        cache_refusal(self.model, "decompose_resid")
        return super().decompose_resid(*args, **kwargs)

    def apply_ln_to_stack(self, residual_stack: Tensor, layer: int | None = None,
                          mlp_input: bool = False, *args: Any, **kwargs: Any) -> Tensor:
        cache_refusal(self.model, "apply_ln_to_stack", layer, mlp_input)
        return super().apply_ln_to_stack(residual_stack, layer, mlp_input, *args, **kwargs)

    def compute_ssm_state(self, *args: Any, **kwargs: Any):
        cache_refusal(self.model, "compute_ssm_state")

    def compute_ssm_effective_attention(self, *args: Any, **kwargs: Any):
        cache_refusal(self.model, "compute_ssm_effective_attention")

    def stack_neuron_results(self, *args: Any, **kwargs: Any):
        with neuron_width(self.model.cfg):  # TL labels neurons by cfg.d_mlp
            return super().stack_neuron_results(*args, **kwargs)

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


def train_config_of(train: dict[str, Any]) -> TrainConfig | None:
    """The training config of a checkpoint's ``train`` record, or None where it has none (a
    hand-set construction stores ``{}``: it was built, not trained)."""
    config = train.get("config") or {}
    return config_from_dict(TrainConfig, config) if config else None


# a saved model is weights and records, not a paused run: it has no optimizer state, so the
# data RNG state is left out too, and a resume from the file is refused instead of restarting
# the optimiser silently (models.train.loop checks for it)
NOT_SAVED_TRAIN_KEYS = ("rng",)


class SuiteModel(ModelContract, TLSurface, TaskText, HookedRootModule):

    def __init__(self, cfg):
        super().__init__()
        if not isinstance(cfg, self.config_cls):
            raise TypeError(f"{type(self).__name__} needs a {self.config_cls.__name__}, "
                            f"got {cfg!r}")
        # This model's own copy: it records the model's device and dtype (TL reads cfg.device),
        # which a config shared with a model elsewhere would get wrong.
        self.cfg = copy.copy(cfg)
        self.train_config: TrainConfig | None = None
        self.provenance = Provenance()
        # recompute each block in the backward pass instead of keeping its activations
        # (TrainConfig.checkpoint_blocks, which the training loop sets; see run_blocks)
        self.checkpoint_blocks = False

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

    # ------------------------------------------------------------------ computation
    def forward(self, input: str | list[str] | Int[Tensor, "batch pos"],
                return_type: str | None = "logits", loss_per_token: bool = False,
                prepend_bos: bool | None = None, padding_side: str | None = None) -> Any:
        """TransformerLens' forward: ``input`` is ``[batch, pos]`` token ids, or a string (or a
        list of them) in the task's vocabulary (:meth:`to_tokens`; ``prepend_bos`` and
        ``padding_side`` as there). ``return_type``: ``"logits"`` ([batch, pos, vocab]),
        ``"log_probs"`` (their :func:`models.outputs.log_probs`), ``"loss"`` (the mean next-token
        loss; ``loss_per_token``: [batch, pos - 1]), ``"both"`` (logits, loss) or None (run for
        the hooks only)."""
        check_return_type(return_type)
        if isinstance(input, Tensor):
            check_tokens(input)
            tokens, mask = input, None
        else:
            tokens, mask = self.tokens_and_mask(input, prepend_bos, padding_side)
            tokens = tokens.to(self.cfg.device)
        logits = self.compute_logits(tokens)
        if return_type in ("logits", None):
            return logits if return_type else None
        lp = log_probs(logits)
        if return_type == "log_probs":
            return lp
        check(getattr(self.cfg, "head", "lm") == "lm" and logits.dim() == 3,
              f"return_type={return_type!r} is the next-token loss of a language model, and this "
              f"{self.arch} model is a {getattr(self.cfg, 'head', '')} classifier")
        loss = next_token_loss(lp, tokens, mask, loss_per_token)
        return loss if return_type == "loss" else (logits, loss)

    def compute_logits(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """Logits of the stack embed -> blocks -> ln_final -> unembed (subclasses that compute
        otherwise override this, not ``forward``)."""
        resid = self.hook_embed(self.embed(tokens))  # [batch, pos, d_model]
        return self.unembed(self.ln_final(self.run_blocks(resid)))

    def run_blocks(self, resid: Float[Tensor, "batch pos d_model"]
                   ) -> Float[Tensor, "batch pos d_model"]:
        """``resid`` through every block in order. With :attr:`checkpoint_blocks` and gradients
        on, each block runs under ``torch.utils.checkpoint``: the backward pass keeps only the
        blocks' inputs and recomputes one block at a time (the same numbers; a block's hooks
        fire again during that recomputation, so analyses run with it off, as it is unless the
        training loop turned it on)."""
        checkpointed = self.checkpoint_blocks and torch.is_grad_enabled()
        for block in self.blocks:
            resid = (torch.utils.checkpoint.checkpoint(block, resid, use_reentrant=False)
                     if checkpointed else block(resid))
        return resid

    def log_probs(self, input: str | list[str] | Tensor) -> Tensor:
        """Log-probabilities of the next token (or class): ``model(input,
        return_type="log_probs")``. The trainer's loss is their NLL at the answer positions."""
        return self(input, return_type="log_probs")

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

    @property
    def config(self):
        """The model config (a frozen dataclass of ``config_cls``; TransformerLens' ``cfg``)."""
        return self.cfg

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
        Takes what ``forward`` takes (text, ``return_type`` …).

        ``HookedRootModule.run_with_cache`` returns a plain dict; users index TransformerLens'
        ``ActivationCache`` (``cache["pattern", 0]``, ``cache.keys()`` …), so wrap it.
        """
        return_cache_object = kwargs.pop("return_cache_object", True)
        out, cache = super().run_with_cache(*args, **kwargs)
        if return_cache_object and not isinstance(cache, ActivationCache):
            cache = SuiteActivationCache(cache, self,
                                         has_batch_dim=not kwargs.get("remove_batch_dim", False))
        return out, cache

    def hook_names(self) -> list[str]:
        """Every hook point's name, in module order."""
        return list(self.hook_dict.keys())

    def add_hook(self, name, hook, *args: Any, **kwargs: Any) -> None:
        """TL's ``add_hook``; a name that is no hook point is one line with its near matches."""
        self._check_hook_name(name)
        super().add_hook(name, hook, *args, **kwargs)

    def _enable_hook_with_name(self, name: str, hook, dir) -> None:
        # what run_with_hooks and `with model.hooks(...)` call for each named hook
        self._check_hook_name(name)
        super()._enable_hook_with_name(name, hook, dir)

    def _check_hook_name(self, name) -> None:
        if isinstance(name, str) and name not in self.hook_dict:
            raise ActivationNotFound(f"this {self.arch} model has no hook {name!r}"
                                     f"{near_matches(name, self.hook_dict)} (every hook: "
                                     "model.hook_names())")

    # ------------------------------------------------------------------ checkpoints
    def load_records(self, ckpt: dict[str, Any], source: str | os.PathLike | None = None
                     ) -> None:
        """Take a checkpoint dict's task, training config and provenance (not its weights:
        those are ``load_state_dict``'s); ``models.load`` calls this."""
        task = ckpt.get("task")
        if task:
            self.set_task(task["name"], task.get("config") or {})
        else:
            self.set_task(None)
        self.train_config = train_config_of(ckpt.get("train") or {})
        self.provenance = Provenance.of_checkpoint(ckpt, source)

    def to_checkpoint_dict(self) -> dict[str, Any]:
        """``{"arch": ..., "config": {...}}``: what a checkpoint needs to rebuild this model."""
        return {"arch": self.arch, "config": config_to_dict(self.cfg)}

    def checkpoint_dict(self) -> dict[str, Any]:
        """This model as a checkpoint dict (DESIGN's layout, no optimizer): its config, task,
        training record (without its RNG state, see :data:`NOT_SAVED_TRAIN_KEYS`), history and
        weights."""
        task = self.require_task("a checkpoint (it records the task a model was trained on)")
        train = {k: v for k, v in self.provenance.train.items() if k not in NOT_SAVED_TRAIN_KEYS}
        if self.train_config is not None:
            train["config"] = config_to_dict(self.train_config)
        train = {"config": {}, "step": 0, "samples_seen": 0, **train}  # built in code: untrained
        # the model config as the file had it (the fields its run set), so that a re-saved
        # checkpoint keeps its run's cache key; the whole config where there is none
        stored = self.provenance.model_config
        config = (stored if stored is not None
                  and config_from_dict(self.config_cls, stored) == self.cfg
                  else config_to_dict(self.cfg))
        return make_checkpoint(self.arch, config, task.name, config_to_dict(task.cfg), train,
                               self.state_dict(), list(self.provenance.history))

    def save(self, path: str | os.PathLike) -> Path:
        """Write this model as a checkpoint file that ``models.load`` reads back (the one
        format, written atomically by :func:`models.checkpoint.save_checkpoint`); returns the
        path. A model built in code needs its task first (:meth:`set_task`)."""
        return save_checkpoint(self.checkpoint_dict(), path)

    @property
    def checkpoint(self) -> dict[str, Any]:
        """Deprecated: the checkpoint's records as a dict (``format``, ``model``, ``task``,
        ``train``, ``history``). Read ``task``, ``train_config`` and ``provenance`` instead."""
        warnings.warn("model.checkpoint is deprecated: read model.task, model.train_config and "
                      "model.provenance", DeprecationWarning, stacklevel=2)
        task = self.task
        return {"format": FORMAT, "model": self.to_checkpoint_dict(),
                "task": None if task is None else {"name": task.name,
                                                   "config": config_to_dict(task.cfg)},
                "train": dict(self.provenance.train), "history": list(self.provenance.history)}

    # ------------------------------------------------------------------ TransformerLens' switches
    def set_use_split_qkv_input(self, use_split_qkv_input: bool) -> None:
        """TL's switch for per-head Q/K/V inputs (``attn.hook_q_input``), which direct-path
        patching needs; suite models have no such fork, so turning it on is refused."""
        check(not use_split_qkv_input,
              f"a suite {self.arch} model has no per-head Q/K/V inputs (hook_q_input), so "
              "get_act_patch_direct_path cannot run on it; export it to HF "
              "(python -m models.hf.export) and use TransformerBridge")

    def set_use_attn_in(self, use_attn_in: bool) -> None:
        """TL's switch for per-head attention inputs (``attn.hook_attn_in``): refused on."""
        check(not use_attn_in, f"a suite {self.arch} model has no per-head attention inputs "
                               "(hook_attn_in)")
