"""Config rules every layer uses: :func:`check` (refuse bad input with one line), and frozen
config dataclasses to and from plain dicts, unknown keys and wrong types refused."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import numbers
import types
import typing
from typing import Any

from seqprobe.errors import ConfigError, InputError


def check(condition: bool, message: str) -> None:
    """Raise :class:`InputError` with ``message`` unless ``condition`` holds (that class, not
    :class:`ConfigError`: a sweep reports the class name, and its users read ``InputError``)."""
    if not condition:
        raise InputError(message)


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, once per class ({} when an annotation cannot be
    resolved): evaluating string annotations dominates building a config from a dict."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: no type check
        return {}


def near(key: Any, allowed) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``allowed`` to a mistyped ``key``, or ""."""
    match = difflib.get_close_matches(str(key), sorted(map(str, allowed)), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


WAS = "was"  # field metadata: the field's name before a rename (read from records, and hashed)


def former_names(cls: type) -> dict[str, str]:
    """{field's former name: its name} of the config dataclass ``cls`` (``metadata={"was":
    OLD}``): a record written before a rename is read under the new name, and the cache key
    keeps the name it hashed (models.train.runconfig)."""
    return {f.metadata[WAS]: f.name for f in dataclasses.fields(cls) if WAS in f.metadata}


def config_from_dict(cls: type, data: dict[str, Any]):
    """Build a frozen config dataclass from a dict, rejecting unknown keys (never ignoring them);
    a field's former name (:func:`former_names`) is read as the field."""
    renamed = former_names(cls)
    if renamed and set(renamed) & set(data):
        both = sorted(k for k in set(renamed) & set(data) if renamed[k] in data)
        if both:
            raise ConfigError(f"{cls.__name__}: {both[0]!r} is the former name of "
                              f"{renamed[both[0]]!r}; give one of them")
        data = {renamed.get(k, k): v for k, v in data.items()}
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown key(s) {unknown}{near(unknown[0], names)}; "
                          f"allowed: {sorted(names)}")
    hints = type_hints(cls)
    data = dict(data)
    for key, value in data.items():
        ok = _fits(value, hints.get(key))
        if ok is False:  # a wrong type would surface later as a TypeError deep inside a check
            tp = hints[key]
            raise ConfigError(f"{cls.__name__}.{key} must be {getattr(tp, '__name__', tp)}, got "
                            f"{value!r} ({type(value).__name__})")
        if isinstance(value, list) and typing.get_origin(hints.get(key)) is tuple:
            data[key] = tuple(value)  # JSON has no tuples; frozen configs stay hashable
    return cls(**data)


def _fits(value: Any, tp: Any) -> bool | None:
    """Whether ``value`` suits the annotation ``tp``; None when ``tp`` is not a simple type."""
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    origin = typing.get_origin(tp)
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0]) is not False for v in value)
        return None
    if origin in (typing.Union, types.UnionType):
        results = [(value is None) if a is type(None) else _fits(value, a)
                   for a in typing.get_args(tp)]
        return True if True in results else (None if None in results else False)
    return None


def config_to_dict(cfg) -> dict[str, Any]:
    """The init fields of a config dataclass as a plain dict (JSON- and torch.load-safe)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.init}
