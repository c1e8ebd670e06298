"""What the configs alone say about a training run, before anything runs: its size, one real
batch's tokens, its FLOPs and its cost on one H100 (measured or projected; see
:mod:`analyses.zoo.dryrun` for the formulas). Apart from the dry run so that the step-cost
table (:mod:`models.train.costs`) can estimate a run without importing the zoo."""

from __future__ import annotations

from typing import Any

from models.checkpoint.rebuild import model_footprint
from models.registry import model_class
from models.train import gpu_costs
from models.train.build import run_size
from models.train.evaluation import batches
from models.train.gpu_costs import MEASURED
from models.train.runconfig import RunConfig
from tasks.base import make_generator
from tasks.registry import make_task

H100_MEMORY = 80 * 2**30  # bytes: a run that needs more does not fit one H100


def flops_per_token(run_config: RunConfig, n_params: int, length: int) -> float:
    """Training FLOPs per token, as the model class declares them
    (:meth:`models.contract.ModelContract.flops_per_token`)."""
    return model_class(run_config.arch).flops_per_token(run_config.model, n_params, length)


def gpu_hours(flops: float, precision: str = "bf16") -> float:
    """Hours of one H100 for ``flops`` at :data:`UTILISATION` of its peak in ``precision``."""
    return gpu_costs.projected_seconds(flops, precision) / 3600.0


def gpu_cost(run_config: RunConfig, length: int, total_flops: float,
             table: gpu_costs.CudaTable | None = None) -> dict[str, Any]:
    """The full run's H100-hours and where they come from: ``"measured"`` (steps x the step
    time of the CUDA table's row of this run on an H100) or ``"projection"`` (its FLOPs at
    :data:`UTILISATION` of the peak of the precision it runs in on a GPU)."""
    c = gpu_costs.measured_or_projected(run_config, length, total_flops / run_config.train.steps,
                                        table)
    out = {"gpu_hours_h100": c["seconds_per_step"] * run_config.train.steps / 3600.0,
           "gpu_hours_source": c["source"], "gpu_precision": c["precision"],
           "gpu_compile": c["compile"]}
    if c["source"] == MEASURED:
        out.update(gpu_seconds_per_step=c["seconds_per_step"],
                   gpu_measured=f"{c['row']['card']}, {c['row'].get('date', '?')}")
    return out


def plan_row(name: str, run_config: RunConfig) -> dict[str, Any]:
    """What the configs alone say about a run: size, one real batch's tokens, the FLOPs of
    the full run and its H100 hours (:func:`gpu_cost`: measured or projected), the memory it
    needs at its real batch."""
    task = make_task(run_config.task_name, run_config.task_dict)
    n_params = model_footprint(run_config.arch, run_config.model_dict)[0]
    batch = next(batches(task, run_config.train, make_generator(run_config.train.seed), "cpu"))
    tokens, length = batch.tokens.numel(), batch.tokens.shape[1]
    fpt = flops_per_token(run_config, n_params, length)
    need = run_size(run_config, task)[1]
    total = fpt * tokens * run_config.train.steps
    return {"name": name, "arch": run_config.arch, "task": run_config.task_name, "params": n_params,
            "steps": run_config.train.steps, "batch_size": run_config.train.batch_size,
            "seq_len": length,
            "tokens_per_step": tokens, "flops_per_token": fpt, "total_flops": total,
            **gpu_cost(run_config, length, total), "need_bytes": need,
            "fits_one_h100": need <= H100_MEMORY}
