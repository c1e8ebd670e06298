"""One run configuration: ``RunConfig{model, task, train}``, its canonical JSON form and its hash.

Each section is a typed, frozen config dataclass: ``model`` the arch's config
(``models.registry``), ``task`` the task's (``tasks.registry``), ``train`` a
:class:`~models.train_config.TrainConfig`. The arch and task names follow from the config
classes, so a run cannot name one arch and carry another's config.

The canonical form, and so the cache key, follows one rule for every field of every section:

    a field is written when it differs from its default, or when it is *pinned*.

Pinned fields are what format-1 records wrote even at their defaults, so that every run keeps
the cache key it had before this class existed:

* ``model``: the fields the run sets (:attr:`RunConfig.model_keys`). A checkpoint records its
  model as the arch's defaults plus the fields set (levels, the task's vocabulary, overrides),
  and two runs that set different fields have always been different cache entries.
* ``task`` and ``train``: the fields their class had when the format was fixed
  (:data:`FORMAT1_FIELDS`, a frozen list). A field added since is left out at its default, so
  adding a field with a default never moves a cache key and needs no code here.

A field whose metadata says ``{"content": "file"}`` (``TrainConfig.init_from``) is written as
the digest of the file it names: a retrained init checkpoint is another run, a moved one is not.
So is each field a task config's ``content_files()`` names (the memorization task's
``data_path``: data changed in place are another run, the zoo cache's and the memorization
cells' key alike).

A field whose metadata has a ``"cpu"`` value (``TrainConfig.device_type``, ``precision``,
``compile``: "auto" until the run's device is known) is left out at "auto" and at that CPU
value, written otherwise. Resolve a run for its device first (:meth:`RunConfig.resolved`; the
cache and the loop do): an unresolved run hashes as its CPU run, a CUDA one as what it uses.
A field whose metadata says ``{"hash": False}`` (``TrainConfig.checkpoint_blocks``,
``micro_batch``: how much memory a step takes, not what it computes) is never written.

A task with a length distribution (``eval_lengths``: copy, lookup) adds ``eval``, the name of
how its evaluation is drawn (:data:`LENGTH_EVAL`): what an evaluation
scores is part of the run (its recorded history and where ``stop_at`` ends it), so the runs
evaluated on a few drawn lengths before every length was scored are other cache entries.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from models.checkpoint.paths import file_kind
from models.registry import ARCHS, model_class
from models.train_config import TrainConfig, resolve_train
from seqprobe.config import (
    check,
    config_from_dict,
    config_to_dict,
    former_names,
    near,
    type_hints,
)
from seqprobe.errors import ConfigError, InputError
from tasks.registry import TASKS, task_class

# How a task with a length distribution is evaluated (models.train.evaluation.length_units); in
# the cache key of its runs: change the name when what such an evaluation scores changes.
LENGTH_EVAL = "every_length"

# Fields that format-1 records wrote at their defaults (see the module docstring). Frozen: a
# field added to one of these classes later is not listed, and never will be; a config class
# added later has no row (it pins nothing) and needs none.
FORMAT1_FIELDS: dict[str, tuple[str, ...]] = {
    "TrainConfig": ("steps", "batch_size", "lr", "weight_decay", "beta1", "beta2",
                    "warmup_steps", "schedule", "grad_clip", "context", "eval_every",
                    "eval_batches", "eval_batch_size", "greedy_eval", "save_every", "seed"),
    "CopyConfig": ("D", "min_len", "max_len"),
    "DupNgramConfig": ("D", "min_len", "max_len", "n", "distinct_successor"),
    "LookupConfig": ("D", "min_len", "max_len", "n", "k", "key"),
    "PhoneBookConfig": ("n_entries", "n_shots"),
    "InductionConfig": ("D", "length"),
    "MarkovConfig": ("S", "order", "beta", "seq_len"),
    "SwitchingMarkovConfig": ("S", "order", "beta", "seq_len", "p_switch"),
    "HoldoutMarkovConfig": ("S", "order", "beta", "seq_len", "p_lo", "p_hi"),
    "MemorizationConfig": ("data", "level", "n_examples", "fraction", "seq_len", "vocab",
                           "n_classes", "consistent", "data_path", "max_len", "seed"),
}


# The keys of a run record (:meth:`RunConfig.to_dict`): every one is required but ``train``
# (a construction's record has no training config: the default one), and no other is read.
RECORD_KEYS = ("model", "task", "train")
SECTION_KEYS = {"model": ("arch", "config"), "task": ("name", "config")}


def _mapping(data: Any, where: str) -> Mapping[str, Any]:
    """``data`` if it is a mapping with string keys, else one :class:`ConfigError` line."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a dict, got {type(data).__name__} "
                          f"{str(data)[:40]!r}")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"{where}: key {key!r} is not a string")
    return data


