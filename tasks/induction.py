"""The induction-heads task of the spectral-filtering paper (§4.2, Fig. 5; after Gu & Dao 2023
and Liu et al. 2024).

A sequence of ``length`` tokens is all ``<BLANK>`` except one ``<FLAG>`` at a uniformly random
position p ∈ [0, length − 3], followed by a token x drawn uniformly from an alphabet of D
symbols (paper: D = 4). The last token is ``<FLAG>`` again — the query — and the only loss is
at that position, whose target is x::

    <BLANK> … <BLANK> <FLAG> x <BLANK> … <BLANK> <FLAG>   → x

Vocabulary: D symbols, then BLANK and FLAG (no PAD: rows all have the same length; the pad
token of packed contexts is BLANK). ``eval_batch`` gives the whole sequence as a prompt and x
as a one-token answer, so greedy accuracy = recall accuracy (chance 1/D). Its ``length``
argument evaluates at lengths other than the training length (length generalisation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from seqprobe.config import check
from seqprobe.flags import MAX_DIM, MAX_HORIZON, Config, bound
from tasks.base import IGNORE, Batch, LetterTask, PromptBatch

SPECIALS = ("BLANK", "FLAG")
MIN_LENGTH = 3  # flag, recalled token, query


@dataclass(frozen=True)
class InductionConfig(Config):
    D: int = field(  # alphabet of the recalled token (paper: vocabulary size 4)
        default=4, metadata=bound(2, MAX_DIM, "the alphabet, a token each; papers: 4 to 30"))
    length: int = field(  # training sequence length (paper: T^q with T = 256)
        default=16, metadata=bound(1, MAX_HORIZON, "tokens per sequence; the STU paper: 2^14"))

    def __post_init__(self):
        check(self.length >= MIN_LENGTH,
              f"length must be >= {MIN_LENGTH} (flag, token, query), got {self.length}")


class InductionHeadsTask(LetterTask):
    name = "induction"
    config_cls = InductionConfig
    specials = SPECIALS

    @property
    def pad_id(self) -> int:
        return self.vocab.id("BLANK")

    def sequences(self, batch_size: int, length: int, g: torch.Generator):
        """``(tokens [batch, length], x [batch], flag_pos [batch])``, vectorised."""
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        check(length >= MIN_LENGTH, f"length must be >= {MIN_LENGTH}, got {length}")
        blank, flag = self.vocab.id("BLANK"), self.vocab.id("FLAG")
        pos = torch.randint(0, length - 2, (batch_size,), generator=g)  # p ∈ [0, length − 3]
        x = torch.randint(0, self.cfg.D, (batch_size,), generator=g)
        tokens = torch.full((batch_size, length), blank, dtype=torch.long)
        rows = torch.arange(batch_size)
        tokens[rows, pos] = flag
        tokens[rows, pos + 1] = x
        tokens[:, -1] = flag  # the query
        return tokens, x, pos

    def batch(self, batch_size: int, g: torch.Generator) -> Batch:
        """Training batch: targets IGNORE everywhere except the final (query) position."""
        tokens, x, _ = self.sequences(batch_size, self.cfg.length, g)
        targets = torch.full_like(tokens, IGNORE)
        targets[:, -1] = x
        return Batch(tokens, targets)

    def example(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.batch(1, g)
        return b.tokens[0], b.targets[0]

    def max_example_len(self) -> int:
        return self.cfg.length

    def eval_batch(self, batch_size: int, g: torch.Generator, length: int | None = None):
        """Prompts = whole sequences (ending in the query flag), answers = the recalled token."""
        L = self.cfg.length if length is None else int(length)
        tokens, x, _ = self.sequences(batch_size, L, g)
        return PromptBatch(tokens, x[:, None])
