"""Phone-book lookup (Jelassi et al. §4.3): a book of "First Last: 609-323-7777" lines, a few
solved queries (few-shot), then a query name whose number must be produced.

Character-level tokenizer; names come from the packaged lists ``tasks/data/*_names.txt``
(no download). Example (one line per entry, ``\\n`` separated)::

    <BOS>John Smith: 609-323-7777
    Mary Jones: 201-555-0142
    <COPY>Mary Jones: 201-555-0142
    John Smith:  ->  609-323-7777<EOS>
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import torch

from seqprobe.config import check
from seqprobe.flags import MAX_ENTRIES, Config, bound
from tasks.base import IGNORE, PromptBatch, Task, Vocab
from tasks.copy import COPY_SPECIALS

CHARS = tuple("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 :-\n")
NUMBER_LEN = 12  # "609-323-7777"


@cache
def names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(first names, last names) from the packaged lists."""
    data = resources.files("tasks") / "data"
    first = tuple((data / "first_names.txt").read_text().split())
    last = tuple((data / "last_names.txt").read_text().split())
    return first, last


@dataclass(frozen=True)
class PhoneBookConfig(Config):
    n_entries: int = field(  # lines in the phone book
        default=20, metadata=bound(1, MAX_ENTRIES, "phone-book entries; paper: up to 140"))
    n_shots: int = field(  # solved queries before the real one
        default=2, metadata=bound(0, MAX_ENTRIES, "phone-book shots; paper: 2"))

    def __post_init__(self):
        first, last = names()
        check(self.n_entries <= len(first) * len(last),
              f"n_entries ({self.n_entries}) exceeds the {len(first) * len(last)} distinct names")
        check(self.n_shots < self.n_entries,
              f"n_shots must be in [0, n_entries), got {self.n_shots}")


class PhoneBookTask(Task):
    name = "phonebook"
    config_cls = PhoneBookConfig

    def __init__(self, cfg: PhoneBookConfig):
        super().__init__(cfg)
        self.vocab = Vocab(CHARS, COPY_SPECIALS)
        self._index = {c: i for i, c in enumerate(CHARS)}

    def encode(self, text: str) -> torch.Tensor:
        try:
            return torch.tensor([self._index[c] for c in text], dtype=torch.long)
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the phone-book alphabet") from None

    def book(self, g: torch.Generator) -> list[tuple[str, str]]:
        """``n_entries`` (name, number) pairs with distinct names."""
        first, last = names()
        picks = torch.randperm(len(first) * len(last), generator=g)[: self.cfg.n_entries]
        digits = torch.randint(0, 10, (self.cfg.n_entries, 10), generator=g).tolist()
        out = []
        for p, d in zip(picks.tolist(), digits, strict=True):
            s = "".join(map(str, d))
            out.append((f"{first[p // len(last)]} {last[p % len(last)]}",
                        f"{s[:3]}-{s[3:6]}-{s[6:]}"))
        return out

    def prompt_answer(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        entries = self.book(g)
        order = torch.randperm(len(entries), generator=g).tolist()
        shots, query = order[: self.cfg.n_shots], order[self.cfg.n_shots]
        book = "".join(f"{n}: {p}\n" for n, p in entries)
        shot_text = "".join(f"{entries[i][0]}: {entries[i][1]}\n" for i in shots)
        prompt = torch.cat([
            torch.tensor([self.vocab.id("BOS")]), self.encode(book),
            torch.tensor([self.vocab.id("COPY")]),
            self.encode(shot_text + entries[query][0] + ": "),
        ])
        return prompt, self.encode(entries[query][1])

    def example(self, g):
        prompt, answer = self.prompt_answer(g)
        eos = torch.tensor([self.vocab.id("EOS")])
        tokens = torch.cat([prompt, answer, eos])
        targets = torch.full_like(tokens, IGNORE)
        targets[len(prompt) - 1 : len(prompt) + len(answer)] = torch.cat([answer, eos])
        return tokens, targets

    def max_example_len(self) -> int:
        first, last = names()
        line = max(map(len, first)) + 1 + max(map(len, last)) + 2 + NUMBER_LEN + 1
        return 2 + line * (self.cfg.n_entries + self.cfg.n_shots + 1) + 1

    def eval_batch(self, batch_size, g, length=None):
        """Prompts differ in length (names vary), so each batch holds one example per row of
        a common length: rows are drawn until ``batch_size`` share the first one's length."""
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        check(length is None, "phone-book prompts have no length parameter")
        pairs = [self.prompt_answer(g)]
        while len(pairs) < batch_size:
            p, a = self.prompt_answer(g)
            if len(p) == len(pairs[0][0]):
                pairs.append((p, a))
        return PromptBatch(torch.stack([p for p, _ in pairs]), torch.stack([a for _, a in pairs]))
