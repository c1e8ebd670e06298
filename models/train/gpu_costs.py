"""What a training run costs on a GPU: a step time measured on a named card where one exists,
a FLOPs projection at an assumed utilisation otherwise, and which of the two it is.

The measured table (:data:`TABLE`, ``step_costs_cuda.json``) is keyed by the card's name as
``torch.cuda.get_device_name`` gives it: a GPU step time means nothing without its card, and
one file keeps every card's rows side by side under one loader and one format (the CPU table,
:mod:`models.train.costs`, keeps ratios to a reference step instead because a CPU's speed
changes with its load; a GPU's seconds are the card's own). Each row records what the time
depends on: the model config, batch, micro-batch, sequence length, precision, compile and
attention path, with the card, date, torch version and where the number was measured.
``python -m bench.gpu_check`` writes rows in this format (``bench/results_gpu_check.json``).

A run matches a row only when all of these agree (:meth:`CudaTable.lookup`); otherwise its
cost is a projection (:func:`projected_seconds`)::

    seconds per step = FLOPs per step / (UTILISATION x peak FLOP/s of the run's precision)

with the peak of the precision the run is configured for: an fp32 run's matmuls do not run on
the bf16 tensor cores, so projecting it at a share of the bf16 peak would be far too fast.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from models.registry import model_class
from models.train.runconfig import RunConfig
from seqprobe.atomic import read_table
from seqprobe.config import config_from_dict, config_to_dict
from seqprobe.device import cuda_present
from seqprobe.errors import InputError

TABLE = Path(__file__).with_name("step_costs_cuda.json")
FORMAT = 1  # of the table file: another format is read as an empty table, never misread

# The card the dry run's "H100-hours" are hours of (its rows are the ones looked up).
REFERENCE_CARD = "NVIDIA H100 80GB HBM3"
# Dense peaks of an H100 SXM (datasheet, no sparsity): bf16 on the tensor cores; fp32 on the
# CUDA cores, where torch runs fp32 matmuls unless TF32 is switched on (the suite never does).
PEAK_FLOPS = {"bf16": 989e12, "fp32": 67e12}
# An assumed model-FLOPs utilisation of a well-tuned dense training step, taken against the
# peak of the run's own precision. The suite's small models (bound by kernel launches, not
# FLOPs) and its recurrent scans reach less: for them a projection is a lower bound.
UTILISATION = 0.40
MEASURED, PROJECTION = "measured", "projection"  # where a row's GPU cost comes from

# What a GPU run costs beyond its training steps, assumed until a GPU run times them (a
# plan's timings then replace every estimate): a compiled run pays torch.compile's cold
# compile of its forward once; an evaluation batch is a forward without a backward, about a
# third of a training step.
COMPILE_S = 60.0
EVAL_SHARE = 1 / 3


def overhead_seconds(run_config: RunConfig, seconds_per_step: float, evals: int) -> float:
    """Seconds a GPU run spends beside its steps: its ``evals`` evaluations (:data:`EVAL_SHARE`
    of a step per batch, scaled by the evaluation batch) and, when it compiles,
    :data:`COMPILE_S`. The process start-up is the job's, not the run's: the plan that starts
    the process costs it."""
    cfg = run_config.train
    per_batch = EVAL_SHARE * seconds_per_step * cfg.eval_batch_size / max(cfg.batch_size, 1)
    _, comp = run_settings(run_config, "cuda")
    return evals * cfg.eval_batches * per_batch + (COMPILE_S if comp else 0.0)


def run_settings(run_config: RunConfig, device_type: str) -> tuple[str, bool]:
    """``(precision, compile)`` of ``run_config``'s training forward on a device of ``device_type``:
    an ``"auto"`` setting is bf16 and compiled on CUDA, fp32 and eager elsewhere; an explicit
    one is kept. :func:`models.train_config.resolve_train` for a card with bfloat16 (every card
    the table knows), answered without one: a GPU plan is estimated on a CPU machine too."""
    cuda = device_type == "cuda"
    precision = getattr(run_config.train, "precision", "fp32")
    if precision == "auto":
        precision = "bf16" if cuda else "fp32"
    comp = getattr(run_config.train, "compile", False)
    if comp == "auto":
        comp = cuda
    elif isinstance(comp, str):
        comp = comp.lower() in ("on", "true", "1", "yes")
    return precision, bool(comp)


def device_kind(name: str) -> str:
    """The kind (``cpu``, ``cuda``, ``mps``) a ``--device`` value names, without asking for the
    device: a plan for a GPU machine is estimated on a machine without one. ``auto`` is this
    machine's (cuda where available)."""
    if name == "auto":
        return "cuda" if cuda_present() else "cpu"
    try:
        return torch.device(name).type
    except RuntimeError:
        raise InputError(f"unknown device {name!r}; allowed: cpu, cuda, cuda:N, auto") from None


