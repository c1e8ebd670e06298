"""The contract every suite model keeps (DESIGN.md "Tests"), run over every architecture in
models.registry.ARCHS and every positional encoding of the transformer: output shapes,
run_with_cache equals forward, patching an activation with itself changes nothing, the
save / load round trip, and each fast path equals the plain path (outputs and gradients).
Plus: the runtime shape checks are on (a wrong shape fails)."""

import jaxtyping
import pytest
import torch

import models
from models.checkpoint import save_checkpoint
from models.layers import RMSNorm
from models.registry import ARCHS, model_class
from models.ssd import ssd_chunked
from models.transformer import PES
from tasks.base import TaskError

CASES = [(arch, {}) for arch in ARCHS if arch != "transformer"]
CASES += [("transformer", {"pe": pe}) for pe in PES]
IDS = [arch + "".join(f"-{v}" for v in kw.values()) for arch, kw in CASES]
B, T = 3, 11  # T > chunk_size and T > d_conv, so chunk and window boundaries are crossed
SSM_HOOKS = ("hook_resid_pre", "hook_resid_post", "mixer.hook_x", "mixer.hook_B",
             "mixer.hook_C", "mixer.hook_ssm_dt", "mixer.hook_decay", "mixer.hook_ssm_write",
             "mixer.hook_ssm_state", "mixer.hook_y", "mixer.hook_ssm_out")
# every layer's hooks DESIGN.md names for the architecture (TransformerLens vocabulary)
LAYER_HOOKS = {
    "transformer": ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "attn.hook_q",
                    "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores", "attn.hook_pattern",
                    "attn.hook_z", "attn.hook_result", "mlp.hook_pre", "mlp.hook_post"),
    "mamba2": SSM_HOOKS, "mambazero": SSM_HOOKS, "mamba": SSM_HOOKS,
    "lstm": ("hook_resid_pre", "hook_h", "hook_c"),
    "stu": ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "stu.hook_features",
            "stu.hook_out", "hook_mlp_out", "mlp.hook_pre", "mlp.hook_post"),
}


def test_every_architecture_has_a_tiny_config(tiny_config):
    for arch in ARCHS:  # a KeyError here: add the new architecture to conftest.TINY
        assert tiny_config(arch) is not None


def _build(tiny_model, arch, kw, dtype=torch.float64):
    return tiny_model(arch, random=True, dtype=dtype, **kw)


def _x(model, tokens):
    return tokens(B, T, model.cfg.vocab_size)


@pytest.mark.parametrize("arch,kw", CASES, ids=IDS)
def test_shapes_and_run_with_cache_equals_forward(arch, kw, tiny_model, tokens):
    m = _build(tiny_model, arch, kw)
    x = _x(m, tokens)
    ref = m(x)
    assert ref.shape == (B, T, m.cfg.vocab_size) and ref.dtype == torch.float64
    logits, cache = m.run_with_cache(x)
    torch.testing.assert_close(logits, ref, atol=1e-10, rtol=0)
    assert not any(hp._forward_hooks for hp in m.hook_dict.values()), "hooks left attached"
    assert set(cache.keys()) <= set(m.hook_names())
    for name in ("hook_embed", "ln_final.hook_normalized",
                 *(f"blocks.{i}.{h}" for i in range(m.cfg.n_layers) for h in LAYER_HOOKS[arch])):
        assert name in cache, name
    for name, act in cache.items():
        assert act.shape[0] == B and act.dtype == torch.float64, name
    assert cache["hook_embed"].shape == (B, T, m.cfg.d_model)
    lp = m.log_probs(x)
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(B, T, dtype=lp.dtype))


