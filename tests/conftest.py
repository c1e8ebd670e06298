"""Shared pytest setup: deterministic, single-threaded torch so tests agree across machines;
runtime shape checks on the model code; the shared fixtures: one tiny model of every
architecture (the table is tests/tiny.py), a tiny checkpoint, tiny HuggingFace model
directories."""

import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from jaxtyping import install_import_hook

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # tests run from a clean clone without `pip install -e .` too
    sys.path.insert(0, str(ROOT))

# DESIGN.md: jaxtyping annotations on public functions, checked under pytest. The hook rewrites
# these modules as they are imported (so it must run before anything imports them): every
# function and config dataclass gets @jaxtyped(typechecker=beartype), so a tensor of the wrong
# shape or dtype, or a config field of the wrong type, fails the test that passed it. The
# numeric tower lets an int stand for a float, as config_from_dict does.
TYPECHECKED_MODULES = (
    "models.base", "models.layers", "models.transformer", "models.ssm.recurrent", "models.ssm.ssd",
    "models.ssm.mamba2", "models.ssm.mambazero", "models.ssm.mamba", "models.lstm", "models.stu",
    "models.spectral", "models.generation", "models.constructions",
)
assert not any(m in sys.modules for m in TYPECHECKED_MODULES), "models imported before the hook"
install_import_hook(TYPECHECKED_MODULES,
                    "beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))")

from models.registry import build_model  # noqa: E402 - after the import hook, on purpose
from tests.tiny import TINY, good_checkpoint  # noqa: E402

os.environ.setdefault("MPLBACKEND", "Agg")
# The default checkpoint cache (seqprobe.paths) is per-user; the tests never touch it, nor the
# clone: each test's default is checkpoints/ in its own temp folder (_default_cache), absolute,
# so a test that changes folder or starts a subprocess keeps it. Code run outside a test (at
# collection) gets a session folder in the temp directory (made only if something trains).
os.environ["SEQPROBE_CACHE"] = os.path.join(tempfile.gettempdir(),
                                           f"seqprobe-test-cache-{os.getpid()}")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _default_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQPROBE_CACHE", str(tmp_path / "checkpoints"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def randomize_parameters(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Move every parameter away from its init (norm weights ≠ 1, biases ≠ 0, SSM decays
    a_t ∈ (0.3, 1)) so that a missing term anywhere shows up in a comparison. Works on HF's
    Mamba models too (their names for the same parameters)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            if name.endswith(("A_log", "dt_bias", "dt_proj.bias")):
                p.copy_(noise * 0.5 - 1.0)
            elif name.endswith(("norm.weight", "norm2.weight", "norm_f.weight",
                                "ln_final.weight")):
                p.copy_(1 + 0.2 * noise)
            else:
                p.add_(0.1 * noise)
    return model


@pytest.fixture(scope="session")
def randomize():
    """randomize(model, seed=0) -> the model, every parameter moved away from its init."""
    return randomize_parameters


@pytest.fixture(scope="session")
def tiny_config():
    """tiny_config(arch, **overrides) -> the tiny config dict of ``arch`` with overrides."""

    def make(arch: str, **overrides) -> dict:
        return {**TINY[arch], **overrides}

    return make


@pytest.fixture
def float64():
    """Models built inside are float64 (the training loop builds with the default dtype)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture
def tiny_model(tiny_config):
    """tiny_model(arch, random=False, dtype=None, **overrides) -> a tiny suite model.

    ``random=True`` moves every parameter off its init (:func:`randomize_parameters`);
    ``dtype=torch.float64`` for comparisons that should agree to rounding.
    """

    def make(arch: str, random: bool = False, dtype: torch.dtype | None = None, **overrides):
        model = build_model(arch, tiny_config(arch, **overrides))
        if dtype is not None:
            model = model.to(dtype)
        return randomize_parameters(model) if random else model

    return make


@pytest.fixture(scope="session")
def tiny_checkpoint():
    """tiny_checkpoint(step=0, **model) -> a valid checkpoint dict of a tiny untrained
    transformer (:func:`tests.tiny.good_checkpoint`)."""
    return good_checkpoint


class _HFDirs(dict):
    """kind -> directory of a tiny HuggingFace model (tests/hf_fixtures.py), each built and
    saved the first time a test asks for it, then shared by the whole session (read only)."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, kind: str):
        from tests.hf_fixtures import save_tiny_hf  # transformers: only for the tests that ask

        self[kind] = save_tiny_hf(kind, self.root)
        return self[kind]


@pytest.fixture(scope="session")
def hf_dirs(tmp_path_factory):
    """hf_dirs[kind] -> Path of a saved tiny HF model (gpt_neox, gpt2, llama, mamba, mamba2,
    bert), built on first use. Tests copy a directory before damaging it."""
    return _HFDirs(tmp_path_factory.mktemp("hf"))


def outputs_and_grads(model, x: torch.Tensor, scan: str):
    """(output, {name: grad of mean(output²)}) of ``model`` on ``x`` along path ``scan``."""
    model.set_scan(scan)
    model.zero_grad()
    out = model(x)
    out.pow(2).mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.fixture
def assert_paths_agree():
    """assert_paths_agree(model, x, scan, atol=1e-10): ``scan`` gives the plain path's outputs
    and gradients (float64 models: the paths differ by rounding only)."""

    def check(model, x: torch.Tensor, scan: str, atol: float = 1e-10) -> None:
        o1, g1 = outputs_and_grads(model, x, "plain")
        o2, g2 = outputs_and_grads(model, x, scan)
        torch.testing.assert_close(o2, o1, atol=atol, rtol=0)
        assert g1.keys() == g2.keys()
        for n in g1:
            torch.testing.assert_close(g2[n], g1[n], atol=atol, rtol=0, msg=n)

    return check


@pytest.fixture
def tokens():
    """tokens(B=3, T=11, V=7, seed=0) -> [B, T] int64 tokens below V, from their own seed."""

    def make(B: int = 3, T: int = 11, V: int = 7, seed: int = 0) -> torch.Tensor:
        return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))

    return make
