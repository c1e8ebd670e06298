"""GPU-only benchmarks: ``python -m bench.bench_cuda`` -> ``bench/results_cuda.json``.

* Mamba-2 and Mamba training step: the mamba-ssm kernel path vs our plain and chunked / scan
  paths (same model, same batch), when mamba-ssm is installed;
* tokens/s of one training step of the paper-scale copy transformer (copy paper App. A.2:
  12 layers, width 1024, 16 heads, Hard-ALiBi, context 420, batch 64).

On a machine without CUDA it writes ``{"skipped": ...}`` and exits 0, so ``python -m bench``
stays green on CPU; the numbers only mean something on a GPU.
"""

from __future__ import annotations

import argparse

import torch

from bench.bench_ssm import BATCH, LONG, M1, M2, VOCAB, ssm_step_fn
from bench.common import interleaved_times, write_results
from models import zoo
from models.registry import build_model


def _kernels_available() -> dict[str, bool]:
    from models.mamba2 import mamba_ssm_chunk_scan

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
    from models.mamba import MambaConfig, MambaLM
    from models.mamba2 import Mamba2Config, Mamba2LM

    x = torch.randint(0, VOCAB, (BATCH, LONG), device="cuda")
    have = _kernels_available()
    return {"kernels_available": have, "batch": BATCH, "seq": LONG,
            "mamba2": _time_paths(lambda: Mamba2LM(Mamba2Config(**M2)), x, ("chunked", "plain"),
                                  have["mamba2"], repeats),
            "mamba": _time_paths(lambda: MambaLM(MambaConfig(**M1)), x, ("scan", "plain"),
                                 have["mamba"], repeats)}


def paper_transformer(repeats: int) -> dict:
    # the zoo's paper copy model: Fig. 1b's strings <= 50 packed into contexts of 420 tokens
    spec = zoo.spec("copy/hard_alibi", "paper")
    model = build_model("transformer", spec.model).cuda()
    batch, context = spec.train.batch_size, spec.train.context
    x = torch.randint(0, model.cfg.vocab_size, (batch, context), device="cuda")
    t = interleaved_times({"train_step": ssm_step_fn(model, x)}, repeats=repeats)
    return {"model": spec.model_dict, "params": model.n_params(), "batch": batch,
            "context": context, "train_step_s": t["train_step"],
            "tokens_per_s": batch * context / t["train_step"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_cuda", description=__doc__)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        write_results("cuda", {"skipped": "no CUDA device: the kernel-path and paper-scale "
                                          "benchmarks need a GPU"})
        return 0
    write_results("cuda", {"ssm_paths": ssm_paths(args.repeats),
                           "paper_transformer": paper_transformer(args.repeats)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
