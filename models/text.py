"""Text in a model's task vocabulary: TransformerLens' ``to_tokens`` / ``to_string`` family on a
suite model, and the task that defines the vocabulary (``model.task``).

A suite model reads token ids of the task it was trained on (:mod:`tasks`: letters, ``<BOS>``,
``<COPY>`` …). :class:`TaskText` is the part of :class:`models.base.SuiteModel` that turns text
into those ids and back, so that strings go wherever tokens go (``model("ab<COPY>ab")``,
``run_with_cache``, TransformerLens' patching and head detector), as on a ``HookedTransformer``.
Its own module because it is one job: the model's computation does not depend on it.
"""

from __future__ import annotations

import re

import torch
from jaxtyping import Int
from torch import Tensor

from seqprobe.config import check
from seqprobe.errors import InputError
from tasks.base import Vocab
from tasks.registry import Task, make_task

_SPECIAL = re.compile(r"(<[A-Za-z_][A-Za-z0-9_]*>)")  # how Vocab.decode writes a special token
SHOWN_SYMBOLS = 12  # how many of a vocabulary's symbols an error message lists


def encode_text(vocab: Vocab, text: str) -> list[int]:
    """Token ids of ``text`` in ``vocab``, the inverse of ``Vocab.decode``.

    Special tokens are written ``<NAME>`` (``<BOS>``, ``<COPY>``); alphabet symbols follow each
    other directly when they are all one character long (``"abc"``; whitespace between them is
    refused in one line, not dropped: ``"hello world"`` is no copy-task text) and are separated
    by whitespace otherwise (``"s10 s11"``). Text with pieces that are not tokens is one
    :class:`InputError` naming every such piece."""
    index = {sym: i for i, sym in enumerate(vocab.alphabet)}
    single = all(len(sym) == 1 for sym in vocab.alphabet)
    if single:
        # one-character symbols follow each other directly: a space inside the text would be
        # dropped, and "hello world" read as "helloworld" (leading / trailing ones only pad)
        inner = [i for i, ch in enumerate(text.strip()) if ch.isspace() and ch not in index]
        if inner:
            lead = len(text) - len(text.lstrip())
            where = ", ".join(str(i + lead) for i in inner[:SHOWN_SYMBOLS])
            joined = "".join(ch for ch in text.strip() if not ch.isspace())
            raise InputError(f"{text!r}: whitespace (at character {where}) is not a token of "
                             "this model's task vocabulary, whose symbols are one character "
                             f"each and follow each other directly: write {joined!r} if that "
                             "is what you mean")
    ids: list[int] = []
    unknown: list[str] = []
    for part in _SPECIAL.split(text):
        if _SPECIAL.fullmatch(part) and part[1:-1] in vocab.specials:
            ids.append(vocab.id(part[1:-1]))
            continue
        pieces = list(part) if single else part.split()
        for piece in pieces:
            if piece in index:
                ids.append(index[piece])
            elif not (single and piece.isspace()) and piece not in unknown:
                unknown.append(piece)
    if unknown:
        shown = ", ".join(vocab.symbols[:SHOWN_SYMBOLS]) + (
            " …" if vocab.size > SHOWN_SYMBOLS else "")
        names = ", ".join(repr(p) for p in unknown[:SHOWN_SYMBOLS]) + (
            f" and {len(unknown) - SHOWN_SYMBOLS} more" if len(unknown) > SHOWN_SYMBOLS else "")
        verb = "is not a token" if len(unknown) == 1 else "are not tokens"
        raise InputError(f"{names} {verb} of this model's task vocabulary ({shown})")
    return ids


