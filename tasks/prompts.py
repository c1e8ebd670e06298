"""Text prompts of the copy paper's pretrained-model experiments (Jelassi et al. §4.2, §4.3):
the phone-book lookup of Fig. 1c and copying a text of Fig. 7, as plain strings for any
tokenizer, with the paper's scoring of a model's continuation.

The formats follow §4 and the authors' evaluation code (``pretrained_exps/data_utils.py`` and
``test_utils.py`` of sjelassi/transformers_ssm_copy; the paper's appendix gives no prompt
text of its own):

* phone-book — the book, one ``"Name: number"`` per line; a blank line; two solved queries
  (few-shot, entries of the book); a blank line; the query name and a colon::

      John Powell: 609-323-7777
      Mary Jones: 201-555-0142
      Ann Lee: 718-200-1234

      Ann Lee: 718-200-1234
      John Powell: 609-323-7777

      Mary Jones:                      ->  answer "201-555-0142"

  The continuation's first line, stripped, must equal the number.
* copy — the text twice and its first word, blank lines between::

      {text}\\n\\n{text}\\n\\n{first word}  ->  answer: the text after its first word

  The continuation up to the first blank line (newlines read as spaces), stripped, must equal
  the answer.

Pure functions of a seeded ``torch.Generator`` and of ``encode`` / ``decode`` callables (a
tokenizer's), so no model code lives here.
"""

from __future__ import annotations

import codecs
import os
import stat
import sys
from collections.abc import Callable, Sequence

import torch

from seqprobe.config import check
from seqprobe.errors import InputError
from tasks.phonebook import PhoneBookConfig, PhoneBookTask

PHONEBOOK_SHOTS = 2  # §4.3: "two few-shot examples"
PHONEBOOK_END = "\n"  # the answer is the first line of the continuation
COPY_END = "\n\n"  # the copy ends at the first blank line


# ---------------------------------------------------------------------------- phone-book
def phonebook_prompt(n_entries: int, g: torch.Generator) -> tuple[str, str]:
    """``(prompt, answer)`` of one phone-book lookup with ``n_entries`` lines (L of Fig. 1c):
    distinct synthetic names (``tasks/data``) with numbers like ``609-323-7777`` (§4.3), two
    solved entries of the book as shots, then the query, a third entry."""
    check(n_entries >= PHONEBOOK_SHOTS + 1,
          f"a phone book needs >= {PHONEBOOK_SHOTS + 1} entries (two shots and the query), "
          f"got {n_entries}")
    task = PhoneBookTask(PhoneBookConfig(n_entries=n_entries, n_shots=PHONEBOOK_SHOTS))
    lines = [f"{name}: {number}" for name, number in task.book(g)]
    *shots, query = torch.randperm(n_entries, generator=g)[: PHONEBOOK_SHOTS + 1].tolist()
    name, number = lines[query].split(": ")
    prompt = ("\n".join(lines) + "\n\n" + "\n".join(lines[i] for i in shots) + "\n\n"
              + f"{name}:")
    return prompt, number


# ---------------------------------------------------------------------------- copy
def normalize_space(text: str) -> str:
    """Whitespace runs (newlines included) as one space, ends stripped: the paper turns a
    sampled string's newlines into spaces; collapsing runs as well keeps the first word and
    the answer well defined (no empty words)."""
    return " ".join(text.split())


def copy_prompt(text: str) -> tuple[str, str]:
    """``(prompt, answer)`` of copying ``text`` (§4.2): two copies and the first word; the
    answer is the rest of the text."""
    text = normalize_space(text)
    check(bool(text), "the text to copy is empty")
    first, _, rest = text.partition(" ")
    return f"{text}\n\n{text}\n\n{first}", rest


def text_window(ids: Sequence[int], n_tokens: int, decode: Callable[[list[int]], str],
                g: torch.Generator) -> str:
    """A window of ``n_tokens`` consecutive tokens of ``ids`` at a random start, decoded and
    whitespace-normalised (§4.2: strings "with varying number of tokens")."""
    check(n_tokens >= 1, f"copy lengths must be >= 1 token, got {n_tokens}")
    check(len(ids) >= n_tokens, f"the text has {len(ids)} tokens, fewer than the copy length "
          f"{n_tokens}")
    start = int(torch.randint(0, len(ids) - n_tokens + 1, (1,), generator=g))
    return normalize_space(decode(list(ids[start : start + n_tokens])))


def shuffle_words(text: str, g: torch.Generator) -> str:
    """The words of ``text`` in a random order (Fig. 7b: "randomly shuffle the order of the
    words")."""
    words = text.split()
    return " ".join(words[i] for i in torch.randperm(len(words), generator=g).tolist())


