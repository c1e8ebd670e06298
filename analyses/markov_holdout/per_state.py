"""Table 2 the way the authors' code reads it (Markov paper App. E.5; Bond1995/Markov-Mamba,
``optim/utils.py``: ``eval_probs`` and ``empirical_est``): on *one* fixed test sequence, the
model's P_θ(1 | x_1^t) and add-β's are compared *per state*, indexed by the visits to that
state (add-β of a state counts only the transitions out of it seen before this visit), not
at the absolute position t that :func:`probes.markov.deviation_table` reads.

The paper leaves open which kernel its test sequence came from. The reading here makes the
question explicit: a binary first-order kernel with **state 0 inside the training range**
(P(1 | 0) drawn from Beta(β, β) conditioned on it) and **state 1 outside it** (P(1 | 1) from
the held-out range), the chain drawn by the suite's own sampler
(:class:`tasks.markov.HoldoutMarkovTask`), 512 tokens as the authors' test sequence. Each
state's deviation is reported at the visits Table 2 names (1, 50, 100, 300) that it reaches.
"""

from __future__ import annotations

import numpy as np
import torch

from probes.markov import TABLE_T, model_probs
from seqprobe.config import check
from tasks.base import make_generator
from tasks.markov import HoldoutMarkovConfig, HoldoutMarkovTask

PER_STATE_LEN = 512  # the authors' fixed test sequence's length
IN_STATE, OUT_STATE = 0, 1  # the state whose P(1 | ·) is inside / outside the training range


class _FixedKernelTask(HoldoutMarkovTask):
    """The hold-out task's sampler with one given kernel for every sequence: the chain is
    drawn exactly as the task draws its own (same inverse-CDF scan), only the kernel is set."""

    def __init__(self, cfg: HoldoutMarkovConfig, kernel: torch.Tensor):
        super().__init__(cfg)
        self._kernel = kernel  # [ctx, 2]

    def kernels(self, n: int, g: torch.Generator) -> torch.Tensor:
        return self._kernel[None].expand(n, -1, -1).clone()  # [n, ctx, 2]


def mixed_kernel_sequence(beta: float, train_range: tuple[float, float],
                          held: tuple[float, float], seed: int, seq_len: int = PER_STATE_LEN
                          ) -> tuple[torch.Tensor, torch.Tensor, HoldoutMarkovTask]:
    """``(tokens [seq_len], kernel [2, 2], task)``: a first-order binary chain whose state
    :data:`IN_STATE` has P(1 | ·) drawn from the training range and state :data:`OUT_STATE`
    from the held-out range (each from the hold-out task's own conditioned prior), drawn by
    the task's sampler. ``task.optimal_probs`` is add-β under the full prior, as Table 2."""
    g = make_generator(seed)

    def cfg(rng):
        return HoldoutMarkovConfig(S=2, order=1, beta=beta, seq_len=seq_len, p_lo=rng[0],
                                   p_hi=rng[1])
    inside = HoldoutMarkovTask(cfg(train_range)).kernels(1, g)[0]  # [ctx, 2]
    outside = HoldoutMarkovTask(cfg(held)).kernels(1, g)[0]
    kernel = torch.stack([inside[IN_STATE], outside[OUT_STATE]])  # [ctx, 2]
    task = _FixedKernelTask(cfg((0.0, 1.0)), kernel)
    x, _ = task.sample(1, g)
    return x[0, :-1], kernel, task


def per_state_deviation(p_model: np.ndarray, p_beta: np.ndarray, tokens: np.ndarray,
                        visits=TABLE_T) -> dict:
    """{state: {"visits": how many, "by_visit": {n: |P_θ(1) − P_β(1)| at the n-th visit}}}:
    position t holds the prediction after x_1..x_t, so the t where x_t = s are the visits to
    state s (first order). Visits the sequence does not reach are left out."""
    check(len(p_model) == len(p_beta) == len(tokens), "one prediction per token")
    d = np.abs(np.asarray(p_model, float) - np.asarray(p_beta, float))
    out = {}
    for s in (0, 1):
        where = np.flatnonzero(np.asarray(tokens) == s)
        out[str(s)] = {"visits": int(len(where)),
                       "by_visit": {str(n): float(d[where[n - 1]]) for n in visits
                                    if n <= len(where)}}
    return out


def per_state(model, beta: float, train_range: tuple[float, float],
              held: tuple[float, float], seed: int, seq_len: int = PER_STATE_LEN) -> dict:
    """The authors' per-state reading of Table 2 for ``model`` on the mixed-kernel sequence
    (:func:`mixed_kernel_sequence`): the kernel, which state is in and which out of the
    training range, and each state's deviation from add-β by its visits."""
    tokens, kernel, task = mixed_kernel_sequence(beta, train_range, held, seed, seq_len)
    p = model_probs(model, tokens[None])[0, :, 1].numpy()  # [pos]
    q = task.optimal_probs(tokens[None]).double()[0, :, 1].numpy()
    return {"seed": seed, "seq_len": seq_len, "in_state": IN_STATE, "out_state": OUT_STATE,
            "p1": {str(s): float(kernel[s, 1]) for s in (0, 1)},
            "tokens": tokens.tolist(), "states": per_state_deviation(p, q, tokens.numpy())}


def combine_per_state(rows: list[dict]) -> dict:
    """Several seeds' :func:`per_state` on the same sequence -> per state and visit, the
    per-seed deviations (the seed is the unit of replication)."""
    first = rows[0]
    check(all(r["tokens"] == first["tokens"] for r in rows),
          "the seeds' per-state readings must share their test sequence")
    states = {s: {"visits": st["visits"],
                  "by_visit": {n: [r["states"][s]["by_visit"][n] for r in rows]
                               for n in st["by_visit"]}}
              for s, st in first["states"].items()}
    return {**{k: first[k] for k in ("seed", "seq_len", "in_state", "out_state", "p1")},
            "states": states}
