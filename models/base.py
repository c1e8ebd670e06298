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
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, HookedRootModule

from tasks.base import check, config_to_dict


def check_tokens(tokens: Tensor) -> None:
    """Refuse anything but ``[batch, pos]`` tokens with a message that says so (a 1-D tensor
    would otherwise be read as one batch of scalars and fail deep inside a layer)."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")


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
        self.cfg = cfg

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
            cache = ActivationCache(cache, self,
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

    def to_checkpoint_dict(self) -> dict[str, Any]:
        """``{"arch": ..., "config": {...}}``: what a checkpoint needs to rebuild this model."""
        return {"arch": self.arch, "config": config_to_dict(self.cfg)}
