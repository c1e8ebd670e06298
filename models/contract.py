"""What the suite needs to know about an architecture, declared on its model class.

Every :class:`~models.base.SuiteModel` subclass states here, beside its code, what the rest of
the suite would otherwise keep in hand lists: its name and config class, its computation paths
(``scans``, the fast ones among them, the one an ensemble's vmapped forward takes), the tiny
config the tests build it at, the shape of every hook DESIGN.md names, and its training FLOPs
per token (what the planner costs a run by). A new architecture fills these in its own file
and every suite-wide check (the model contract test, the planner, the ensembles) finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

Shapes = dict[str, tuple[int, ...]]


class ModelContract:
    arch: ClassVar[str] = ""  # its row's name in [archs] of seqprobe/registry.toml
    config_cls: ClassVar[type] = object
    scans: ClassVar[tuple[str, ...]] = ()  # the paths set_scan accepts; () = one path only
    fast_scans: ClassVar[tuple[str, ...]] = ()  # paths tested against "plain" (CPU ones)
    # the path an ensemble's vmapped forward takes (models.train.ensemble), where the default
    # one has no vmap batching rule; None: the default path batches
    ensemble_scan: ClassVar[str | None] = None
    # the smallest config the tests build (tests/tiny.py): every axis distinct where it can be
    # (vocab, width, heads, state), so a transposed axis shows up as a shape error
    tiny_config: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    @classmethod
    def hook_shapes(cls, cfg, batch: int, pos: int) -> Shapes:
        """Every hook DESIGN.md names for this architecture (TransformerLens' vocabulary) ->
        its shape on a ``[batch, pos]`` input: the embedding, the final norm, and each block's
        :meth:`block_hook_shapes`."""
        d = cfg.d_model
        shapes = {"hook_embed": (batch, pos, d), "ln_final.hook_normalized": (batch, pos, d)}
        layer = {"hook_resid_pre": (batch, pos, d), **cls.block_hook_shapes(cfg, batch, pos)}
        for i in range(cfg.n_layers):
            shapes |= {f"blocks.{i}.{n}": s for n, s in layer.items()}
        return shapes

    @classmethod
    def block_hook_shapes(cls, cfg, batch: int, pos: int) -> Shapes:
        """The hooks DESIGN.md names inside one block (``blocks.{i}.`` left off)."""
        raise NotImplementedError(f"{cls.__name__}: declare the shapes of its blocks' hooks "
                                  "(DESIGN.md's names) in block_hook_shapes")

    @classmethod
    def flops_per_token(cls, cfg, n_params: int, length: int) -> float:
        """Training FLOPs per token: 6·N, a forward and a backward pass through every weight
        (Kaplan et al. 2020's estimate); a class whose cost grows with the context adds it."""
        return 6.0 * n_params
