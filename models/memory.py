"""What running a suite model costs in memory, estimated before it runs (so a run too big for
the machine is refused before it allocates).

:func:`forward_bytes` runs the model on the meta device (shapes, no memory) at three short
lengths and fits what its hooks hold as ``a + b·T + c·T²`` per row — the constant (per-row
state), linear (residual streams, SSM states) and quadratic (attention scores and patterns)
parts of any architecture — then evaluates that at the rows and length asked for. The estimate
errs high: everything ``run_with_cache`` would keep, times :data:`TEMPORARIES` for the
temporaries no hook sees, plus logits, log-probabilities and the int64 tokens and targets.

:func:`check_evaluation_fits` is the check an analysis makes when it loads a checkpoint to
evaluate it (:func:`analyses.common.load_model`): a task config whose lengths are within the
per-int bound (a Markov ``seq_len`` of 2^24) can still ask for gigabytes per batch, so the least
an evaluation at the task's longest sequence needs (:func:`evaluation_bytes`: one row through
the model, the data of :data:`EVAL_ROWS` rows) must fit in what this process can still allocate
(:func:`seqprobe.memory.check_fits`), or the load is refused in one line before any data is drawn.
An analysis' own batch sizes are its flags, estimated by the analysis where they matter.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import torch

from models.checkpoint.rebuild import meta_model, model_footprint
from seqprobe.config import config_to_dict
from seqprobe.memory import check_fits

TEMPORARIES = 2.0  # unhooked temporaries (softmax, norms, einsum outputs) at most double it
FIT_LENGTHS = (8, 16, 32)  # short meta runs: three points fix a + b·T + c·T²
# rows an analysis runs through a model at once: probes.markov.model_probs' chunk and
# ngram_heads' default batch (larger batches are the analysis' own flags, checked there)
EVAL_ROWS = 64


def _config_dict(config) -> dict:
    return config if isinstance(config, dict) else config_to_dict(config)


# attention hooks a fused SDPA forward never materialises (T² per head) when nothing reads them
SDPA_SKIPS = ("attn.hook_attn_scores", "attn.hook_pattern")


def _quadratic(ys: list[float]) -> tuple[float, float, float]:
    c, b, a = np.polyfit(np.array(FIT_LENGTHS, dtype=float), np.array(ys, dtype=float), 2)
    return max(a, 0.0), max(b, 0.0), max(c, 0.0)


@functools.lru_cache(maxsize=64)
def _per_row_fit(arch: str, config_json: str) -> tuple[tuple, tuple, int]:
    """``(cached, plain, vocab)``: each ``(a, b, c)`` with bytes of one row of length T ≈
    a + b·T + c·T². ``cached``: every hook's activation (what ``run_with_cache`` keeps);
    ``plain``: a forward without hooks, which holds the activations outside the blocks and one
    block's at a time (without the T² scores where the model uses SDPA)."""
    config = json.loads(config_json)
    model = meta_model(arch, config)
    sdpa = bool(getattr(model.cfg, "use_sdpa", False))
    held: dict[str, int] = {}

    def count(t: torch.Tensor, hook) -> None:
        held[hook.name] = held.get(hook.name, 0) + t.numel() * t.element_size()

    cached, plain = [], []
    for T in FIT_LENGTHS:
        held.clear()
        tokens = torch.zeros(1, T, dtype=torch.long, device="meta")
        with torch.no_grad():
            model.run_with_hooks(tokens, fwd_hooks=[(lambda name: True, count)])
        cached.append(sum(held.values()))
        blocks: dict[str, int] = {}
        outside = 0
        for name, n in held.items():
            if name.startswith("blocks."):
                if not (sdpa and name.endswith(SDPA_SKIPS)):
                    i = name.split(".")[1]
                    blocks[i] = blocks.get(i, 0) + n
            else:
                outside += n
        plain.append(outside + max(blocks.values(), default=0))
    vocab = int(getattr(model.cfg, "vocab_size", 0) or 0)
    return _quadratic(cached), _quadratic(plain), vocab


def forward_bytes(arch: str, config, rows: int, positions: int, cached: bool = True) -> int:
    """Bytes of one forward pass of ``rows`` sequences of ``positions`` tokens (the temporaries,
    logits and data included), excluding the weights: with every activation cached
    (``run_with_cache``, the default), or a plain forward (``cached=False``)."""
    fit_cached, fit_plain, vocab = _per_row_fit(
        arch, json.dumps(_config_dict(config), sort_keys=True))
    a, b, c = fit_cached if cached else fit_plain
    T = float(positions)
    hooked = rows * (a + b * T + c * T * T) * TEMPORARIES
    logits = rows * T * vocab * 4 * 2  # logits and their log-softmax, float32
    data = rows * T * 8 * 2  # int64 tokens and targets
    return int(hooked + logits + data)


def weight_bytes(arch: str, config) -> int:
    """Bytes of the model's parameters and buffers (a meta-device build, nothing allocated)."""
    _, params, buffers = model_footprint(arch, _config_dict(config))
    return int(params + buffers)


def evaluation_bytes(arch: str, config, positions: int, rows: int = EVAL_ROWS) -> int:
    """The least an evaluation at ``positions`` tokens needs: one row through the model with its
    activations cached (an analysis cannot run less), and the data of ``rows`` rows at once:
    int64 tokens and targets, and the model's float64 probabilities over its vocabulary (what
    the Markov analyses hold per batch)."""
    vocab = _per_row_fit(arch, json.dumps(_config_dict(config), sort_keys=True))[2]
    data = rows * positions * (8 * 2 + 8 * max(vocab, 1))
    return forward_bytes(arch, config, 1, positions) + data


def check_evaluation_fits(model, what: str, rows: int = EVAL_ROWS) -> None:
    """Refuse (one line) a suite model whose task's longest sequence makes an evaluation
    (:func:`evaluation_bytes`) larger than the memory this process can still get. Models
    without a suite task or architecture (a pretrained LM) pass: no task sizes to check."""
    task = getattr(model, "task", None)
    arch = getattr(model, "arch", None)
    if task is None or arch is None or getattr(model, "cfg", None) is None:
        return
    positions = task.max_example_len()  # the task's own: no list of length fields here
    try:
        need = evaluation_bytes(arch, model.cfg, positions, rows)
    except Exception:  # noqa: BLE001 - an architecture the meta device cannot run: no estimate
        return
    check_fits(need, f"{what}: evaluating it at its task's length ({positions:,} positions of "
               f"{task.name}: one row through the model, the data of {rows} rows)",
               "its task config asks for sequences this machine cannot run")
