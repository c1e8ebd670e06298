"""Markov-paper analyses and their probes (probes/markov.py, probes/bc.py, probes/ssm.py) on
the Thm 1 construction (exact answers) and on random models."""

import json

import pytest
import torch

from analyses import (
    bc_orthogonality,
    mamba_decay,
    markov_ablations,
    markov_holdout,
    markov_laplace,
    state_probe,
    zoo,
)
from models.constructions import mambazero_add_beta, save_mambazero
from models.ssm.mamba2 import Mamba2LM
from models.ssm.ssd import Mamba2Config
from probes.bc import bc_table, readout_ratio
from probes.markov import evaluate_markov, markov_batch, markov_task_of
from probes.ssm import decay_from_parameters, read_decay
from seqprobe.errors import InputError


@pytest.fixture(scope="module")
def construction3():
    m = mambazero_add_beta(3, 0.5, dtype=torch.float64)
    m.set_task("markov", {"S": 3, "order": 1, "beta": 0.5, "seq_len": 48})
    return m


def test_state_probe_reads_the_counts_of_the_construction(construction3):
    r = state_probe.compute(construction3, n_seqs=12, max_rows=400, control=True,
                            progress=False)
    tr = r["trained"][0]
    assert len(tr["r2"]) == 9 and min(tr["r2"]) > 0.9999  # every n_ij, held out
    assert tr["ctx_r2_mean"] > 0.9999 and tr["state_explained_by_counts"] > 0.9999
    assert tr["readout_r2_mean"] > 0.9999  # y_t = H_t c_t holds exactly n_{x_t, ·}
    assert len(r["random_init_seeds"]) == 3
    assert tr["shuffled_r2_mean"] < 0.3  # the control explains (almost) nothing
    assert r["random_init"][0]["r2_mean"] is not None
    assert state_probe.plot(r) is not None


def test_state_probe_rejects_other_archs():
    from models.transformer import HookedTransformerLM, TransformerConfig

    m = HookedTransformerLM(TransformerConfig(vocab_size=2, d_model=8, n_heads=1, n_layers=1))
    with pytest.raises(InputError):
        state_probe.compute(m, progress=False)


def test_a_random_conv_ssm_with_unit_decay_already_holds_the_counts():
    """Eq. (4) at random weights: with a_t = 1 and w = 2 the state is linear in the transition
    counts, so the count probe cannot tell a random model from a trained one; the readout
    probe (what y_t = H_t c_t carries) can."""
    torch.manual_seed(0)
    m = Mamba2LM(Mamba2Config(vocab_size=2, d_model=8, d_conv=2, d_state=4, decay=False))
    m = m.double()
    m.set_task("markov", {"S": 2, "order": 1, "beta": 1.0, "seq_len": 64})
    tr = state_probe.compute(m, n_seqs=16, max_rows=600, control=False,
                             progress=False)["trained"][0]
    assert min(tr["r2"]) > 0.9999
    assert tr["readout_r2_mean"] < 0.5


def test_bc_table_of_the_construction_is_exactly_orthogonal(construction3):
    r = bc_orthogonality.compute([("thm1", construction3)], n_seqs=16, progress=False)
    row = r["models"][0]
    T = torch.tensor(row["table"])  # [i, j, c]
    eye = torch.eye(3, dtype=torch.bool)[:, None, :].expand(3, 3, 3)
    assert torch.all(T[eye] == 1.0) and torch.all(T[~eye] == 0.0)
    assert row["ratio_pairs"] == 0.0 and row["ratio_table"] == 0.0
    assert row["ratio_pinned"] == 0.0 and row["ratio_free"] == 0.0
    assert row["ratio_readout"] == 0.0 and row["ratio_readout_pinned"] == 0.0
    assert abs(row["beta_fit"] - 0.5) < 1e-4 and row["kl_at_fit"] < 1e-10
    assert all(abs(b - 0.5) < 1e-9 for ctx in row["l1"]["beta_per_context"] for b in ctx)


def test_bc_table_splits_pinned_from_free_entries():
    """A readout of the transitions *into* the current symbol (b(u) = e_j, c(v) = e_k: b·c = 1
    iff u ends in k) is off-diagonal only on the free entries 1→0 at 0 and 0→1 at 1."""
    import itertools

    windows = torch.tensor(list(itertools.product(range(2), repeat=2)))  # u = (i, j)
    e = torch.eye(2, dtype=torch.float64)
    b = e[windows[:, -1]][:, None]  # [window, group, N]
    row = bc_table(windows, b, b.clone(), 2, 1)
    T = row["table"]  # [i, j, c]
    assert T[1, 0, 0] == 1.0 and T[0, 1, 1] == 1.0  # free: into the current symbol
    assert T[1, 1, 0] == 0.0 and T[0, 0, 1] == 0.0  # pinned
    assert row["ratio_pinned"] == 0.0 and row["ratio_free"] == 2.0  # diagonal mean 0.5
    assert row["ratio_pairs"] == 1.0


