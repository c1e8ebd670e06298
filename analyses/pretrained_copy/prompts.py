"""The copy paper's pretrained-model prompts (§4) as token ids, and their greedy verdicts:
:class:`Prompt` (text, answer, tokens, the authors' token budget), the phone-book and copy
prompts of one point (:func:`phonebook_prompts`, :func:`copy_prompts`), and
:func:`greedy_verdicts`, greedy decoding scored as the paper scores (one teacher-forced pass,
step by step only while the verdict is open). Used by :mod:`analyses.pretrained_copy`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks.base import make_generator
from tasks.prompts import (
    COPY_END,
    PHONEBOOK_END,
    copy_prompt,
    phonebook_prompt,
    score_continuation,
    shuffle_words,
    text_window,
)

PHONEBOOK_NEW_TOKENS = 50  # authors' code: max_length = prompt + 50


# ---------------------------------------------------------------------------- greedy verdicts
@dataclass(frozen=True)
class Prompt:
    """One prompt: its text, the answer, the end mark and the tokens."""

    text: str
    answer: str
    end: str  # PHONEBOOK_END or COPY_END
    ids: list[int]  # the prompt's tokens (the tokenizer's defaults, as the authors call it)
    expected: list[int]  # the tokens of " answer" + end: the continuation tried first
    budget: int  # new tokens greedy decoding may write


def make_prompt(tokenizer, text: str, answer: str, end: str) -> Prompt:
    ids = list(tokenizer(text)["input_ids"])
    expected = list(tokenizer((" " + answer if answer else "") + end,
                              add_special_tokens=False)["input_ids"])
    # authors' code: 50 new tokens for the phone-book, max_length = 1.5 * prompt + 50 to copy
    budget = (PHONEBOOK_NEW_TOKENS if end == PHONEBOOK_END
              else int(1.5 * len(ids)) + 50 - len(ids))
    return Prompt(text, answer, end, ids, expected, budget)


def decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=True)


@torch.no_grad()
def greedy_verdicts(model, prompts: list[Prompt], batch_size: int = 4, on_batch=None
                    ) -> list[tuple[bool, str]]:
    """``[(right, continuation)]``: greedy decoding of each prompt, scored as the paper does.

    Rows are padded on the right, which a causal model never reads. The teacher-forced argmax
    of a row equals greedy decoding up to the first token that differs from ``expected``; the
    continuation is that agreed prefix plus the differing token, and decoding goes on one step
    at a time only while the verdict is still open."""
    tok = model.tokenizer
    eos = {t for t in (tok.eos_token_id,) if t is not None}
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    out: list[tuple[bool, str] | None] = [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].ids) + len(
        prompts[i].expected))  # similar lengths share a batch: less padding
    for start in range(0, len(order), batch_size):
        rows = [prompts[i] for i in order[start : start + batch_size]]
        seqs = [p.ids + p.expected[:-1] for p in rows]
        width = max(map(len, seqs))
        tokens = torch.full((len(rows), width), pad, dtype=torch.long)  # [batch, pos]
        for r, s in enumerate(seqs):
            tokens[r, : len(s)] = torch.tensor(s)
        logits = model(tokens.to(model.device))  # [batch, pos, vocab]
        for r, p in enumerate(rows):
            n = len(p.ids)
            guess = logits[r, n - 1 : n - 1 + len(p.expected)].argmax(-1).tolist()
            agree = next((j for j, (a, b) in enumerate(zip(guess, p.expected, strict=True))
                          if a != b), len(p.expected))
            generated = p.expected[:agree] + guess[agree : agree + 1]
            out[order[start + r]] = _finish(model, p, generated, eos)
        if on_batch is not None:
            on_batch(len(rows))
    return out  # type: ignore[return-value]


def _finish(model, p: Prompt, generated: list[int], eos: set[int]) -> tuple[bool, str]:
    """Decode on from ``generated`` (greedy, no cache: rare and short) until decided."""
    tok = model.tokenizer
    while True:
        stop = next((j for j, t in enumerate(generated) if t in eos), None)
        final = stop is not None or len(generated) >= p.budget
        generated = generated[: min(p.budget, stop if stop is not None else len(generated))]
        text = decode(tok, generated)
        verdict = score_continuation(text, p.answer, p.end, final=final)
        if verdict is not None:
            return verdict, text
        seq = torch.tensor([p.ids + generated], device=model.device)  # [1, pos]
        generated = generated + [int(model(seq)[0, -1].argmax())]


# ---------------------------------------------------------------------------- prompts per point
def phonebook_prompts(tokenizer, n_entries: int, n: int, seed: int) -> list[Prompt]:
    """``n`` lookups in books of ``n_entries`` lines; the same books for every model."""
    g = make_generator(seed * 100_003 + n_entries)
    return [make_prompt(tokenizer, *phonebook_prompt(n_entries, g), PHONEBOOK_END)
            for _ in range(n)]


def copy_prompts(tokenizer, text_ids: list[int], n_tokens: int, n: int, seed: int,
                 shuffle: bool = False) -> list[Prompt]:
    """``n`` copy prompts of ``n_tokens``-token windows of the text (the same windows for
    every model that shares a tokenizer)."""
    g = make_generator(seed * 100_003 + 50_000 + n_tokens)
    out = []
    for _ in range(n):
        window = text_window(text_ids, n_tokens, lambda ids: decode(tokenizer, ids), g)
        if shuffle:
            window = shuffle_words(window, g)
        out.append(make_prompt(tokenizer, *copy_prompt(window), COPY_END))
    return out
