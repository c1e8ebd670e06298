"""The Markov paper's Mamba-2 as the authors ran it (models.ssm.mamba2.MARKOV_PAPER_MODEL): a state
dict in the authors' layout (Bond1995/Markov-Mamba's MambaLMHeadModel names), mapped to ours,
gives the logits of a reference forward pass written here from the paper's equations (§2.2,
App. B) plus the layer norms the paper omits "for simplicity": bias-free LayerNorm before the
mixer, on y_t (then ⊙ act(z_t)), before the MLP and before the Linear layer; no D term."""

from __future__ import annotations

import math

import pytest
import torch

from analyses.zoo.levels import make_run_config
from models.ssm.mamba2 import MARKOV_PAPER_MODEL, Mamba2LM, from_markov_paper_state_dict
from models.ssm.ssd import Mamba2Config
from seqprobe.errors import InputError

D, E, N, W, L, V = 6, 2, 5, 4, 2, 2  # d, e, N, w, layers, vocab (binary Markov)
DI = E * D  # ed
F = 4 * D  # MLP width (the authors' mlp_factor 4)
NEW_FIELDS = ("norm", "norm_before_gate", "mlp_gated", "paper_init")


def _authors_state_dict(gated_mlp: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random float64 parameters under the authors' names and shapes (Table 6: in_proj
    (2ed + 2N + 1) × d, conv1d (ed + 2N) × w, fc1 4d × d, or 8d × d gated)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.5):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    sd = {"embedding.weight": r(V, D, scale=1.0), "norm_f.weight": 1 + r(D, scale=0.2),
          "lm_head.weight": r(V, D)}
    for i in range(L):
        p = f"layers.{i}."
        sd |= {p + "norm.weight": 1 + r(D, scale=0.2),
               p + "mixer.in_proj.weight": r(2 * DI + 2 * N + 1, D),
               p + "mixer.conv1d.weight": r(DI + 2 * N, 1, W),
               p + "mixer.conv1d.bias": r(DI + 2 * N, scale=0.1),
               p + "mixer.dt_bias": r(1),
               p + "mixer.A_log": r(1, scale=0.3),
               p + "mixer.norm.weight": 1 + r(DI, scale=0.2),
               p + "mixer.out_proj.weight": r(D, DI),
               p + "norm2.weight": 1 + r(D, scale=0.2),
               p + "mlp.fc1.weight": r((2 if gated_mlp else 1) * F, D),
               p + "mlp.fc2.weight": r(D, F)}
    return sd


