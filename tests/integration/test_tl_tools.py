"""TransformerLens' own tools on suite models (issue 19 item 6): ``transformer_lens.patching``
(residual, MLP and attention-head patching) and ``transformer_lens.head_detector`` called as a
researcher calls them, on tiny models of every architecture where the tool makes sense, and on a
copy checkpoint file (the hand-set hash-copy transformer, whose copy head is known).

What makes the checks able to fail: the residual stream before layer 0 is the embedding, so
patching the one position where the clean and corrupted tokens differ must give the clean
metric exactly and every other position the corrupted one; nothing before that position
differs between the runs (causal models), so patching there must change nothing; patching the
clean cache into the clean run must give the clean metric everywhere; one patched entry is
recomputed by hand; the head detector's scores follow from the Hard-ALiBi windows (a window-2
head attends only to itself and the previous token) and from the pattern itself.
"""

import dataclasses

import pytest
import torch
from transformer_lens import patching
from transformer_lens.head_detector import detect_head

import models
from models.base import ActivationNotFound
from models.constructions import save_hash_copy, strings_without_repeated_ngrams
from models.registry import ARCHS, build_model
from probes.attention import pattern_scores
from seqprobe.config import config_to_dict
from seqprobe.errors import InputError
from seqprobe.flags import N_CTX_UNBOUNDED
from tasks.base import letters
from tasks.registry import make_task

T, P = 9, 4  # sequence length; the one position where the corrupted tokens differ
ATOL = 1e-5  # TL stores every patched metric in a float32 tensor (the models run in float64)


def _model(tiny_model, arch, **kw):
    m = tiny_model(arch, random=True, dtype=torch.float64, **kw).eval()
    if m.cfg.vocab_size >= 6:  # copy over vocab − 4 letters + BOS, EOS, COPY, PAD
        m.set_task("copy", {"D": m.cfg.vocab_size - 4})
    return m


def _pair(m):
    """(clean, corrupted) [1, T] tokens that differ at position P only; the last position
    predicts and the metric reads its logits."""
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(0, min(m.cfg.vocab_size, 7), (1, T), generator=g)
    corrupted = clean.clone()
    corrupted[0, P] = (clean[0, P] + 1) % min(m.cfg.vocab_size, 7)
    return clean, corrupted


def _metric(logits):
    return logits[0, -1, 0] - logits[0, -1, 1]  # a logit difference, as in IOI-style patching


@torch.no_grad()
def _runs(m):
    clean, corrupted = _pair(m)
    clean_logits, cache = m.run_with_cache(clean)
    return clean, corrupted, cache, float(_metric(clean_logits)), float(_metric(m(corrupted)))


# ---------------------------------------------------------------------------- the config
@pytest.mark.parametrize("arch", list(ARCHS))
def test_config_gives_tl_names_without_changing_what_a_checkpoint_stores(arch, tiny_model):
    m = tiny_model(arch)
    fields = {f.name for f in dataclasses.fields(m.cfg) if f.init}
    assert set(config_to_dict(m.cfg)) == fields  # properties, never saved
    assert not {"device", "dtype", "n_ctx", "d_vocab", "n_key_value_heads"} & fields
    assert m.cfg.device == torch.device("cpu") and m.cfg.dtype == torch.float32
    assert m.cfg.n_ctx == N_CTX_UNBOUNDED and m.cfg.d_vocab == m.cfg.vocab_size
    assert m.cfg.n_key_value_heads is None and m.cfg.n_heads >= 1 and m.cfg.n_layers >= 1
    twin = build_model(arch, config_to_dict(m.cfg))
    m.double()  # cfg.dtype follows the parameters, of this model only
    assert m.cfg.dtype == torch.float64 and twin.cfg.dtype == torch.float32
    assert m.cfg == twin.cfg and m.to_checkpoint_dict() == twin.to_checkpoint_dict()
    with pytest.raises(AttributeError, match="belongs to none"):
        m.config_cls().device  # noqa: B018 - a config of no model has no device


