"""The contract every suite model keeps (DESIGN.md "Tests"), run over every architecture in
models.registry.ARCHS (and every positional encoding of the transformer, both STU
parameterisations, a Mamba-2 with an MLP): output shapes, every hook DESIGN.md names present
with its documented shape, run_with_cache equals forward, patching an activation with itself
changes nothing, the save / load round trip (of a checkpoint and of a training run), and each
fast path equals the plain path (outputs and gradients). Plus: the runtime shape checks are on
(a wrong shape fails). The per-architecture test files keep only what this does not cover."""

import jaxtyping
import pytest
import torch

import models
from analyses.zoo.levels import make_run_config
from models.checkpoint.write import save_checkpoint
from models.layers import RMSNorm
from models.registry import ARCHS, build_model, model_class
from models.ssm.ssd import ssd_chunked
from models.stu import PARAMS
from models.train.loop import train
from models.transformer import PES
from seqprobe.errors import InputError
from tests.tiny import TINY

CASES = [(arch, {}) for arch in ARCHS if arch != "transformer"]
CASES += [("transformer", {"pe": pe}) for pe in PES]
CASES += [("stu", {"param": p}) for p in PARAMS[1:]]  # PARAMS[0] is the config's default
CASES += [("mamba2", {"d_mlp": 8})]  # the MLP half of a Mamba-2 block and its hooks


def _id(arch: str, kw: dict) -> str:
    return arch + "".join(f"-{v}" if isinstance(v, str) else f"-{k}={v}" for k, v in kw.items())


IDS = [_id(arch, kw) for arch, kw in CASES]
B, T = 3, 11  # T > chunk_size and T > d_conv, so chunk and window boundaries are crossed


def design_hook_shapes(arch: str, cfg) -> dict[str, tuple[int, ...]]:
    """Every hook DESIGN.md names for ``arch`` -> its shape on a [B, T] batch, as the model
    class declares it (models.contract.ModelContract.hook_shapes)."""
    return model_class(arch).hook_shapes(cfg, B, T)


# DESIGN.md's vocabulary per family: a class's declaration must name at least these
DESIGN_NAMES = {
    "transformer": {"hook_resid_pre", "hook_resid_mid", "hook_resid_post", "attn.hook_q",
                    "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores", "attn.hook_pattern",
                    "attn.hook_z", "attn.hook_result", "mlp.hook_pre", "mlp.hook_post"},
    "ssm": {"hook_resid_pre", "hook_resid_post", *(f"mixer.hook_{n}" for n in (
        "in_proj", "conv", "x", "B", "C", "ssm_dt", "decay", "ssm_write", "ssm_state", "y",
        "ssm_out"))},
    "lstm": {"hook_resid_pre", "hook_h", "hook_c"},
    "stu": {"hook_resid_pre", "stu.hook_features", "stu.hook_out"},
}


def family(arch: str) -> str:
    """The DESIGN.md family of ``arch``, from where its class lives (models/ssm/ holds the
    SSMs; any other module is its own family): no list of architectures to keep."""
    module = model_class(arch).__module__
    return "ssm" if module.startswith("models.ssm.") else module.rsplit(".", 1)[-1]


def test_every_design_family_is_an_architecture_s():
    assert set(DESIGN_NAMES) <= {family(a) for a in ARCHS}  # a renamed module shows here


@pytest.mark.parametrize("arch", list(ARCHS))
def test_each_class_declares_design_hooks(arch, tiny_config):
    cfg = build_model(arch, tiny_config(arch)).cfg
    declared = model_class(arch).hook_shapes(cfg, B, T)
    layer = {n.split(".", 2)[2] for n in declared if n.startswith("blocks.0.")}
    # a family DESIGN.md does not name yet (a new architecture) declares its own hooks
    names = DESIGN_NAMES.get(family(arch), {"hook_resid_pre"})
    assert names <= layer, names - layer
    assert {"hook_embed", "ln_final.hook_normalized"} <= set(declared)


def assert_design_hooks(arch: str, model, cache) -> None:
    """Every hook DESIGN.md names is in ``cache`` (a [B, T] run) with its documented shape."""
    for name, shape in design_hook_shapes(arch, model.cfg).items():
        assert name in cache, name
        assert tuple(cache[name].shape) == shape, (name, tuple(cache[name].shape), shape)


