"""Transformer benchmarks (is our hooked transformer as fast as HF's?): training-step time of the
quick copy transformer against ``transformers.GPTNeoXForCausalLM`` of the same size (built from a
config, no download), on the SDPA path training takes and on the explicit path (the one hooks on the
scores / pattern force), their peak memory, and the cost of ``run_with_cache`` over a plain forward
pass. The machine's load average is recorded beside the times.

    python -m bench.bench_transformer        # writes bench/results_transformer.json
"""

from __future__ import annotations

import argparse
import os

import torch

from bench.common import (
    in_fresh_process,
    interleaved_times,
    peak_memory_mb,
    train_step_fn,
    write_results,
)
from models.transformer import HookedTransformerLM, TransformerConfig
from seqprobe import flags

# The quick copy level's shape: strings <= 20 -> examples of <= 43 tokens, batch 32.
SHAPE = dict(vocab_size=30, d_model=128, n_layers=2, n_heads=8, d_mlp=512)
BATCH, SEQ = 32, 43


def ours(pe: str = "rope", scan: str = "auto") -> HookedTransformerLM:
    model = HookedTransformerLM(TransformerConfig(pe=pe, **SHAPE))
    model.set_scan(scan)  # auto: SDPA while nothing reads the pattern; plain: explicit
    return model


def hf_neox():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=SHAPE["vocab_size"], hidden_size=SHAPE["d_model"],
                        num_hidden_layers=SHAPE["n_layers"], num_attention_heads=SHAPE["n_heads"],
                        intermediate_size=SHAPE["d_mlp"], rotary_pct=1.0,
                        use_parallel_residual=False,
                        max_position_embeddings=2048, hidden_dropout=0.0, attention_dropout=0.0)
    return GPTNeoXForCausalLM(cfg)


def _peak_ours():
    tokens = torch.randint(0, 30, (4 * BATCH, 8 * SEQ))  # larger than the timing shape: visible
    train_step_fn(ours(), tokens, hf=False)()


def _peak_ours_explicit():
    tokens = torch.randint(0, 30, (4 * BATCH, 8 * SEQ))
    train_step_fn(ours(scan="plain"), tokens, hf=False)()


def _peak_hf():
    tokens = torch.randint(0, 30, (4 * BATCH, 8 * SEQ))
    train_step_fn(hf_neox(), tokens, hf=True)()


def cache_cost(repeats: int) -> dict:
    """forward and run_with_cache of the Hard-ALiBi model in eval mode, interleaved."""
    torch.manual_seed(0)
    tokens = torch.randint(0, 30, (BATCH, SEQ))
    model = ours("hard_alibi").eval()
    with torch.no_grad():
        c = interleaved_times({
            "forward": lambda: model(tokens),
            "run_with_cache": lambda: model.run_with_cache(tokens),
        }, repeats=repeats)
    return {**c, "ratio": c["run_with_cache"] / c["forward"]}


def run(repeats: int = 15) -> dict:
    torch.manual_seed(0)
    tokens = torch.randint(0, 30, (BATCH, SEQ))
    load_before = os.getloadavg()
    m_rope, m_hard, hf = ours("rope"), ours("hard_alibi"), hf_neox()
    n_ours, n_hf = m_rope.n_params(), sum(p.numel() for p in hf.parameters())
    t = interleaved_times({
        "ours_rope": train_step_fn(m_rope, tokens, hf=False),
        "ours_hard_alibi": train_step_fn(m_hard, tokens, hf=False),
        "ours_rope_explicit": train_step_fn(ours("rope", "plain"), tokens, hf=False),
        "ours_hard_alibi_explicit": train_step_fn(ours("hard_alibi", "plain"), tokens, hf=False),
        "hf_gpt_neox": train_step_fn(hf, tokens, hf=True),
    }, repeats=repeats)

    # Timed twice, after the training steps (as before) and in a fresh process:
    # run_with_cache keeps every activation, and whether that memory is fresh (page faults) or
    # reused depends on what the process allocated before.
    c = cache_cost(repeats * 2)
    fresh = in_fresh_process(cache_cost, repeats * 2)
    return {
        "shape": {**SHAPE, "batch": BATCH, "seq": SEQ},
        "params": {"ours": n_ours, "hf_gpt_neox": n_hf},
        "load_avg_1m": {"before": load_before[0], "after": os.getloadavg()[0]},
        "train_step_s": t,
        **{f"ratio_hf_over_{k}": t["hf_gpt_neox"] / t[k] for k in t if k.startswith("ours")},
        "target_ratio_hf_over_ours": ">= 1.3 (ours_rope, ours_hard_alibi)",
        "forward_s": {k: c[k] for k in ("forward", "run_with_cache")},
        "ratio_run_with_cache_over_forward": c["ratio"],
        "forward_s_fresh_process": {k: fresh[k] for k in ("forward", "run_with_cache")},
        "ratio_run_with_cache_over_forward_fresh_process": fresh["ratio"],
        "target_ratio_run_with_cache_over_forward": "<= 1.15",
        "peak_memory_mb_train_step_batch4x_seq8x": {
            "ours_rope": peak_memory_mb(_peak_ours),
            "ours_rope_explicit": peak_memory_mb(_peak_ours_explicit),
            "hf_gpt_neox": peak_memory_mb(_peak_hf)},
    }


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.bench_transformer")
    p.add_argument("--repeats", type=flags.flag("--repeats"), default=15)
    args = p.parse_args(argv)
    write_results("transformer", run(args.repeats))


if __name__ == "__main__":
    main()