def check_keys(data: Any, allowed, where: str, required=()) -> Mapping[str, Any]:
    """``data`` as a mapping with only ``allowed`` keys and every ``required`` one, else one
    :class:`ConfigError` line naming the key, its near match and where it is."""
    for key in _mapping(data, where):
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r}{near(key, allowed)}; allowed: "
                              f"{', '.join(allowed)}")
    missing = [k for k in required if k not in data]
    if missing:
        raise ConfigError(f"{where}: missing key {missing[0]!r}; a run record is {{'model': "
                          "{'arch', 'config'}, 'task': {'name', 'config'}, 'train': {...}}")
    return data


def refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: an object that names a key twice is refused (JSON
    would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"duplicate key {key!r} in a JSON object (keys: "
                              f"{', '.join(k for k, _ in pairs)[:120]})")
        out[key] = value
    return out


def loads_json(text: str | bytes, what: str = "JSON") -> Any:
    """``json.loads`` that refuses duplicate keys and NaN / Infinity, one
    :class:`ConfigError` line for any text that is not such JSON."""
    def constant(name: str):
        raise ConfigError(f"{name} is not a JSON number")  # prefixed with ``what`` below, once

    try:
        return json.loads(text, object_pairs_hook=refuse_duplicates, parse_constant=constant)
    except ConfigError as e:
        raise ConfigError(f"{what}: {e}") from None
    except RecursionError:  # '[' * 100000: nested deeper than any record
        raise ConfigError(f"{what} is not JSON (nested too deep)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what} is not JSON ({str(e).splitlines()[0][:120]})") from None