# ---------------------------------------------------------------------------- patching
@pytest.mark.parametrize("arch", list(ARCHS))
def test_resid_pre_patching_on_every_architecture(arch, tiny_model):
    m = _model(tiny_model, arch)
    clean, corrupted, cache, clean_m, corrupt_m = _runs(m)
    out = patching.get_act_patch_resid_pre(m, corrupted, cache, _metric)
    assert out.shape == (m.cfg.n_layers, T)
    # before layer 0 the stream is the embedding: patching position P makes the input clean
    torch.testing.assert_close(out[0, P].item(), clean_m, atol=ATOL, rtol=0)
    others = [p for p in range(T) if p != P]
    torch.testing.assert_close(out[0, others], torch.full((T - 1,), corrupt_m,
                                                          dtype=out.dtype), atol=ATOL, rtol=0)
    # positions before P are the same in both runs at every layer (causal models)
    torch.testing.assert_close(out[:, :P], torch.full_like(out[:, :P], corrupt_m),
                               atol=ATOL, rtol=0)
    same = patching.get_act_patch_resid_pre(m, clean, cache, _metric)
    torch.testing.assert_close(same, torch.full_like(same, clean_m), atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch,kw", [("transformer", {}), ("mamba2", {"d_mlp": 8}),
                                     ("stu", {})])
def test_mlp_patching(arch, kw, tiny_model):
    m = _model(tiny_model, arch, **kw)
    clean, corrupted, cache, clean_m, corrupt_m = _runs(m)
    out = patching.get_act_patch_mlp_out(m, corrupted, cache, _metric)
    assert out.shape == (m.cfg.n_layers, T)
    torch.testing.assert_close(out[:, :P], torch.full_like(out[:, :P], corrupt_m),
                               atol=ATOL, rtol=0)
    assert abs(out[-1, -1].item() - corrupt_m) > 1e-6  # the last MLP write moves the metric
    same = patching.get_act_patch_mlp_out(m, clean, cache, _metric)
    torch.testing.assert_close(same, torch.full_like(same, clean_m), atol=ATOL, rtol=0)


def test_attention_head_patching_by_position(tiny_model):
    m = _model(tiny_model, "transformer")
    L, H = m.cfg.n_layers, m.cfg.n_heads
    clean, corrupted, cache, clean_m, corrupt_m = _runs(m)
    out = patching.get_act_patch_attn_head_out_by_pos(m, corrupted, cache, _metric)
    assert out.shape == (L, T, H)
    torch.testing.assert_close(out[:, :P], torch.full_like(out[:, :P], corrupt_m),
                               atol=ATOL, rtol=0)

    def patch(z, hook):  # the entry (layer 1, last position, head 3), by hand
        z = z.clone()
        z[:, -1, 3] = cache["z", 1][:, -1, 3]
        return z

    by_hand = _metric(m.run_with_hooks(corrupted, fwd_hooks=[("blocks.1.attn.hook_z", patch)]))
    torch.testing.assert_close(out[1, -1, 3].item(), by_hand.item(), atol=ATOL, rtol=0)
    assert abs(by_hand.item() - corrupt_m) > 1e-6
    same = patching.get_act_patch_attn_head_out_by_pos(m, clean, cache, _metric)
    torch.testing.assert_close(same, torch.full_like(same, clean_m), atol=ATOL, rtol=0)


def test_every_patch_type_at_once(tiny_model):
    """TL's combined sweeps (q, k, v, z, pattern per head; resid_pre, attn_out, mlp_out per
    block) address our hooks with TL's axis layouts: the clean cache patched into the clean run
    changes nothing, and the corrupted run's rows before P stay corrupted."""
    m = _model(tiny_model, "transformer")
    L, H = m.cfg.n_layers, m.cfg.n_heads
    clean, corrupted, cache, clean_m, corrupt_m = _runs(m)
    heads = patching.get_act_patch_attn_head_all_pos_every(m, clean, cache, _metric)
    assert heads.shape == (5, L, H)  # z, q, k, v, pattern
    torch.testing.assert_close(heads, torch.full_like(heads, clean_m), atol=ATOL, rtol=0)
    blocks = patching.get_act_patch_block_every(m, corrupted, cache, _metric)
    assert blocks.shape == (3, L, T)  # resid_pre, attn_out, mlp_out
    torch.testing.assert_close(blocks[:, :, :P], torch.full_like(blocks[:, :, :P], corrupt_m),
                               atol=ATOL, rtol=0)


