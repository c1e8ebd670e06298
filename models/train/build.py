"""Building and checking runs: :func:`make_run_config` and :func:`validate_run_config`.

A run is described by :class:`~models.train.runconfig.RunConfig` (typed sections, canonical
form, the cache hash); every function here takes or returns one.

:func:`make_run_config` merges a level's rows (from the :class:`~models.levels.LevelTable`
it is given: a paper's, from its zoo module; by default only the generic rows), the task's
derived model fields (vocabulary size, classification head …) and the caller's overrides, then
:func:`validate_run_config` checks every config and their fit before any compute.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from models.checkpoint.io import read_checkpoint
from models.checkpoint.paths import check_path
from models.checkpoint.rebuild import model_footprint
from models.checkpoint.untrusted import check_task_bounds
from models.levels import GENERIC, LevelTable
from models.registry import ARCHS, model_class
from models.train.runconfig import RunConfig
from models.train_config import TrainConfig
from seqprobe.config import check, config_from_dict, config_to_dict
from seqprobe.device import check_fits
from seqprobe.errors import InputError
from seqprobe.memory import human_bytes
from tasks.registry import TASKS, check_packable, make_task


def check_names(arch: str, task: str) -> None:
    if arch not in ARCHS:
        raise InputError(f"unknown arch {arch!r}; allowed: {', '.join(sorted(ARCHS))}")
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; allowed: {', '.join(sorted(TASKS))}")


def make_run_config(arch: str, task: str, level: str = "quick", model: dict | None = None,
                    task_config: dict | None = None, train: dict | None = None,
                    table: LevelTable = GENERIC) -> RunConfig:
    """The run of ``arch`` on ``task`` at ``level``: the rows of ``table`` (the level's
    settings for this task and arch; :data:`~models.levels.GENERIC` unless a caller
    gives a paper's), then the task's derived model fields (vocab size…), then user overrides.
    With ``init_from``, the model config starts from that checkpoint's instead of the rows'
    (fine-tuning a checkpoint needs no model flags)."""
    check_names(arch, task)
    rows = table.rows(level, task, arch)
    task_cfg = {**rows["task"], **(task_config or {})}
    task_obj = make_task(task, task_cfg)  # validates the task config
    train_cfg = config_from_dict(TrainConfig, {**rows["train"], **(train or {})})
    base = rows["model"]
    if train_cfg.init_from:
        init = _init_model_entry(train_cfg.init_from)
        base = init["config"] if init["arch"] == arch else base
    model_cfg = {**base, **model_fields_for(task_obj, arch), **(model or {})}
    run = RunConfig.build(arch, task, model_cfg, config_to_dict(task_obj.cfg), train_cfg)
    validate_run_config(run)  # every config checked before any compute
    return run


def run_config_of_checkpoint(ck: dict, model: dict | None = None, task_config: dict | None = None,
                       train: dict | None = None) -> RunConfig:
    """The run a checkpoint was trained with (``--resume``), with overrides on top."""
    run_config = RunConfig.build(ck["model"]["arch"], ck["task"]["name"],
                                 {**ck["model"]["config"], **(model or {})},
                                 {**ck["task"]["config"], **(task_config or {})},
                                 {**ck["train"].get("config", {}), **(train or {})})
    validate_run_config(run_config)
    return run_config


def validate_run_config(run_config: RunConfig) -> None:
    """Raise :class:`InputError` unless the run can start: its configs and their fit (the
    names and the types of the sections :class:`RunConfig` checked already).

    Cheap (no training step; the model is sized on the meta device, so a config too large for
    this machine is one line, not an allocator failure); called by :func:`make_run_config`, by
    ``--resume`` and by the loop.
    """
    check_task_bounds(run_config.task_name, run_config.task_dict)
    task = make_task(run_config.task_name, run_config.task_dict)
    check_run_size(run_config, task)
    vocab = getattr(run_config.model, "vocab_size", None)
    if vocab is not None and hasattr(task, "vocab") and getattr(run_config.model, "head",
                                                                "lm") == "lm":
        check(vocab >= task.vocab.size,
              f"vocab_size {vocab} is smaller than the {run_config.task_name} task's vocabulary "
              f"({task.vocab.size} tokens)")
    if run_config.train.init_from:
        _check_init(run_config)
    if run_config.train.context:
        check_packable(task, run_config.train.context)


BYTES_PER_PARAM = 16  # fp32 weights, gradients and AdamW's two moments


def run_size(run_config: RunConfig, task) -> tuple[int, int, str]:
    """``(parameters, bytes, what)``: a lower bound on the memory this run needs (weights,
    gradients, optimizer state, rebuilt buffers, one batch's tokens and logits, and one
    micro-batch's residual stream at every block boundary), from the
    configs alone (meta-device builds: nothing is allocated)."""
    n_params, param_bytes, buffer_bytes = model_footprint(run_config.arch, run_config.model_dict)
    cfg = run_config.train
    length = cfg.context or task.max_example_len()
    rows = max(cfg.batch_size, cfg.eval_batch_size)
    vocab = int(getattr(run_config.model, "vocab_size", 0) or 0)
    # int64 tokens and targets; fp32 logits, their log-softmax and its gradient
    batch_bytes = rows * length * (16 + 12 * vocab)
    # the residual stream at every block boundary of one micro-batch, which the backward needs
    # however the blocks are checkpointed: fp32 (autocast keeps the residual stream in fp32)
    width = int(getattr(run_config.model, "d_model", 0) or 0)
    layers = int(getattr(run_config.model, "n_layers", 0) or 0)
    stream_bytes = (cfg.micro_batch or cfg.batch_size) * length * width * (layers + 1) * 4
    micro = cfg.micro_batch or cfg.batch_size
    state_bytes = ssd_state_bytes(run_config.model, micro, length) * layers
    need = (param_bytes * BYTES_PER_PARAM // 4 + buffer_bytes + batch_bytes + stream_bytes
            + state_bytes)
    what = (f"training {run_config.arch} with {n_params:,} parameters (weights, gradients and "
            f"AdamW state) on batches of {rows} x {length:,} tokens"
            + (f", {human_bytes(state_bytes)} of SSM states" if state_bytes else ""))
    return n_params, need, what


def ssd_state_bytes(model, rows: int, length: int) -> int:
    """One layer's least hold of a Mamba-2 (SSD) micro-batch, which the backward keeps: the
    chunked scan's state of every head entering and leaving each chunk ([d_head x d_state]
    per head, d_inner x d_state floats a chunk) and B and C at every position (n_groups x
    d_state each); 0 for a model without SSD heads. A large ``d_state`` makes this the
    run's largest term while adding few parameters."""
    d_state, chunk = getattr(model, "d_state", None), getattr(model, "chunk_size", None)
    groups, d_inner = getattr(model, "n_groups", None), getattr(model, "d_inner", None)
    if not (d_state and chunk and groups and d_inner):
        return 0
    chunks = -(-length // chunk) + 1  # the initial state's too
    return int(rows * 4 * (2 * chunks * d_inner * d_state + 2 * length * groups * d_state))


def check_run_size(run_config: RunConfig, task, device="cpu") -> int:
    """Raise :class:`InputError` (one line) when :func:`run_size` exceeds ``device``'s memory;
    returns the parameter count."""
    n_params, need, what = run_size(run_config, task)
    check_fits(need, what, device)
    return n_params


def _init_model_entry(path: str) -> dict:
    """The ``model`` entry (arch, config) of an ``init_from`` checkpoint, read once per version
    of the file (a paper-scale checkpoint is hundreds of MB), not once per question."""
    p = check_path(path)
    if not p.is_file():
        return read_checkpoint(p)["model"]  # raises the clear error
    st = p.stat()
    return _model_entry(str(p.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _model_entry(path: str, mtime_ns: int, size: int) -> dict:
    # mtime and size only key the cache: a rewritten file is read again
    return read_checkpoint(path)["model"]


def _check_init(run_config: RunConfig) -> None:
    """The ``init_from`` checkpoint must hold this run's arch and model config."""
    path = run_config.train.init_from
    entry = _init_model_entry(path)
    arch = entry["arch"]
    check(arch == run_config.arch, f"init_from {path} holds a {arch} model, not {run_config.arch}")
    cls = model_class(arch).config_cls  # full configs: a default left out is not a difference
    config = config_to_dict(config_from_dict(cls, entry["config"]))
    ours = config_to_dict(run_config.model)
    differ = sorted(k for k in set(config) | set(ours) if config.get(k) != ours.get(k))
    check(not differ, f"init_from {path}: its model config differs from this run's in "
          + ", ".join(f"{k} ({config.get(k)!r} vs {ours.get(k)!r})" for k in differ[:4]))


def model_fields_for(task, arch: str) -> dict[str, Any]:
    """Model config fields the task decides (vocabulary size, classification head…)."""
    fields = {f.name for f in dataclasses.fields(model_class(arch).config_cls)}
    wanted = (task.model_fields() if hasattr(task, "model_fields")
              else {"vocab_size": task.vocab.size})
    return {k: v for k, v in wanted.items() if k in fields}
