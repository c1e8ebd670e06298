"""Hypothesis fuzzing of the task generators (issue 8).

For any valid config each generator's invariants hold (copy: answer == source, lengths in
range; duplicated n-gram: the n-gram is there twice; lookup: the answer is the key's true
successor; phone book: the answer is the queried name's number). For any invalid config, or an
invalid argument to a generator, the only exception is the suite's own :class:`InputError`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqprobe.errors import InputError
from seqprobe.flags import MAX_N
from tasks.base import IGNORE, make_generator
from tasks.copy import plant_duplicate
from tasks.registry import TASKS, make_task, packed_batch, task_class

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2**31 - 1)


def ngrams(x: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(x[i : i + n]) for i in range(len(x) - n + 1)]


def check_targets(tokens: torch.Tensor, targets: torch.Tensor, n_answer: int) -> None:
    """Targets are the next token wherever a loss is taken, on exactly the answer (+ EOS)."""
    kept = targets != IGNORE
    assert int(kept.sum()) == n_answer
    assert not kept[-1]
    assert torch.equal(targets[:-1][kept[:-1]], tokens[1:][kept[:-1]])


# ---------------------------------------------------------------------------- copy
@st.composite
def copy_configs(draw):
    lo = draw(st.integers(1, 12))
    return dict(D=draw(st.integers(2, 60)), min_len=lo, max_len=lo + draw(st.integers(0, 12)))


def check_copy_example(task, tokens, targets):
    cfg, v = task.cfg, task.vocab
    L = (len(tokens) - 3) // 2
    assert len(tokens) == 2 * L + 3 and cfg.min_len <= L <= cfg.max_len
    assert tokens[0] == v.id("BOS") and tokens[L + 1] == v.id("COPY") and tokens[-1] == v.id("EOS")
    x = tokens[1 : L + 1]
    assert bool(((x >= 0) & (x < cfg.D)).all())
    assert torch.equal(tokens[L + 2 : 2 * L + 2], x)  # the answer is the source
    check_targets(tokens, targets, L + 1)
    return x


def checked_copy_examples(name: str, cfg: dict, seed: int, n: int = 3):
    """``(task, generator, [x])``: task ``name`` of ``cfg`` and the strings of its first ``n``
    examples, each checked by :func:`check_copy_example`."""
    task = make_task(name, cfg)
    g = make_generator(seed)
    return task, g, [check_copy_example(task, *task.example(g)) for _ in range(n)]


@FUZZ
@given(cfg=copy_configs(), seed=seeds)
def test_copy_invariants(cfg, seed):
    task, g, _ = checked_copy_examples("copy", cfg, seed)
    batch = task.batch(3, g)
    for row in range(3):  # padding carries no loss
        t, y = batch.tokens[row], batch.targets[row]
        end = int((t == task.vocab.id("EOS")).nonzero()[0]) + 1
        check_copy_example(task, t[:end], y[:end])
        assert bool((t[end:] == task.pad_id).all()) and bool((y[end:] == IGNORE).all())
    pb = task.eval_batch(4, g)
    L = pb.answers.shape[1]
    assert cfg["min_len"] <= L <= cfg["max_len"] and pb.prompts.shape == (4, L + 2)
    assert torch.equal(pb.prompts[:, 1:-1], pb.answers)
    packed = packed_batch(task, 2, task.max_example_len() + 7, g)
    kept = packed.targets != IGNORE
    assert torch.equal(packed.targets[:, :-1][kept[:, :-1]], packed.tokens[:, 1:][kept[:, :-1]])
    assert bool((packed.tokens[:, 0] == task.vocab.id("BOS")).all())


# ---------------------------------------------------------------------------- duplicated n-gram
@st.composite
def dup_configs(draw):
    n = draw(st.integers(1, 5))
    lo = draw(st.integers(2 * n + 1, 2 * n + 10))
    return dict(D=draw(st.integers(2, 12)), n=n, min_len=lo, max_len=lo + draw(st.integers(0, 10)),
                distinct_successor=draw(st.booleans()))


def has_repeated_ngram(x: list[int], n: int) -> bool:
    """Some n-gram occurs at two non-overlapping positions."""
    first: dict[tuple, int] = {}
    for i, gram in enumerate(ngrams(x, n)):
        if gram in first and i >= first[gram] + n:
            return True
        first.setdefault(gram, i)
    return False


@FUZZ
@given(cfg=dup_configs(), seed=seeds)
def test_duplicated_ngram_invariants(cfg, seed):
    task, g, strings = checked_copy_examples("dup_ngram_copy", cfg, seed)
    n = cfg["n"]
    for x in strings:
        assert has_repeated_ngram(x.tolist(), n)
    pb = task.eval_batch(3, g)
    for row in pb.answers.tolist():
        assert has_repeated_ngram(row, n)
    # the planting itself: where, what, and the successors
    L = cfg["max_len"]
    x = torch.randint(0, cfg["D"], (L,), generator=g)
    y, src, dst = plant_duplicate(x, n, cfg["D"], g, cfg["distinct_successor"])
    assert 0 <= src and src + n + 1 <= dst and dst + n <= L
    assert torch.equal(y[dst : dst + n], y[src : src + n])
    changed = (x != y).nonzero().flatten().tolist()
    assert all(dst <= i <= dst + n for i in changed)  # only the copy and its successor change
    if cfg["distinct_successor"] and dst + n < L:
        assert y[dst + n] != y[src + n]


# ---------------------------------------------------------------------------- lookup
@st.composite
def lookup_configs(draw):
    n, k = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    lo = draw(st.integers(n + k, n + k + 15))
    return dict(D=draw(st.integers(2, 8)), n=n, k=k, min_len=lo,
                max_len=lo + draw(st.integers(0, 15)),
                key=draw(st.sampled_from(["suffix", "prefix"])))


def check_lookup(task, prompt: list[int], answer: list[int]) -> None:
    cfg, v = task.cfg, task.vocab
    bos, cp = v.id("BOS"), v.id("COPY")
    assert prompt[0] == bos and len(answer) == cfg.k
    if cfg.key == "suffix":  # <BOS> x <COPY> key
        x, key = prompt[1 : -cfg.n - 1], prompt[-cfg.n :]
        assert prompt[-cfg.n - 1] == cp
    else:  # <BOS> key <COPY> x <COPY>
        key, x = prompt[1 : 1 + cfg.n], prompt[cfg.n + 2 : -1]
        assert prompt[cfg.n + 1] == cp and prompt[-1] == cp
    assert cfg.min_len <= len(x) <= cfg.max_len and all(0 <= t < cfg.D for t in x)
    grams = ngrams(x, cfg.n)
    assert grams.count(tuple(key)) == 1  # the key is unique, so the answer is well defined
    i = grams.index(tuple(key))
    assert answer == x[i + cfg.n : i + cfg.n + cfg.k]  # the true successor


@FUZZ
@given(cfg=lookup_configs(), seed=seeds)
def test_lookup_invariants(cfg, seed):
    if cfg["D"] ** cfg["n"] < 2 * cfg["max_len"]:  # too few distinct keys: must be refused
        with pytest.raises(InputError, match="vocabulary too small"):
            make_task("lookup", cfg)
        return
    task = make_task("lookup", cfg)
    g = make_generator(seed)
    for _ in range(3):
        tokens, targets = task.example(g)
        check_targets(tokens, targets, cfg["k"] + 1)
        assert tokens[-1] == task.vocab.id("EOS")
        P = len(tokens) - cfg["k"] - 1
        check_lookup(task, tokens[:P].tolist(), tokens[P:-1].tolist())
    pb = task.eval_batch(3, g)
    for p, a in zip(pb.prompts.tolist(), pb.answers.tolist(), strict=True):
        check_lookup(task, p, a)


# ---------------------------------------------------------------------------- phone book
@st.composite
def phonebook_configs(draw):
    n = draw(st.integers(1, 30))
    return dict(n_entries=n, n_shots=draw(st.integers(0, n - 1)))


def check_phonebook(task, prompt: list[int], answer: list[int]) -> None:
    from tasks.phonebook import CHARS

    v = task.vocab
    assert prompt[0] == v.id("BOS") and prompt.count(v.id("COPY")) == 1
    cut = prompt.index(v.id("COPY"))
    text = lambda ids: "".join(CHARS[i] for i in ids)  # noqa: E731
    book_lines = text(prompt[1:cut]).splitlines()
    book = dict(line.split(": ") for line in book_lines)
    assert len(book) == len(book_lines) == task.cfg.n_entries  # distinct names
    assert all(len(num) == 12 and num[3] == num[7] == "-" for num in book.values())
    *shots, query = text(prompt[cut + 1 :]).split("\n")
    assert len(shots) == task.cfg.n_shots and query.endswith(": ")
    for line in shots:  # few-shot examples are true entries, and not the query
        name, num = line.split(": ")
        assert book[name] == num and name != query[:-2]
    assert text(answer) == book[query[:-2]]  # the queried name's number


@settings(max_examples=25, deadline=None, derandomize=True)
@given(cfg=phonebook_configs(), seed=seeds)
def test_phonebook_invariants(cfg, seed):
    task = make_task("phonebook", cfg)
    g = make_generator(seed)
    tokens, targets = task.example(g)
    check_targets(tokens, targets, 13)  # 12 characters of the number + EOS
    check_phonebook(task, tokens[:-13].tolist(), tokens[-13:-1].tolist())
    assert len(tokens) <= task.max_example_len()
    pb = task.eval_batch(2, g)
    for p, a in zip(pb.prompts.tolist(), pb.answers.tolist(), strict=True):
        check_phonebook(task, p, a)


# ---------------------------------------------------------------------------- invalid configs
FUZZED_TASKS = [name for name in ("copy", "dup_ngram_copy", "lookup", "phonebook") if name in TASKS]
junk = st.one_of(st.integers(-30, 80), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                 st.text(max_size=5), st.booleans(), st.none(), st.lists(st.integers(0, 3),
                                                                          max_size=3))


@st.composite
def any_config(draw, name):
    """Any mix of the task's own fields (sensible or junk values) and, sometimes, a stray key."""
    import dataclasses

    fields = [f.name for f in dataclasses.fields(task_class(name).config_cls) if f.init]
    keys = draw(st.lists(st.sampled_from(fields), unique=True))
    cfg = {k: draw(junk) for k in keys}
    if draw(st.integers(0, 9)) == 0:
        cfg[draw(st.sampled_from(["length", "vocab", "seed", "d"]))] = draw(junk)
    return cfg


