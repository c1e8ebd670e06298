"""Fast by default on CUDA (issue 35 §2): "auto" precision / compile / device type resolved per
device, recorded in the checkpoint and the cache key (CPU keys unchanged); fused AdamW where
the device has it; a compile failure falls back to eager with one warning; compiled models
work under the suite's runtime type-check hook (tests/conftest.py)."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

from analyses.zoo.levels import make_run_config
from models.checkpoint.write import save_checkpoint
from models.registry import build_model
from models.train import cache
from models.train.cli import build_parser, parse_value
from models.train.compiled import CompiledForward, CompileFallbackWarning
from models.train.evaluation import batches
from models.train.loop import fused_adamw, make_optimizer, train
from models.train.loss import nll, step_loss
from models.train.runconfig import RunConfig
from models.train_config import TrainConfig, resolve_train
from seqprobe.config import config_from_dict
from seqprobe.errors import InputError
from tasks.base import make_generator
from tasks.registry import make_task
from tests.cuda_fakes import fake_gpu

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a cuda device object needs no GPU


def _run_config(**train):
    return make_run_config("transformer", "copy", "quick", model={"d_model": 16, "n_layers": 1},
                     task_config={"max_len": 6},
                     train={"steps": 2, "eval_every": 0, "batch_size": 4, **train})


@pytest.fixture
def bf16_card(monkeypatch):
    fake_gpu(monkeypatch, bf16=True)


def test_auto_resolves_per_device(bf16_card, monkeypatch):
    cfg = TrainConfig()
    assert (cfg.device_type, cfg.precision, cfg.compile) == ("auto", "auto", "auto")
    cpu = resolve_train(cfg, CPU)
    assert (cpu.device_type, cpu.precision, cpu.compile) == ("cpu", "fp32", False)
    cuda = resolve_train(cfg, CUDA)
    assert (cuda.device_type, cuda.precision, cuda.compile) == ("cuda", "bf16", True)
    assert resolve_train(cuda, CUDA) == cuda  # idempotent
    # explicit values win
    eager = resolve_train(TrainConfig(precision="fp32", compile=False), CUDA)
    assert (eager.precision, eager.compile) == ("fp32", False)
    assert resolve_train(TrainConfig(precision="bf16"), CPU).precision == "bf16"
    fake_gpu(monkeypatch, bf16=False)
    assert resolve_train(cfg, CUDA).precision == "fp32"  # a card without bfloat16


def test_a_run_of_one_device_type_refuses_another():
    with pytest.raises(InputError, match="cuda run .* would train on cpu"):
        resolve_train(TrainConfig(device_type="cuda"), CPU)
    with pytest.raises(InputError, match="device_type must be"):
        TrainConfig(device_type="tpu")
    with pytest.raises(InputError, match="compile must be true, false or auto"):
        config_from_dict(TrainConfig, {"compile": "maybe"})
    with pytest.raises(InputError, match="precision must be auto, fp32 or bf16"):
        TrainConfig(precision="fp16")


def test_cpu_keys_stay_and_cuda_runs_key_apart(bf16_card):
    run_config = _run_config()
    cpu = run_config.resolved(CPU)
    assert cpu.hash() == run_config.hash()  # what CPU runs were keyed as before "auto"
    assert not {"device_type", "precision", "compile"} & set(cpu.canonical()["train"])
    cuda = run_config.resolved(CUDA)
    assert cuda.canonical()["train"] == {**cpu.canonical()["train"], "device_type": "cuda",
                                         "precision": "bf16", "compile": True}
    # fp32 eager on CUDA is still not the CPU's run: the device type keys it apart
    eager = _run_config(precision="fp32", compile=False).resolved(CUDA)
    assert len({cpu.hash(), cuda.hash(), eager.hash()}) == 3
    # a record round-trips to its own key
    assert RunConfig.from_dict(cuda.to_dict()).hash() == cuda.hash()


def test_the_cache_records_what_the_cpu_used(tmp_path):
    run_config = _run_config()
    path = cache.train_run_cached(run_config, tmp_path, device="cpu", progress=False)
    assert path == cache.cache_path(run_config, tmp_path)
    ck = torch.load(path, weights_only=True)
    tr = ck["train"]["config"]
    assert (tr["device_type"], tr["precision"], tr["compile"]) == ("cpu", "fp32", False)
    assert cache.entry_state(path, run_config.resolved(CPU)) == "done"
    # the same file read as a CUDA run's record is another run: never served for this RunConfig
    ck["train"]["config"] = {**tr, "device_type": "cuda", "precision": "bf16", "compile": True}
    save_checkpoint(ck, tmp_path / "gpu.pt")  # as that run wrote it: its digests match
    assert cache.entry_state(tmp_path / "gpu.pt", run_config) == "other"


def test_cli_flags_of_the_auto_fields():
    p, _ = build_parser("transformer", "copy")
    assert p.parse_args(["--no-compile"]).train__compile == "false"
    assert p.parse_args(["--compile"]).train__compile == "true"
    tp = TrainConfig.__annotations__["compile"]
    hint = eval(tp, {}) if isinstance(tp, str) else tp  # "bool | str" under __future__
    assert [parse_value(t, hint, "--compile") for t in ("false", "true", "auto")] == [
        False, True, "auto"]
    assert p.parse_args(["--precision", "fp32"]).train__precision == "fp32"


def test_fused_adamw_on_cuda_only_and_same_numbers():
    assert fused_adamw(CUDA) and not fused_adamw(CPU)
    m = build_model("transformer", {"vocab_size": 12, "d_model": 16, "n_layers": 1})
    assert not make_optimizer(m, TrainConfig()).defaults["fused"]
    # torch's fused AdamW (the kernel CUDA runs; the CPU has one too) steps as the loop does
    x = torch.randint(0, 12, (3, 7))
    models = [build_model("transformer", {"vocab_size": 12, "d_model": 16, "n_layers": 1})
              for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [torch.optim.AdamW(mm.parameters(), lr=1e-2, fused=f)
            for mm, f in zip(models, (None, True), strict=True)]
    for _ in range(3):
        for mm, opt in zip(models, opts, strict=True):
            opt.zero_grad()
            mm(x).square().mean().backward()
            opt.step()
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def _boom(gm, example_inputs):
    raise RuntimeError("no C compiler here")


def test_a_compile_failure_falls_back_to_eager_with_one_warning(monkeypatch):
    torch.manual_seed(0)
    run_config = _run_config()
    model = build_model(run_config.arch, run_config.model)
    batch = next(iter(_batches(run_config)))
    eager = nll(model.log_probs(batch.tokens), batch.targets)
    real = torch.compile
    monkeypatch.setattr(torch, "compile", functools.partial(real, backend=_boom))
    loss_fn = step_loss(model, TrainConfig(compile=True), CPU)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, value = loss_fn(batch)
        second, _ = loss_fn(batch)
    fell = [w for w in caught if issubclass(w.category, CompileFallbackWarning)]
    assert len(fell) == 1 and "no C compiler here" in str(fell[0].message)
    assert value == eager.item() and second.item() == eager.item()
    first.backward()  # the fallback's loss trains


def test_a_run_that_fell_back_says_so_in_its_history(monkeypatch):
    """The checkpoint's record keeps compile=True (the run's key); its history says it ran
    eager, and why."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=_boom))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileFallbackWarning)
        ckpt = train(_run_config(compile=True, eval_batches=1, eval_batch_size=2), progress=False)
    assert ckpt["train"]["config"]["compile"] is True
    assert "no C compiler here" in ckpt["history"][-1]["compile_fallback"]
    plain = train(_run_config(eval_batches=1, eval_batch_size=2), progress=False)
    assert "compile_fallback" not in plain["history"][-1]


