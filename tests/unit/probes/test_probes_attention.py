"""The copy paper's probes: attention-pattern scores (probes/attention.py), head ablation
(probes/ablation.py), copy accuracy and recurrent state size (probes/copying.py)."""

import pytest
import torch

from models.constructions import build_hash_copy_transformer
from models.registry import build_model
from models.transformer import HookedTransformerLM, TransformerConfig
from probes.ablation import ablated_heads, head_means
from probes.attention import (
    answer_queries,
    induction_score,
    ngram_match_mask,
    ngram_match_score,
    pattern_scores,
    previous_token_profile,
    target_score,
)
from probes.copying import accuracy_at, accuracy_on, state_floats, string_errors
from seqprobe.errors import InputError
from tasks.base import make_generator
from tasks.copy import CopyConfig, CopyTask, DuplicatedNgramCopyTask, DupNgramConfig


def brute_match(tokens, n, lag=0):
    T = len(tokens)
    out = torch.zeros(T, T, dtype=torch.bool)
    for p in range(T):
        for q in range(p + 1):
            if q >= n + lag and p >= n - 1:
                out[p, q] = all(tokens[q - lag - t] == tokens[p - t + 1]
                                for t in range(1, n + 1))
    return out


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("lag", [0, 1])
def test_ngram_match_mask_equals_brute_force(n, lag):
    g = torch.Generator().manual_seed(n)
    tokens = torch.randint(0, 3, (4, 15), generator=g)  # small alphabet: many matches
    mask = ngram_match_mask(tokens, n, lag)
    for b in range(4):
        assert torch.equal(mask[b], brute_match(tokens[b].tolist(), n, lag))
    assert mask.any()


def test_lag_one_keys_are_one_past_the_successors():
    tokens = torch.tensor([[9, 1, 2, 3, 7, 1, 2]])
    # at p=6 the bigram "1 2" occurred at 1..2: successor q=3 at lag 0, q=4 at lag 1
    assert ngram_match_mask(tokens, 2, 0)[0, 6].nonzero().flatten().tolist() == [3]
    assert ngram_match_mask(tokens, 2, 1)[0, 6].nonzero().flatten().tolist() == [4]
    with pytest.raises(ValueError, match="lag"):
        ngram_match_mask(tokens, 1, -1)


def test_match_score_of_hand_built_pattern():
    # positions:      0  1  2  3  4  5  6  7
    tokens = torch.tensor([[9, 1, 2, 3, 7, 1, 2, 8]])
    # At p=6 (current token 2, bigram "1 2") the bigram occurred at 1..2, its successor is q=3.
    # Unigram "2" also occurred at 2 -> successor 3 as well.
    # At p=5 (token 1): unigram successor of the earlier 1 is q=2; bigram "7 1" never occurred.
    T = tokens.shape[1]
    pattern = torch.zeros(1, 2, T, T)
    pattern[0, :, :, 0] = 1.0  # default: everything on BOS
    pattern[0, 0, 6] = 0.0
    pattern[0, 0, 6, 3], pattern[0, 0, 6, 5] = 0.7, 0.3  # head 0: 0.7 on the match
    pattern[0, 0, 5] = 0.0
    pattern[0, 0, 5, 2], pattern[0, 0, 5, 4] = 0.4, 0.6  # head 0: 0.4 on the unigram match
    # head 1 stays on BOS: score 0
    qmask = torch.zeros(1, T, dtype=torch.bool)
    qmask[0, 5:7] = True
    s1, c1 = ngram_match_score(pattern, tokens, 1, qmask)
    assert c1 == 2
    torch.testing.assert_close(s1, torch.tensor([(0.7 + 0.4) / 2, 0.0]))
    s2, c2 = ngram_match_score(pattern, tokens, 2, qmask)
    assert c2 == 1  # only p=6 has an earlier bigram
    torch.testing.assert_close(s2, torch.tensor([0.7, 0.0]))
    s3, c3 = ngram_match_score(pattern, tokens, 3, qmask)
    assert c3 == 0 and torch.isnan(s3).all()
    torch.testing.assert_close(induction_score(pattern, tokens, qmask), s1)
    target = torch.full((1, T), -1)
    target[0, 6], target[0, 5] = 3, 4
    torch.testing.assert_close(target_score(pattern, target), torch.tensor([(0.7 + 0.6) / 2, 0.0]))


def test_previous_token_profile_of_hard_alibi_windows():
    cfg = TransformerConfig(vocab_size=7, d_model=16, n_heads=4, n_layers=1, pe="hard_alibi",
                            hard_alibi_heads=3)
    m = HookedTransformerLM(cfg).eval()
    with torch.no_grad():  # W_Q = W_K = 0: uniform over each window (Lemma C.1)
        m.blocks[0].attn.W_Q.zero_()
        m.blocks[0].attn.W_K.zero_()
    tokens = torch.randint(0, 7, (2, 12))
    _, cache = m.run_with_cache(tokens)
    qmask = torch.zeros(2, 12, dtype=torch.bool)
    qmask[:, 5:] = True  # p >= window: full windows
    prof = previous_token_profile(cache["pattern", 0], 4, qmask)
    expected = torch.zeros(3, 5)
    for h, w in enumerate((1, 2, 3)):
        expected[h, :w] = 1.0 / w
    torch.testing.assert_close(prof[:3], expected)
    assert prof.shape == (4, 5)


def tiny():
    cfg = TransformerConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=4, d_mlp=32)
    return HookedTransformerLM(cfg).eval()


