"""FlexAttention for ALiBi and Hard-ALiBi (issue 35 §2): the bias added per score inside the
kernel equals the explicit path's, and ``auto`` takes it only on CUDA, only for those two
encodings, only while no hook reads the scores or pattern. PyTorch runs FlexAttention on the CPU
eagerly and forward only, so the CPU checks are forward parity; gradients are checked on CUDA
(test_flex_equals_plain_on_cuda, marked gpu)."""

from __future__ import annotations

import warnings

import pytest
import torch

from models.registry import build_model
from models.transformer import TransformerConfig, alibi_score_mod, positional_bias

CASES = [("alibi", True), ("hard_alibi", True), ("alibi", False), ("hard_alibi", False),
         ("nope", True)]


def _model(pe: str, causal: bool = True, dtype=torch.float32):
    torch.manual_seed(0)
    m = build_model("transformer", {"vocab_size": 11, "d_model": 32, "n_layers": 2,
                                    "n_heads": 4, "pe": pe, "causal": causal})
    return m.to(dtype).eval()


def _tokens(n: int = 3, length: int = 13, device="cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 11, (n, length), generator=g).to(device)


def _run(m, x, scan: str) -> torch.Tensor:
    m.set_scan(scan)
    with warnings.catch_warnings():  # eager flex on the CPU warns that it is unfused
        warnings.simplefilter("ignore", UserWarning)
        return m(x)


@pytest.mark.parametrize("pe,causal", CASES)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_flex_equals_the_explicit_path(pe, causal, dtype, tol):
    m, x = _model(pe, causal, dtype), _tokens()
    with torch.no_grad():
        ref, out = _run(m, x, "plain"), _run(m, x, "flex")
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("pe", ["alibi", "hard_alibi"])
def test_the_score_mod_is_the_positional_bias(pe):
    """Every score the kernel sees gets exactly positional_bias's entry (what the plain path
    adds, hook_pattern's bias), −∞ included."""
    cfg = TransformerConfig(vocab_size=11, d_model=32, n_layers=1, n_heads=4, pe=pe)
    T = 9
    mod = alibi_score_mod(cfg, torch.device("cpu"))
    h, q, k = torch.meshgrid(torch.arange(4), torch.arange(T), torch.arange(T), indexing="ij")
    got = mod(torch.zeros(4, T, T), torch.zeros_like(h), h, q, k)
    assert torch.equal(got, positional_bias(cfg, T, T, "cpu"))


def test_auto_takes_flex_on_cuda_for_alibi_only():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # device objects: no GPU needed
    for pe, on_cuda in (("alibi", "flex"), ("hard_alibi", "flex"), ("rope", "sdpa"),
                        ("nope", "sdpa")):
        attn = _model(pe).blocks[0].attn
        assert attn._path(cuda) == on_cuda and attn._path(cpu) == "sdpa", pe
    m = _model("hard_alibi")
    attn = m.blocks[0].attn
    with m.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda t, hook: None)]):
        assert attn._path(cuda) == "plain"  # the pattern must be materialised
    m.set_scan("flex")
    assert attn._path(cpu) == "flex"  # forced (tests)
    m.set_scan("sdpa")
    assert attn._path(cuda) == "sdpa"
    off = build_model("transformer", {"vocab_size": 11, "d_model": 32, "n_layers": 1,
                                      "pe": "alibi", "use_sdpa": False})
    assert off.blocks[0].attn._path(cuda) == "plain"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("pe,causal", CASES)
def test_flex_equals_plain_on_cuda(pe, causal):
    """Outputs and gradients, compiled FlexAttention (what auto runs) against the plain path."""
    m = _model(pe, causal).cuda().train()
    x = _tokens(4, 96, "cuda")
    grads = {}
    outs = {}
    for scan in ("plain", "flex"):
        m.zero_grad()
        m.set_scan(scan)
        outs[scan] = m(x)
        outs[scan].square().mean().backward()
        grads[scan] = [p.grad.clone() for p in m.parameters()]
    torch.testing.assert_close(outs["flex"], outs["plain"], atol=1e-4, rtol=1e-4)
    for a, b in zip(grads["flex"], grads["plain"], strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    m.set_scan("auto")
    assert m.blocks[0].attn._path(x.device) == ("flex" if pe in ("alibi", "hard_alibi")
                                                 else "sdpa")