def test_errors_of_the_computation_are_not_swallowed():
    def compiled_that_fails(fn, **_):
        def run(*a):
            raise ValueError("a real bug")
        return run
    forward = CompiledForward(lambda x: x, compile_fn=compiled_that_fails)
    with pytest.raises(ValueError, match="a real bug"):
        forward(torch.ones(1))
    assert forward.fallback == ""


def test_compiled_model_under_the_type_check_hook():
    """Dynamo traces the model, not conftest's jaxtyping/beartype wrappers (which made
    test_gpu's compile test fail on CUDA). aot_eager: dynamo and AOT autograd, no C compiler."""
    torch.manual_seed(0)
    m = build_model("transformer", {"vocab_size": 12, "d_model": 16, "n_layers": 1,
                                    "n_heads": 2, "pe": "rope"})
    x = torch.randint(0, 12, (2, 7))
    ref = m.log_probs(x)
    forward = CompiledForward(m.log_probs, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        out = forward(x)
    assert forward.fallback == ""
    torch.testing.assert_close(out, ref)
    out.sum().backward()


@pytest.mark.slow  # inductor builds C++ kernels for the CPU
def test_inductor_compiled_model_under_the_hook_equals_eager():
    torch.manual_seed(0)
    m = build_model("transformer", {"vocab_size": 12, "d_model": 16, "n_layers": 1,
                                    "n_heads": 2, "pe": "hard_alibi"}).eval()
    x = torch.randint(0, 12, (2, 7))
    ref = m.log_probs(x)
    forward = CompiledForward(m.log_probs)
    out = forward(x)
    assert forward.fallback == ""
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def _batches(run_config):
    return batches(make_task(run_config.task_name, run_config.task_dict), run_config.train,
                   make_generator(0), CPU)
