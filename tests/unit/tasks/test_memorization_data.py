"""Memorization datasets and their loaders (issue 6): the synthetic sequences (distinct, seeded,
nested fractions, consistent labels), the task's model fields and refusals, and the CoNLL-2003
and MNLI loaders on small fixtures, malformed and missing files included."""

from __future__ import annotations

import pytest
import torch

from analyses.zoo.levels import make_run_config
from models.registry import build_model
from models.train.loss import loss_of
from seqprobe.errors import InputError
from tasks.base import IGNORE, make_generator
from tasks.memorization import NER_TAGS, NLI_LABELS, read_conll, synthetic_dataset
from tasks.registry import make_task


# ---------------------------------------------------------------------------- synthetic
@pytest.mark.parametrize("consistent", [True, False])
def test_synthetic_sequences_are_distinct_and_labels_in_range(consistent):
    task = make_task("memorization", n_examples=300, seq_len=5, vocab=12, n_classes=3,
                     consistent=consistent, seed=3)
    rows = [tuple(r) for r in task.tokens.tolist()]
    assert task.tokens.shape == (300, 5) and len(set(rows)) == 300
    assert int(task.labels.min()) >= 0 and int(task.labels.max()) <= 2
    assert set(task.labels.unique().tolist()) == {0, 1, 2}  # uniform labels use every class
    if consistent:  # Thm 3.1.1 premise: distinct contexts (token sets)
        assert len({frozenset(r) for r in rows}) == 300


def test_consistent_labels_equal_tokens_share_a_label():
    """Def. 3.2: X[:, k] = X[:, l] in one sequence implies Y[k] = Y[l]."""
    tokens, labels = synthetic_dataset(100, 8, 10, 5, "token", True, make_generator(0))
    repeats = 0
    for x, y in zip(tokens.tolist(), labels.tolist(), strict=True):
        for k in range(8):
            for l in range(8):
                if x[k] == x[l]:
                    repeats += k != l
                    assert y[k] == y[l]
    assert repeats > 0  # 8 tokens over 10 ids: the condition was really exercised
    # without consistency, equal tokens of a sequence get independent labels (some differ)
    tokens, labels = synthetic_dataset(100, 8, 10, 5, "token", False, make_generator(0))
    differ = sum(y[k] != y[l] for x, y in zip(tokens.tolist(), labels.tolist(), strict=True)
                 for k in range(8) for l in range(8) if x[k] == x[l])
    assert differ > 0


def test_synthetic_is_seeded_and_fractions_are_nested_prefixes():
    a = make_task("memorization", n_examples=50, seed=1)
    b = make_task("memorization", n_examples=50, seed=1)
    c = make_task("memorization", n_examples=50, seed=2)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.labels, b.labels)
    assert not torch.equal(a.tokens, c.tokens)
    half = make_task("memorization", n_examples=50, seed=1, fraction=0.3)
    assert half.n_used == 15 and half.n_total == 50
    assert torch.equal(half.tokens, a.tokens[:15]) and torch.equal(half.labels, a.labels[:15])


def test_sequence_level_batches_come_from_the_fixed_set():
    task = make_task("memorization", labels_per="sequence", n_examples=20, n_classes=4, seed=0)
    assert task.labels.shape == (20,) and task.n_labels == 20
    batch = task.batch(64, make_generator(5))
    assert batch.tokens.shape == (64, 8) and batch.targets.shape == (64,)
    table = {tuple(x): int(y) for x, y in zip(task.tokens.tolist(), task.labels, strict=True)}
    for x, y in zip(batch.tokens.tolist(), batch.targets.tolist(), strict=True):
        assert table[tuple(x)] == y  # every drawn row is a training example with its label
    seen = torch.cat([b.tokens for b in task.epoch(6, make_generator(0))])
    assert sorted(map(tuple, seen.tolist())) == sorted(table)  # an epoch covers each once