# ---------------------------------------------------------------------------- head detector
def test_head_detector_scores_follow_the_hard_alibi_windows(tiny_model):
    m = _model(tiny_model, "transformer")  # heads 0, 1: windows 1, 2; heads 2, 3: NoPE
    x = "".join(letters(7))  # "abcdefg", period 7: induction targets are 6 tokens back
    seq = x + x
    prev = detect_head(m, seq, "previous_token_head", exclude_current_token=True)
    assert prev.shape == (2, 4)
    torch.testing.assert_close(prev[:, 1], torch.ones(2, dtype=prev.dtype))  # only i − 1 left
    assert (prev[:, 2:] < 0.9).all()
    ind = detect_head(m, seq, "induction_head")
    assert (ind[:, :2] == 0).all()  # windows 1 and 2 cannot see 6 tokens back
    # a NoPE head's score from its own pattern: attention to i − 6 over all attention
    tokens = m.to_tokens(seq)  # [1, 15]: <BOS> then x twice
    _, cache = m.run_with_cache(tokens)
    pat = cache["pattern", 1][0, 3]  # [q, k]
    rows = torch.arange(8, 15)
    expect = pat[rows, rows - 6].sum() / pat.sum()
    torch.testing.assert_close(ind[1, 3].item(), expect.item(), atol=1e-6, rtol=0)
    # several strings: the mean of their scores
    both = detect_head(m, [seq, seq[::-1]], "induction_head")
    again = (ind + detect_head(m, seq[::-1], "induction_head")) / 2
    torch.testing.assert_close(both, again)


