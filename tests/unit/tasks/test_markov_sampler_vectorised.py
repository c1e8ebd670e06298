"""The Markov samplers run the chain as a scan over positions (tasks.markov): the same samples,
the same kernels and the same generator state afterwards as the per-position loop they
replace, which is kept here as the reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tasks.add_beta import window_index
from tasks.markov import (
    HoldoutMarkovConfig,
    HoldoutMarkovTask,
    MarkovConfig,
    MarkovTask,
    SwitchingMarkovConfig,
    SwitchingMarkovTask,
    _numpy_rng,
)


def loop_markov(task: MarkovTask, batch_size: int, g: torch.Generator):
    """The per-position sampler of MarkovTask.sample before it was vectorised."""
    cfg = task.cfg
    S, k, T1 = cfg.S, cfg.order, cfg.seq_len + 1
    P = task.kernels(batch_size, g)
    cdf = P.cumsum(-1)
    u = torch.rand(batch_size, T1, generator=g, dtype=torch.float64)
    x = torch.empty(batch_size, T1, dtype=torch.long)
    first = min(k, T1)
    x[:, :first] = torch.randint(0, S, (batch_size, first), generator=g)
    rows = torch.arange(batch_size)
    for t in range(k, T1):
        c = window_index(x[:, t - k : t], S)
        x[:, t] = (u[:, t, None] > cdf[rows, c]).sum(-1).clamp(max=S - 1)
    return x, P


def loop_switching(task: SwitchingMarkovTask, batch_size: int, g: torch.Generator):
    """The per-position sampler of SwitchingMarkovTask.sample before it was vectorised."""
    cfg = task.cfg
    S, k, T1 = cfg.S, cfg.order, cfg.seq_len + 1
    rng = _numpy_rng(g)
    P = torch.from_numpy(rng.dirichlet(np.full(S, cfg.beta), size=(batch_size, S**k)))
    cdf = P.cumsum(-1)
    switch = torch.rand(batch_size, T1, generator=g) < cfg.p_switch
    u = torch.rand(batch_size, T1, generator=g, dtype=torch.float64)
    uniform = torch.randint(0, S, (batch_size, T1), generator=g)
    x = torch.empty(batch_size, T1, dtype=torch.long)
    since = torch.zeros(batch_size, dtype=torch.long)
    rows = torch.arange(batch_size)
    for t in range(T1):
        if t >= k:
            c = window_index(x[:, t - k : t].clamp(max=S - 1), S)
            drawn = (u[:, t, None] > cdf[rows, c]).sum(-1).clamp(max=S - 1)
        else:
            drawn = uniform[:, t]
        sym = torch.where(since < k, uniform[:, t], drawn)
        x[:, t] = torch.where(switch[:, t], torch.full_like(sym, task.switch_id), sym)
        since = torch.where(switch[:, t], torch.zeros_like(since), since + 1)
        hit = switch[:, t].nonzero().flatten()
        if len(hit):
            fresh = rng.dirichlet(np.full(S, cfg.beta), size=(len(hit), S**k))
            P[hit] = torch.from_numpy(fresh)
            cdf[hit] = P[hit].cumsum(-1)
    return x, P


def _same(task, reference, batch_size: int, seed: int) -> None:
    g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    x1, P1 = task.sample(batch_size, g1)
    x2, P2 = reference(task, batch_size, g2)
    assert torch.equal(x1, x2)
    assert torch.equal(P1, P2)
    # the generator is left where the loop left it: the next batch is the same too
    assert torch.equal(torch.rand(3, generator=g1), torch.rand(3, generator=g2))


@pytest.mark.parametrize(("S", "k", "T", "beta", "B"), [
    (2, 1, 256, 1.0, 32), (3, 2, 40, 0.5, 5), (4, 3, 17, 0.05, 3), (2, 4, 3, 1.0, 2),
    (5, 1, 1, 2.0, 4), (2, 2, 64, 1.0, 1)])
def test_markov_scan_is_the_loop(S, k, T, beta, B):
    _same(MarkovTask(MarkovConfig(S=S, order=k, beta=beta, seq_len=T)), loop_markov, B, 7)


def test_holdout_scan_is_the_loop():
    task = HoldoutMarkovTask(HoldoutMarkovConfig(order=2, seq_len=100, p_lo=0.0, p_hi=0.5))
    _same(task, loop_markov, 16, 3)


@pytest.mark.parametrize(("S", "k", "T", "p", "B"), [
    (2, 1, 256, 0.01, 32), (2, 1, 200, 0.2, 8), (3, 2, 60, 0.1, 6), (2, 3, 50, 0.3, 4),
    (4, 1, 30, 0.0, 3), (2, 2, 2, 0.5, 5), (2, 1, 300, 0.9, 2)])
def test_switching_scan_is_the_loop(S, k, T, p, B):
    task = SwitchingMarkovTask(SwitchingMarkovConfig(S=S, order=k, seq_len=T, p_switch=p))
    _same(task, loop_switching, B, 11)


def test_blocks_bound_memory_and_change_nothing(monkeypatch):
    """A block of positions smaller than the sequence (a large batch × states) gives the same
    samples: the scan carries the state across blocks."""
    import tasks.markov as markov
    task = SwitchingMarkovTask(SwitchingMarkovConfig(S=3, order=2, seq_len=90, p_switch=0.1))
    plain = task.sample(4, torch.Generator().manual_seed(5))
    monkeypatch.setattr(markov, "BLOCK_ELEMENTS", 50)
    blocked = task.sample(4, torch.Generator().manual_seed(5))
    assert torch.equal(plain[0], blocked[0]) and torch.equal(plain[1], blocked[1])
    mtask = MarkovTask(MarkovConfig(S=3, order=2, seq_len=90))
    monkeypatch.setattr(markov, "BLOCK_ELEMENTS", 1 << 22)
    a = mtask.sample(4, torch.Generator().manual_seed(5))
    monkeypatch.setattr(markov, "BLOCK_ELEMENTS", 50)
    b = mtask.sample(4, torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0])