def test_bc_table_of_a_random_model_is_not_orthogonal():
    torch.manual_seed(1)
    m = Mamba2LM(Mamba2Config(vocab_size=2, d_model=8, d_conv=2, d_state=4))
    r = bc_orthogonality.compute([("rand", m)], n_seqs=8, task_config={"seq_len": 32},
                                 progress=False)
    assert r["models"][0]["ratio_pairs"] > 0.3
    w1 = Mamba2LM(Mamba2Config(vocab_size=2, d_model=8, d_conv=1, d_state=4))
    row = bc_orthogonality.compute([("w1", w1)], n_seqs=8, task_config={"seq_len": 32},
                                   progress=False)["models"][0]
    assert row["table"] is None and "w=1" in row["note"]


def test_readout_ratio_keeps_the_shift_of_an_l1_model():
    """Counts that move both outputs alike are invisible to softmax but not to L1 normalisation:
    with equal unembedding rows every count coefficient is (a, a)."""
    import dataclasses

    from models.ssm.mambazero import MambaZeroConfig, MambaZeroLM

    torch.manual_seed(0)
    l1 = MambaZeroLM(MambaZeroConfig(vocab_size=2, d_model=8, d_state=4)).double()
    with torch.no_grad():
        l1.unembed.weight[1] = l1.unembed.weight[0]
    soft = MambaZeroLM(dataclasses.replace(l1.cfg, prediction="softmax")).double()
    soft.load_state_dict(l1.state_dict())
    r_l1 = readout_ratio(l1, 2, 1)["ratio_readout"]
    r_soft = readout_ratio(soft, 2, 1)["ratio_readout"]
    assert 0 < r_l1 < float("inf") and r_soft != r_soft  # softmax: 0 / 0, nothing to read


def test_decay_hook_matches_the_parameters():
    torch.manual_seed(0)
    m = Mamba2LM(Mamba2Config(vocab_size=3, d_model=16, n_heads=2, n_layers=2)).double()
    with torch.no_grad():
        for b in m.blocks:  # input-dependent Δ_t and a well below 1
            b.mixer.in_proj.weight[-2:].normal_()
            b.mixer.dt_bias.fill_(0.3)
    x = torch.randint(0, 3, (4, 25))
    a = read_decay(m, x)  # [layers, batch, pos, heads]
    for layer in range(2):
        ref = torch.exp(-torch.exp(m.blocks[layer].mixer.A_log) *
                        torch.nn.functional.softplus(
                            m.blocks[layer].mixer.in_proj(m.blocks[layer].norm(
                                m.run_with_cache(x)[1][f"blocks.{layer}.hook_resid_pre"]))[..., -2:]
                            + m.blocks[layer].mixer.dt_bias))
        assert torch.allclose(a[layer], ref, atol=1e-12)
        assert torch.allclose(a[layer], decay_from_parameters(m, x, layer),
                              atol=1e-12)
        assert a[layer].std() > 1e-3  # really input-dependent


def test_decay_on_switching_data_splits_switch_tokens():
    torch.manual_seed(0)
    m = Mamba2LM(Mamba2Config(vocab_size=3, d_model=8))
    m.set_task("switching_markov", {"p_switch": 0.1, "seq_len": 40})
    r = mamba_decay.compute([("sw", m)], n_seqs=8)
    row = r["models"][0]
    assert row["n_switch"] > 0 and 0 < row["mean_at_switch"] <= 1
    assert len(row["trace"]["switch_pos"]) >= 1
    assert mamba_decay.plot(r) is not None


def test_construction_matches_add_beta_in_markov_laplace_and_holdout(construction3):
    r = markov_laplace.compute([("thm1", construction3)], n_seqs=8, t_min=10, progress=False)
    row = r["models"][0]
    assert row["l1_mean"] < 1e-9 and abs(row["loss_gap"]) < 1e-9
    assert markov_laplace.plot(r) is not None
    binary = mambazero_add_beta(2, 1.0, dtype=torch.float64)
    h = markov_holdout.compute(binary, n_seqs=8, seq_len=60)
    assert all(v["mean"] < 1e-9 for v in h["held_out"]["by_t"].values())
    assert h["held_out"]["range"] == [0.5, 1.0]