# ---------------------------------------------------------------------------- a checkpoint
def test_patching_and_head_detector_on_a_copy_checkpoint(tmp_path):
    n, D = 2, 8
    path = save_hash_copy(tmp_path / "hash_copy.pt", n=n, D=D, max_len=16)
    m = models.load(path)  # the copy head is layer 1, head n + 1 (models.constructions)
    g = torch.Generator().manual_seed(0)
    x = strings_without_repeated_ngrams(1, 7, n, D, g)[0]
    s = m.to_string(x)
    seq_scores = detect_head(m, s + s, "induction_head")  # to_tokens: the file's task, <BOS>
    assert seq_scores.shape == (2, n + 2)
    top = divmod(int(seq_scores.argmax()), n + 2)
    # the score is attention on induction targets over all attention: 7 of the 15 rows of
    # <BOS> x x have a target, so 7 / 15 is the most any head can score
    assert top == (1, n + 1) and seq_scores[1, n + 1] > 0.95 * 7 / 15
    assert (seq_scores[0] < 0.2).all()
    # the suite's n-gram match score (probes.attention) names the same head
    task = make_task("copy", m.checkpoint["task"]["config"])
    data = [(task.eval_batch(16, torch.Generator().manual_seed(0), length=7), 8)]
    match = pattern_scores(m, data, n_max=n)["match"].nan_to_num(-1).amax(-1)  # [layer, head]
    assert divmod(int(match.argmax()), n + 2) == top
    clean = m.to_tokens(s + "<COPY>" + s[:3])  # the next answer letter is x[3]
    assert m.to_str_tokens(clean)[0] == "<BOS>" and clean.shape == (1, 12)
    corrupted = m.to_tokens(s[:3] + m.to_string((x[3:4] + 1) % D) + s[4:] + "<COPY>" + s[:3])

    def metric(logits):
        return logits[0, -1, int(x[3])]

    clean_logits, cache = m.run_with_cache(clean)
    out = patching.get_act_patch_attn_head_out_by_pos(m, corrupted, cache, metric)
    assert out.shape == (2, 12, n + 2)
    # the read-out sees only the copy head's output: patching it at the last position gives
    # the clean logit, and no other head at that position changes anything
    torch.testing.assert_close(out[1, -1, n + 1].item(), metric(clean_logits).item(),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(out[1, -1, : n + 1], torch.full((n + 1,), metric(m(corrupted))
                                                               .item()), atol=1e-4, rtol=0)
    resid = patching.get_act_patch_resid_pre(m, corrupted, cache, metric)
    assert resid.shape == (2, 12)
    torch.testing.assert_close(resid[0, 4].item(), metric(clean_logits).item(), atol=1e-4,
                               rtol=0)


# ---------------------------------------------------------------------------- tokens
def test_to_tokens_uses_the_task_vocabulary(tiny_model):
    m = tiny_model("transformer")
    with pytest.raises(InputError, match="has no task .*set_task"):
        m.to_tokens("abc")
    m.set_task("copy", {"D": 7})  # letters a..g = 0..6, then BOS 7, EOS 8, COPY 9, PAD 10
    assert m.to_tokens("abc").tolist() == [[7, 0, 1, 2]]
    assert m.to_tokens("<BOS>ab<COPY>").tolist() == [[7, 0, 1, 9]]  # BOS not doubled
    assert m.to_tokens("ab", prepend_bos=False).tolist() == [[0, 1]]
    assert m.to_tokens(["ab", "a"]).tolist() == [[7, 0, 1], [7, 0, 10]]  # padded with PAD
    ids = torch.tensor([3, 2, 1])
    assert m.to_tokens(ids).tolist() == [[3, 2, 1]]  # ids pass through, batch axis added
    assert m.to_str_tokens("ab<COPY>") == ["<BOS>", "a", "b", "<COPY>"]
    assert m.to_string(m.to_tokens("gab")[0]) == "<BOS>gab"
    assert m.to_single_token("<EOS>") == 8
    with pytest.raises(InputError, match="'z' is not a token"):
        m.to_tokens("abz")
    m.set_task("copy", {"D": 8})
    with pytest.raises(InputError, match="12 tokens but the model 11"):
        m.to_tokens("ab")


# ---------------------------------------------------------------------------- clear refusals
@pytest.mark.parametrize("arch", ["lstm", "mamba2", "stu"])
def test_attention_tools_on_a_model_without_attention_say_so(arch, tiny_model):
    m = _model(tiny_model, arch)
    clean, corrupted, cache, _, _ = _runs(m)
    with pytest.raises(ActivationNotFound, match=f"this {arch} model has no attention heads"):
        patching.get_act_patch_attn_head_out_by_pos(m, corrupted, cache, _metric)
    with pytest.raises(ActivationNotFound, match="no attention heads"):
        detect_head(m, clean[0], "induction_head")


def test_missing_hooks_and_direct_paths_are_one_clear_line(tiny_model):
    m = _model(tiny_model, "mamba2")  # no MLP: no hook_mlp_out
    _, corrupted, cache, _, _ = _runs(m)
    with pytest.raises(ActivationNotFound, match="has no hook 'blocks.0.hook_mlp_out'"):
        patching.get_act_patch_mlp_out(m, corrupted, cache, _metric)
    m = _model(tiny_model, "transformer", parallel_residual=True)  # resid_mid never fires
    clean, corrupted, cache, _, _ = _runs(m)
    with pytest.raises(ActivationNotFound, match="did not fire"):
        patching.get_act_patch_resid_mid(m, corrupted, cache, _metric)
    _, corrupted_cache = m.run_with_cache(corrupted)
    with pytest.raises(InputError, match="no per-head Q/K/V inputs"):
        patching.get_act_patch_direct_path(m, corrupted, cache, corrupted_cache, _metric,
                                           src_layer=0, src_head=0, verbose=False)