def test_every_architecture_declares_a_tiny_config():
    for arch in ARCHS:  # empty: set tiny_config on the model class (models.contract)
        assert model_class(arch).tiny_config or arch == "mambazero", arch
        build_model(arch, dict(model_class(arch).tiny_config))


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
    assert_design_hooks(arch, m, cache)
    for name, act in cache.items():
        assert act.shape[0] == B and act.dtype == torch.float64, name
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
    train_record = {"config": {"steps": 10}, "seed": 0, "step": 3, "samples_seen": 12}
    V = m.cfg.vocab_size  # a task whose vocabulary fits the model (models.load checks it)
    task = ({"name": "copy", "config": {"D": V - 4}} if V > 4 else
            {"name": "markov", "config": {"S": V}})
    ck = {"format": 1, "model": m.to_checkpoint_dict(), "task": task,
          "train": train_record, "state_dict": m.state_dict(), "history": []}
    loaded = models.load(save_checkpoint(ck, tmp_path / "m.pt"))
    assert type(loaded) is type(m) and loaded.arch == arch and loaded.cfg == m.cfg
    assert not loaded.training and loaded.checkpoint["train"]["step"] == 3
    assert loaded.state_dict().keys() == m.state_dict().keys()
    for k, v in m.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    x = _x(m, tokens)
    torch.testing.assert_close(loaded(x), m.eval()(x), atol=0, rtol=0)
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]  # no temp file left behind


# a task each architecture trains on in the round trip of a run (copy unless named here)
RUN_TASKS = {"mamba2": ("markov", {"seq_len": 32}), "mambazero": ("markov", {"seq_len": 32})}


@pytest.mark.parametrize("arch", list(ARCHS))
def test_a_training_run_round_trips(arch, tmp_path):
    """A few steps of the one training loop write a file that torch.load reads with
    weights_only=True and models.load rebuilds into the same model, hooks included."""
    task, task_cfg = RUN_TASKS.get(arch, ("copy", {"max_len": 5}))
    model = {k: v for k, v in TINY[arch].items() if k != "vocab_size"} | {"n_layers": 1}
    run_config = make_run_config(arch, task, "quick", model, task_cfg,
                     {"steps": 3, "batch_size": 4, "eval_batches": 1, "eval_batch_size": 4})
    ck = train(run_config, out=tmp_path / "c.pt", device="cpu", progress=False)
    assert ck["train"]["step"] == 3 and ck["history"][-1]["step"] == 3
    if task == "markov":  # the Markov paper's metrics (Eq. 2, the add-beta estimator's KL)
        assert {"lbeta", "loss_gap", "kl_beta"} <= set(ck["history"][-1])
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    assert raw["format"] == 1 and raw["model"]["arch"] == arch
    m = models.load(tmp_path / "c.pt")
    fresh = build_model(arch, ck["model"]["config"])
    fresh.load_state_dict(ck["state_dict"])
    x = torch.randint(0, m.cfg.vocab_size, (B, T))
    torch.testing.assert_close(m(x), fresh.eval()(x), atol=0, rtol=0)
    _, cache = m.run_with_cache(x)
    assert_design_hooks(arch, m, cache)


FAST = [(arch, kw, scan) for arch, kw in CASES for scan in model_class(arch).fast_scans]


def test_every_fast_path_is_tested():
    """Each architecture with more than one path names its fast ones (and they are paths)."""
    for arch in ARCHS:
        cls = model_class(arch)
        assert set(cls.fast_scans) <= set(cls.scans)
        assert bool(cls.fast_scans) == bool(cls.scans), arch
    assert {a for a, _, _ in FAST} == {a for a in ARCHS if model_class(a).scans}


@pytest.mark.parametrize("arch,kw,scan", FAST, ids=[f"{_id(a, k)}-{s}" for a, k, s in FAST])
def test_fast_path_equals_plain_path(arch, kw, scan, tiny_model, tokens, assert_paths_agree):
    m = _build(tiny_model, arch, kw)
    assert_paths_agree(m, _x(m, tokens), scan)


# the mamba-ssm kernels (CUDA, optional extra) against the fast CPU path of the same model, at
# sizes the Triton kernels take (MambaZero's construction sizes are below their smallest block;
# its mixer is Mamba-2's, checked through mamba2)
KERNELS = [a for a in ARCHS if "kernel" in model_class(a).scans and a != "mambazero"]


@pytest.mark.gpu
@pytest.mark.parametrize("arch", KERNELS)
def test_kernel_path_matches_the_fast_path_on_cuda(arch, tiny_model, tokens):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    m = tiny_model(arch, random=True, d_model=64, d_state=16).cuda()
    x = tokens(2, 100, m.cfg.vocab_size).cuda()
    m.set_scan(model_class(arch).fast_scans[0])
    ref = m(x)
    m.set_scan("kernel")
    try:
        out = m(x)
    except RuntimeError as e:
        if "mamba-ssm installed" not in str(e):
            raise
        pytest.skip("needs mamba-ssm")
    assert torch.allclose(out, ref, atol=1e-3, rtol=1e-3)


def test_set_scan_refuses_unknown_paths(tiny_model):
    with pytest.raises(InputError, match="scan must be one of"):
        tiny_model("mamba2").set_scan("sdpa")
    with pytest.raises(InputError, match="single computation path"):
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
