"""State-space model benchmarks (is our pure-torch SSM fast enough to train on?): our Mamba-2
against HF ``Mamba2ForCausalLM``'s torch path at the same size, the chunked SSD path against the
plain recurrence at T = 512, the same for Mamba-1 (parallel scan vs loop, and vs HF
``MambaForCausalLM``) and the LSTM (fused vs loop), plus peak memory of each pair.

    python -m bench.bench_ssm            # writes bench/results_ssm.json

Times are medians of interleaved repeats (``bench.common.interleaved_times``) of one training
step (forward, cross-entropy, backward, AdamW). Peak memory is the growth of the process'
resident set size during one training step, sampled every 0.2 ms in a fresh process
(``bench.common.peak_memory_mb``; tracemalloc cannot see torch's C++ allocations).
"""

from __future__ import annotations

import argparse
import warnings

import torch

from bench.common import interleaved_times, peak_memory_mb, train_step_fn, write_results
from models.lstm import LSTMLM, LSTMConfig
from models.ssm.mamba import MambaConfig, MambaLM
from models.ssm.mamba2 import Mamba2LM
from models.ssm.ssd import Mamba2Config, ssd_chunked, ssd_plain
from seqprobe import flags

VOCAB = 32
# Mamba-2 vs HF: a small multi-head model, HF's defaults otherwise (no MLP: HF has none)
M2 = dict(vocab_size=VOCAB, d_model=64, n_layers=2, expand=2, n_heads=4, d_state=16,
          n_groups=1, d_conv=4, chunk_size=64)
M1 = dict(vocab_size=VOCAB, d_model=64, n_layers=2, expand=2, d_state=16, d_conv=4)
BATCH, SEQ = 16, 256
LONG = 512  # the chunked-vs-plain comparison (issue target: >= 5x)


def ours_m2(**kw) -> Mamba2LM:
    return Mamba2LM(Mamba2Config(**{**M2, **kw}))


def hf_m2():
    from transformers import Mamba2Config as HFConfig
    from transformers import Mamba2ForCausalLM

    c = M2
    cfg = HFConfig(vocab_size=c["vocab_size"], hidden_size=c["d_model"], state_size=c["d_state"],
                   num_heads=c["n_heads"], head_dim=c["expand"] * c["d_model"] // c["n_heads"],
                   expand=c["expand"], n_groups=c["n_groups"], conv_kernel=c["d_conv"],
                   num_hidden_layers=c["n_layers"], chunk_size=c["chunk_size"], use_bias=False,
                   use_conv_bias=True, tie_word_embeddings=False, pad_token_id=0,
                   bos_token_id=0, eos_token_id=0)
    return Mamba2ForCausalLM(cfg)


def hf_m1():
    from transformers import MambaConfig as HFConfig
    from transformers import MambaForCausalLM

    c = M1
    cfg = HFConfig(vocab_size=c["vocab_size"], hidden_size=c["d_model"], state_size=c["d_state"],
                   expand=c["expand"], conv_kernel=c["d_conv"], num_hidden_layers=c["n_layers"],
                   use_bias=False, use_conv_bias=True, tie_word_embeddings=False,
                   pad_token_id=0, bos_token_id=0, eos_token_id=0)
    return MambaForCausalLM(cfg)


def ssm_step_fn(model, tokens, hf: bool = False, scan: str | None = None):
    """:func:`bench.common.train_step_fn` with our model's scan path chosen first."""
    if scan is not None:
        model.set_scan(scan)
    return train_step_fn(model, tokens, hf)


def _tokens(T):
    return torch.randint(0, VOCAB, (BATCH, T), generator=torch.Generator().manual_seed(0))


def _core_step(path: str):
    """Forward + backward of the SSD scan alone at the M2 shapes, T = LONG."""
    H, N = M2["n_heads"], M2["d_state"]
    P = M2["expand"] * M2["d_model"] // H
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, LONG, H, P, generator=g, requires_grad=True)
    dA = (-0.1 * torch.rand(BATCH, LONG, H, generator=g)).requires_grad_()
    B = torch.randn(BATCH, LONG, 1, N, generator=g, requires_grad=True)
    C = torch.randn(BATCH, LONG, 1, N, generator=g, requires_grad=True)

    def step():
        if path == "chunked":
            y = ssd_chunked(x, dA, B, C, M2["chunk_size"])
        else:
            states = ssd_plain(dA.exp(), x[..., None] * B[..., None, :])  # [b, p, h, P, N]
            y = torch.einsum("bphdn,bpgn->bphd", states, C)
        y.sum().backward()

    return step


# module-level functions: peak_memory_mb runs them in a fresh (spawned) process
def _peak_m2_chunked():
    ssm_step_fn(ours_m2(), _tokens(LONG), scan="chunked")()


def _peak_m2_plain():
    ssm_step_fn(ours_m2(), _tokens(LONG), scan="plain")()


def _peak_m2_hf():
    warnings.filterwarnings("ignore")
    ssm_step_fn(hf_m2(), _tokens(LONG), hf=True)()