def test_ablation_summary(construction3):
    torch.manual_seed(0)
    rand = Mamba2LM(Mamba2Config(vocab_size=3, d_model=8, conv=False))
    rand.set_task(construction3.task)
    r = markov_ablations.compute([("conv", "mamba2", construction3),
                                  ("conv", "mamba2 no conv", rand)], n_seqs=8)
    assert r["summary"]["conv_noconv_over_full_gap"] > 1e3
    with pytest.raises(InputError):
        markov_ablations.recipes_for(["nope"], "quick")


def test_cli_on_a_construction_checkpoint(tmp_path):
    ck = save_mambazero(tmp_path / "mz.pt", S=2, beta=1.0, seq_len=40)
    out = tmp_path / "out"
    assert bc_orthogonality.main([str(ck), "--out", str(out), "--n-seqs", "8"]) == 0
    res = json.loads((out / "bc_orthogonality.json").read_text())
    assert res["models"][0]["ratio_pairs"] == 0.0 and (out / "bc_orthogonality.png").exists()
    assert state_probe.main([str(ck), "--out", str(out), "--n-seqs", "8", "--no-control"]) == 0
    assert json.loads((out / "state_probe.json").read_text())["trained"][0]["r2_mean"] > 0.999


def test_cli_wrong_checkpoint_kind_exits_2(tmp_path, capsys):
    from models.constructions import save_hash_copy

    ck = save_hash_copy(tmp_path / "hc.pt", n=2, D=4, max_len=8)
    assert state_probe.main([str(ck), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mamba2" in err[0]


@pytest.mark.slow
def test_quick_mamba2_learns_add_beta_and_stores_the_counts(tmp_path):
    """The issue's done-when numbers on the quick level (minutes on a CPU)."""
    from analyses.common import load_model

    m = load_model(str(zoo.checkpoint("markov/mamba2", "quick", tmp_path, "cpu", False)))
    ev = evaluate_markov(m, markov_task_of(m), 128, 0)
    assert ev["l1_mean_t_min"] < 0.05
    probe = state_probe.compute(m, n_seqs=32, max_rows=6000, progress=False)
    assert probe["trained"][0]["r2_mean"] >= 0.9
    # the state of a random init holds counts too; its readout does not select them
    assert probe["trained"][0]["readout_r2_mean"] >= 0.9
    assert probe["random_init_max"]["readout_r2_mean"] < 0.5
    a = mamba_decay.compute([("m", m)], n_seqs=16)["models"][0]["mean"]
    assert a >= 0.95


def _padded_construction(d: int = 8, N: int = 4):
    """Thm 1's S = 2 construction inside a larger MambaZero (room to move; tiny noise
    elsewhere), float64."""
    from models.ssm.mambazero import MambaZeroConfig, MambaZeroLM

    small = mambazero_add_beta(2, 1.0, dtype=torch.float64).state_dict()
    torch.manual_seed(0)
    m = MambaZeroLM(MambaZeroConfig(vocab_size=2, d_model=d, d_state=N)).double()
    big = {k: v * 1e-3 for k, v in m.state_dict().items()}
    d0, N0 = 4, 2  # the construction's d = 2S, N = S
    big["embed.weight"][:, :d0] = small["embed.weight"]
    W, w = big["blocks.0.mixer.in_proj.weight"], small["blocks.0.mixer.in_proj.weight"]
    W[:d0, :d0] = w[:d0]  # rows: W_X (d), W_B (N), W_C (N), w_Δ
    W[d : d + N0, :d0] = w[d0 : d0 + N0]
    W[d + N : d + N + N0, :d0] = w[d0 + N0 : d0 + 2 * N0]
    conv, c = big["blocks.0.mixer.conv1d.weight"], small["blocks.0.mixer.conv1d.weight"]
    conv[:d0], conv[d : d + N0], conv[d + N : d + N + N0] = c[:d0], c[d0 : d0 + N0], c[d0 + N0 :]
    big["blocks.0.mixer.A_log"].fill_(-20.0)  # a_t = 1 to float64 precision, finite gradient
    big["blocks.0.mixer.dt_bias"] = small["blocks.0.mixer.dt_bias"].clone()
    big["blocks.0.mixer.out_proj.weight"][:d0, :d0] = small["blocks.0.mixer.out_proj.weight"]
    big["unembed.weight"][:, :d0] = small["unembed.weight"]
    m.load_state_dict(big)
    return m


@pytest.mark.slow
@pytest.mark.parametrize("entry, stays_optimal", [((1, 0, 0), True), ((1, 1, 0), False)])
def test_the_loss_pins_only_the_bc_entries_of_transitions_not_entering_the_context(
        entry, stays_optimal):
    """Hold one off-diagonal b^(ij)·c^(k) at half its row's diagonal b^(ij)·c^(i) while fitting
    the add-β estimator: 1→0 at current 0 (enters 0: free) costs nothing, 1→1 at current 0
    cannot."""
    import itertools

    from tasks.add_beta import add_beta_probs
    from tasks.registry import make_task

    m = _padded_construction()
    x = markov_batch(make_task("markov", {"S": 2, "order": 1, "seq_len": 64}), 128, 0).tokens
    q = add_beta_probs(x, 2, 1, 1.0)
    windows = torch.tensor(list(itertools.product(range(2), repeat=2)))  # u = (i, j)
    i, j, cur = entry
    store = {}

    def keep(t, hook):
        store[hook.name] = t[:, -1, 0]  # [window, N] at the window's last position

    def kl():
        return (q * (q.log() - m.log_probs(x)[..., :2])).sum(-1).mean()

    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(1000):
        opt.zero_grad()
        m.run_with_hooks(windows, fwd_hooks=[("blocks.0.mixer.hook_B", keep),
                                             ("blocks.0.mixer.hook_C", keep)])
        ip = store["blocks.0.mixer.hook_B"] @ store["blocks.0.mixer.hook_C"].T  # [u, v]
        u = 2 * i + j  # held relative to its own row: b(u) can grow while x̃(u) shrinks
        held = ip[u, windows[:, -1] == cur].mean() / ip[u, windows[:, -1] == i].mean()
        (kl() + 10.0 * (held - 0.5) ** 2).backward()
        opt.step()
    final = float(kl())
    assert abs(float(held) - 0.5) < 0.1
    assert (final < 2e-4) if stays_optimal else (final > 1e-3)


# ---------------------------------------------------------------------------- zoo recipes, CLI
MY_ANALYSES = (markov_laplace, state_probe, bc_orthogonality, mamba_decay, markov_ablations,
               markov_holdout)


@pytest.mark.parametrize("level", ["quick", "paper"])
def test_every_recipe_the_markov_analyses_name_is_a_valid_zoo_run(level):
    names = {n for a in MY_ANALYSES for n in a.FIGURE.recipes(level)}
    names |= set(markov_laplace.LABELS) | set(markov_ablations.LABELS)
    for n in sorted(names):
        if zoo.recipe(n).available(level):
            zoo.run_config(n, level)  # every config validated (MambaZero's start bias too)
    from models.registry import build_model

    mz = build_model("mambazero", zoo.run_config("markov/mambazero_fig5", level).model)
    assert mz.cfg.prediction == "l1" and torch.all(mz.unembed.bias == 1.0)  # the L1 start bias


def test_recipe_labels_are_the_ones_the_claims_read():
    assert [markov_laplace.LABELS[n] for n in markov_laplace.FIGURE.recipes("quick")] == [
        "mamba2 1L", "transformer 1L", "transformer 2L"]
    assert [markov_ablations.LABELS[n] for n in markov_ablations.FIGURE.recipes("quick")] == [
        ("conv", "mamba2"), ("conv", "mamba2 no conv"), ("conv", "mambazero")]
    assert markov_ablations.LABELS["markov_ablation/window/k2_w3"] == ("window", "k=2 w=3")
    assert markov_ablations.LABELS["markov_ablation/depth/2L_no_conv"] == ("depth",
                                                                           "2 layers no conv")
    quick = markov_ablations.recipes_for(["noconv_width"], "quick")
    assert quick == ["markov_ablation/noconv_width/no_conv_d10",
                     "markov_ablation/noconv_width/no_conv_d100"]  # d 1000: paper only
    assert len(markov_ablations.FIGURE.recipes("paper")) == len(markov_ablations.LABELS)


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    """A cache where every recipe of the Markov analyses is the S = 2 Thm 1 construction, so
    ``--train quick`` runs the whole command line without training anything (the cache, which
    serves only a recipe's own run, is told to take these stand-ins)."""
    from models.train import cache as cache_mod
    from models.train.cache import cache_path

    def stand_in(path, run_config=None):
        return "done" if path.exists() else "missing"

    monkeypatch.setattr(cache_mod, "entry_state", stand_in)
    monkeypatch.setattr(zoo.runs, "entry_state", stand_in)  # where the exact way reads it

    cache = tmp_path / "cache"
    cache.mkdir()
    ck = save_mambazero(tmp_path / "mz.pt", S=2, beta=1.0, seq_len=40)
    names = {n for a in MY_ANALYSES for n in a.FIGURE.recipes("quick")}
    for n in names:
        cache_path(zoo.run_config(n, "quick"), cache).write_bytes(ck.read_bytes())
    return cache


def test_train_quick_reads_the_zoo_and_labels_its_rows(fake_zoo, tmp_path):
    out = tmp_path / "out"
    common = ["--train", "quick", "--cache-dir", str(fake_zoo), "--out", str(out),
              "--n-seqs", "8"]
    assert markov_laplace.main([*common, "--t-min", "10"]) == 0
    res = json.loads((out / "markov_laplace.json").read_text())
    assert [r["label"] for r in res["models"]] == ["mamba2 1L", "transformer 1L",
                                                   "transformer 2L"]
    text, holds = markov_laplace.claim_l1(res)
    assert holds and "Mamba-2" in text
    assert markov_ablations.main(common) == 0
    res = json.loads((out / "markov_ablations.json").read_text())
    assert [(r["group"], r["label"]) for r in res["models"]] == [
        ("conv", "mamba2"), ("conv", "mamba2 no conv"), ("conv", "mambazero")]
    assert mamba_decay.main(common) == 0
    res = json.loads((out / "mamba_decay.json").read_text())
    assert [r["label"] for r in res["models"]] == list(mamba_decay.RECIPES)
    assert markov_holdout.main([*common, "--seq-len", "60"]) == 0
    assert state_probe.main([*common, "--no-control"]) == 0
    assert bc_orthogonality.main(common) == 0
    res = json.loads((out / "bc_orthogonality.json").read_text())
    assert [r["label"] for r in res["models"]] == list(bc_orthogonality.RECIPES)


def test_given_checkpoints_keep_their_file_name_as_label(tmp_path):
    ck = save_mambazero(tmp_path / "thm1.pt", S=2, beta=1.0, seq_len=40)
    out = tmp_path / "out"
    assert markov_ablations.main([str(ck), "--out", str(out), "--n-seqs", "8"]) == 0
    row = json.loads((out / "markov_ablations.json").read_text())["models"][0]
    assert (row["group"], row["label"]) == ("given", "thm1") and row["abs_gap"] < 1e-5
    assert markov_holdout.main([str(ck), str(ck), "--out", str(out)]) == 2  # exactly one


def test_a_run_continued_from_an_earlier_checkpoint_is_the_same_run(tmp_path):
    """``zoo.checkpoint(..., resume=)`` (bc_orthogonality --trajectory): at a constant
    schedule, steps 0-4 then 4-8 give the weights of one 8-step run; anything else is
    refused."""
    train = {"schedule": "constant", "warmup_steps": 2, "eval_every": 0, "batch_size": 4}
    short = {**train, "steps": 4}
    first = zoo.checkpoint("markov/mamba2", "quick", tmp_path / "a", "cpu", False, short)
    two = zoo.checkpoint("markov/mamba2", "quick", tmp_path / "a", "cpu", False,
                         {**train, "steps": 8}, resume=first)
    one = zoo.checkpoint("markov/mamba2", "quick", tmp_path / "b", "cpu", False,
                         {**train, "steps": 8})
    sa, sb = (torch.load(p, weights_only=True)["state_dict"] for p in (two, one))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    with pytest.raises(InputError, match="not this run"):
        zoo.checkpoint("markov/mamba2", "quick", tmp_path / "a", "cpu", False,
                       {**train, "steps": 8, "schedule": "cosine"}, resume=first)
    with pytest.raises(InputError, match="not this run"):
        zoo.checkpoint("markov/mamba2", "quick", tmp_path / "a", "cpu", False,
                       {**train, "steps": 8, "lr": 1e-2}, resume=first)


def test_trajectory_checkpoints_chain_one_constant_lr_run(monkeypatch, tmp_path):
    """--trajectory N: N evenly spaced steps of the Fig. 5 recipe, each continuing the last."""
    assert bc_orthogonality.trajectory_steps("quick", 4) == [2500, 5000, 7500, 10000]
    calls = []

    def fake(name, level, cache_dir, device, progress=True, train=None, resume=None,
             seed_offset=0):
        calls.append((name, dict(train), resume))
        return tmp_path / f"{train['steps']}.pt"

    monkeypatch.setattr(zoo, "checkpoint", fake)
    got = bc_orthogonality.trajectory_checkpoints("quick", str(tmp_path), "cpu", 2)
    assert [c.label for c in got] == ["markov/mambazero_fig5@5000", "markov/mambazero_fig5@10000"]
    assert calls == [("markov/mambazero_fig5", {"steps": 5000, "schedule": "constant"}, None),
                     ("markov/mambazero_fig5", {"steps": 10000, "schedule": "constant"},
                      tmp_path / "5000.pt")]