@pytest.mark.parametrize("name", FUZZED_TASKS)
def test_any_config_is_either_valid_or_a_task_error(name):
    @settings(max_examples=150, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(cfg=any_config(name), seed=seeds)
    def run(cfg, seed):
        try:
            task = make_task(name, cfg)
        except InputError:
            return
        g = make_generator(seed)  # a config that is accepted must generate
        tokens, targets = task.example(g)
        assert tokens.shape == targets.shape and len(tokens) <= task.max_example_len()
        assert task.eval_batch(2, g) is not None

    run()


@pytest.mark.parametrize("name", FUZZED_TASKS)
def test_bad_generator_arguments_raise_task_error(name):
    task = make_task(name)

    @settings(max_examples=20, deadline=None, derandomize=True)
    @given(batch_size=st.integers(-5, 0), length=st.integers(-5, 0))
    def run(batch_size, length):
        g = make_generator(0)
        with pytest.raises(InputError):
            task.batch(batch_size, g)
        with pytest.raises(InputError):
            task.eval_batch(2, g, length=length)
        with pytest.raises(InputError):
            packed_batch(task, 2, 1, g)  # a context shorter than any example

    run()


@pytest.mark.parametrize("name", FUZZED_TASKS)
@pytest.mark.parametrize("batch_size", [0, -1])
def test_eval_batch_refuses_a_bad_batch_size(name, batch_size):
    with pytest.raises(InputError, match="batch_size"):
        make_task(name).eval_batch(batch_size, make_generator(0))


def test_huge_but_valid_lookup_config_is_not_a_crash():
    """The longest key the bound allows is valid (the strings are long enough) and must not
    crash the check of the vocabulary size; a longer one (D**n would exceed Python's
    int-to-str limit in a message) is refused by the field's bound, in one short line."""
    task = make_task("lookup", D=26, n=MAX_N, min_len=4000, max_len=4000)
    assert task.cfg.n == MAX_N and task.max_example_len() > 4000
    with pytest.raises(InputError, match="LookupConfig.n 5000 is out of range") as e:
        make_task("lookup", D=26, n=5000, min_len=4000, max_len=4000)
    assert "\n" not in str(e.value) and len(str(e.value)) < 300
    with pytest.raises(InputError, match="min_len"):  # a key too long for its strings
        make_task("lookup", D=26, n=MAX_N, min_len=60, max_len=60)


@FUZZ
@given(seed=seeds, cfg=copy_configs())
def test_generators_are_pure_functions_of_the_seed(seed, cfg):
    task = make_task("copy", cfg)
    a, b = task.batch(3, make_generator(seed)), task.batch(3, make_generator(seed))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
