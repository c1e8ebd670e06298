"""Memorization datasets (Kim, Kim & Mozafari, "Provable memorization capacity of transformers").

A memorization task is a *fixed, finite* labelled set of N input sequences, not a stream of
fresh samples: a model memorises it when its training error (the fraction of wrong labels on
the whole set) reaches zero. Two labellings, as the paper's two theorems:

* ``labels_per="token"`` (sequence-to-sequence, Thm 3.1): every token of every sequence has a
  label in [C]; targets are ``[batch, n]``.
* ``labels_per="sequence"`` (sequence classification, Thm 4.1): one label in [C] per sequence;
  targets are ``[batch]``.

Glossary (code name -> paper symbol, §3.1):
    n_examples          N, the number of input sequences (the full dataset; ``fraction`` of it
                        is used, App. F "picking the first p %")
    seq_len             n, the length of each input sequence X^(i)
    vocab               |V|, the number of distinct tokens (token ids; a learned embedding maps
                        them to the d-dimensional vectors of §3.1: distinct ids -> distinct rows,
                        so the embedded tokens are tokenwise (r, δ)-separated, Def. 3.1, for
                        any embedding with distinct rows, e.g. almost surely at initialisation)
    n_classes           C, the number of labels
    consistent          Def. 3.2 (consistently labelled) + distinct contexts V^(i): the premises
                        of Thm 3.1.1 / 4.1.1 (memorization *with* permutation equivariance,
                        i.e. a model with no positional information)

Data sources:

* ``synthetic``: N distinct sequences of n uniform token ids, labels uniform at random (so
  nothing can be generalised, only memorised). With ``consistent`` (default) the contexts (the
  sets of tokens of each sequence) are distinct too and a token's label is a function of
  (sequence, token), so equal tokens in one sequence share a label: the data then satisfy
  the premises of both parts of Thm 3.1 / 4.1, whether or not the model sees positions.
* ``conll``: CoNLL-2003 NER (labels per token, the 9 IOB tags, §5.1), standard column format
  (``WORD POS CHUNK TAG``, blank line between sentences, ``-DOCSTART-`` lines skipped).
* ``mnli``: MNLI (labels per sequence, 3 classes), GLUE TSV with a header naming ``sentence1``,
  ``sentence2`` and ``gold_label`` (or ``label``); input is ``premise <SEP> hypothesis``.

Real data come from local files (``data_path``: the file, or a folder holding the standard
file name); the vocabulary is word level, built from the N selected examples (so it does not
change with ``fraction``). Inputs longer than ``max_len`` tokens are truncated; duplicate
inputs are dropped (keeping the first) because the theorems need distinct inputs and a
duplicate with other labels could never be memorised. Sequences are right-padded to one fixed
length with ``<PAD>`` and **never trimmed per batch**: the encoder has no padding mask, so an
example's input must be the same row in every batch and in the error evaluation.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch

from seqprobe import flags
from seqprobe.config import WAS, check
from seqprobe.errors import InputError
from seqprobe.flags import MAX_DIM, MAX_HORIZON, MAX_LENGTH, SEED_FIELD, Config, bound
from tasks.base import IGNORE, Batch, Task, Vocab, letters, make_generator

DATA_SOURCES = ("synthetic", "conll", "mnli")
LABELS_PER = ("token", "sequence")  # what one label belongs to
# CoNLL-2003 NER tags in the order of the HuggingFace conll2003 dataset (9 classes, App. F)
NER_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
# GLUE / HuggingFace MNLI label order (3 classes, App. F)
NLI_LABELS = ("entailment", "neutral", "contradiction")
REAL_CLASSES = {"conll": len(NER_TAGS), "mnli": len(NLI_LABELS)}
REAL_LABELS_PER = {"conll": "token", "mnli": "sequence"}
# file names looked for when data_path is a folder
DATA_FILES = {"conll": ("train.txt", "eng.train", "conll2003/train.txt"),
              "mnli": ("train.tsv", "MNLI/train.tsv")}
WORD_RE = re.compile(r"\w+|[^\w\s]")  # MNLI word-level tokenizer: words and single punctuation


@dataclass(frozen=True)
class MemorizationConfig(Config):
    data: str = "synthetic"  # synthetic | conll | mnli
    # token (Thm 3.1) | sequence (Thm 4.1): a label per token or per sequence; named "level"
    # before (still read from records, and the name its cache keys hash)
    labels_per: str = field(default="token", metadata={WAS: "level"})
    n_examples: int = field(  # N; real data: 0 -> every (distinct) example of the file
        default=256,
        metadata=bound(0, flags.MAX_EXAMPLES, "examples to memorize; paper: up to 10^5; "
                                                "0: the whole file (real data)"))
    fraction: float = field(  # use the first round(fraction · N) examples (App. F: 10 %, …, 100 %)
        default=1.0, metadata=bound(0.0, 1.0, "a fraction of the dataset", open_lo=True))
    seq_len: int = field(  # n (synthetic)
        default=8, metadata=bound(1, MAX_HORIZON, "tokens per sequence; papers: up to 2,048"))
    vocab: int = field(  # |V| (synthetic)
        default=16, metadata=bound(2, MAX_DIM, "tokens of the vocabulary"))
    n_classes: int = field(  # C; 0 -> 2 for synthetic, 9 for CoNLL, 3 for MNLI
        default=0, metadata=bound(0, MAX_DIM, "labels; 0: the default"))
    consistent: bool = True  # synthetic: distinct contexts, consistent labels (Def. 3.2)
    data_path: str = ""  # real data: the file, or a folder holding it
    max_len: int = field(  # real data: inputs truncated to this many tokens
        default=64, metadata=bound(1, MAX_LENGTH, "tokens per string; papers: up to 1,000"))
    seed: int = field(  # data seed: sequences, labels, the order the fractions are taken in
        default=0, metadata=SEED_FIELD)

    def __post_init__(self):
        check(self.data in DATA_SOURCES, f"data must be one of {DATA_SOURCES}, got {self.data!r}")
        check(self.labels_per in LABELS_PER,
              f"labels_per must be one of {LABELS_PER}, got {self.labels_per!r}")
        if self.data == "synthetic":
            check(self.n_examples >= 1, "synthetic data need n_examples >= 1")
            check(self.C >= 2, f"n_classes must be >= 2 (random labels), got {self.n_classes}")
            # N distinct sequences need |V|^n >= N (compared in logs: |V|^n can be astronomic)
            check(self.seq_len * math.log(self.vocab) >= math.log(self.n_examples) - 1e-9,
                  f"only {self.vocab}^{self.seq_len} distinct sequences exist, fewer than "
                  f"n_examples={self.n_examples}; raise vocab or seq_len")
            if self.consistent:  # distinct contexts: at most this many non-empty token sets
                n_sets = sum(math.comb(self.vocab, k)
                             for k in range(1, min(self.seq_len, self.vocab) + 1))
                check(2 * self.n_examples <= n_sets,
                      f"n_examples={self.n_examples} distinct contexts (token sets) are too "
                      f"many for vocab={self.vocab}, seq_len={self.seq_len} (at most half of "
                      f"the {n_sets} sets); raise vocab or seq_len, or set consistent=False")
        else:
            check(self.labels_per == REAL_LABELS_PER[self.data],
                  f"data={self.data} has labels per {REAL_LABELS_PER[self.data]}, got "
                  f"labels_per={self.labels_per!r}")
            check(self.n_classes in (0, REAL_CLASSES[self.data]),
                  f"data={self.data} has {REAL_CLASSES[self.data]} classes, got "
                  f"n_classes={self.n_classes}")
            check(self.data_path != "",
                  f"data={self.data} needs data_path (--data-path FILE): the "
                  f"{'CoNLL-2003 training file' if self.data == 'conll' else 'MNLI train.tsv'}")

    def content_files(self) -> dict[str, Path]:
        """The fields naming a file whose bytes are part of the run: a run's hash covers the
        data file's contents, not its path (labels changed in place are another run)."""
        if self.data == "synthetic" or not self.data_path:
            return {}
        return {"data_path": resolve_data_file(self.data, self.data_path)}

    @property
    def C(self) -> int:  # noqa: N802 - the paper's name for the number of classes
        if self.n_classes:
            return self.n_classes
        return 2 if self.data == "synthetic" else REAL_CLASSES[self.data]