def test_ablation_with_no_heads_changes_nothing_and_hooks_are_removed():
    m = tiny()
    tokens = torch.randint(0, 11, (3, 9))
    ref = m(tokens)
    means = head_means(m, tokens)
    for mode in ("mean", "zero"):
        with ablated_heads(m, [], mode=mode, means=means):
            torch.testing.assert_close(m(tokens), ref, atol=0, rtol=0)
    with ablated_heads(m, [(0, 1), (1, 3)], mode="zero"):
        assert (m(tokens) - ref).abs().max() > 1e-5  # the test can fail
    assert not any(hp._forward_hooks for hp in m.hook_dict.values())
    torch.testing.assert_close(m(tokens), ref)
    with pytest.raises(RuntimeError), ablated_heads(m, [(0, 0)], mode="zero"):
        raise RuntimeError("boom")
    assert not any(hp._forward_hooks for hp in m.hook_dict.values()), "hooks left after an error"


def test_zero_ablation_equals_zeroing_the_head_output_weights():
    m = tiny()
    tokens = torch.randint(0, 11, (2, 8))
    with ablated_heads(m, [(1, 2)], mode="zero"):
        ablated = m(tokens)
    m2 = tiny()
    m2.load_state_dict(m.state_dict())
    with torch.no_grad():
        m2.blocks[1].attn.W_O[2].zero_()
    torch.testing.assert_close(ablated, m2(tokens), atol=1e-5, rtol=1e-5)


def test_mean_ablation_writes_the_mean_and_survives_run_with_cache():
    m = tiny()
    tokens = torch.randint(0, 11, (2, 8))
    means = head_means(m, tokens)
    with ablated_heads(m, [(0, 1)], mode="mean", means=means):
        _, cache = m.run_with_cache(tokens, names_filter=lambda n: n == "blocks.0.attn.hook_z")
        z = cache["blocks.0.attn.hook_z"]
        torch.testing.assert_close(z[:, :, 1], means[0][1].expand(2, 8, -1))
        assert m.hook_dict["blocks.0.attn.hook_z"]._forward_hooks, "cache run removed the ablation"
    with pytest.raises(InputError):
        with ablated_heads(m, [(0, 1)], mode="mean"):
            pass
    with pytest.raises(InputError):
        with ablated_heads(m, [(2, 0)], mode="zero"):
            pass


# ---------------------------------------------------------------------------- over copy batches
def test_answer_queries_point_at_the_token_each_answer_copies():
    task = CopyTask(CopyConfig(D=5, min_len=1, max_len=9))
    batch = task.eval_batch(4, make_generator(0), length=9)
    tokens, qmask, target = answer_queries(batch, period=10)
    assert qmask.sum(1).tolist() == [9] * 4 and ((target >= 0) == qmask).all()
    b, q = qmask.nonzero(as_tuple=True)
    # the query at q predicts token q + 1, which appeared before at the target position
    assert torch.equal(tokens[b, target[b, q]], tokens[b, q + 1])
    assert int(target[qmask].min()) == 1  # the first letter, right after <BOS>


def test_pattern_scores_find_the_construction_match_head():
    model = build_hash_copy_transformer(3, 26).eval()
    task = CopyTask(CopyConfig(D=26, min_len=1, max_len=12))
    data = [(task.eval_batch(8, make_generator(0), length=12), 13)]
    sc = pattern_scores(model, data, n_max=3)
    assert sc["match"].shape == (2, 2, model.cfg.n_heads, 3) and sc["profile"].shape[-1] == 4
    lag0, lag1 = sc["match"]
    assert lag0[1, 4, 2] > 0.99 and sc["target"][1, 4] > 0.99  # layer 1, its NoPE head
    assert lag1[1, 4].nan_to_num(0).max() < 0.1  # the construction reads the successor itself
    assert lag0[0].nan_to_num(0).max() < 0.9  # the hashing heads do not copy
    # answer queries whose 3-gram occurred before: all but the 3 that still hold <COPY>
    assert sc["counts"].tolist() == [8 * 11, 8 * 10, 8 * 9]


# ---------------------------------------------------------------------------- copy accuracy
def test_accuracy_and_string_errors_agree_and_see_the_duplicate():
    model = build_hash_copy_transformer(2, 6).eval()
    dup = DuplicatedNgramCopyTask(DupNgramConfig(D=6, min_len=10, max_len=10, n=2))
    acc = accuracy_at(model, dup, 10, 32, seed=1, example_len=23)
    batch = dup.eval_batch(32, make_generator(1), length=10)  # the same strings
    errors = string_errors(model, batch.prompts, batch.answers, batch_size=5)
    assert errors.shape == (32,) and errors.any()  # a duplicated 2-gram confuses the n = 2 copy
    assert acc["string_acc"] == pytest.approx(1 - errors.float().mean().item())
    assert acc["string_acc"] <= acc["char_acc"] < 1
    greedy = accuracy_on(model, [batch], greedy=True)  # decoding: the same string accuracy
    assert greedy["string_acc"] == pytest.approx(acc["string_acc"])
    with pytest.raises(InputError):
        accuracy_on(model, [])


def test_state_floats_count_the_recurrent_state():
    lstm = build_model("lstm", {"vocab_size": 8, "d_model": 6, "n_layers": 3})
    assert state_floats(lstm) == 3 * 2 * 6  # (h, c) per layer
    m2 = build_model("mamba2", {"vocab_size": 8})
    c = m2.cfg
    per_layer = c.n_heads * (c.d_inner // c.n_heads) * c.d_state  # H_t
    assert state_floats(m2) > c.n_layers * per_layer  # plus the convolution's window
    with pytest.raises(InputError, match="recurrent state"):
        state_floats(tiny())
