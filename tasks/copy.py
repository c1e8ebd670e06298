"""The copy task and its duplicated-n-gram variant (Jelassi et al., "Repeat After Me").

Copy (§2.1, §3.1, Fig. 2): ``<BOS> x_1 … x_L <COPY> x_1 … x_L <EOS>`` with x uniform over an
alphabet of D letters and L uniform in [min_len, max_len]. Vocabulary: D letters + BOS, EOS,
COPY, PAD — 30 tokens for D = 26 as in the paper (§3.1). The loss covers only the answer
(App. A.2: "we apply a mask on the input instance").

Duplicated n-gram copy (§3.4, Fig. 4): a uniform string in which one n-gram is overwritten by
a copy of another n-gram of the same string, so the string holds the same n-gram twice,
followed by different tokens — a model that copies by n-gram lookup of length ≤ n is confused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from seqprobe.config import check
from seqprobe.flags import MAX_DIM, MAX_LENGTH, MAX_N, Config, bound
from tasks.base import IGNORE, LetterTask, PromptBatch, Vocab

COPY_SPECIALS = ("BOS", "EOS", "COPY", "PAD")
COPY_TASKS = ("copy", "dup_ngram_copy")  # the names of this module's two tasks


@dataclass(frozen=True)
class CopyConfig(Config):
    D: int = field(  # alphabet size (paper: 26 letters)
        default=26, metadata=bound(2, MAX_DIM, "the alphabet, a token each; papers: 4 to 30"))
    min_len: int = field(
        default=1, metadata=bound(1, MAX_LENGTH, "tokens per string; papers: up to 1,000"))
    max_len: int = field(
        default=20, metadata=bound(1, MAX_LENGTH, "tokens per string; papers: up to 1,000"))

    def __post_init__(self):
        check(self.min_len <= self.max_len,
              f"min_len ({self.min_len}) must be <= max_len ({self.max_len})")


def copy_sequence(x: torch.Tensor, vocab: Vocab) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, targets)`` of one copy example for the string ``x`` (1-D, letters only)."""
    L = len(x)
    bos, eos, cp = (torch.tensor([vocab.id(s)]) for s in ("BOS", "EOS", "COPY"))
    tokens = torch.cat([bos, x, cp, x, eos])  # [2L + 3]
    targets = torch.full_like(tokens, IGNORE)
    targets[L + 1 : 2 * L + 1] = x  # position of <COPY> predicts x_1, …, last x predicts <EOS>
    targets[2 * L + 1] = eos
    return tokens, targets


class CopyTask(LetterTask):
    name = "copy"
    config_cls = CopyConfig
    specials = COPY_SPECIALS

    def sample_length(self, g: torch.Generator) -> int:
        return int(torch.randint(self.cfg.min_len, self.cfg.max_len + 1, (1,), generator=g))

    def sample_string(self, L: int, g: torch.Generator) -> torch.Tensor:
        return torch.randint(0, self.cfg.D, (L,), generator=g)

    def example(self, g):
        return copy_sequence(self.sample_string(self.sample_length(g), g), self.vocab)

    def max_example_len(self) -> int:
        return 2 * self.cfg.max_len + 3

    def example_len(self, L: int) -> int:
        """Tokens of one evaluation example (prompt and answer) for a length-``L`` string."""
        return 2 * L + 3

    def eval_lengths(self) -> tuple[int, ...]:
        """Every string length of the training distribution (L uniform in min_len..max_len):
        the trainer's evaluation scores each of them, so its accuracy is over the distribution
        and it has the score at exactly L (``models.train.evaluation``)."""
        return tuple(range(self.cfg.min_len, self.cfg.max_len + 1))

    def strings(self, batch_size: int, L: int, g: torch.Generator) -> torch.Tensor:
        """[batch, L] uniform strings (overridden by variants that plant structure)."""
        return torch.randint(0, self.cfg.D, (batch_size, L), generator=g)

    def eval_batch(self, batch_size, g, length=None):
        """Prompts ``<BOS> x <COPY>`` with answer x; all rows of one length (drawn if None)."""
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        L = self.sample_length(g) if length is None else int(length)
        check(L >= 1, f"length must be >= 1, got {L}")
        x = self.strings(batch_size, L, g)  # [batch, L]
        bos = torch.full((batch_size, 1), self.vocab.id("BOS"))
        cp = torch.full((batch_size, 1), self.vocab.id("COPY"))
        return PromptBatch(torch.cat([bos, x, cp], dim=1), x)


@dataclass(frozen=True)
class DupNgramConfig(CopyConfig):
    min_len: int = 11  # the default n = 5 needs strings of at least 2n + 1 tokens
    n: int = field(  # length of the duplicated n-gram
        default=5, metadata=bound(1, MAX_N, "n of an n-gram; papers: up to 10"))
    distinct_successor: bool = True  # the two copies are followed by different tokens

    def __post_init__(self):
        super().__post_init__()
        # two non-overlapping copies plus a successor after the earlier one
        check(2 * self.n + 1 <= self.min_len,
              f"n-gram length n={self.n} needs strings of length >= 2n+1={2 * self.n + 1}, "
              f"but min_len={self.min_len}")


