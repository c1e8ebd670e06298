"""The model a payload describes: its size without allocating it, and the model itself with
the payload's weights loaded (strict). Nothing is allocated before the config is known to fit
the file (:mod:`models.checkpoint.untrusted` bounds) and the machine."""

from __future__ import annotations

import functools
import json
import os

import torch

from models.checkpoint.untrusted import (
    check_config_fits_file,
    check_rebuilt_bytes,
    first_sentence,
    need,
    view_bytes,
)
from models.registry import build_model
from seqprobe.device import check_fits
from seqprobe.errors import CheckpointError, InputError

DEEP = 64  # deeper stacks are counted from one- and two-layer builds (a meta build of 10^6 layers
#            would itself take minutes)


def meta_model(arch: str, config: dict | object):
    """The model a config describes, built on the meta device: every shape, no memory."""
    with torch.device("meta"):
        return build_model(arch, config)


def _sizes(model) -> tuple[int, int, int]:
    params = list(model.parameters())
    return (sum(p.numel() for p in params), sum(view_bytes(p) for p in params),
            sum(view_bytes(b) for b in model.buffers()))


def model_footprint(arch: str, config: dict) -> tuple[int, int, int]:
    """``(parameters, parameter bytes, buffer bytes)`` of the model ``config`` describes,
    without allocating it (meta-device builds; a stack deeper than :data:`DEEP` is
    extrapolated from one and two layers, as every suite model is a stack of equal blocks).
    Raises :class:`InputError` for an invalid config, or one whose tensors cannot even be
    described (a size that overflows 64 bits)."""
    try:
        key = json.dumps(config, sort_keys=True)
    except (TypeError, ValueError):  # not plain data: build it, uncached
        key = None
    try:
        return _cached_footprint(arch, key) if key is not None else _footprint(arch, config)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. "Storage size calculation overflowed"
        raise InputError(f"the {arch} model of this config cannot be built: "
                        f"{first_sentence(e)}") from None


@functools.lru_cache(maxsize=1024)
def _cached_footprint(arch: str, key: str) -> tuple[int, int, int]:
    # a meta build still runs every initialiser (slow on the meta device), and planning a
    # sweep asks for the same few model configs once per seed and learning rate
    return _footprint(arch, json.loads(key))


def _footprint(arch: str, config: dict) -> tuple[int, int, int]:
    n_layers = config.get("n_layers")
    if isinstance(n_layers, int) and not isinstance(n_layers, bool) and n_layers > DEEP:
        try:
            one = _sizes(meta_model(arch, {**config, "n_layers": 1}))
            two = _sizes(meta_model(arch, {**config, "n_layers": 2}))
        except InputError:  # a config tied to its depth: build the whole stack
            pass
        else:
            return tuple(a + (n_layers - 1) * (b - a) for a, b in zip(one, two, strict=True))
    return _sizes(meta_model(arch, config))


def _kind(t: torch.Tensor) -> str:
    return "float" if t.is_floating_point() else "bool" if t.dtype == torch.bool else "int"


def state_dict_mismatch(model, sd: dict) -> str:
    """One line naming the first differences between a model's weights and a state dict."""
    own = model.state_dict()
    missing = [k for k in own if k not in sd]
    extra = [k for k in sd if k not in own]
    shapes = [f"{k} is {list(sd[k].shape)} in the file but {list(own[k].shape)} for the config"
              for k in own if k in sd and sd[k].shape != own[k].shape]
    # a float weight stored as ints (or bools) would load truncated, silently
    shapes += [f"{k} is {sd[k].dtype} in the file but {own[k].dtype} for the config"
               for k in own if k in sd and _kind(sd[k]) != _kind(own[k])]
    parts = []
    if missing:
        parts.append(f"missing {missing[:3]}{'…' if len(missing) > 3 else ''}")
    if extra:
        parts.append(f"unexpected {[k[:80] for k in extra[:3]]}{'…' if len(extra) > 3 else ''}")
    if shapes:
        parts.append(shapes[0] + (f" (+{len(shapes) - 1} more)" if len(shapes) > 1 else ""))
    return "; ".join(parts)


def model_from_checkpoint(payload: dict, ckpt_path: str | os.PathLike = "<checkpoint>"):
    """Rebuild the model a payload describes and load its weights (strict).

    Nothing is allocated before the config is known to fit the file: the shapes the config
    implies (a meta-device build) must equal the stored ones, and what is rebuilt rather than
    stored (buffers such as STU's filters) must stay within ``MAX_REBUILT_BYTES`` beyond the
    stored weights and within the machine's memory.
    """
    arch, config = payload["model"]["arch"], payload["model"]["config"]
    sd = payload["state_dict"]
    need(isinstance(sd, dict), ckpt_path, "'state_dict' must be a dict")
    check_config_fits_file(payload, ckpt_path)
    try:
        meta = meta_model(arch, config)
    except InputError as e:
        raise CheckpointError(f"{ckpt_path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a config value no check anticipated
        raise CheckpointError(f"{ckpt_path}: invalid model config ({type(e).__name__}: "
                              f"{first_sentence(e)})") from None
    mismatch = state_dict_mismatch(meta, sd)
    if mismatch:
        raise CheckpointError(f"{ckpt_path}: weights do not match the config: {mismatch}")
    total = check_rebuilt_bytes(meta, sd, ckpt_path)
    try:
        check_fits(total, f"the {arch} model of this checkpoint")
    except InputError as e:
        raise CheckpointError(f"{ckpt_path}: {e}") from None
    del meta
    try:
        model = build_model(arch, config)
        model.load_state_dict(sd, strict=True)
    except InputError as e:
        raise CheckpointError(f"{ckpt_path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - see above
        raise CheckpointError(f"{ckpt_path}: weights do not match the config: "
                              f"{first_sentence(e)}") from None
    return model