def micro_batch(run_config: RunConfig) -> int:
    """Rows per forward pass: the run's ``micro_batch`` when it splits the batch (gradient
    accumulation), else the whole batch."""
    mb = getattr(run_config.train, "micro_batch", 0) or 0
    return int(mb) if 0 < mb < run_config.train.batch_size else run_config.train.batch_size


def full_model(arch: str, model: dict[str, Any]) -> str:
    """The whole model config (defaults filled in) as canonical JSON: a row written before a
    field was added still matches a run that leaves the field at its default, and never one
    that changes it."""
    cfg = config_from_dict(model_class(arch).config_cls, dict(model))
    return json.dumps(config_to_dict(cfg), sort_keys=True, default=list)


def _model_of(row: dict[str, Any]) -> str | None:
    """:func:`full_model` of a row; None for a row whose config no longer builds (a field
    since removed or renamed): it then matches nothing."""
    try:
        return full_model(row["arch"], row["model"])
    except (InputError, KeyError, TypeError, ValueError):
        return None


def projected_seconds(flops_per_step: float, precision: str) -> float:
    """Seconds of one step at :data:`UTILISATION` of the peak of ``precision``."""
    return flops_per_step / (UTILISATION * PEAK_FLOPS[precision])


@dataclass(frozen=True)
class CudaTable:
    """``cards[name] = {"bf16_peak_flops": ..., "rows": [row, ...], ...}``; each row has
    ``arch``, ``model``, ``batch_size``, ``micro_batch``, ``seq_len``, ``precision``,
    ``compile``, ``attention``, ``seconds_per_step`` and its provenance (``date``, ``torch``,
    ``source``, ``how``)."""

    cards: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path = TABLE) -> CudaTable:
        """The table at ``path``; empty when missing, unreadable or of another format (an
        estimate is a convenience, never a reason to refuse a run)."""
        return cls(dict(read_table(path, FORMAT).get("cards", {})))

    def card(self, name: str | None = None) -> str | None:
        """The table's name for card ``name`` (default :data:`REFERENCE_CARD`): exact, else
        the one card whose name contains it or is contained in it; None when none is known."""
        name = name or REFERENCE_CARD
        if name in self.cards:
            return name
        near = [c for c in self.cards if name in c or c in name]
        return near[0] if len(near) == 1 else None

    def lookup(self, run_config: RunConfig, seq_len: int, card: str | None = None,
               device_type: str = "cuda") -> dict[str, Any] | None:
        """The first row of ``card`` measured with ``run_config``'s model, batch, micro-batch,
        sequence length, precision and compile (as they resolve on ``device_type``); None when
        the table has none."""
        name = self.card(card)
        if name is None:
            return None
        precision, comp = run_settings(run_config, device_type)
        want = full_model(run_config.arch, run_config.model_dict)
        for row in self.cards[name].get("rows", []):
            if (row.get("arch") == run_config.arch and row.get("seq_len") == seq_len
                    and row.get("batch_size") == run_config.train.batch_size
                    and row.get("micro_batch", row.get("batch_size")) == micro_batch(run_config)
                    and row.get("precision") == precision
                    and bool(row.get("compile")) == comp
                    and "seconds_per_step" in row and _model_of(row) == want):
                return {**row, "card": name}
        return None

    def launch_floor(self, arch: str, card: str | None = None) -> float:
        """The least seconds a training step of ``arch`` took on ``card`` in the table (of any
        architecture where it has no row of this one; 0 without rows): a small model's step
        is bound by kernel launches, not FLOPs, so no projection of one is taken below it."""
        rows = [r for r in self.rows(card) if "seconds_per_step" in r]
        own = [r for r in rows if r.get("arch") == arch] or rows
        return min((float(r["seconds_per_step"]) for r in own), default=0.0)

    def rows(self, card: str | None = None) -> list[dict[str, Any]]:
        name = self.card(card)
        return list(self.cards[name].get("rows", [])) if name else []


def measured_or_projected(run_config: RunConfig, seq_len: int, flops_per_step: float,
                          table: CudaTable | None = None,
                          card: str | None = None) -> dict[str, Any]:
    """One step of ``run_config`` on ``card`` (default :data:`REFERENCE_CARD`): ``seconds_per_step``
    and ``source`` (:data:`MEASURED`, with the table's ``row``, or :data:`PROJECTION`), and the
    ``precision`` and ``compile`` it runs with on CUDA."""
    table = cuda_table() if table is None else table
    precision, comp = run_settings(run_config, "cuda")
    row = table.lookup(run_config, seq_len, card)
    if row is not None:
        return {"seconds_per_step": float(row["seconds_per_step"]), "source": MEASURED,
                "row": row, "precision": precision, "compile": comp}
    floor = table.launch_floor(run_config.arch, card)
    return {"seconds_per_step": max(projected_seconds(flops_per_step, precision), floor),
            "source": PROJECTION, "precision": precision, "compile": comp, "floor_s": floor}


@functools.lru_cache(maxsize=4)
def cuda_table(path: Path = TABLE) -> CudaTable:
    """The shipped table, read once per process."""
    return CudaTable.load(path)
