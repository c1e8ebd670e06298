"""Packed lookup contexts (copy paper App. A.2, as the medium prefix-lookup recipes train):
many i.i.d. examples a row, loss on the answers only, and a recurrent model's state running on
across the examples (the authors' code never resets it)."""

import pytest
import torch

from models.registry import build_model
from tasks.base import IGNORE, make_generator
from tasks.lookup import LookupConfig, NgramLookupTask
from tasks.registry import packed_batch


def task():
    return NgramLookupTask(LookupConfig(D=8, min_len=5, max_len=20, n=3, k=1, key="prefix"))


def test_packed_rows_hold_many_examples_with_loss_on_the_answers_only():
    t = task()
    b = packed_batch(t, 3, 420, make_generator(0))
    bos, eos = t.vocab.id("BOS"), t.vocab.id("EOS")
    for tokens, targets in zip(b.tokens, b.targets, strict=True):
        n = int((tokens == bos).sum())
        assert n >= 420 // t.max_example_len()  # at least as many as the longest fit
        # each example supervises its k = 1 answer token and EOS, nothing of the prompt
        assert int((targets != IGNORE).sum()) == 2 * n
        assert int((targets == eos).sum()) == n
        # the answer is predicted at the second separator of its example
        cp = t.vocab.id("COPY")
        pos = (targets != IGNORE).nonzero().flatten()[::2]
        assert bool((tokens[pos] == cp).all())


@pytest.mark.parametrize("arch,model", [("lstm", {"d_model": 8, "n_layers": 1}),
                                        ("mamba", {"d_model": 8, "n_layers": 1, "d_state": 4})])
def test_a_recurrent_state_runs_across_the_packed_examples(arch, model):
    torch.manual_seed(0)
    m = build_model(arch, {"vocab_size": 12, **model}).eval()
    b = packed_batch(task(), 1, 420, make_generator(1))
    tokens = b.tokens.clone()
    second = int((tokens[0] == task().vocab.id("BOS")).nonzero()[1])
    changed = tokens.clone()
    changed[0, 1:second - 1] = (changed[0, 1:second - 1] + 1) % 8  # rewrite the first example
    with torch.no_grad():
        a, c = m.log_probs(tokens), m.log_probs(changed)
    # the second example's predictions depend on the first: no reset at its BOS
    assert not torch.allclose(a[0, second:], c[0, second:])
