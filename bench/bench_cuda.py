"""GPU-only benchmarks: ``python -m bench.bench_cuda`` -> ``bench/results_cuda.json``.

* Mamba-2 and Mamba training step: the mamba-ssm kernel path vs our plain and chunked / scan
  paths (same model, same batch), when mamba-ssm is installed;
* every paper copy model (copy paper App. A.2: the transformer with each positional encoding,
  12 layers, width 1024, 16 heads; Mamba, 24 layers, width 1024, state 32; a Mamba-2 of
  Mamba's size; LSTM, 4 layers, 1024) at batch 64 x 420, each in a fresh process through the
  training loop's own step (:func:`train_step_cost`) with the defaults a CUDA run gets (the
  run's ``"auto"`` precision and compile): s/step, tokens/s, MFU against the card's bf16
  peak, peak memory. ``python -m bench.gpu_check`` runs the same with the GPU tests and the
  dry run.

On a machine without CUDA it writes ``{"skipped": ...}`` and exits 0, so ``python -m bench``
stays green on CPU; the numbers only mean something on a GPU.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from analyses import zoo
from analyses.zoo.dryrun import recipe_run_config
from bench.bench_ssm import BATCH, LONG, M1, M2, VOCAB, ssm_step_fn
from bench.common import in_fresh_process, interleaved_times, write_results
from models.registry import build_model
from models.train import gpu_costs
from models.train.callbacks import Callback, Run
from models.train.loop import train
from models.train.plan import plan_row
from models.train.runconfig import RunConfig
from seqprobe import flags
from seqprobe.sweep import ProcessFailed

# The paper copy models by the name the bench reports them under: the zoo's paper recipes (the
# Mamba-2 one is sized as the paper Mamba: analyses.zoo.copy says why).
COPY_RECIPES = {"transformer_nope": "copy/nope", "transformer_alibi": "copy/alibi",
                "transformer_hard_alibi": "copy/hard_alibi", "transformer_rope": "copy/rope",
                "mamba": "copy/mamba", "mamba2": "copy/mamba2", "lstm": "copy/lstm"}
WARM_STEPS = 3  # untimed: allocations, autotuning and torch.compile's first graphs
TIMED_STEPS = 5


def _kernels_available() -> dict[str, bool]:
    from models.ssm.ssd import mamba_ssm_chunk_scan

    try:  # Mamba-1's selective scan kernel
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn  # noqa: F401

        m1 = True
    except Exception:  # noqa: BLE001 - any import failure means "no kernel"
        m1 = False
    return {"mamba2": mamba_ssm_chunk_scan() is not None, "mamba": m1}


def _time_paths(make_model, x, scans: tuple[str, ...], kernel: bool, repeats: int) -> dict:
    """Median training-step time of each scan path (plus ``kernel`` when available) and the
    ratio of every other path to the kernel's."""
    paths = scans + (("kernel",) if kernel else ())
    t = interleaved_times({s: ssm_step_fn(make_model().to(x.device), x, scan=s) for s in paths},
                          repeats=repeats)
    out: dict = {"train_step_s": t}
    if kernel:
        out.update({f"ratio_{s}_over_kernel": t[s] / t["kernel"] for s in scans})
    return out


def ssm_paths(repeats: int) -> dict:
    from models.ssm.mamba import MambaConfig, MambaLM
    from models.ssm.mamba2 import Mamba2LM
    from models.ssm.ssd import Mamba2Config

    x = torch.randint(0, VOCAB, (BATCH, LONG), device="cuda")
    have = _kernels_available()
    return {"kernels_available": have, "batch": BATCH, "seq": LONG,
            "mamba2": _time_paths(lambda: Mamba2LM(Mamba2Config(**M2)), x, ("chunked", "plain"),
                                  have["mamba2"], repeats),
            "mamba": _time_paths(lambda: MambaLM(MambaConfig(**M1)), x,
                                 ("scan", "chunked", "plain"),
                                 have["mamba"], repeats)}


def paper_transformer(repeats: int) -> dict:
    # the zoo's paper copy model: Fig. 1b's strings <= 50 packed into contexts of 420 tokens
    run_config = zoo.run_config("copy/hard_alibi", "paper")
    model = build_model("transformer", run_config.model).cuda()
    batch, context = run_config.train.batch_size, run_config.train.context
    x = torch.randint(0, model.cfg.vocab_size, (batch, context), device="cuda")
    t = interleaved_times({"train_step": ssm_step_fn(model, x)}, repeats=repeats)
    return {"model": run_config.model_dict, "params": model.n_params(), "batch": batch,
            "context": context, "train_step_s": t["train_step"],
            "tokens_per_s": batch * context / t["train_step"]}