# ---------------------------------------------------------------------------- synthetic
def synthetic_dataset(N: int, n: int, V: int, C: int, labels_per: str, consistent: bool,
                      g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens [N, n], labels [N, n] or [N])``: distinct sequences, uniform random labels.

    ``consistent``: the token sets (contexts V^(i), §3.1) are distinct too, and a token's
    label is drawn once per (sequence, token id), so equal tokens of one sequence share it
    (Def. 3.2). Rejection sampling in chunks; a hopeless request is a :class:`InputError`.
    """
    seen: set[tuple[int, ...]] = set()
    contexts: set[frozenset[int]] = set()
    rows: list[list[int]] = []
    max_draws, draws = 50 * N + 10_000, 0
    while len(rows) < N:
        check(draws < max_draws, f"could not draw {N} distinct sequences"
              f"{' with distinct contexts' if consistent else ''} in {max_draws} tries; "
              "raise vocab or seq_len")
        chunk = min(max(2 * (N - len(rows)), 64), max_draws - draws)
        draws += chunk
        for row in torch.randint(0, V, (chunk, n), generator=g).tolist():
            key, ctx = tuple(row), frozenset(row)
            if key in seen or (consistent and ctx in contexts):
                continue
            seen.add(key)
            contexts.add(ctx)
            rows.append(row)
            if len(rows) == N:
                break
    tokens = torch.tensor(rows, dtype=torch.long)  # [N, n]
    if labels_per == "sequence":
        return tokens, torch.randint(0, C, (N,), generator=g)  # [N]
    if consistent:
        table = torch.randint(0, C, (N, V), generator=g)  # label of token v in sequence i
        return tokens, table.gather(1, tokens)  # [N, n]
    return tokens, torch.randint(0, C, (N, n), generator=g)  # [N, n]


# ---------------------------------------------------------------------------- real data
def resolve_data_file(data: str, data_path: str) -> Path:
    """The data file: ``data_path`` itself, or the standard file name inside that folder."""
    what = "CoNLL-2003 training file" if data == "conll" else "MNLI (GLUE) train.tsv"
    path = Path(data_path).expanduser()
    if path.is_dir():
        for name in DATA_FILES[data]:
            if (path / name).is_file():
                return path / name
        raise InputError(f"{path}: folder has no {what} (looked for "
                        f"{', '.join(DATA_FILES[data])}); pass the file itself as --data-path")
    if not path.is_file():
        raise InputError(f"{what} not found: {path} (download it and pass its path as "
                        "--data-path; nothing is downloaded automatically)")
    return path


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        msg = f"{path}: not UTF-8 text (byte {e.start}); is this the right file?"
        raise InputError(msg) from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None


def read_conll(path: Path) -> list[tuple[list[str], list[int]]]:
    """Sentences of a CoNLL-2003 file as ``(words, tag ids)``; tag ids index :data:`NER_TAGS`.

    Column format: ``WORD [POS CHUNK] TAG`` per line (whitespace separated), a blank line
    between sentences, ``-DOCSTART-`` lines between documents.
    """
    tag_id = {t: i for i, t in enumerate(NER_TAGS)}
    sentences: list[tuple[list[str], list[int]]] = []
    words: list[str] = []
    tags: list[int] = []
    for lineno, line in enumerate(_read_lines(path), start=1):
        cols = line.split()
        if not cols or cols[0] == "-DOCSTART-":
            if words:
                sentences.append((words, tags))
            words, tags = [], []
            continue
        if len(cols) < 2:
            raise InputError(f"{path}:{lineno}: expected 'WORD [POS CHUNK] TAG' columns, got "
                            f"{line.strip()[:60]!r}; is this a CoNLL-2003 file?")
        if cols[-1] not in tag_id:
            raise InputError(f"{path}:{lineno}: unknown NER tag {cols[-1][:30]!r}; expected one "
                            f"of {', '.join(NER_TAGS)}")
        words.append(cols[0])
        tags.append(tag_id[cols[-1]])
    if words:
        sentences.append((words, tags))
    check(bool(sentences), f"{path}: no sentences found; is this a CoNLL-2003 file?")
    return sentences


def read_mnli(path: Path) -> list[tuple[list[str], list[str], int]]:
    """Pairs of an MNLI GLUE TSV as ``(premise words, hypothesis words, label id)``.

    Rows without a gold label (``-``: the annotators disagreed) are skipped, as GLUE does.
    """
    lines = _read_lines(path)
    check(bool(lines), f"{path}: empty file; expected the MNLI (GLUE) train.tsv")
    header = lines[0].split("\t")
    label_col = "gold_label" if "gold_label" in header else "label"
    missing = [c for c in ("sentence1", "sentence2", label_col) if c not in header]
    if missing:
        raise InputError(f"{path}:1: header lacks column(s) {missing}; expected the GLUE MNLI "
                        f"TSV header (… sentence1 sentence2 … gold_label), got {header[:12]}")
    i1, i2, il = (header.index(c) for c in ("sentence1", "sentence2", label_col))
    label_id = {name: i for i, name in enumerate(NLI_LABELS)}
    pairs = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        row = line.split("\t")
        if len(row) != len(header):
            raise InputError(f"{path}:{lineno}: {len(row)} tab-separated fields, the header has "
                            f"{len(header)}")
        label = row[il].strip()
        if label == "-":
            continue
        if label not in label_id:
            raise InputError(f"{path}:{lineno}: unknown label {label[:30]!r}; expected one of "
                            f"{', '.join(NLI_LABELS)}")
        pairs.append((WORD_RE.findall(row[i1]), WORD_RE.findall(row[i2]), label_id[label]))
    check(bool(pairs), f"{path}: no labelled sentence pairs found")
    return pairs


def real_dataset(cfg: MemorizationConfig) -> tuple[torch.Tensor, torch.Tensor, Vocab, int]:
    """``(tokens [N, L], labels, vocab, n_dropped)`` from the file of ``cfg.data``.

    Examples are put in a seeded random order (App. F: "randomly order examples"); the first
    N distinct (after truncation) are kept; ``n_dropped`` counts duplicates passed over.
    """
    path = resolve_data_file(cfg.data, cfg.data_path)
    stat = os.stat(path)
    return _real_dataset_cached(cfg.data, str(path.resolve()), stat.st_mtime_ns, stat.st_size,
                                cfg.n_examples, cfg.max_len, cfg.seed)


# make_run_config / validate_run_config / train each build the task: parse once
@lru_cache(maxsize=4)
def _real_dataset_cached(data: str, path: str, mtime_ns: int, size: int, n_examples: int,
                         max_len: int, seed: int):
    p = Path(path)
    if data == "conll":
        examples = [(w[:max_len], t[:max_len]) for w, t in read_conll(p)]
    else:
        examples = [((a + ["<SEP>"] + b)[:max_len], y) for a, b, y in read_mnli(p)]
    order = torch.randperm(len(examples), generator=make_generator(seed)).tolist()
    chosen, seen, dropped = [], set(), 0
    for i in order:
        words, labels = examples[i]
        key = tuple(words)
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        chosen.append((words, labels))
        if len(chosen) == n_examples:
            break
    if n_examples and len(chosen) < n_examples:
        raise InputError(f"{path}: only {len(chosen)} distinct examples (of {len(examples)}), "
                        f"fewer than n_examples={n_examples}; lower it (0 = all)")
    words_seen: dict[str, None] = {}  # insertion order: ids follow first use in the seeded order
    for words, _ in chosen:
        words_seen.update(dict.fromkeys(w for w in words if w != "<SEP>"))
    vocab = Vocab(tuple(words_seen), ("PAD", "SEP"))
    index = {w: i for i, w in enumerate(vocab.alphabet)}
    index["<SEP>"] = vocab.id("SEP")
    L = max(len(w) for w, _ in chosen)
    tokens = torch.full((len(chosen), L), vocab.id("PAD"), dtype=torch.long)  # [N, L]
    if data == "conll":
        labels = torch.full((len(chosen), L), IGNORE, dtype=torch.long)  # [N, L], pads ignored
    else:
        labels = torch.empty(len(chosen), dtype=torch.long)  # [N]
    for row, (words, y) in enumerate(chosen):
        tokens[row, : len(words)] = torch.tensor([index[w] for w in words])
        if data == "conll":
            labels[row, : len(y)] = torch.tensor(y)
        else:
            labels[row] = y
    return tokens, labels, vocab, dropped


# ---------------------------------------------------------------------------- the task
class MemorizationTask(Task):
    """A fixed labelled set; ``batch`` draws minibatches from it, never fresh examples.

    Attributes: ``tokens`` [N_used, L], ``labels`` [N_used, L] (token) or [N_used] (sequence),
    ``n_total`` (N before ``fraction``), ``n_dropped`` (real data: duplicate inputs skipped).
    """

    name = "memorization"
    config_cls = MemorizationConfig

    def __init__(self, cfg: MemorizationConfig):
        super().__init__(cfg)
        if cfg.data == "synthetic":
            tokens, labels = synthetic_dataset(cfg.n_examples, cfg.seq_len, cfg.vocab, cfg.C,
                                               cfg.labels_per, cfg.consistent,
                                               make_generator(cfg.seed))
            self.vocab = Vocab(letters(cfg.vocab), ("PAD",))  # PAD unused: fixed length n
            self.n_dropped = 0
        else:
            tokens, labels, self.vocab, self.n_dropped = real_dataset(cfg)
        self.n_total = len(tokens)
        n_used = max(1, round(cfg.fraction * self.n_total))  # nested subsets: the first p %
        self.tokens, self.labels = tokens[:n_used], labels[:n_used]

    # ------------------------------------------------------------ sizes
    @property
    def n_used(self) -> int:
        """N of this run: the number of memorised sequences."""
        return len(self.tokens)

    @property
    def n_labels(self) -> int:
        """Number of labels to memorise (labelled tokens with labels per token, else sequences)."""
        return int((self.labels != IGNORE).sum())

    @property
    def seq_len(self) -> int:
        """n: the (padded) input length."""
        return self.tokens.shape[1]

    def model_fields(self) -> dict:
        """An encoder (§5.1: encoder-only, BERT) with the classification head of ``labels_per``."""
        return {"vocab_size": self.vocab.size, "causal": False, "n_classes": self.cfg.C,
                "head": "token_cls" if self.cfg.labels_per == "token" else "seq_cls"}

    # ------------------------------------------------------------ batches
    def subset(self, idx: torch.Tensor) -> Batch:
        """The examples ``idx`` (rows of the fixed set) as a :class:`~tasks.base.Batch`."""
        return Batch(self.tokens[idx], self.labels[idx])

    def batch(self, batch_size: int, g: torch.Generator) -> Batch:
        """``batch_size`` examples drawn with replacement from the fixed set (seeded by ``g``)."""
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        return self.subset(torch.randint(0, self.n_used, (batch_size,), generator=g))

    def epoch(self, batch_size: int, g: torch.Generator):
        """Minibatches covering the fixed set once, in a seeded random order."""
        check(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
        perm = torch.randperm(self.n_used, generator=g)
        for start in range(0, self.n_used, batch_size):
            yield self.subset(perm[start : start + batch_size])

    def example(self, g):
        raise InputError("memorization examples are rows of a fixed set: use batch() "
                        "(no --context packing)")

    def max_example_len(self) -> int:
        return self.seq_len

    # ------------------------------------------------------------ error
    @torch.no_grad()
    def errors(self, model, batch: Batch) -> tuple[int, int]:
        """``(wrong, total)`` labels of ``batch`` under ``model`` (argmax prediction)."""
        was_training = model.training
        model.eval()
        try:
            logits = model(batch.tokens)  # [batch, pos, C] or [batch, C]
        finally:
            model.train(was_training)
        keep = batch.targets != IGNORE
        wrong = (logits.argmax(-1) != batch.targets) & keep
        return int(wrong.sum()), int(keep.sum())

    def train_error(self, model, batch_size: int = 1024) -> float:
        """Fraction of wrong labels on the whole training set (the paper's training error)."""
        device = next(model.parameters()).device
        wrong = total = 0
        for start in range(0, self.n_used, batch_size):
            idx = torch.arange(start, min(start + batch_size, self.n_used))
            w, t = self.errors(model, self.subset(idx).to(device))
            wrong, total = wrong + w, total + t
        return wrong / max(total, 1)

    def extra_metrics(self, model, batch: Batch) -> dict:
        """For ``models.train``: the error on this batch of training examples (its mean over
        the evaluation batches estimates the training error)."""
        w, t = self.errors(model, batch)
        return {"train_error": w / max(t, 1)}
