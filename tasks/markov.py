"""Random Markov chains and the switching Markov process (Bondaschi et al., "From Markov to
Laplace: how Mamba in-context learns Markov chains", §2.1 and App. E.7).

Random Markov chains (§2.1, "Data generation"): every *sequence* gets its own order-k kernel
P = (P_c)_{c ∈ X^k}, each row P_c ~ Dir(β·1) drawn independently; the first k symbols are
uniform on X = {0, …, S−1}; then x_{t+1} ~ P_{x_{t−k+1..t}}. A model trained on such data has
to estimate the kernel in context for every test sequence, and the Bayes-optimal predictor is
the add-β (Laplacian) estimator of :mod:`tasks.add_beta` (§2.4, App. A).

Switching Markov (§5.1, App. E.7): a SWITCH token (id S) is added; at every position the token
is SWITCH with probability ``p_switch`` (i.i.d., "a parallel Bernoulli process"); after every
switch a fresh kernel is drawn and the chain restarts. Restarting means the first k symbols
after a switch are uniform again (as at the start of a sequence, §2.1) — the paper leaves
this detail open; with this choice the optimal predictor is exactly "add-β on the counts since
the last switch" (the strategy §5.1 describes), times 1 − p_switch, plus p_switch on SWITCH.

Hold-out chains (App. E.5, Table 2): binary chains whose P(1 | context) are drawn from the
Beta(β, β) prior *conditioned* on [p_lo, p_hi] (inverse-CDF sampling): train on part of the
simplex, test on the rest.

Batches: ``tokens = x_1..x_T`` and ``targets = x_2..x_{T+1}`` (the next token at every
position, Eq. (3): the loss covers all T positions). Sequences are generated vectorised over
the batch; the Dirichlet draws use numpy's sampler (accurate for small β) seeded from the
task's ``torch.Generator``, so a batch is still a pure function of that generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from seqprobe.config import check
from seqprobe.flags import MAX_DIM, MAX_HORIZON, MAX_ORDER, MAX_SCALE, Config, bound
from tasks.add_beta import add_beta_probs, switching_probs, window_index
from tasks.base import Batch, Task, Vocab


@dataclass(frozen=True)
class MarkovConfig(Config):
    S: int = field(  # state-space size |X| (the paper's binary case: 2)
        default=2, metadata=bound(2, MAX_DIM, "Markov states; papers: 2 to 10"))
    order: int = field(  # Markov order k
        default=1, metadata=bound(1, MAX_ORDER, "S^order contexts, at most 2^20"))
    beta: float = field(  # Dirichlet concentration β of every kernel row (β = 1: uniform simplex)
        default=1.0,
        metadata=bound(0.0, MAX_SCALE, "the Dirichlet prior's beta; papers: 1", open_lo=True))
    seq_len: int = field(  # T: positions per sequence (T + 1 symbols are drawn)
        default=256, metadata=bound(1, MAX_HORIZON, "tokens per sequence; papers: up to 2,048"))

    def __post_init__(self):
        # one kernel row per context: S^k rows of S probabilities per sequence
        check(self.S ** self.order <= 1 << 20,
              f"S**order = {self.S}**{self.order} kernel rows per sequence is too many")


@dataclass(frozen=True)
class SwitchingMarkovConfig(MarkovConfig):
    p_switch: float = field(  # probability that a position is the SWITCH token (App. E.7: 0.01)
        default=0.01, metadata=bound(0.0, 1.0, "a probability; must be < 1"))

    def __post_init__(self):
        super().__post_init__()
        check(self.p_switch < 1.0, f"p_switch must be in [0, 1), got {self.p_switch}")


# Elements of one block's [batch, positions, states, S] comparison: the scan over positions
# works on blocks of positions small enough that memory stays bounded for any batch and order.
BLOCK_ELEMENTS = 1 << 22


def _block_len(batch: int, states: int, S: int) -> int:
    return max(1, BLOCK_ELEMENTS // max(1, batch * states * S))


def _states_before(F: Int[Tensor, "batch L N"], z0: Int[Tensor, " batch"]
                   ) -> tuple[Int[Tensor, "batch L"], Int[Tensor, " batch"]]:
    """Run a chain whose step at position i maps state z to ``F[:, i, z]``, from ``z0``: the
    state before each position, and the state after the last. The maps are composed by a
    doubling (Hillis-Steele) scan, log2(L) gathers instead of L Python steps; integer maps, so
    the result is exactly the loop's."""
    L = F.shape[1]
    G = F  # G[:, i] = F_i ∘ … ∘ F_{max(0, i-o+1)} after the step with offset o
    o = 1
    while o < L:
        G = torch.cat([G[:, :o], torch.gather(G[:, o:], 2, G[:, :-o])], 1)
        o *= 2
    after = torch.gather(G, 2, z0[:, None, None].expand(-1, L, 1)).squeeze(2)  # [batch, L]
    return torch.cat([z0[:, None], after[:, :-1]], 1), after[:, -1]


