"""Copy-family generators: invariants of copy, duplicated n-gram, lookup and phone-book."""

import pytest
import torch

from seqprobe.errors import InputError
from tasks.base import IGNORE, make_generator
from tasks.copy import plant_duplicate
from tasks.lookup import unique_key_positions
from tasks.registry import make_task, packed_batch


def test_copy_example_answer_equals_source_and_mask_covers_answer_only():
    task = make_task("copy", min_len=3, max_len=12)
    assert task.vocab.size == 30  # 26 letters + BOS, EOS, COPY, PAD (paper §3.1)
    g = make_generator(1)
    for _ in range(50):
        tokens, targets = task.example(g)
        L = (len(tokens) - 3) // 2
        assert 3 <= L <= 12
        assert tokens[0] == task.vocab.id("BOS") and tokens[L + 1] == task.vocab.id("COPY")
        assert torch.equal(tokens[1 : L + 1], tokens[L + 2 : 2 * L + 2])
        kept = targets != IGNORE
        assert kept.sum() == L + 1  # the answer and its EOS, nothing of the input
        # target at position t is the token at t + 1 wherever a loss is taken
        assert torch.equal(targets[:-1][kept[:-1]], tokens[1:][kept[:-1]])


def test_copy_is_seeded():
    task = make_task("copy")
    a = task.batch(4, make_generator(7))
    b = task.batch(4, make_generator(7))
    c = task.batch(4, make_generator(8))
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_eval_batch_prompts_and_answers():
    task = make_task("copy")
    pb = task.eval_batch(5, make_generator(0), length=17)
    assert pb.prompts.shape == (5, 19) and pb.answers.shape == (5, 17)
    assert torch.equal(pb.prompts[:, 1:-1], pb.answers)


def test_packing_fills_context_with_whole_examples():
    task = make_task("copy", min_len=2, max_len=10)
    batch = packed_batch(task, 3, 60, make_generator(0))
    assert batch.tokens.shape == (3, 60)
    bos = task.vocab.id("BOS")
    for row in range(3):
        starts = (batch.tokens[row] == bos).nonzero().flatten().tolist()
        assert len(starts) >= 2 and starts[0] == 0
    with pytest.raises(InputError):
        packed_batch(task, 1, 10, make_generator(0))  # an example of length 23 cannot fit


@pytest.mark.parametrize("n", [1, 3, 5])
def test_duplicated_ngram_present_twice_with_different_successors(n):
    g = make_generator(n)
    for _ in range(40):
        x = torch.randint(0, 26, (30,), generator=g)
        y, src, dst = plant_duplicate(x, n, 26, g)
        assert src + n < dst + 1 and torch.equal(y[src : src + n], y[dst : dst + n])
        if dst + n < 30:
            assert y[dst + n] != y[src + n]
    task = make_task("dup_ngram_copy", n=n, min_len=2 * n + 1, max_len=25)
    pb = task.eval_batch(8, g, length=25)
    for row in pb.answers:
        grams = [tuple(row[i : i + n].tolist()) for i in range(25 - n + 1)]
        assert len(grams) > len(set(grams)), "the string must hold a repeated n-gram"


def test_lookup_answer_is_the_true_successor():
    for key in ("suffix", "prefix"):
        task = make_task("lookup", key=key, n=2, k=3, min_len=8, max_len=16)
        g = make_generator(3)
        for _ in range(30):
            tokens, targets = task.example(g)
            keep = targets != IGNORE
            answer = targets[keep][:-1]  # drop EOS
            if key == "suffix":
                cp = (tokens == task.vocab.id("COPY")).nonzero()[0, 0]
                x, k = tokens[1:cp], tokens[cp + 1 : cp + 3]
            else:
                cps = (tokens == task.vocab.id("COPY")).nonzero().flatten()
                k, x = tokens[1:cps[0]], tokens[cps[0] + 1 : cps[1]]
            i = [j for j in range(len(x) - 1) if torch.equal(x[j : j + 2], k)]
            assert len(i) == 1, "key must be unique in the string"
            assert torch.equal(x[i[0] + 2 : i[0] + 5], answer)


def test_unique_key_positions():
    x = torch.tensor([1, 2, 1, 2, 3, 4])
    # (1,2) repeats; (2,1), (2,3) unique; (3,4) has no successor
    assert unique_key_positions(x, 2, 1) == [1, 3]


def test_phonebook_query_answer_is_in_the_book():
    task = make_task("phonebook", n_entries=6, n_shots=2)
    g = make_generator(0)
    tokens, targets = task.example(g)
    text = task.vocab.decode(tokens)
    answer = task.vocab.decode(targets[targets != IGNORE][:-1])
    query = text.split("<COPY>")[1].splitlines()[-1]  # "First Last: 123-456-7890<EOS>"
    name = query.split(":")[0]
    assert f"{name}: {answer}\n" in text.split("<COPY>")[0]
    assert len(answer) == 12 and answer[3] == "-" and answer[7] == "-"


@pytest.mark.parametrize("name,bad", [
    ("copy", dict(min_len=5, max_len=3)), ("copy", dict(min_len=0)), ("copy", dict(D=1)),
    ("dup_ngram_copy", dict(n=10, min_len=5, max_len=20)),
    ("lookup", dict(n=3, k=2, min_len=4)), ("lookup", dict(D=2, n=2, max_len=30)),
    ("lookup", dict(key="middle")), ("phonebook", dict(n_shots=5, n_entries=5)),
    ("copy", dict(colour="red")),
])
def test_bad_task_configs_raise_task_error(name, bad):
    with pytest.raises(InputError):
        make_task(name, **bad)
