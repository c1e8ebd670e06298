"""n-gram lookup (Jelassi et al. §3.5, Figs. 5 and 6): use an n-gram of the string as a key
and output the k tokens that follow it in the string.

* suffix key (Fig. 5): ``<BOS> x <COPY> key  ->  answer <EOS>``: the key comes after the string,
  so the model must have kept the whole string (hard for a fixed-size state).
* prefix key (Fig. 6): ``<BOS> key <COPY> x <COPY>  ->  answer <EOS>``: the key comes first, so
  a model can watch for it while reading (easy for a state-space model).

The key occurs exactly once in x (n-gram unique), so the answer is well defined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from seqprobe.config import check
from seqprobe.flags import MAX_DIM, MAX_LENGTH, MAX_N, Config, bound
from tasks.base import IGNORE, LetterTask, PromptBatch
from tasks.copy import COPY_SPECIALS

MAX_TRIES = 1000


@dataclass(frozen=True)
class LookupConfig(Config):
    D: int = field(
        default=26, metadata=bound(2, MAX_DIM, "the alphabet, a token each; papers: 4 to 30"))
    min_len: int = field(
        default=10, metadata=bound(1, MAX_LENGTH, "tokens per string; papers: up to 1,000"))
    max_len: int = field(  # paper: trained on strings of at most 30 tokens
        default=30, metadata=bound(1, MAX_LENGTH, "tokens per string; papers: up to 1,000"))
    n: int = field(  # key length (n-gram)
        default=3, metadata=bound(1, MAX_N, "n of an n-gram; papers: up to 10"))
    k: int = field(  # answer tokens after the key
        default=1, metadata=bound(1, MAX_LENGTH, "tokens looked up"))
    key: str = "suffix"  # suffix | prefix

    def __post_init__(self):
        check(self.key in ("suffix", "prefix"), f"key must be suffix or prefix, got {self.key!r}")
        check(self.min_len <= self.max_len,
              f"min_len ({self.min_len}) must be <= max_len ({self.max_len})")
        check(self.min_len >= self.n + self.k,
              f"strings must hold the key and its answer: min_len ({self.min_len}) >= n + k "
              f"({self.n + self.k})")
        # Enough distinct n-grams that a unique key is likely: D^n well above the string length.
        # Compared in logs: D**n itself can be too large to build or print for long keys.
        if self.n * math.log(self.D) < math.log(2 * self.max_len):
            check(False, f"vocabulary too small for unique {self.n}-gram keys: D^n = "
                  f"{self.D**self.n} < 2 * max_len = {2 * self.max_len}")


def unique_key_positions(x: torch.Tensor, n: int, k: int) -> list[int]:
    """Start positions i whose n-gram occurs once in x and has k tokens after it."""
    L = len(x)
    grams = [tuple(x[i : i + n].tolist()) for i in range(L - n + 1)]
    counts: dict[tuple, int] = {}
    for gram in grams:
        counts[gram] = counts.get(gram, 0) + 1
    return [i for i in range(L - n - k + 1) if counts[grams[i]] == 1]


class NgramLookupTask(LetterTask):
    name = "lookup"
    config_cls = LookupConfig
    specials = COPY_SPECIALS

    def max_example_len(self) -> int:
        extra = 1 if self.cfg.key == "prefix" else 0
        return 1 + self.cfg.max_len + 1 + self.cfg.n + extra + self.cfg.k + 1

    def eval_lengths(self) -> tuple[int, ...]:
        """Every string length of the training distribution (uniform in min_len..max_len): the
        trainer's evaluation scores each of them (``models.train.evaluation``)."""
        return tuple(range(self.cfg.min_len, self.cfg.max_len + 1))

    def sample(self, L: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, int]:
        """``(x, key, i)``: a string of length L with a unique key x[i:i+n] (resampled if none)."""
        n, k = self.cfg.n, self.cfg.k
        for _ in range(MAX_TRIES):
            x = torch.randint(0, self.cfg.D, (L,), generator=g)
            positions = unique_key_positions(x, n, k)
            if positions:
                i = positions[int(torch.randint(0, len(positions), (1,), generator=g))]
                return x, x[i : i + n], i
        raise RuntimeError(f"no unique {n}-gram key found in {MAX_TRIES} strings of length {L}")

    def prompt_answer(self, L: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x, key, i = self.sample(L, g)
        bos, cp = torch.tensor([self.vocab.id("BOS")]), torch.tensor([self.vocab.id("COPY")])
        if self.cfg.key == "suffix":
            prompt = torch.cat([bos, x, cp, key])
        else:
            prompt = torch.cat([bos, key, cp, x, cp])
        return prompt, x[i + self.cfg.n : i + self.cfg.n + self.cfg.k]

    def example(self, g):
        L = int(torch.randint(self.cfg.min_len, self.cfg.max_len + 1, (1,), generator=g))
        prompt, answer = self.prompt_answer(L, g)
        eos = torch.tensor([self.vocab.id("EOS")])
        tokens = torch.cat([prompt, answer, eos])
        targets = torch.full_like(tokens, IGNORE)
        P = len(prompt)
        targets[P - 1 : P - 1 + len(answer) + 1] = torch.cat([answer, eos])
        return tokens, targets

    def eval_batch(self, batch_size, g, length=None):
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        L = (int(torch.randint(self.cfg.min_len, self.cfg.max_len + 1, (1,), generator=g))
             if length is None else int(length))
        check(L >= self.cfg.n + self.cfg.k, f"length {L} < n + k = {self.cfg.n + self.cfg.k}")
        pairs = [self.prompt_answer(L, g) for _ in range(batch_size)]
        return PromptBatch(torch.stack([p for p, _ in pairs]), torch.stack([a for _, a in pairs]))