def _numpy_rng(g: torch.Generator) -> np.random.Generator:
    """A numpy generator seeded from (and advancing) the torch generator ``g``."""
    seed = int(torch.randint(0, 2**62, (1,), generator=g))
    return np.random.default_rng(seed)


def sample_kernels(n: int, S: int, k: int, beta: float, g: torch.Generator
                   ) -> Float[Tensor, "n ctx S"]:
    """``n`` order-k kernels: ``P[i, c, :] ~ Dir(β·1)`` for each of the S**k contexts c (§2.1).

    Contexts are indexed base S with the oldest symbol most significant (as in
    :mod:`tasks.add_beta`): ``c = Σ_m x_{t−k+1+m}·S^(k−1−m)``.
    """
    rng = _numpy_rng(g)
    rows = rng.dirichlet(np.full(S, beta), size=(n, S**k))  # [n, S^k, S]
    # numpy's sampler can return exact zeros for tiny β; those transitions then never occur,
    # which is still a valid draw from the (discretised) prior
    return torch.from_numpy(rows).to(torch.float64)


class MarkovTask(Task):
    """Random order-k Markov chains over S symbols, a new Dirichlet kernel per sequence."""

    name = "markov"
    config_cls = MarkovConfig
    packable = False  # every sequence is seq_len long

    def __init__(self, cfg: MarkovConfig):
        super().__init__(cfg)
        self.vocab = Vocab(tuple(str(i) for i in range(cfg.S)) if cfg.S <= 10
                           else tuple(f"s{i}" for i in range(cfg.S)))

    # ------------------------------------------------------------------ data
    def kernels(self, n: int, g: torch.Generator) -> Float[Tensor, "n ctx S"]:
        """``n`` kernels from the prior of this task (Dir(β·1) per row, §2.1)."""
        cfg = self.cfg
        return sample_kernels(n, cfg.S, cfg.order, cfg.beta, g)

    def sample(self, batch_size: int, g: torch.Generator
               ) -> tuple[Int[Tensor, "batch T1"], Float[Tensor, "batch ctx S"]]:
        """``(x, P)``: ``batch_size`` sequences of T + 1 symbols and the kernels that made them."""
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        cfg = self.cfg
        S, k, T1 = cfg.S, cfg.order, cfg.seq_len + 1
        P = self.kernels(batch_size, g)  # [batch, S^k, S]
        cdf = P.cumsum(-1)  # [batch, S^k, S]
        u = torch.rand(batch_size, T1, generator=g, dtype=torch.float64)  # inverse-CDF draws
        x = torch.empty(batch_size, T1, dtype=torch.long)
        first = min(k, T1)
        x[:, :first] = torch.randint(0, S, (batch_size, first), generator=g)  # x_1..x_k uniform
        if T1 <= k:
            return x, P
        # The chain as a scan: at position t every context c has its draw d[b, t, c] (the
        # inverse CDF of row c at u[b, t]); the next context is (c·S + d) mod S^k.
        C = S**k
        shifted = torch.arange(C) * S % C  # [ctx]: c·S mod S^k, the oldest symbol dropped
        c = window_index(x[:, :k], S)  # [batch]: the context before position k
        step = _block_len(batch_size, C, S)
        for t0 in range(k, T1, step):
            t1 = min(T1, t0 + step)
            d = (u[:, t0:t1, None, None] > cdf[:, None]).sum(-1).clamp(max=S - 1)  # [b, L, ctx]
            before, c = _states_before(shifted + d, c)  # [batch, L]
            x[:, t0:t1] = torch.gather(d, 2, before[..., None]).squeeze(2)
        return x, P

    def batch(self, batch_size: int, g: torch.Generator) -> Batch:
        x, _ = self.sample(batch_size, g)
        return Batch(x[:, :-1].contiguous(), x[:, 1:].contiguous())  # predict the next token

    def example(self, g: torch.Generator) -> tuple[Tensor, Tensor]:
        b = self.batch(1, g)
        return b.tokens[0], b.targets[0]

    def max_example_len(self) -> int:
        return self.cfg.seq_len  # a sequence's positions: T + 1 symbols drawn, T predicted

    def model_fields(self) -> dict:
        return {"vocab_size": self.vocab.size}

    # ------------------------------------------------------------------ reference
    def optimal_probs(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos V"]:
        """The Bayes-optimal next-token distribution for this data: add-β (§2.4)."""
        c = self.cfg
        return add_beta_probs(tokens, c.S, c.order, c.beta)


class SwitchingMarkovTask(MarkovTask):
    """Binary (or S-ary) order-k chains interrupted by SWITCH tokens that resample the kernel."""

    name = "switching_markov"
    config_cls = SwitchingMarkovConfig

    def __init__(self, cfg: SwitchingMarkovConfig):
        super().__init__(cfg)
        self.vocab = Vocab(self.vocab.alphabet, ("SWITCH",))

    @property
    def switch_id(self) -> int:
        return self.vocab.id("SWITCH")

    def sample(self, batch_size, g):
        """``(x, P)``: sequences with SWITCH tokens, and the *last* kernel of every sequence."""
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        cfg = self.cfg
        S, k, T1 = cfg.S, cfg.order, cfg.seq_len + 1
        rng = _numpy_rng(g)
        C = S**k
        P = torch.from_numpy(rng.dirichlet(np.full(S, cfg.beta), size=(batch_size, C)))
        switch = torch.rand(batch_size, T1, generator=g) < cfg.p_switch  # [batch, T1]
        u = torch.rand(batch_size, T1, generator=g, dtype=torch.float64)
        uniform = torch.randint(0, S, (batch_size, T1), generator=g)
        # A fresh kernel for every switch (App. E.7 step 2), drawn in (position, sequence)
        # order as a position-by-position loop draws them; a position reads the kernel of the
        # last switch before it (its sequence's first kernel before any).
        hit_t, hit_b = switch.T.nonzero(as_tuple=True)  # [H], position-major
        fresh = torch.from_numpy(rng.dirichlet(np.full(S, cfg.beta), size=(len(hit_t), C)))
        kernels = torch.cat([P, fresh])  # [batch + H, ctx, S]
        cdf = kernels.cumsum(-1)
        hit_id = torch.full((batch_size, T1), -1, dtype=torch.long)
        hit_id[hit_b, hit_t] = torch.arange(len(hit_t))
        last = hit_id.cummax(1).values  # [batch, T1]: the last switch at or before t
        own = torch.arange(batch_size)[:, None]
        kernel_at = torch.where(last >= 0, batch_size + last, own)  # after position t
        kernel_before = torch.cat([own, kernel_at[:, :-1]], 1)  # [batch, T1]: used at t
        # The chain as a scan over the state z = (context c, symbols since the last (re)start
        # s, capped at k): at s < k the symbol is uniform (a restart), at SWITCH s = 0.
        K1 = k + 1
        zc, zs = torch.arange(C * K1) // K1, torch.arange(C * K1) % K1  # [states]
        z = torch.zeros(batch_size, dtype=torch.long)  # c = 0, s = 0 at the start
        x = torch.empty(batch_size, T1, dtype=torch.long)
        step = _block_len(batch_size, C * K1, S)
        for t0 in range(0, T1, step):
            t1 = min(T1, t0 + step)
            rows = cdf[kernel_before[:, t0:t1]]  # [batch, L, ctx, S]
            d = (u[:, t0:t1, None, None] > rows).sum(-1).clamp(max=S - 1)  # [batch, L, ctx]
            sw = switch[:, t0:t1, None]  # [batch, L, 1]
            sym = torch.where(zs < k, uniform[:, t0:t1, None], d[:, :, zc])  # [batch, L, states]
            sym = torch.where(sw, self.switch_id, sym)
            c_next = zc * S % C + sym.clamp(max=S - 1)  # SWITCH enters the context as S - 1
            s_next = torch.where(sw, 0, (zs + 1).clamp(max=k))
            before, z = _states_before(c_next * K1 + s_next, z)
            x[:, t0:t1] = torch.gather(sym, 2, before[..., None]).squeeze(2)
        return x, kernels[kernel_at[:, -1]]

    def optimal_probs(self, tokens):
        """(1 − p_switch)·add-β since the last SWITCH, and p_switch on SWITCH (§5.1)."""
        c = self.cfg
        return switching_probs(tokens, c.S, c.order, c.beta, c.p_switch, self.switch_id)


@dataclass(frozen=True)
class HoldoutMarkovConfig(MarkovConfig):
    p_lo: float = field(  # every P(1 | context) is drawn from Beta(β, β) restricted to [p_lo, p_hi]
        default=0.0, metadata=bound(0.0, 1.0, "a probability"))
    p_hi: float = field(default=0.5, metadata=bound(0.0, 1.0, "a probability"))

    def __post_init__(self):
        super().__post_init__()
        check(self.S == 2, f"the hold-out task is binary (App. E.5), got S={self.S}")
        check(self.p_lo < self.p_hi,
              f"need 0 <= p_lo < p_hi <= 1, got [{self.p_lo}, {self.p_hi}]")


class HoldoutMarkovTask(MarkovTask):
    """Binary order-k chains with P(1 | context) ~ Beta(β, β) conditioned on [p_lo, p_hi]
    (Markov paper App. E.5: train on part of the simplex, test on the rest).

    ``optimal_probs`` stays the add-β estimator of the *full* prior: the paper compares the
    model with it on held-out kernels (it is minimax optimal as t → ∞), not with the
    restricted prior's posterior mean."""

    name = "markov_holdout"
    config_cls = HoldoutMarkovConfig

    def kernels(self, n: int, g: torch.Generator) -> Float[Tensor, "n ctx 2"]:
        """Inverse CDF of Beta(β, β) on uniform draws in [F(p_lo), F(p_hi)]."""
        from scipy.stats import beta as beta_dist  # a large import, for this task's data only

        cfg = self.cfg
        rng = _numpy_rng(g)
        lo, hi = beta_dist.cdf([cfg.p_lo, cfg.p_hi], cfg.beta, cfg.beta)
        u = lo + (hi - lo) * rng.random((n, 2**cfg.order))
        p1 = torch.from_numpy(np.clip(beta_dist.ppf(u, cfg.beta, cfg.beta), cfg.p_lo, cfg.p_hi))
        return torch.stack([1 - p1, p1], dim=-1)  # [n, ctx, 2]