@pytest.mark.parametrize("arch,kw", CASES, ids=IDS)
def test_patching_every_activation_with_itself_changes_nothing(arch, kw, tiny_model, tokens):
    m = _build(tiny_model, arch, kw)
    x = _x(m, tokens)
    ref = m(x)
    _, cache = m.run_with_cache(x)
    names = list(cache.keys())
    ident = m.run_with_hooks(x, fwd_hooks=[(n, lambda v, hook: v) for n in m.hook_names()])
    torch.testing.assert_close(ident, ref, atol=1e-10, rtol=0)
    same = m.run_with_hooks(x, fwd_hooks=[(n, lambda v, hook: cache[hook.name].clone())
                                          for n in names])
    torch.testing.assert_close(same, ref, atol=1e-10, rtol=0)
    assert not any(hp._forward_hooks for hp in m.hook_dict.values()), "hooks left attached"
    # and patching with another value does change the output (the check above can fail)
    other = m.run_with_hooks(x, fwd_hooks=[("hook_embed", lambda v, hook: v.flip(1))])
    assert (other - ref).abs().max() > 1e-6


@pytest.mark.parametrize("arch,kw", CASES, ids=IDS)
def test_save_load_round_trip(arch, kw, tiny_model, tokens, tmp_path):
    m = _build(tiny_model, arch, kw, dtype=None)
    ck = {"format": 1, "model": m.to_checkpoint_dict(), "task": {"name": "copy", "config": {}},
          "train": {}, "state_dict": m.state_dict(), "history": []}
    loaded = models.load(save_checkpoint(ck, tmp_path / "m.pt"))
    assert type(loaded) is type(m) and loaded.arch == arch and loaded.cfg == m.cfg
    assert loaded.state_dict().keys() == m.state_dict().keys()
    for k, v in m.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    x = _x(m, tokens)
    torch.testing.assert_close(loaded(x), m.eval()(x), atol=0, rtol=0)


FAST = [(arch, kw, scan) for arch, kw in CASES for scan in model_class(arch).fast_scans]


def test_every_fast_path_is_tested():
    """Each architecture with more than one path names its fast ones (and they are paths)."""
    for arch in ARCHS:
        cls = model_class(arch)
        assert set(cls.fast_scans) <= set(cls.scans)
        assert bool(cls.fast_scans) == bool(cls.scans), arch
    assert {a for a, _, _ in FAST} == {a for a in ARCHS if model_class(a).scans}


@pytest.mark.parametrize("arch,kw,scan", FAST,
                         ids=[f"{i}-{s}" for (a, k, s) in FAST
                              for i in [a + "".join(f"-{v}" for v in k.values())]])
def test_fast_path_equals_plain_path(arch, kw, scan, tiny_model, tokens, assert_paths_agree):
    m = _build(tiny_model, arch, kw)
    assert_paths_agree(m, _x(m, tokens), scan)


def test_set_scan_refuses_unknown_paths(tiny_model):
    with pytest.raises(TaskError, match="scan must be one of"):
        tiny_model("mamba2").set_scan("sdpa")
    with pytest.raises(TaskError, match="single computation path"):
        tiny_model("stu").set_scan("plain")


# ---------------------------------------------------------------------------- shape checks
def test_wrong_shapes_fail_under_pytest(tiny_model):
    """conftest's import hook checks the jaxtyping annotations at run time: a wrong shape or
    dtype raises at the call, not deep inside (and the right ones pass)."""
    x, dA = torch.randn(2, 5, 2, 3), torch.randn(2, 5, 2)
    Bm = Cm = torch.randn(2, 5, 1, 4)
    assert ssd_chunked(x, dA, Bm, Cm, 4).shape == (2, 5, 2, 3)
    with pytest.raises(jaxtyping.TypeCheckError):
        ssd_chunked(x, torch.randn(2, 5, 3), Bm, Cm, 4)  # 3 heads of decay for 2 heads of x
    norm = RMSNorm(8, 1e-5)
    with pytest.raises(jaxtyping.TypeCheckError):
        norm(torch.randn(2, 8))  # no position axis
    m = tiny_model("mamba2")
    with pytest.raises(jaxtyping.TypeCheckError):
        m(torch.zeros(2, 5))  # float "tokens"
    with pytest.raises(jaxtyping.TypeCheckError):
        m.blocks[0].mixer(torch.randn(1, 2, 5, m.cfg.d_model))  # a 4-D residual stream
