"""The hash-copy construction of Thm 2.3 / App. C (models/constructions.py) copies exactly."""

import itertools
import math

import pytest
import torch

from models import load
from models.constructions import (
    HashCopyConfig,
    build_hash_copy_transformer,
    gssm_error_bound,
    has_repeated_ngram,
    lemma_2_4_bound,
    save_hash_copy,
    strings_without_repeated_ngrams,
)
from models.generation import greedy_decode, teacher_forced_argmax
from probes.attention import ngram_match_score
from seqprobe.errors import InputError

BOS, EOS, COPY = 0, 1, 2  # offsets after the D letters (tasks.copy.COPY_SPECIALS)


def prompts_for(x, D):
    B = x.shape[0]
    return torch.cat([torch.full((B, 1), D + BOS), x, torch.full((B, 1), D + COPY)], dim=1)


@pytest.mark.parametrize("n,D,lengths", [
    (1, 26, [2, 7, 26]),
    (2, 3, [4, 6, 9]),  # 9 = D^n: every bigram once (de Bruijn-like)
    (3, 2, [6, 8]),  # binary alphabet: code margin 2/b = 2
    (3, 26, [6, 50, 300]),
    (4, 26, [8, 1000]),  # L far beyond any training length
])
def test_copies_strings_without_repeated_ngrams_exactly(n, D, lengths):
    model = build_hash_copy_transformer(n, D)
    g = torch.Generator().manual_seed(n * 100 + D)
    for L in lengths:
        batch = 2 if L >= 300 else 6
        x = strings_without_repeated_ngrams(batch, L, n, D, g)
        assert not has_repeated_ngram(x, n, D).any()
        pred = teacher_forced_argmax(model, prompts_for(x, D), x)
        assert torch.equal(pred, x), f"n={n} D={D} L={L}: copy failed"


def test_greedy_copy_ends_with_eos():
    n, D = 2, 26
    model = build_hash_copy_transformer(n, D)
    x = strings_without_repeated_ngrams(4, 12, n, D, torch.Generator().manual_seed(0))
    out = greedy_decode(model, prompts_for(x, D), 13)
    assert torch.equal(out[:, :12], x)
    assert (out[:, 12] == D + EOS).all()


def test_repeated_ngram_with_different_successors_breaks_the_copy():
    # The lookup is ambiguous exactly when an n-gram repeats (Thm 2.3's error event).
    n, D = 2, 26
    model = build_hash_copy_transformer(n, D)
    x = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 5, 6, 7]])  # "ab" followed by c, then by f
    pred = teacher_forced_argmax(model, prompts_for(x, D), x)
    assert not torch.equal(pred, x)
    model3 = build_hash_copy_transformer(3, D)  # a 3-gram hash is not fooled by a 2-gram repeat
    assert torch.equal(teacher_forced_argmax(model3, prompts_for(x, D), x), x)


def test_copy_head_is_an_ngram_match_head_and_hooks_work():
    n, D, L = 3, 26, 30
    model = build_hash_copy_transformer(n, D)
    x = strings_without_repeated_ngrams(4, L, n, D, torch.Generator().manual_seed(1))
    tokens = torch.cat([prompts_for(x, D), x], dim=1)  # <BOS> x <COPY> x
    _, cache = model.run_with_cache(tokens)
    qmask = torch.zeros_like(tokens, dtype=torch.bool)
    qmask[:, L + 1 : 2 * L + 1] = True  # answer phase
    score, count = ngram_match_score(cache["pattern", 1], tokens, n, qmask)
    assert count == 4 * (L - n)  # queries holding x_j, j = n..L−1
    assert score[n + 1] > 0.999  # the NoPE head of layer 2
    assert score[: n + 1].max() < 0.2  # the windowed heads are not match heads
    for name in ("blocks.0.attn.hook_pattern", "blocks.1.attn.hook_z", "blocks.0.mlp.hook_post"):
        assert name in cache.keys()


def test_save_and_load_round_trip(tmp_path):
    path = save_hash_copy(tmp_path / "hash.pt", n=3, D=5, max_len=20)
    m = load(path)
    ref = build_hash_copy_transformer(3, 5)
    tokens = torch.cat([prompts_for(torch.tensor([[0, 1, 2, 3, 4, 0]]), 5)], 1)
    torch.testing.assert_close(m(tokens), ref(tokens))
    assert m.checkpoint["task"]["name"] == "copy"
    assert m.cfg.normalization == "none" and m.cfg.pe == "hard_alibi"


def test_repeat_detection_and_bounds():
    x = torch.tensor([[0, 1, 2, 0, 1], [0, 1, 2, 3, 4], [1, 1, 1, 0, 0]])
    assert has_repeated_ngram(x, 2, 5).tolist() == [True, False, True]
    assert has_repeated_ngram(x, 3, 5).tolist() == [False, False, False]
    # brute force over all binary strings of length 6
    allx = torch.tensor(list(itertools.product([0, 1], repeat=6)))
    brute = [any(tuple(r[i:i + 3]) == tuple(r[j:j + 3]) for i in range(4) for j in range(i + 1, 4))
             for r in allx.tolist()]
    assert has_repeated_ngram(allx, 3, 2).tolist() == brute
    assert lemma_2_4_bound(1000, 5, 26) == pytest.approx(1e6 / 26**5)
    assert gssm_error_bound(64, 10, 2) == 0.0
    assert gssm_error_bound(8, 10, 2) == pytest.approx(1 - 2**-2)
    with pytest.raises(InputError):
        strings_without_repeated_ngrams(1, 20, 2, 3, torch.Generator())  # 19 bigrams > 3^2
    with pytest.raises(InputError):
        HashCopyConfig(n=0)
    assert HashCopyConfig(n=2, D=26).tau_ > math.log(4e6)
