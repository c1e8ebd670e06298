"""Mamba-1's chunked selective scan equals the plain loop (float64, outputs and gradients of
every parameter), whatever the chunk length against the sequence, and gives way to a path that
materialises the states whenever a hook reads them."""

import pytest
import torch

from models.ssm.mamba import MambaConfig
from models.ssm.recurrent import selective_scan_chunked


@pytest.fixture
def tiny(tiny_model):
    return lambda **kw: tiny_model("mamba", random=True, dtype=torch.float64, **kw)


# (batch, T, chunk): T a multiple of the chunk, not a multiple, shorter than one chunk, one
# position per chunk, one chunk exactly
SHAPES = [(2, 12, 4), (3, 11, 4), (2, 5, 8), (1, 7, 1), (2, 6, 6)]


@pytest.mark.parametrize("B,T,K", SHAPES, ids=[f"B{b}-T{t}-K{k}" for b, t, k in SHAPES])
def test_chunked_path_equals_plain_path(B, T, K, tiny, tokens, assert_paths_agree):
    m = tiny(chunk_size=K)
    assert_paths_agree(m, tokens(B=B, T=T, V=m.cfg.vocab_size), "chunked", atol=1e-10)


def test_chunked_scan_with_the_parallel_inner_scan(tokens):
    """The inner log-depth scan (the CUDA choice) gives the loop's numbers and gradients."""
    g = torch.Generator().manual_seed(0)
    B, T, D, N = 2, 13, 3, 4
    x, dt = torch.randn(B, T, D, generator=g), torch.rand(B, T, D, generator=g)
    A = -torch.rand(D, N, generator=g) - 0.1
    Bm, Cm = torch.randn(B, T, N, generator=g), torch.randn(B, T, N, generator=g)
    inputs = [t.double().requires_grad_() for t in (x, dt, A, Bm, Cm)]
    grads = []
    for parallel in (False, True):
        y = selective_scan_chunked(*inputs, chunk=5, parallel=parallel)
        (g_,) = [torch.autograd.grad(y.pow(2).sum(), inputs)]
        grads.append((y.detach(), g_))
    torch.testing.assert_close(grads[1][0], grads[0][0], atol=1e-12, rtol=0)
    for a, b in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(b, a, atol=1e-10, rtol=0)
    # and against the explicit recurrence
    a_t = torch.exp(inputs[1][..., None] * inputs[2])  # [B, T, D, N]
    h = torch.zeros(B, D, N, dtype=torch.float64)
    ys = []
    for t in range(T):
        h = a_t[:, t] * h + (inputs[1][:, t] * inputs[0][:, t])[..., None] * inputs[3][:, t, None]
        ys.append(torch.einsum("bdn,bn->bd", h, inputs[4][:, t]))
    torch.testing.assert_close(grads[0][0], torch.stack(ys, 1).detach(), atol=1e-12, rtol=0)


def test_the_chunked_path_keeps_no_per_position_state(tiny, tokens):
    """What autograd keeps for backward on the chunked path holds no storage as large as one
    chunk's states (the plain path keeps every position's; a boundary state kept as a view
    of its chunk's states would keep the chunk's): the memory the path exists for."""
    B, T, K = 2, 12, 4
    m = tiny(chunk_size=K, d_state=16)  # K·N above 2·T: larger than any [B, T, ·] tensor
    x = tokens(B=B, T=T, V=m.cfg.vocab_size)
    chunk_states = B * K * m.cfg.d_inner * m.cfg.d_state * 8  # bytes, float64

    def big_saved(scan: str) -> int:
        m.set_scan(scan)
        n = 0

        def pack(t):
            nonlocal n
            n += t.untyped_storage().nbytes() >= chunk_states
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            m(x).sum().backward()
        return n

    assert big_saved("plain") > 0  # the check can fail
    assert big_saved("chunked") == 0


def test_state_hooks_fall_back_to_a_materialising_path(tiny, tokens):
    """A hook on h_t gets every position's state on the chunked path too, with the same
    output."""
    m = tiny(chunk_size=4)
    x = tokens(B=2, T=9, V=m.cfg.vocab_size)
    m.set_scan("plain")
    ref, ref_cache = m.run_with_cache(x)
    m.set_scan("chunked")
    out, cache = m.run_with_cache(x)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    assert cache["blocks.0.mixer.hook_ssm_state"].shape == ref_cache[
        "blocks.0.mixer.hook_ssm_state"].shape
    for name in ("hook_decay", "hook_ssm_write", "hook_ssm_state"):
        assert m.blocks[0].mixer._path(torch.zeros(1, 1, 1)) == "chunked"
        with m.hooks(fwd_hooks=[(f"blocks.0.mixer.{name}", lambda t, hook: t)]):
            assert m.blocks[0].mixer._path(torch.zeros(1, 1, 1)) == "plain", name


def test_auto_chunks_only_large_training_states(tiny, monkeypatch):
    """auto: the chunked path when gradients are needed and one [batch, pos, d_inner, d_state]
    tensor reaches the threshold; the plain loop otherwise (on CPU)."""
    mixer = tiny().blocks[0].mixer
    D, N = mixer.cfg.d_inner, mixer.cfg.d_state
    monkeypatch.setattr(MambaConfig, "CHUNKED_MIN_ELEMENTS", 2 * 10 * D * N)
    assert mixer.scan == "auto"
    assert mixer._path(torch.zeros(2, 10, D)) == "chunked"
    assert mixer._path(torch.zeros(1, 10, D)) == "plain"  # below the threshold
    with torch.no_grad():  # nothing to keep for a backward pass
        assert mixer._path(torch.zeros(2, 10, D)) == "plain"
    # the shipped threshold keeps small models on the loop and the paper copy Mamba chunked
    monkeypatch.undo()
    paper = MambaConfig(d_model=1024, n_layers=1, d_state=32)
    assert 1 * 420 * paper.d_inner * paper.d_state >= MambaConfig.CHUNKED_MIN_ELEMENTS
    assert 32 * 64 * 128 * 16 < MambaConfig.CHUNKED_MIN_ELEMENTS


def test_chunked_without_gradients_equals_plain(tiny, tokens):
    m = tiny(chunk_size=3).eval()
    x = tokens(B=2, T=10, V=m.cfg.vocab_size)
    with torch.no_grad():
        m.set_scan("plain")
        ref = m(x)
        m.set_scan("chunked")
        torch.testing.assert_close(m(x), ref, atol=1e-12, rtol=0)


@pytest.mark.gpu
def test_chunked_path_on_cuda_equals_plain_and_keeps_less(tiny, tokens, assert_paths_agree):
    """On CUDA the chunks scan by the log-depth scan: the same numbers in float64, and a
    training step's peak memory below the log-depth path's, which keeps every pass."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    m = tiny(chunk_size=16, d_state=16).cuda()
    x = tokens(B=2, T=100, V=m.cfg.vocab_size).cuda()
    peaks = {}
    for scan in ("scan", "chunked"):
        m.set_scan(scan)
        torch.cuda.reset_peak_memory_stats()
        m.zero_grad()
        m(x).pow(2).mean().backward()
        peaks[scan] = torch.cuda.max_memory_allocated()
    assert peaks["chunked"] < peaks["scan"]
    assert_paths_agree(m, x, "chunked", atol=1e-10)