def _peak_m1_scan():
    ssm_step_fn(MambaLM(MambaConfig(**M1)), _tokens(LONG), scan="scan")()


def _peak_m1_plain():
    ssm_step_fn(MambaLM(MambaConfig(**M1)), _tokens(LONG), scan="plain")()


def _peak_m1_hf():
    warnings.filterwarnings("ignore")
    ssm_step_fn(hf_m1(), _tokens(LONG), hf=True)()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_ssm", description=__doc__)
    p.add_argument("--repeats", type=flags.flag("--repeats"), default=7)
    p.add_argument("--threads", type=flags.flag("--threads"), default=0,
                   help="torch threads (0: leave as is)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    r = args.repeats
    out: dict = {"shapes": {"mamba2": M2, "mamba": M1, "batch": BATCH, "seq": SEQ, "long": LONG}}

    # 1. our Mamba-2 (chunked SSD) vs HF Mamba2 torch path, same weights shape, T = SEQ
    x = _tokens(SEQ)
    t = interleaved_times({"ours": ssm_step_fn(ours_m2(), x),
                           "hf_torch": ssm_step_fn(hf_m2(), x, hf=True)}, repeats=r)
    out["mamba2_train_step_s"] = t
    out["mamba2_ratio_hf_over_ours"] = t["hf_torch"] / t["ours"]

    # 2. chunked vs plain recurrence at T = 512 (training step, and forward only)
    x = _tokens(LONG)
    m = ours_m2()
    t = interleaved_times({"chunked": ssm_step_fn(m, x, scan="chunked"),
                           "plain": ssm_step_fn(ours_m2(), x, scan="plain")}, repeats=r)
    out["mamba2_T512_train_step_s"] = t
    out["mamba2_T512_ratio_plain_over_chunked"] = t["plain"] / t["chunked"]
    mp, mc = ours_m2(), ours_m2()
    mp.set_scan("plain")
    mc.set_scan("chunked")
    with torch.no_grad():
        t = interleaved_times({"chunked": lambda: mc(x), "plain": lambda: mp(x)}, repeats=r)
    out["mamba2_T512_forward_s"] = t
    out["mamba2_T512_forward_ratio_plain_over_chunked"] = t["plain"] / t["chunked"]
    # the scan alone (forward + backward), without the layers both paths share
    t = interleaved_times({"chunked": _core_step("chunked"), "plain": _core_step("plain")},
                          repeats=r)
    out["ssd_core_T512_fwd_bwd_s"] = t
    out["ssd_core_T512_ratio_plain_over_chunked"] = t["plain"] / t["chunked"]

    # 3. Mamba-1 at T = SEQ: parallel scan vs loop, and vs HF Mamba's torch path (HF's loop
    # takes tens of seconds a step on CPU: fewer repeats)
    xs = _tokens(SEQ)
    slow = min(r, 3)
    t = interleaved_times({
        "scan": ssm_step_fn(MambaLM(MambaConfig(**M1)), xs, scan="scan"),
        "plain": ssm_step_fn(MambaLM(MambaConfig(**M1)), xs, scan="plain")}, repeats=slow,
        warmup=1)
    out["mamba_train_step_s_by_path"] = t
    out["mamba_ratio_scan_over_plain"] = t["scan"] / t["plain"]
    t = interleaved_times({"ours": ssm_step_fn(MambaLM(MambaConfig(**M1)), xs),
                           "hf_torch": ssm_step_fn(hf_m1(), xs, hf=True)}, repeats=slow,
                          warmup=1)
    out["mamba_train_step_s"] = t
    out["mamba_ratio_hf_over_ours"] = t["hf_torch"] / t["ours"]

    # 4. LSTM: fused nn.LSTM vs the hookable loop, T = SEQ
    lcfg = LSTMConfig(vocab_size=VOCAB, d_model=128, n_layers=2)
    t = interleaved_times({"fused": ssm_step_fn(LSTMLM(lcfg), xs, scan="fused"),
                           "plain": ssm_step_fn(LSTMLM(lcfg), xs, scan="plain")}, repeats=r)
    out["lstm_train_step_s"] = t
    out["lstm_ratio_plain_over_fused"] = t["plain"] / t["fused"]

    # 5. peak memory of one training step at T = 512 (fresh process each)
    if not args.no_memory:
        out["peak_memory_mb_T512"] = {
            "how": "growth of process RSS during one training step, sampled every 0.2 ms, in "
                   "a fresh spawned process (bench.common.peak_memory_mb)",
            "mamba2_chunked": peak_memory_mb(_peak_m2_chunked),
            "mamba2_plain": peak_memory_mb(_peak_m2_plain),
            "mamba2_hf_torch": peak_memory_mb(_peak_m2_hf),
            "mamba_parallel_scan": peak_memory_mb(_peak_m1_scan),
            "mamba_plain": peak_memory_mb(_peak_m1_plain),
            "mamba_hf_torch": peak_memory_mb(_peak_m1_hf),
        }
    write_results("ssm", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