def test_model_fields_build_an_encoder_classifier_and_the_loss_takes_both_shapes():
    for level, head, tshape in (("token", "token_cls", (4, 8)), ("sequence", "seq_cls", (4,))):
        run_config = make_run_config("transformer", "memorization", "quick",
                         task_config={"level": level, "n_examples": 10, "n_classes": 3})
        assert run_config.model.head == head and run_config.model.n_classes == 3
        assert run_config.model.causal is False and run_config.model.vocab_size == 17
        model = build_model("transformer", run_config.model)
        batch = make_task("memorization", run_config.task_dict).batch(4, make_generator(0))
        assert batch.targets.shape == tshape
        assert torch.isfinite(loss_of(model, batch))


@pytest.mark.parametrize("bad", [
    {"n_examples": 100, "vocab": 2, "seq_len": 3},  # only 8 sequences exist
    {"n_examples": 20, "vocab": 3, "seq_len": 4},  # only 7 token sets: contexts can't be distinct
    {"n_classes": 1}, {"fraction": 0.0}, {"fraction": 1.5}, {"level": "pair"},
    {"data": "imdb"}, {"data": "conll"}, {"data": "mnli", "data_path": "x", "labels_per": "token"},
    {"data": "conll", "data_path": "x", "n_classes": 3}, {"n_examples": -1},
])
def test_bad_configs_are_task_errors(bad):
    with pytest.raises(InputError):
        make_task("memorization", bad)


def test_example_and_packing_are_refused():
    task = make_task("memorization", n_examples=4)
    with pytest.raises(InputError, match="fixed set"):
        task.example(make_generator(0))
    with pytest.raises(InputError):
        task.batch(0, make_generator(0))


# ---------------------------------------------------------------------------- real data
DOCSTART = "-DOCSTART- -X- -X- O\n\n"
EU_SENTENCE = """EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O

"""
# two documents that both hold the EU sentence: the loader keeps one copy
CONLL = (DOCSTART + EU_SENTENCE + "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n"
         + DOCSTART + EU_SENTENCE + "BRUSSELS NNP B-NP B-LOC\n1996-08-22 CD I-NP O\n")


def test_conll_loader_on_a_fixture(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(CONLL)
    sents = read_conll(path)
    assert len(sents) == 4 and sents[1] == (["Peter", "Blackburn"], [1, 2])
    task = make_task("memorization", data="conll", data_path=str(tmp_path), n_examples=0)
    assert task.n_total == 3 and task.n_dropped == 1  # the repeated sentence is dropped
    assert task.tokens.shape == (3, 5) and task.cfg.C == 9 == len(NER_TAGS)
    pad = task.vocab.id("PAD")
    for x, y in zip(task.tokens.tolist(), task.labels.tolist(), strict=True):
        words = [task.vocab.alphabet[i] for i in x if i != pad]
        assert (y[len(words):] == [IGNORE] * (5 - len(words)))  # no loss on padding
        if words[0] == "EU":
            assert y[:5] == [3, 0, 7, 0, 0]  # B-ORG O B-MISC O O
    assert task.vocab.D == 9  # every distinct word once
    assert task.model_fields()["head"] == "token_cls"
    short = make_task("memorization", data="conll", data_path=str(path), n_examples=2,
                      max_len=2)
    assert short.tokens.shape == (2, 2)


@pytest.mark.parametrize("text, match", [
    ("EU\n", ":1: expected 'WORD"),
    ("EU NNP B-NP B-ORG\nrejects VBZ B-VP B-FOO\n", ":2: unknown NER tag 'B-FOO'"),
    ("\n\n", "no sentences"),
])
def test_conll_malformed_files(tmp_path, text, match):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=match):
        make_task("memorization", data="conll", data_path=str(path), n_examples=0)