def _ln(x, w, eps=1e-5):
    """Bias-free layer norm over the last dim, written out."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w


def _silu(v):
    return v / (1 + torch.exp(-v))


def _reference_logits(sd: dict, tokens: list[int], gated_mlp: bool) -> torch.Tensor:
    """logit_t for one sequence, position by position (no parallel scan, no conv layer):
    x_t = e_{x_t}; per layer u_t = x_t + W_o[LN(y_t) ⊙ act(W_z LN(x)_t)], with y_t = H_t c_t,
    H_t = a_t H_{t−1} + x̃_t b_tᵀ, a_t = exp(−a Δ_t), Δ_t = softplus(⟨w_Δ, ·⟩ + δ),
    x̃_t, b_t, c_t = act(conv(W_{X,B,C} ·)) (x̃_t · Δ_t); v_t = u_t + MLP(LN(u_t));
    logit_t = W_ℓ LN(v_t)."""
    T = len(tokens)
    h = [sd["embedding.weight"][k].clone() for k in tokens]  # T × [d]
    for i in range(L):
        p = f"layers.{i}."
        w_in = sd[p + "mixer.in_proj.weight"]
        W_z, W_X = w_in[:DI], w_in[DI:2 * DI]
        W_B, W_C, w_dt = w_in[2 * DI:2 * DI + N], w_in[2 * DI + N:2 * DI + 2 * N], w_in[-1]
        cw, cb = sd[p + "mixer.conv1d.weight"][:, 0], sd[p + "mixer.conv1d.bias"]  # [ch, w]
        a = math.exp(float(sd[p + "mixer.A_log"][0]))
        delta = float(sd[p + "mixer.dt_bias"][0])
        xin = [_ln(v, sd[p + "norm.weight"]) for v in h]
        pre = [torch.cat([W_X @ v, W_B @ v, W_C @ v]) for v in xin]  # [ed + 2N] per step
        H = torch.zeros(DI, N, dtype=torch.float64)
        out = []
        for t in range(T):
            conv = cb.clone()  # window x_{t−w+1..t}; weight[:, w−1] multiplies step t
            for k in range(W):
                s = t - (W - 1) + k
                if s >= 0:
                    conv = conv + cw[:, k] * pre[s]
            conv = _silu(conv)
            xt, bt, ct = conv[:DI], conv[DI:DI + N], conv[DI + N:]
            dt = math.log1p(math.exp(float(w_dt @ xin[t]) + delta))  # softplus
            H = math.exp(-a * dt) * H + torch.outer(xt * dt, bt)
            y = H @ ct
            z = _silu(W_z @ xin[t])
            out.append(h[t] + sd[p + "mixer.out_proj.weight"]
                       @ (_ln(y, sd[p + "mixer.norm.weight"]) * z))
        h = []
        for u in out:
            m = sd[p + "mlp.fc1.weight"] @ _ln(u, sd[p + "norm2.weight"])
            if gated_mlp:
                m = m[:F] * _silu(m[F:])  # value half ⊙ act(gate half)
            else:
                m = _silu(m)
            h.append(u + sd[p + "mlp.fc2.weight"] @ m)
    return torch.stack([sd["lm_head.weight"] @ _ln(v, sd["norm_f.weight"]) for v in h])


def _ours(gated_mlp: bool, **kw) -> Mamba2LM:
    cfg = Mamba2Config(vocab_size=V, d_model=D, expand=E, d_state=N, d_conv=W, n_layers=L,
                       d_mlp=F, chunk_size=4, mlp_gated=gated_mlp, **{**MARKOV_PAPER_MODEL, **kw})
    return Mamba2LM(cfg).double()


@pytest.mark.parametrize("gated_mlp", [True, False])
@pytest.mark.parametrize("scan", ["plain", "chunked"])
def test_authors_state_dict_maps_and_forward_equals_the_paper_reference(gated_mlp, scan):
    sd = _authors_state_dict(gated_mlp)
    model = _ours(gated_mlp, scan=scan)
    ours = from_markov_paper_state_dict(sd)
    assert set(ours) == set(model.state_dict())  # every name maps, nothing left over
    model.load_state_dict(ours, strict=True)
    tokens = [0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1]  # 11: not a multiple of the chunk
    want = _reference_logits(sd, tokens, gated_mlp)
    got = model(torch.tensor([tokens]))[0]
    assert got.dtype == torch.float64
    assert (got - want).abs().max().item() <= 1e-10
    assert want.abs().max().item() > 0.1  # not a degenerate comparison


def test_default_mamba2_differs_from_the_paper_forward():
    # the same numbers under mamba-ssm's defaults (RMSNorm, gate before the norm, D = 1) are
    # another function: the options are what makes the mapping exact
    sd = from_markov_paper_state_dict(_authors_state_dict(True))
    cfg = Mamba2Config(vocab_size=V, d_model=D, expand=E, d_state=N, d_conv=W, n_layers=L,
                       d_mlp=F, activation="silu", mlp_act="silu")
    model = Mamba2LM(cfg).double()
    for i in range(L):
        sd[f"blocks.{i}.mixer.D"] = torch.zeros(1, dtype=torch.float64)
    model.load_state_dict(sd, strict=True)
    tokens = [0, 1, 1, 0, 1, 0, 0, 0]
    want = _reference_logits(_authors_state_dict(True), tokens, True)
    assert (model(torch.tensor([tokens]))[0] - want).abs().max().item() > 1e-3


@pytest.mark.parametrize("field, value", [("norm", "layernorm"), ("norm_before_gate", True)])
def test_each_option_alone_changes_the_forward(field, value):
    torch.manual_seed(0)
    base = Mamba2LM(Mamba2Config(d_model=8, d_state=4, d_mlp=16)).double()
    torch.manual_seed(0)
    other = Mamba2LM(Mamba2Config(d_model=8, d_state=4, d_mlp=16, **{field: value})).double()
    other.load_state_dict(base.state_dict(), strict=True)  # same names and shapes
    with torch.no_grad():  # random norm weights so the norms are not the identity's twins
        for (n, p), (_, q) in zip(base.named_parameters(), other.named_parameters(),
                                      strict=True):
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
                q.copy_(p)
        for blk in (base.blocks[0], other.blocks[0]):
            blk.mixer.out_proj.weight.mul_(30)  # the mixer's output visible in the logits
    x = torch.tensor([[0, 1, 1, 0, 1, 0, 0, 1]])
    assert (base(x) - other(x)).abs().max().item() > 1e-6


def test_paper_init_is_the_authors_scheme():
    torch.manual_seed(1)
    m = _ours(True, paper_init=True).float()
    blk = m.blocks[0]
    # in_proj N(0, 0.02): far smaller than torch's default uniform(±1/√d)
    assert abs(blk.mixer.in_proj.weight.std().item() - 0.02) < 0.005
    assert abs(blk.mlp.fc1.weight.std().item() - 0.02) < 0.005
    # out_proj: kaiming-uniform bound 1/√fan_in, ÷ √(2·n_layers)
    bound = 1 / math.sqrt(DI) / math.sqrt(2 * L)
    assert blk.mixer.out_proj.weight.abs().max().item() <= bound
    assert blk.mixer.out_proj.weight.abs().max().item() > 0.8 * bound
    A = [math.exp(b.mixer.A_log.item()) for b in m.blocks]
    assert all(1.0 <= a <= 16.0 for a in A) and A != [1.0] * L
    default = Mamba2LM(Mamba2Config(d_model=D, d_state=N, d_mlp=F))
    assert default.blocks[0].mixer.A_log.item() == 0.0  # A = 1 (mamba-ssm: arange)
    assert default.blocks[0].mixer.in_proj.weight.std().item() > 0.1


def test_new_fields_default_to_mamba_ssm_and_leave_run_config_hashes_alone():
    cfg = Mamba2Config()
    assert (cfg.norm, cfg.norm_before_gate, cfg.mlp_gated, cfg.paper_init) == (
        "rms", False, True, False)
    run_config = make_run_config("mamba2", "markov", "quick")
    # defaults are not written into the RunConfig
    assert not set(NEW_FIELDS) & set(run_config.model_dict)
    # the quick Markov Mamba-2's cache hash, as before these fields existed
    assert run_config.hash() == QUICK_MARKOV_MAMBA2_HASH


def test_config_checks():
    with pytest.raises(InputError):
        Mamba2Config(norm="batch")
    with pytest.raises(InputError):
        Mamba2Config(norm="layernorm", n_heads=2, n_groups=2)


QUICK_MARKOV_MAMBA2_HASH = "820fab78b18c"


def test_a_run_without_gate_maps_dropping_the_unused_z_rows():
    """Without --gate the authors' mixer has no act(z) gate either (gated=False) while its
    in_proj keeps the W_z rows: the loader drops them, and only them."""
    sd = _authors_state_dict(False)
    model = _ours(False, gated=False)
    ours = from_markov_paper_state_dict(sd, gated=False)
    assert set(ours) == set(model.state_dict())
    model.load_state_dict(ours, strict=True)
    for i in range(L):
        theirs = sd[f"layers.{i}.mixer.in_proj.weight"]  # [2ed + 2N + 1, d]: z first
        assert torch.equal(model.blocks[i].mixer.in_proj.weight, theirs[DI:])
    # the gated mapping of the same dict keeps every row: it does not fit gated=False
    with pytest.raises(RuntimeError, match="in_proj"):
        model.load_state_dict(from_markov_paper_state_dict(sd), strict=True)
    # a dict whose in_proj has no W_z rows (already ungated) is refused with one line
    bad = {k: (v[DI:] if k.endswith("in_proj.weight") else v) for k, v in sd.items()}
    with pytest.raises(InputError, match="--gate"):
        from_markov_paper_state_dict(bad, gated=False)