def paper_copy_run_configs() -> dict[str, RunConfig]:
    """The paper copy models' runs at the paper level, as their recipes configure them."""
    return {name: recipe_run_config(recipe, "paper") for name, recipe in COPY_RECIPES.items()}


class _Timer(Callback):
    """The end of every step (CUDA synchronised: the step's kernels, not their launch); stops
    the run after ``steps``."""

    def __init__(self, steps: int, device: torch.device):
        self.steps, self.device, self.ends = steps, device, []

    def on_step(self, run: Run) -> bool:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.ends.append(time.perf_counter())
        return run.step >= self.steps


def train_step_cost(run_config_dict: dict[str, Any], device: str, warm: int = WARM_STEPS,
                    timed: int = TIMED_STEPS, bf16_peak: float = gpu_costs.PEAK_FLOPS["bf16"]
                    ) -> dict[str, Any]:
    """``warm`` + ``timed`` optimizer steps of a run through the training loop (what a user's
    run executes: data, autocast, compile, clipping, AdamW) on ``device``: seconds per timed
    step, tokens/s, MFU (model FLOPs, :func:`~analyses.zoo.dryrun.flops_per_token`, over the
    card's bf16 peak) and peak memory (CUDA: max allocated). Module-level: run it in a fresh
    process (:func:`~bench.common.in_fresh_process`) so each model's peak is its own. A failure
    (out of memory…) is ``{"error": one line}``."""
    run_config = RunConfig.from_dict(run_config_dict)
    dev = torch.device(device)
    try:
        run_config = run_config.replace(train=dict(eval_every=0, save_every=0, init_from="",
                                                   steps=max(run_config.train.steps, warm + timed)))
        plan = plan_row(run_config.arch, run_config)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        timer = _Timer(warm + timed, dev)
        t0 = time.perf_counter()
        train(run_config, out=None, device=str(dev), progress=False, callbacks=[timer])
        if len(timer.ends) < warm + timed:
            return {"error": f"the run stopped after {len(timer.ends)} step(s)"}
        step_s = (timer.ends[-1] - timer.ends[warm - 1]) / timed
    except Exception as e:  # noqa: BLE001 - one model's failure is its row, the others still run
        text = str(e).strip().splitlines()
        return {"error": f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__}
    precision, comp = gpu_costs.run_settings(run_config, dev.type)
    tokens = plan["tokens_per_step"]
    out = {"arch": run_config.arch, "model": run_config.model_dict, "params": plan["params"],
           "batch_size": run_config.train.batch_size,
           "micro_batch": gpu_costs.micro_batch(run_config),
           "seq_len": plan["seq_len"], "precision": precision, "compile": comp,
           "attention": (("sdpa" if run_config.model.use_sdpa else "explicit")
                         if run_config.arch == "transformer" else None),
           "checkpoint_blocks": bool(getattr(run_config.train, "checkpoint_blocks", False)),
           "seconds_per_step": step_s, "tokens_per_s": tokens / step_s,
           "mfu_bf16": plan["flops_per_token"] * tokens / step_s / bf16_peak,
           "first_steps_s": timer.ends[warm - 1] - t0, "timed_steps": timed}
    if dev.type == "cuda":
        out["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(dev))
    return out


def copy_models(run_configs: dict[str, RunConfig], device: str, warm: int = WARM_STEPS,
                timed: int = TIMED_STEPS, log=print,
                timeout: float | None = None) -> dict[str, dict[str, Any]]:
    """:func:`train_step_cost` of each run, each in a fresh process killed after ``timeout``
    seconds (a cold compile or a hang costs that one model's row, not the whole check)."""
    rows = {}
    for name, run_config in run_configs.items():
        try:
            row = in_fresh_process(train_step_cost, run_config.to_dict(), device, warm, timed,
                                   timeout=timeout)
        except ProcessFailed as e:
            row = {"error": str(e)}
        rows[name] = row
        log(f"{name}: " + (f"FAILED {row['error']}" if "error" in row else
                           f"{row['seconds_per_step']:.4g} s/step, "
                           f"{row['tokens_per_s'] / 1e3:.4g}k tokens/s, "
                           f"MFU {row['mfu_bf16']:.1%}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_cuda", description=__doc__)
    p.add_argument("--repeats", type=flags.flag("--repeats"), default=7)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        write_results("cuda", {"skipped": "no CUDA device: the kernel-path and paper-scale "
                                          "benchmarks need a GPU"})
        return 0
    write_results("cuda", {"ssm_paths": ssm_paths(args.repeats),
                           "paper_transformer": paper_transformer(args.repeats),
                           "paper_copy_models": copy_models(paper_copy_run_configs(), "cuda")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