def test_missing_or_binary_data_files(tmp_path):
    with pytest.raises(InputError, match="not found"):
        make_task("memorization", data="conll", data_path=str(tmp_path / "nope.txt"))
    with pytest.raises(InputError, match="folder has no"):
        make_task("memorization", data="mnli", labels_per="sequence", data_path=str(tmp_path))
    binary = tmp_path / "train.txt"
    binary.write_bytes(b"\xff\xfe\x00\x01garbage")
    with pytest.raises(InputError, match="not UTF-8"):
        make_task("memorization", data="conll", data_path=str(binary))
    (tmp_path / "ok.txt").write_text(CONLL)
    with pytest.raises(InputError, match="only 3 distinct examples"):
        make_task("memorization", data="conll", data_path=str(tmp_path / "ok.txt"),
                  n_examples=10)


MNLI_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
               "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")


def mnli_row(i, s1, s2, label):
    return "\t".join([str(i), "1", f"{i}e", "fiction", "(", "(", "(", "(", s1, s2, label, label])


def test_mnli_loader_on_a_fixture(tmp_path):
    rows = [mnli_row(0, "The cat sat.", "A cat sat.", "entailment"),
            mnli_row(1, "The cat sat.", "No cat sat.", "contradiction"),
            mnli_row(2, "He left.", "He may leave.", "-"),  # no gold label: skipped
            mnli_row(3, "He left.", "She stayed.", "neutral")]
    path = tmp_path / "train.tsv"
    path.write_text("\n".join([MNLI_HEADER, *rows]) + "\n")
    task = make_task("memorization", data="mnli", labels_per="sequence", data_path=str(path),
                     n_examples=0, seed=0)
    assert task.n_used == 3 and task.labels.shape == (3,) and task.cfg.C == 3
    sep = task.vocab.id("SEP")
    assert bool(((task.tokens == sep).sum(1) == 1).all())  # premise <SEP> hypothesis
    got = {}
    for x, y in zip(task.tokens.tolist(), task.labels.tolist(), strict=True):
        words = [task.vocab.symbols[i] for i in x if i != task.vocab.id("PAD")]
        got[" ".join(words)] = NLI_LABELS[y]
    assert got["The cat sat . <SEP> No cat sat ."] == "contradiction"
    assert got["He left . <SEP> She stayed ."] == "neutral"
    assert task.model_fields()["head"] == "seq_cls"


@pytest.mark.parametrize("lines, match", [
    (["sentence1\tsentence2"], "header lacks"),
    ([MNLI_HEADER, "0\t1\tshort row"], ":2: 3 tab-separated fields"),
    ([MNLI_HEADER, mnli_row(0, "a", "b", "maybe")], ":2: unknown label 'maybe'"),
    ([MNLI_HEADER, mnli_row(0, "a", "b", "-")], "no labelled sentence pairs"),
    ([], "empty file"),
])
def test_mnli_malformed_files(tmp_path, lines, match):
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(lines))
    with pytest.raises(InputError, match=match):
        make_task("memorization", data="mnli", labels_per="sequence", data_path=str(path))


def test_labels_per_was_level_and_its_records_and_cache_keys_are_unchanged():
    """The label type has one name, ``labels_per``; a record written as ``level`` (a stored
    checkpoint's task config) is read as it, and the cache key still hashes the old name, so
    no trained cell or zoo entry moves."""
    from models.train.runconfig import RunConfig
    from seqprobe.config import config_from_dict
    from seqprobe.errors import ConfigError
    from tasks.memorization import MemorizationConfig

    old = config_from_dict(MemorizationConfig, {"level": "sequence", "n_examples": 20})
    assert old == MemorizationConfig(labels_per="sequence", n_examples=20)
    with pytest.raises(ConfigError, match="former name of 'labels_per'"):
        config_from_dict(MemorizationConfig, {"level": "token", "labels_per": "token"})
    record = {"model": {"arch": "transformer", "config": {"head": "seq_cls", "n_classes": 2}},
              "task": {"name": "memorization", "config": {"level": "sequence"}}}
    run = RunConfig.from_dict(record)
    assert run.task.labels_per == "sequence" and run.task_dict["labels_per"] == "sequence"
    assert run.canonical()["task_config"]["level"] == "sequence"
    assert "labels_per" not in run.canonical()["task_config"]
