"""Dry run of training runs at their real size: does each one start, and what would it cost?

Each model is built at its real size and takes :data:`DRY_STEPS` optimizer steps at its real
sequence length through the one training loop (:func:`models.train.loop.train`, stopped by a
callback, with no output file: nothing is written to the checkpoint cache), on batches of one
row on the CPU and of the real batch on a GPU. Each run is a fresh process, so its peak memory
is its own (on the CPU the RSS it added, the task's data included; on a GPU
``torch.cuda.max_memory_allocated``) and a crash or an out-of-memory kill is one row of the
table, not the end of the dry run. A model that cannot run (an invalid config, one too large
for this machine by the meta-device size check of :func:`~models.train.build.check_run_size`,
an error in the first steps) is listed with its one-line reason; :func:`report` returns 1
after listing every model when any could not run. A run whose memory at its real batch
(measured on a GPU, extrapolated from batch 1 on a CPU: :func:`at_batch`) exceeds one H100's
is flagged in the table's note; it is not a failure (mamba-ssm's kernels, where installed,
need far less than the suite's own scans).

The cost of the full run on one H100 (its "H100-hours") never comes from the time of a step
here (a CPU step says nothing about a GPU's). It is *measured* where the CUDA step-cost table
(:mod:`models.train.gpu_costs`) has the run's row on an H100 (same model, batch, micro-batch,
length, precision and compile): steps x the measured seconds per step. Otherwise it is a
*projection* from the run's FLOPs, and each row of the table says which::

    FLOPs per token  = 6 N  (+ 12 n_layers d_model L  for transformers)
    GPU-hours        = steps x tokens per step x FLOPs per token / (UTILISATION x peak)

N is every trainable parameter: a forward pass costs one multiply-add (2 FLOPs) per parameter
and token, the backward pass twice that. The attention term is QK^T and the weighted sum over
the L positions of a row (2 x 2 L d_model per layer and token in the forward, x 3 with the
backward), counted over all L positions as dense kernels compute them. Recurrent and SSM
scans, the STU's convolutions and the embedding lookup (counted in N as a matmul) are left at
that: at these sizes they are small beside 6 N. Tokens per step are those of one real batch
as the loop draws it, padding included (the model computes on it). The peak is that of the
precision the run is configured for on a GPU (:data:`~models.train.gpu_costs.PEAK_FLOPS`:
bf16 tensor cores for a bf16 run, the fp32 units for an fp32 one; ``"auto"`` is bf16 on CUDA).

    python -m analyses.reproduce --level paper --dry-run [--device cuda] [--out DIR]
    python -m analyses.NAME --train --level paper --dry-run
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from analyses import zoo
from analyses.zoo.dryrun.measuring import CHILD_TIMEOUT, DRY_STEPS, _one_line, run_isolated
from models.train import gpu_costs
from models.train.build import BYTES_PER_PARAM
from models.train.gpu_costs import MEASURED, PEAK_FLOPS, PROJECTION
from models.train.plan import (
    H100_MEMORY,
    plan_row,
)
from models.train.runconfig import Builder, RunConfig
from seqprobe.atomic import write_atomic
from seqprobe.device import resolve_device
from seqprobe.errors import InputError
from seqprobe.memory import human_bytes

H100_PEAK = PEAK_FLOPS["bf16"]  # FLOP/s: the H100's dense bf16 peak (gpu_costs says why)
UTILISATION = gpu_costs.UTILISATION  # of the run's precision's peak (an assumption: gpu_costs)
EXIT_SOME_FAILED = 1

# ---------------------------------------------------------------------------- RunConfigs
def recipe_run_config(name: str, level: str) -> RunConfig:
    """The run of zoo recipe ``name`` at ``level`` without its ``init_from`` (the
    starting weights change no cost, and the recipe it starts from need not be trained): a
    fine-tuned recipe's model is its parent's run's (:meth:`~analyses.zoo.recipe.Recipe.
    run_config`)."""
    r = zoo.recipe(name)
    parent = recipe_run_config(r.init_from[level], level) if level in r.init_from else None
    return r.run_config(level, init_from=parent)


def recipe_builders(names: Sequence[str], level: str) -> list[tuple[str, Builder]]:
    return [(n, lambda n=n: recipe_run_config(n, level)) for n in names]


def dry_batch_size(run_config: RunConfig, device: torch.device) -> int:
    """One row on the CPU (the real batch is a GPU's job), the real batch elsewhere."""
    return 1 if device.type == "cpu" else run_config.train.batch_size


def dry_run_config(run_config: RunConfig, device: torch.device) -> RunConfig:
    """``run_config`` as the dry run trains it: the dry batch, no evaluation, no checkpoint, no
    init file; steps, schedule and block checkpointing as they are (at least
    :data:`DRY_STEPS`); the whole batch in one pass (on a GPU :func:`measure` then looks for
    the largest micro-batch that fits)."""
    b = dry_batch_size(run_config, device)
    return run_config.replace(train=dict(
        batch_size=b, eval_every=0, stop_at=0.0, save_every=0, init_from="", micro_batch=0,
        steps=max(run_config.train.steps, DRY_STEPS),
        eval_batch_size=b if device.type == "cpu" else run_config.train.eval_batch_size))


def _key(run_config: RunConfig, length: int) -> str:
    """What a step's cost depends on: the model, the batch's shape and how the forward runs.
    Runs that share it (seeds of one recipe, one model on two tasks of one length) are
    measured once."""
    cfg = run_config.train
    return json.dumps([run_config.arch, run_config.model_dict, cfg.batch_size, length,
                       cfg.precision,
                       cfg.compile], sort_keys=True, default=list)


# ---------------------------------------------------------------------------- the dry run
def at_batch(row: dict[str, Any]) -> int:
    """The peak memory of ``row``'s run at its real batch: measured when it ran at it, else
    extrapolated (weights, gradients and AdamW state as they are; the rest, activations,
    grows with the batch). Rough: what it is for is a run far beyond a GPU's memory."""
    static = BYTES_PER_PARAM * row["params"]
    peak = row["peak_memory_bytes"]
    return int(static + max(peak - static, 0) * row["batch_size"] / row["dry_batch_size"])


def dry_run(items: Sequence[tuple[str, Builder]], device: str | torch.device = "cpu",
            timeout: float = CHILD_TIMEOUT, log=None) -> list[dict[str, Any]]:
    """One row per ``(name, RunConfig builder)``: :func:`plan_row`'s numbers and the measured ones
    (``seconds_per_step``, ``peak_memory_bytes``…), or ``error`` (one line) for a run that
    cannot start or fails. Runs that differ in their seed only are measured once
    (``measured_as`` names the row measured). ``log(text)`` gets a line per model."""
    dev = resolve_device(device)
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    measured: dict[str, tuple[str, dict]] = {}
    rows = []
    for i, (name, build) in enumerate(items, 1):
        try:
            run_config = build()
            row = plan_row(name, run_config)
        except InputError as e:
            row = {"name": name, "error": str(e).splitlines()[0]}
        except Exception as e:  # noqa: BLE001 - a broken config is a row, never a traceback
            row = {"name": name, "error": _one_line(e)}
        if "error" not in row:
            dry = dry_run_config(run_config, dev)
            key = _key(dry, row["seq_len"])
            if key in measured:
                first, result = measured[key]
                row["measured_as"] = first
            else:
                result = run_isolated(dry, dev, timeout)
                measured[key] = (name, result)
            row["dry_batch_size"] = dry.train.batch_size
            row.update(result)
            if "peak_memory_bytes" in row:
                row["memory_at_batch"] = at_batch(row)
            if "seconds_per_step" in row and dry.train.batch_size == run_config.train.batch_size:
                row["hours_at_measured_rate"] = row["seconds_per_step"] * row["steps"] / 3600
        rows.append(row)
        log(f"dry run {i}/{len(items)} {name}: " + (
            f"FAILED: {row['error']}" if "error" in row else
            f"{row['seconds_per_step']:.3g} s/step" + (
                f" (as {row['measured_as']})" if "measured_as" in row else "")))
    return rows


def _fmt_count(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def hours_from(row: dict[str, Any]) -> str:
    """Where a row's H100-hours come from, in a few words: ``measured`` (the CUDA table's step
    time) or ``projection`` and the precision it was projected at."""
    if row.get("gpu_hours_source") == MEASURED:
        return f"{MEASURED} {row['gpu_seconds_per_step']:.3g} s/step"
    return f"{PROJECTION} ({row.get('gpu_precision', 'bf16')})"


def memory_note(row: dict[str, Any]) -> str:
    """The memory settings a measured row used, where any is not the plain one: a
    micro-batch smaller than the batch it ran, checkpointed blocks, a chunked scan."""
    parts = []
    if row.get("micro_batch", row.get("dry_batch_size")) != row.get("dry_batch_size"):
        parts.append(f"micro-batch {row['micro_batch']}")
    if row.get("checkpoint_blocks"):
        parts.append("checkpointed blocks")
    if "chunked" in row.get("scan_paths", ()):
        parts.append("chunked scan")
    return ", ".join(parts)


def table(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The printed table: a header and a row per model."""
    gpu = any("hours_at_measured_rate" in r for r in rows)
    head = ["model", "params", "tokens/step", "peak mem", "s/step here",
            "H100-hours", "hours from", *(["h at this rate"] if gpu else []), "note"]
    out = [head]
    for r in rows:
        if "params" not in r:  # the config itself failed
            out.append([r["name"], *["-"] * (len(head) - 2), r["error"]])
            continue
        notes = [r.get("error", ""), f"as {r['measured_as']}" if "measured_as" in r else ""]
        if not r["fits_one_h100"]:
            notes.append(f"needs {human_bytes(r['need_bytes'])} at batch {r['batch_size']} "
                         "(weights, gradients, AdamW): more than one H100")
        elif r.get("memory_at_batch", 0) > H100_MEMORY:
            notes.append(f"~{human_bytes(r['memory_at_batch'])} at batch {r['batch_size']}"
                         + (" (extrapolated)" if r["dry_batch_size"] != r["batch_size"] else "")
                         + ": more than one H100")
        notes.append(memory_note(r))
        note = "; ".join(n for n in notes if n)
        out.append([
            r["name"], _fmt_count(r["params"]),
            f"{_fmt_count(r['tokens_per_step'])} ({r['batch_size']}x{r['seq_len']})",
            human_bytes(r["peak_memory_bytes"]) if "peak_memory_bytes" in r else "-",
            f"{r['seconds_per_step']:.3g}" if "seconds_per_step" in r else "-",
            f"{r['gpu_hours_h100']:.3g}", hours_from(r),
            *([f"{r['hours_at_measured_rate']:.3g}" if "hours_at_measured_rate" in r else "-"]
              if gpu else []),
            note])
    return out


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    cells = table(rows)
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True))
                     + "  " + r[-1] for r in cells).rstrip()


def summary(rows: Sequence[dict[str, Any]], device: str | torch.device,
            wall_s: float) -> dict[str, Any]:
    """The JSON document of a dry run."""
    failed = [r["name"] for r in rows if "error" in r]
    return {"device": str(resolve_device(device)), "dry_steps": DRY_STEPS,
            "h100_peak_flops": H100_PEAK, "peak_flops": PEAK_FLOPS, "utilisation": UTILISATION,
            "flops_per_token": "6 N (+ 12 n_layers d_model L for transformers)",
            "gpu_hours": "measured: steps x the CUDA step-cost table's s/step on "
                         f"{gpu_costs.REFERENCE_CARD}; projection: FLOPs at {UTILISATION:.0%} "
                         "of the peak of the run's precision on a GPU",
            "gpu_hours_measured": sum(r.get("gpu_hours_source") == MEASURED for r in rows),
            "gpu_hours_projected": sum(r.get("gpu_hours_source") == PROJECTION for r in rows),
            "total_gpu_hours_h100": sum(r.get("gpu_hours_h100", 0.0) for r in rows),
            "wall_s": round(wall_s, 1), "failed": failed, "rows": rows}


def report(items: Sequence[tuple[str, Builder]], device: str | torch.device = "cpu",
           out: str | Path | None = None, name: str = "dry_run") -> int:
    """Dry-run ``items``, print the table (and the total), write ``out/NAME.json``; 0 when
    every model ran, :data:`EXIT_SOME_FAILED` otherwise."""
    t0 = time.time()
    rows = dry_run(items, device)
    doc = summary(rows, device, time.time() - t0)
    print(format_table(rows))
    dev = resolve_device(device)
    print(f"\n{len(rows)} models, {len(doc['failed'])} cannot run; {doc['dry_steps']} steps "
          f"each at batch {'1' if dev.type == 'cpu' else 'of the recipe'} on {dev}; "
          f"H100-hours of the full runs (total {doc['total_gpu_hours_h100']:.3g}): "
          f"{doc['gpu_hours_measured']} measured (the CUDA step-cost table's "
          f"{gpu_costs.REFERENCE_CARD} rows), {doc['gpu_hours_projected']} projected at "
          f"{UTILISATION:.0%} of the peak of the run's precision (bf16 "
          f"{PEAK_FLOPS['bf16'] / 1e12:.0f}, fp32 {PEAK_FLOPS['fp32'] / 1e12:.0f} TFLOP/s); "
          f"{doc['wall_s']:.0f} s wall")
    if out is not None:
        path = write_atomic(Path(out) / f"{name}.json", json.dumps(doc, indent=1))
        print(f"wrote {path}")
    if doc["failed"]:
        print(f"cannot run: {', '.join(doc['failed'])}", file=sys.stderr)
        return EXIT_SOME_FAILED
    return 0