def plant_duplicate(x: torch.Tensor, n: int, D: int, g: torch.Generator,
                    distinct_successor: bool = True) -> tuple[torch.Tensor, int, int]:
    """Overwrite one n-gram of the 1-D string ``x`` with a copy of another, non-overlapping one.

    Returns ``(x', src, dst)``: ``x'[dst:dst+n] == x'[src:src+n]`` with ``src + n <= dst``
    (the copy comes later, so copying by n-gram lookup at ``dst`` retrieves the wrong
    successor). With ``distinct_successor`` the tokens after the two copies differ whenever
    both exist.
    """
    L = len(x)
    x = x.clone()
    # src in [0, L-2n-1], dst in [src+n+1, L-n]: src always has a successor inside the string
    src = int(torch.randint(0, L - 2 * n, (1,), generator=g))
    dst = int(torch.randint(src + n + 1, L - n + 1, (1,), generator=g))
    x[dst : dst + n] = x[src : src + n]
    if distinct_successor and dst + n < L and x[dst + n] == x[src + n]:
        shift = int(torch.randint(1, D, (1,), generator=g))
        x[dst + n] = (x[dst + n] + shift) % D
    return x, src, dst


class DuplicatedNgramCopyTask(CopyTask):
    name = "dup_ngram_copy"
    config_cls = DupNgramConfig

    def sample_string(self, L, g):
        x = super().sample_string(L, g)
        return plant_duplicate(x, self.cfg.n, self.cfg.D, g, self.cfg.distinct_successor)[0]

    def strings(self, batch_size, L, g):
        check(L >= 2 * self.cfg.n + 1, f"length {L} too short for a duplicated {self.cfg.n}-gram")
        return torch.stack([self.sample_string(L, g) for _ in range(batch_size)])


class TokenCopyPrompts:
    """A copy task's strings written in a pretrained language model's tokens, in the copy
    paper's prompt format for pretrained models (§4.2, App. B.2): the string twice and its first
    token, a separator after each copy, the model completing the third copy::

        bos x_1 … x_L sep x_1 … x_L sep x_1   ->   answer x_2 … x_L

    ``task`` (a :class:`CopyTask` or :class:`DuplicatedNgramCopyTask` whose D is
    ``len(alphabet)``) draws the strings as indices into ``alphabet``, a 1-D tensor of token
    ids, so whatever the task plants (a duplicated n-gram) holds token for token. The first
    token is given as the paper gives the first word: it tells the model the copy has begun.
    Same ``eval_batch`` / ``example_len`` as the task, so accuracy probes take either.
    """

    def __init__(self, task: CopyTask, alphabet: torch.Tensor, sep: list[int],
                 bos: list[int] | tuple[int, ...] = (), n_ctx: int | None = None):
        check(alphabet.dim() == 1 and len(alphabet) == task.cfg.D,
              f"the alphabet must be 1-D with D={task.cfg.D} token ids, got shape "
              f"{tuple(alphabet.shape)}")
        check(len(sep) >= 1, "the separator must be at least one token")
        self.task, self.alphabet = task, alphabet.long()
        self.sep = torch.tensor(list(sep), dtype=torch.long)
        self.bos = torch.tensor(list(bos), dtype=torch.long)
        self.n_ctx = n_ctx

    def example_len(self, L: int) -> int:
        return len(self.bos) + 3 * L + 2 * len(self.sep)

    def check_length(self, L: int) -> None:
        """One line unless a length-``L`` string makes a prompt the model can read."""
        check(L >= 2, f"length must be >= 2 (the first token is given), got {L}")
        fed = self.example_len(L) - 1  # the last answer token is never fed back in
        check(self.n_ctx is None or fed <= self.n_ctx,
              f"a copy prompt for a length-{L} string is {fed} tokens, more than the model's "
              f"context ({self.n_ctx}); use shorter --lengths")

    def eval_batch(self, batch_size: int, g: torch.Generator,
                   length: int | None = None) -> PromptBatch:
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        L = self.task.sample_length(g) if length is None else int(length)
        self.check_length(L)
        x = self.alphabet[self.task.strings(batch_size, L, g)]  # [batch, L] token ids
        sep = self.sep.expand(batch_size, -1)  # [batch, len(sep)]
        bos = self.bos.expand(batch_size, -1)  # [batch, 0 or 1]
        prompts = torch.cat([bos, x, sep, x, sep, x[:, :1]], dim=1)  # [batch, 3 + 2L + …]
        return PromptBatch(prompts, x[:, 1:])
