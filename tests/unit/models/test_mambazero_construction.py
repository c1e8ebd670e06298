"""MambaZero construction of Thm 1 (App. C.2): exactly the add-β estimator; w ≥ k + 1 needed."""

import pytest
import torch

from models import load
from models.constructions import mambazero_add_beta, save_mambazero
from models.ssm.mamba2 import Mamba2LM
from models.ssm.mambazero import MambaZeroConfig, MambaZeroLM
from models.ssm.ssd import Mamba2Config
from probes.counts import transition_counts
from tasks.add_beta import add_beta_probs

STATE = "blocks.0.mixer.hook_ssm_state"


def kl_to_add_beta(model, x, S, beta):
    q = add_beta_probs(x, S, 1, beta)  # float64
    lp = model.log_probs(x).double()
    return (q * (q.log() - lp)).sum(-1)  # [batch, pos]


@pytest.mark.parametrize("S,beta", [(2, 1.0), (2, 0.3), (3, 0.5), (5, 2.0)])
def test_construction_is_add_beta(S, beta):
    g = torch.Generator().manual_seed(S)
    x = torch.randint(0, S, (6, 120), generator=g)
    m = mambazero_add_beta(S, beta)
    for scan in ("plain", "chunked"):
        m.set_scan(scan)
        kl = kl_to_add_beta(m, x, S, beta)
        assert kl.abs().max() <= 1e-6, (scan, kl.abs().max())
    m64 = mambazero_add_beta(S, beta, dtype=torch.float64)
    assert kl_to_add_beta(m64, x, S, beta).abs().max() <= 1e-12


def test_construction_state_holds_the_counts_and_a_t_is_one():
    S = 3
    x = torch.randint(0, S, (4, 50))
    m = mambazero_add_beta(S, 1.0, dtype=torch.float64)
    _, cache = m.run_with_cache(x)
    H = cache[STATE][:, :, 0]  # [batch, pos, 2S, S]
    n = transition_counts(x, S, 1).double()  # [batch, pos, i, j]
    # H_t[2j + 1, i] = n_ij(t) (Eq. 4); even rows (the embedding coordinates) stay 0
    assert torch.allclose(H[:, :, 1::2, :], n.transpose(-1, -2), atol=1e-12)
    assert H[:, :, 0::2, :].abs().max() == 0
    assert torch.all(cache["blocks.0.mixer.hook_decay"] == 1.0)


def test_construction_checkpoint_round_trip(tmp_path):
    path = save_mambazero(tmp_path / "mz.pt", S=2, beta=0.5, seq_len=64)
    m = load(path)
    assert m.arch == "mambazero" and m.checkpoint["task"]["config"]["beta"] == 0.5
    x = torch.randint(0, 2, (3, 40))
    assert kl_to_add_beta(m, x, 2, 0.5).abs().max() <= 1e-6


def _confusable_states(model):
    x = torch.tensor([[0, 1, 0, 1, 0, 1], [0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        out, cache = model.run_with_cache(x)
    return cache[STATE][:, -1], out[:, -1]


def _rel(a, b):
    return float((a - b).norm() / (a.norm() + b.norm()))


def _random_w1(cls, cfg_cls, **kw):
    m = cls(cfg_cls(vocab_size=2, d_model=8, d_conv=1, d_state=4, **kw)).double()
    with torch.no_grad():  # unit-scale embeddings, so states are far from 0 (init std is 0.02)
        m.embed.weight.normal_()
    return m


@pytest.mark.parametrize("cls,cfg_cls", [(MambaZeroLM, MambaZeroConfig), (Mamba2LM, Mamba2Config)])
def test_confusable_pair_identical_for_w1(cls, cfg_cls):
    """§4.2.1 / App. C.1: with w = 1 (and a_t = 1) b_t, x̃_t, c_t see only x_t, so 010101 and
    000111 (same symbol counts, different transition counts) end in the same state."""
    torch.manual_seed(0)
    H, out = _confusable_states(_random_w1(cls, cfg_cls, decay=False))
    assert H.norm() > 1e-2 and _rel(H[0], H[1]) < 1e-12 and _rel(out[0], out[1]) < 1e-12
    # the add-β estimator does tell them apart: P(1) = 1/4 vs 3/4 (β = 1)
    p = add_beta_probs(torch.tensor([[0, 1, 0, 1, 0, 1], [0, 0, 0, 1, 1, 1]]), 2, 1, 1.0)
    assert p[:, -1, 1].tolist() == [0.25, 0.75]
    # a window of 2 separates the pair (the construction, w = k + 1)
    H2, _ = _confusable_states(mambazero_add_beta(2, 1.0, dtype=torch.float64))
    assert _rel(H2[0], H2[1]) > 0.1
    # and so does a w = 1 model whose a_t < 1 depends on the input (order matters again)
    m2 = _random_w1(cls, cfg_cls)
    with torch.no_grad():
        m2.blocks[0].mixer.in_proj.weight[-1].normal_()  # w_Δ ≠ 0: input-dependent Δ_t
        m2.blocks[0].mixer.dt_bias.fill_(0.0)  # a_t well below 1 (init: a_t ≈ 0.9..0.999)
    H3, _ = _confusable_states(m2)
    assert _rel(H3[0], H3[1]) > 1e-3