def file_digest(path: str | Path) -> str:
    """sha256 of a regular file's bytes (first 16 hex digits), read up to the size it had when
    opened. Anything else is an :class:`OSError` before a byte is read: a FIFO would block the
    read (it is opened non-blocking, never waited on), ``/dev/zero`` would never end."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a checkpoint file")
        left = st.st_size
        while left > 0:
            block = os.read(fd, min(left, 1 << 20))
            if not block:
                break
            h.update(block)
            left -= len(block)
    finally:
        os.close(fd)
    return h.hexdigest()[:16]


def _content_digest(name: str, path: str, section: str = "train") -> str:
    """:func:`file_digest` of a field that names a file (its bytes are part of the run), or one
    :class:`InputError` line when the file cannot be read."""
    try:
        return file_digest(path)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise InputError(f"{section}.{name} {path}: cannot read it ({why}); the run's hash "
                         "covers the file's bytes") from None


def _name_of(config_cls: type, names, class_of, what: str, config: str) -> str:
    """The registry name (arch or task) whose class takes ``config_cls`` as its config."""
    for name in names:
        if class_of(name).config_cls is config_cls:
            return name
    raise InputError(f"{config_cls.__name__} is no {what}'s {config}; {what}s: "
                    f"{', '.join(sorted(names))}")


@functools.cache
def _arch_of(config_cls: type) -> str:
    return _name_of(config_cls, ARCHS, model_class, "arch", "model config")


@functools.cache
def _task_of(config_cls: type) -> str:
    return _name_of(config_cls, TASKS, task_class, "task", "config")


def _defaults(cfg) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cfg):
        if f.init and f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.init and f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _section(cfg, pinned: frozenset[str] | tuple[str, ...]) -> dict[str, Any]:
    """The canonical form of one config section: the one rule of the module docstring."""
    defaults = _defaults(cfg)
    hints = type_hints(type(cfg))
    # per-device fields (TrainConfig's "auto" ones) at "auto" or at their CPU value: left out
    cpu = {f.name: f.metadata["cpu"] for f in dataclasses.fields(cfg) if "cpu" in f.metadata}
    # a renamed field keeps the name it was hashed under (its metadata's "was"): no key moves
    hashed = {new: old for old, new in former_names(type(cfg)).items()}
    out = {}
    for name, value in config_to_dict(cfg).items():
        if name in cpu and (value == "auto" or value is cpu[name] or value == cpu[name]):
            continue
        key = hashed.get(name, name)
        if key in pinned or name not in defaults or value != defaults[name]:
            if hints.get(name) is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)  # lr=1 and lr=1.0 are one run
            out[key] = value
    return out


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a training run, typed: ``model`` (the arch's config dataclass),
    ``task`` (the task's config dataclass), ``train`` (:class:`TrainConfig`), and
    ``model_keys``, the model fields the run sets (pinned in the canonical form; a field that
    differs from its default is always among them)."""

    model: Any
    task: Any
    train: TrainConfig = field(default_factory=TrainConfig)
    model_keys: frozenset[str] = frozenset()

    def __post_init__(self):
        arch = _arch_of(type(self.model))  # raises for a non-config
        _task_of(type(self.task))
        check(isinstance(self.train, TrainConfig),
              f"RunConfig.train must be a TrainConfig, got {type(self.train).__name__}")
        names = {f.name for f in dataclasses.fields(self.model) if f.init}
        unknown = sorted(set(self.model_keys) - names)
        check(not unknown, f"model_keys {unknown} are not fields of the {arch} config")
        set_fields = set(_section(self.model, ()))  # non-defaults are always set
        object.__setattr__(self, "model_keys", frozenset(self.model_keys) | set_fields)
        # a run's numbers take the range their flags take: each config checks its fields'
        # bounds when it is built (seqprobe.flags.Config), however the run is given

    # ------------------------------------------------------------------ names
    @property
    def arch(self) -> str:
        return _arch_of(type(self.model))

    @property
    def task_name(self) -> str:
        return _task_of(type(self.task))

    @property
    def model_dict(self) -> dict[str, Any]:
        """The model fields the run sets, as plain data: the checkpoint's ``model.config``."""
        return _section(self.model, self.model_keys)

    @property
    def task_dict(self) -> dict[str, Any]:
        """The whole task config as plain data: the checkpoint's ``task.config``."""
        return config_to_dict(self.task)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, arch: str, task: str, model: Mapping[str, Any] | None = None,
              task_config: Mapping[str, Any] | None = None,
              train: Mapping[str, Any] | TrainConfig | None = None) -> RunConfig:
        """From names and plain dicts (unknown keys and wrong types refused). The model fields
        given are the ones the run sets (:attr:`model_keys`)."""
        check(isinstance(arch, str) and arch in ARCHS,
              f"unknown arch {arch!r}{near(arch, ARCHS)}; allowed: {', '.join(sorted(ARCHS))}")
        check(isinstance(task, str) and task in TASKS,
              f"unknown task {task!r}{near(task, TASKS)}; allowed: {', '.join(sorted(TASKS))}")
        # each section's keys and types are checked by config_from_dict (near match included)
        # None is "nothing set"; any other non-dict ("", 0, []) is refused, not read as {}
        model = dict(_mapping({} if model is None else model, "model config"))
        task_config = dict(_mapping({} if task_config is None else task_config, "task config"))
        tr = train if isinstance(train, TrainConfig) else config_from_dict(
            TrainConfig, dict(_mapping({} if train is None else train, "train")))
        return cls(config_from_dict(model_class(arch).config_cls, model),
                   config_from_dict(task_class(task).config_cls, dict(task_config or {})),
                   tr, frozenset(model))

    @classmethod
    def from_dict(cls, record: Mapping[str, Any] | None = None, /,
                  **sections: Any) -> RunConfig:
        """Inverse of :meth:`to_dict`: ``{"model": {"arch", "config"}, "task": {"name",
        "config"}, "train": {...}}`` (``train`` may be left out: the default training), its
        sections also given as keywords (``from_dict(record, train={...})``, which win).
        Exact: an unknown key at any level (``"trian"``, ``"confg"``), a missing one or a
        value of the wrong type is one :class:`ConfigError` line naming it and its near
        match, never a default run under the default's hash."""
        record = {**check_keys(record if record is not None else {}, RECORD_KEYS,
                               "run record"), **sections}
        check_keys(record, RECORD_KEYS, "run record")
        if "train" in record:  # its type first: from_dict(train="abc") is about train
            _mapping(record["train"], "run record's train")
        check_keys(record, RECORD_KEYS, "run record", required=("model", "task"))
        model = check_keys(record["model"], SECTION_KEYS["model"], "run record's model",
                           required=SECTION_KEYS["model"])
        task = check_keys(record["task"], SECTION_KEYS["task"], "run record's task",
                          required=SECTION_KEYS["task"])
        return cls.build(model["arch"], task["name"], model["config"], task["config"],
                         record.get("train", {}))

    @classmethod
    def from_json(cls, text: str | bytes) -> RunConfig:
        """:meth:`from_dict` of a JSON text (a ``--config FILE.json``, a child's stdin):
        duplicate keys and NaN refused (:func:`loads_json`)."""
        return cls.from_dict(loads_json(text, "run record"))

    @classmethod
    def from_checkpoint(cls, payload: Mapping[str, Any]) -> RunConfig:
        """The run a checkpoint dict records (``models.checkpoint.read_checkpoint``'s
        result), old formats included: its ``model`` / ``task`` entries and
        ``train["config"]``. A checkpoint of a construction (no ``train.config``) gets the
        default training config."""
        train = payload.get("train") if isinstance(payload, Mapping) else None
        config = train.get("config", {}) if isinstance(train, Mapping) else {}
        return cls.from_dict({"model": payload["model"], "task": payload["task"],
                              "train": config})

    @classmethod
    def of(cls, model) -> RunConfig:
        """The run a loaded suite model records: its arch, the model fields its run set (all
        of its config for a model built in code), its task and its training config (the
        default one for a model that was built, not trained). Equal to the recipe's, so
        ``RunConfig.of(m).hash()`` is the cache key of the run that made ``m``."""
        check(getattr(model, "task", None) is not None and hasattr(model, "provenance"),
              f"a {type(model).__name__} without a task (a HuggingFace model, or one built in "
              "code before set_task) records no run")
        stored = model.provenance.model_config
        train = model.train_config
        return cls.build(model.arch, model.task.name,
                         config_to_dict(model.config) if stored is None else stored,
                         config_to_dict(model.task.cfg), train if train is not None else {})

    def replace(self, *, model: Mapping[str, Any] | None = None,
                task: Mapping[str, Any] | None = None,
                train: Mapping[str, Any] | None = None) -> RunConfig:
        """A copy with fields of each section overridden (model fields given become set)."""
        return RunConfig(
            dataclasses.replace(self.model, **(model or {})),
            dataclasses.replace(self.task, **(task or {})),
            dataclasses.replace(self.train, **(train or {})),
            self.model_keys | set(model or {}))

    def resolved(self, device: torch.device) -> RunConfig:
        """This run as it trains on ``device`` (:func:`~models.train_config.resolve_train`:
        its "auto" precision, compile and device type set): what the cache keys and the
        checkpoint records."""
        return RunConfig(self.model, self.task, resolve_train(self.train, device),
                         self.model_keys)

    # ------------------------------------------------------------------ forms
    def to_dict(self) -> dict[str, Any]:
        """The record a checkpoint stores: the model as the fields the run sets, the task and
        training configs whole (readers take any of their fields without knowing defaults)."""
        return {"model": {"arch": self.arch, "config": self.model_dict},
                "task": {"name": self.task_name, "config": self.task_dict},
                "train": config_to_dict(self.train)}

    def canonical(self) -> dict[str, Any]:
        """The hashed form (module docstring): one rule for every field of every section."""
        train = _section(self.train, FORMAT1_FIELDS.get("TrainConfig", ()))
        for f in dataclasses.fields(self.train):
            if f.metadata.get("content") == "file" and train.get(f.name):
                train[f.name] = _content_digest(f.name, train[f.name])
            if f.metadata.get("hash") is False:  # memory settings: the same run either way
                train.pop(f.name, None)
        task = _section(self.task, FORMAT1_FIELDS.get(type(self.task).__name__, ()))
        files = getattr(self.task, "content_files", None)  # a task reading a user's data file
        for name, path in (files() if files else {}).items():
            task[name] = _content_digest(name, str(path), "task")
        out = {"arch": self.arch, "task": self.task_name,
               "model": self.model_dict,
               "task_config": task,
               "train": train}
        if hasattr(task_class(self.task_name), "eval_lengths"):  # module docstring
            out["eval"] = LENGTH_EVAL
        return out

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, tuples as lists."""
        return json.dumps(self.canonical(), sort_keys=True, default=list)

    def hash(self) -> str:
        """The cache key: sha256 of :meth:`to_json` (first 12 hex digits)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]


# a run made on demand: the dry run and the plan build each only when they measure or list it
Builder = Callable[[], RunConfig]