# ---------------------------------------------------------------------------- scoring
def score_continuation(continuation: str, answer: str, end: str, final: bool = False
                       ) -> bool | None:
    """The paper's verdict on a model's (possibly unfinished) continuation: the text up to
    ``end`` (``PHONEBOOK_END`` or ``COPY_END``), newlines as spaces, stripped, equals
    ``answer``. ``None`` while undecided: no ``end`` yet and the text so far can still become
    the answer. ``final=True`` (generation stopped) decides on what is there."""
    head, found, _ = continuation.partition(end)
    pred = head.replace("\n", " ").lstrip()
    if found or final:
        return pred.strip() == answer
    partial = pred.rstrip("\ufffd")  # a byte-level token may end inside a character
    if answer.startswith(partial) or partial.rstrip() == answer:
        return None
    return False


# ---------------------------------------------------------------------------- offline text
# The default text to copy when the user names no file. It is NOT natural text (the paper
# samples C4, which needs a download): sentences from a small template grammar over common
# English words, so that a pretrained LM sees English words in grammatical order, while the
# vocabulary and sentence shapes are far more repetitive than real text.
_WORDS = {
    "det": "the a this that every one some another".split(),
    "adj": ("old new small large quiet bright early late green cold warm young long short "
            "happy simple heavy clean busy open").split(),
    "noun": ("house river teacher garden window letter city road child doctor market table "
             "village student engine morning story friend station forest bridge painter "
             "kitchen boat mountain").split(),
    "verb": ("found saw opened carried painted visited followed watched built cleaned moved "
             "closed wrote read reached crossed").split(),
    "prep": "near behind under across beside above through after before".split(),
    "adv": "slowly quickly quietly carefully again soon often finally".split(),
}
_SENTENCES = (
    ("det", "adj", "noun", "verb", "det", "noun", "prep", "det", "noun"),
    ("det", "noun", "adv", "verb", "det", "adj", "noun"),
    ("det", "adj", "noun", "prep", "det", "noun", "verb", "det", "noun", "adv"),
    ("det", "noun", "verb", "det", "adj", "adj", "noun", "prep", "det", "noun"),
)


def generated_text(n_words: int, g: torch.Generator) -> str:
    """At least ``n_words`` words of template sentences (see ``_SENTENCES``), each capitalised
    and ending in a full stop: the suite's offline stand-in for natural text."""
    out: list[str] = []
    while len(out) < n_words:
        shape = _SENTENCES[int(torch.randint(len(_SENTENCES), (1,), generator=g))]
        words = [_WORDS[k][int(torch.randint(len(_WORDS[k]), (1,), generator=g))] for k in shape]
        words[0] = words[0].capitalize()
        words[-1] += "."
        out += words
    return " ".join(out)


GENERATED_TEXT_NOTE = (f"not natural text: sentences the suite generates offline from a "
                       f"template grammar over {len({w for v in _WORDS.values() for w in v})} "
                       f"common English words (tasks/prompts.py); give --text FILE for natural "
                       f"text")


# How much of a --text file is read: the analyses cut windows of at most a few hundred tokens
# at random starts, which a megabyte of text offers by the hundred thousand, while a tokenizer
# holds several hundred bytes per byte of text it encodes (a whole-gigabyte file is gigabytes).
TEXT_MAX_BYTES = 2**20
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"))


def read_text(path: str, flag: str = "--text", max_bytes: int = TEXT_MAX_BYTES) -> str:
    """A user's natural-text file (UTF-8), or one line saying why it cannot serve. Only its
    first ``max_bytes`` are read (cut back to the last whitespace, so no word or character is
    split; a note on stderr says so); what is not a regular file is refused by its kind
    before it is opened (a FIFO would block the read, a device never end)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{flag} {path}: no such file") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{flag} {path}: cannot read it ({getattr(e, 'strerror', None) or e})"
                        ) from None
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _FILE_KINDS if test(st.st_mode)), "not a regular file")
        raise InputError(f"{flag} {path}: is {kind}, not a text file")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
        cut = len(data) > max_bytes
        # a prefix may end inside a character: the incremental decoder leaves it pending
        text = codecs.getincrementaldecoder("utf-8")().decode(data[:max_bytes], final=not cut)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{flag} {path}: cannot read it as UTF-8 text ({e})") from None
    if cut:
        end = max(text.rfind(c) for c in " \n\t\r")  # the last word may go on past the cut
        text = text[: end + 1] if text[: end + 1].strip() else text
        print(f"note: {flag} {path}: reading its first {len(text.encode()):,} bytes of "
              f"{st.st_size:,} (the windows the analysis cuts need no more)", file=sys.stderr)
    check(bool(text.split()), f"{flag} {path}: the file holds no words")
    return text