class TaskText:
    """``task``, ``set_task`` and TransformerLens' text methods for a model whose ``cfg`` has
    ``vocab_size`` and ``device`` and whose class has ``arch`` (a mixin of ``SuiteModel``)."""

    @property
    def task(self) -> Task | None:
        """The task this model was trained on, a :mod:`tasks` object (``.name``, ``.cfg``,
        ``.vocab``, ``.batch(n, g)``, ``.eval_batch(n, g)``): rebuilt from its checkpoint's task
        config by ``models.load``; None for a model built in code until :meth:`set_task`."""
        return self.__dict__.get("_task")

    def set_task(self, task: str | Task | None, config: dict | None = None) -> None:
        """Give this model its task: a task name and config dict (``set_task("copy", {"D":
        26})``), a task object, or None. A model loaded from a checkpoint has its task already;
        one built in code needs this before text (:meth:`to_tokens`) or :meth:`save`."""
        if isinstance(task, str):
            task = make_task(task, config or {})
        else:
            check(config is None, "set_task takes a config only with a task name")
            check(task is None or isinstance(task, Task),
                  f"set_task takes a task name, a task object or None, got {task!r}")
        self.__dict__["_task"] = task

    def require_task(self, what: str) -> Task:
        """``self.task``, or one :class:`InputError` line saying ``what`` needs it."""
        task = self.task
        check(task is not None,
              f"this {self.arch} model has no task (it was built in code, not loaded from a "
              f"checkpoint), and {what} needs one: call model.set_task(name, config) first")
        return task

    @property
    def task_vocab(self) -> Vocab:
        """The vocabulary of :attr:`task`: what :meth:`to_tokens` and :meth:`to_string` read."""
        task = self.require_task("text (strings instead of token ids)")
        vocab = task.vocab
        check(vocab.size <= self.cfg.vocab_size,
              f"the {task.name!r} task has {vocab.size} tokens but the model "
              f"{self.cfg.vocab_size}: the task config does not belong to this model")
        return vocab

    def to_tokens(self, input: str | list[str] | Tensor, prepend_bos: bool | None = None,
                  padding_side: str | None = None, move_to_device: bool = True,
                  truncate: bool = True) -> Int[Tensor, "batch pos"]:
        """TransformerLens' ``to_tokens``: ``[batch, pos]`` ids of a string (or a list of them,
        padded with ``<PAD>``) in the task vocabulary (:func:`encode_text`).

        ``prepend_bos=None`` writes the sequence the way the task does: ``<BOS>`` first when the
        vocabulary has one (not twice when the text starts with it); ``True`` insists on it,
        ``False`` leaves the text as written. A tensor of ids passes through (a 1-D one gains the
        batch axis). ``truncate`` is accepted for TL's signature: nothing has a context bound.
        """
        if isinstance(input, Tensor):
            check(not input.is_floating_point() and not input.is_complex()
                  and input.dim() in (1, 2),
                  f"token ids must be a 1-D or [batch, pos] integer tensor, got "
                  f"{input.dtype} of shape {tuple(input.shape)}")
            tokens = input if input.dim() == 2 else input[None]
            return tokens.to(self.cfg.device) if move_to_device else tokens
        tokens, _ = self.tokens_and_mask(input, prepend_bos, padding_side)
        return tokens.to(self.cfg.device) if move_to_device else tokens

    def tokens_and_mask(self, input: str | list[str], prepend_bos: bool | None = None,
                        padding_side: str | None = None
                        ) -> tuple[Int[Tensor, "batch pos"], Tensor | None]:
        """:meth:`to_tokens` of text (on the CPU) and, where strings of different lengths were
        padded, the ``[batch, pos]`` bool mask of real tokens (None where nothing was padded):
        TransformerLens' loss leaves padding out, and so does ``return_type="loss"`` here."""
        check(isinstance(input, str) or (isinstance(input, (list, tuple)) and
                                         all(isinstance(t, str) for t in input)),
              f"text must be a string or a list of strings, got {type(input).__name__}")
        vocab = self.task_vocab
        texts = [input] if isinstance(input, str) else list(input)
        check(len(texts) >= 1, "to_tokens needs at least one string")
        bos = vocab.id("BOS") if "BOS" in vocab.specials else None
        check(not (prepend_bos and bos is None),
              "prepend_bos=True, but this task's vocabulary has no <BOS>")
        rows = []
        for text in texts:
            ids = encode_text(vocab, text)
            if prepend_bos is not False and bos is not None and ids[:1] != [bos]:
                ids = [bos, *ids]
            rows.append(ids)
        width = max(len(r) for r in rows)
        side = padding_side or "right"
        check(side in ("left", "right"), f"padding_side must be left or right, got {side!r}")
        if all(len(r) == width for r in rows):
            return torch.tensor(rows, dtype=torch.long).reshape(len(rows), width), None
        check("PAD" in vocab.specials,
              "strings of different lengths need a <PAD> token, and this task has none")
        pad = vocab.id("PAD")
        tokens = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, r in enumerate(rows):
            span = slice(0, len(r)) if side == "right" else slice(width - len(r), width)
            tokens[i, span] = torch.tensor(r, dtype=torch.long)
            mask[i, span] = True
        return tokens, mask

    def to_str_tokens(self, input: str | list[str] | Tensor, prepend_bos: bool | None = None
                      ) -> list[str] | list[list[str]]:
        """TransformerLens' ``to_str_tokens``: each token as its symbol (``<BOS>``, ``a`` …).
        One string or one row of ids gives a list; a batch gives a list per row."""
        tokens = self.to_tokens(input, prepend_bos=prepend_bos, move_to_device=False)
        syms = self.task_vocab.symbols
        rows = [[syms[int(i)] for i in row] for row in tokens.tolist()]
        single = isinstance(input, str) or (isinstance(input, Tensor) and
                                            (input.dim() == 1 or input.shape[0] == 1))
        return rows[0] if single else rows

    def to_string(self, tokens: Tensor) -> str | list[str]:
        """TransformerLens' ``to_string``: ``Vocab.decode`` of one token id (a 0-D tensor), a
        1-D sequence, or each row of a batch."""
        check(tokens.dim() in (0, 1, 2), f"tokens must be one id, 1-D or [batch, pos], got "
                                         f"{tuple(tokens.shape)}")
        vocab = self.task_vocab
        if tokens.dim() == 0:
            return vocab.decode(tokens[None])
        return vocab.decode(tokens) if tokens.dim() == 1 else [vocab.decode(r) for r in tokens]

    def to_single_token(self, string: str) -> int:
        """The id of a string that is exactly one token (``"a"``, ``"<COPY>"``)."""
        ids = encode_text(self.task_vocab, string)
        check(len(ids) == 1, f"{string!r} is {len(ids)} tokens, not one")
        return ids[0]
