"""Markov tasks (tasks/markov.py) and the add-β estimator (tasks/add_beta.py, re-exported by
probes/estimators.py and probes/counts.py)."""

import math

import pytest
import torch

from probes.counts import current_counts
from probes.estimators import add_beta_brute_force, add_beta_loss, cross_entropy
from seqprobe.errors import InputError
from tasks.add_beta import add_beta_counts, add_beta_probs, switching_probs
from tasks.base import Batch, make_generator
from tasks.registry import make_task, packed_batch


# ---------------------------------------------------------------------------- estimator
@pytest.mark.parametrize("S,k,beta", [(2, 1, 1.0), (3, 1, 0.5), (2, 2, 1.0), (3, 2, 2.0),
                                      (2, 3, 0.3)])
def test_add_beta_matches_brute_force(S, k, beta):
    g = torch.Generator().manual_seed(100 * S + k)
    x = torch.randint(0, S, (4, 23), generator=g)
    p = add_beta_probs(x, S, k, beta)
    assert p.shape == (4, 23, S)
    for b in range(4):
        ref = torch.tensor(add_beta_brute_force(x[b].tolist(), S, k, beta), dtype=torch.float64)
        assert torch.allclose(p[b], ref, atol=1e-12)
    assert torch.allclose(p.sum(-1), torch.ones(4, 23, dtype=torch.float64))


def test_add_beta_with_reset_and_non_symbols_matches_brute_force():
    S, reset = 2, 2
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, 3, (5, 30), generator=g)  # ~1/3 of the tokens are the reset token
    for k in (1, 2):
        p = add_beta_probs(x, S, k, 1.0, reset_token=reset)
        p_noreset = add_beta_probs(x, S, k, 1.0)  # token 2 is then just a non-symbol
        for b in range(5):
            seq = x[b].tolist()
            ref = torch.tensor(add_beta_brute_force(seq, S, k, 1.0, reset_token=reset),
                               dtype=torch.float64)
            assert torch.allclose(p[b], ref, atol=1e-12)
            ref2 = torch.tensor(add_beta_brute_force(seq, S, k, 1.0), dtype=torch.float64)
            assert torch.allclose(p_noreset[b], ref2, atol=1e-12)
        assert not torch.allclose(p, p_noreset)  # the reset really forgets


def test_counts_agree_with_probes_counts():
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 3, (3, 40), generator=g)
    for k in (1, 2):
        assert torch.equal(add_beta_counts(x, 3, k), current_counts(x, 3, k).double())
        assert torch.equal(add_beta_counts(x, 2, k, reset_token=2),
                           current_counts(x, 2, k, reset_token=2).double())


def test_paper_confusable_sequences():
    """App. C.1: (0,1,0,1,0,1) and (0,0,0,1,1,1) give P(next = 1) = 1/4 and 3/4 (β = 1)."""
    x = torch.tensor([[0, 1, 0, 1, 0, 1], [0, 0, 0, 1, 1, 1]])
    p = add_beta_probs(x, 2, 1, 1.0)
    assert p[0, -1, 1].item() == pytest.approx(1 / 4)
    assert p[1, -1, 1].item() == pytest.approx(3 / 4)
    assert p[:, 0].tolist() == [[0.5, 0.5], [0.5, 0.5]]  # no transition seen yet


def test_loss_helpers():
    x = torch.tensor([[0, 0, 1]])
    y = torch.tensor([[0, 1, -100]])
    # predictions: t=0 uniform -> 1/2 for 0; t=1 after 0->0: P(1) = 1/3
    assert add_beta_loss(x, y, 2, 1, 1.0) == pytest.approx((math.log(2) + math.log(3)) / 2)
    with pytest.raises(InputError):
        cross_entropy(torch.full((1, 1, 2), 0.5), torch.tensor([[-100]]))
    with pytest.raises(InputError):
        add_beta_probs(x, 2, 1, 0.0)


@pytest.mark.parametrize("beta", [1.0, 0.25])
def test_add_beta_is_the_best_beta_on_task_data(beta):
    """Bayes optimality (App. A, Thm 3): on Dir(β) data the add-β rule with the *same* β
    has the lowest loss among its neighbours (paired comparison on one batch)."""
    task = make_task("markov", S=2, order=1, beta=beta, seq_len=64)
    b = task.batch(512, make_generator(0))
    losses = {c: add_beta_loss(b.tokens, b.targets, 2, 1, c) for c in (beta / 4, beta, beta * 4)}
    assert min(losses, key=losses.get) == beta


# ---------------------------------------------------------------------------- tasks
def test_markov_batch_shapes_targets_and_determinism():
    task = make_task("markov", S=3, order=2, seq_len=50)
    b = task.batch(6, make_generator(1))
    assert b.tokens.shape == b.targets.shape == (6, 50)
    assert torch.equal(b.tokens[:, 1:], b.targets[:, :-1])  # targets are the next token
    assert int(b.tokens.min()) >= 0 and int(b.tokens.max()) <= 2
    b2 = task.batch(6, make_generator(1))
    assert torch.equal(b.tokens, b2.tokens) and torch.equal(b.targets, b2.targets)
    assert not torch.equal(b.tokens, task.batch(6, make_generator(2)).tokens)
    assert task.model_fields() == {"vocab_size": 3}
    assert task.eval_batch(4, make_generator(0)) is None
    assert task.max_example_len() == 50  # what a model sees: the memory checks size by it
    with pytest.raises(InputError, match="not packed"):
        packed_batch(task, 2, 64, make_generator(0))  # fixed-length sequences are never packed


def test_markov_sequences_follow_their_own_kernel():
    """Empirical transition frequencies of each long sequence match *its* kernel, and the
    kernels differ between sequences (resampled per sequence, §2.1)."""
    task = make_task("markov", S=2, order=2, seq_len=6000)
    x, P = task.sample(3, make_generator(5))
    assert P.shape == (3, 4, 2)
    assert torch.allclose(P.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    for b in range(3):
        ctx = 2 * x[b, :-2] + x[b, 1:-1]
        nxt = x[b, 2:]
        for c in range(4):
            sel = ctx == c
            if sel.sum() > 400:
                freq = nxt[sel].double().mean().item()
                assert abs(freq - P[b, c, 1].item()) < 0.06
    assert (P[0] - P[1]).abs().max() > 0.05


def test_markov_config_checks():
    for bad in ({"S": 1}, {"order": 0}, {"beta": 0.0}, {"seq_len": 0}, {"nope": 1}):
        with pytest.raises(InputError):
            make_task("markov", **bad)
    with pytest.raises(InputError):
        make_task("switching_markov", p_switch=1.0)


def test_switching_markov_tokens_and_optimal_predictor():
    task = make_task("switching_markov", S=2, order=1, seq_len=400, p_switch=0.05)
    assert task.vocab.size == 3 and task.switch_id == 2
    b = task.batch(32, make_generator(2))
    frac = (b.tokens == 2).double().mean().item()
    assert 0.03 < frac < 0.07  # i.i.d. Bernoulli(p_switch) switches
    p = task.optimal_probs(b.tokens)
    assert p.shape == (32, 400, 3)
    assert torch.allclose(p.sum(-1), torch.ones(32, 400, dtype=torch.float64))
    assert torch.allclose(p[..., 2], torch.full((32, 400), 0.05, dtype=torch.float64))
    # the binary part is add-β on the counts since the last switch
    ref = torch.tensor(add_beta_brute_force(b.tokens[0].tolist(), 2, 1, 1.0, reset_token=2))
    assert torch.allclose(p[0, :, :2], 0.95 * ref.double())
    assert torch.allclose(p, switching_probs(b.tokens, 2, 1, 1.0, 0.05))
    # forgetting is better than counting through switches on this data
    keep = add_beta_probs(b.tokens, 2, 1, 1.0) * 0.95
    keep = torch.cat([keep, torch.full_like(keep[..., :1], 0.05)], -1)
    assert cross_entropy(p, b.targets) < cross_entropy(keep, b.targets)


class _Uniform(torch.nn.Module):
    """A 'model' that predicts the uniform distribution."""

    def __init__(self, V):
        super().__init__()
        self.V = V

    def log_probs(self, tokens):
        return torch.full((*tokens.shape, self.V), -math.log(self.V))


def test_reference_metrics_report_lbeta_and_gap():
    """The training loop's evaluation compares a model with ``task.optimal_probs``: for Markov
    data that is add-β, so ``lbeta`` is L_β and ``loss_gap`` the Markov paper's L(θ) − L_β."""
    from models.train.loss import reference_metrics

    task = make_task("markov", S=2, order=1, seq_len=64)
    b = task.batch(16, make_generator(0))
    m = reference_metrics(_Uniform(2), task, b)
    lbeta = add_beta_loss(b.tokens, b.targets, 2, 1, 1.0)
    assert m["lbeta"] == pytest.approx(lbeta)
    assert m["loss_gap"] == pytest.approx(math.log(2) - lbeta)
    assert m["kl_beta"] > 0


def test_the_estimator_lives_with_the_tasks_and_probes_reexport_it():
    """One implementation: probes.estimators / probes.counts hand out tasks.add_beta's."""
    import probes.counts
    import probes.estimators
    from tasks import add_beta

    for name in ("add_beta_counts", "add_beta_probs", "switching_probs"):
        assert getattr(probes.estimators, name) is getattr(add_beta, name)
    assert probes.counts.context_index is add_beta.context_index
    x = torch.tensor([[1, 0, 1], [0, 0, 1]])
    assert add_beta.window_index(x, 2).tolist() == [5, 1]  # oldest symbol most significant
    assert add_beta.window_index(x[:, 1:], 3).tolist() == [1, 1]


# ---------------------------------------------------------------------------- hold-out task
def test_holdout_task_kernels_stay_in_range():
    task = make_task("markov_holdout", {"seq_len": 20, "p_lo": 0.0, "p_hi": 0.5})
    assert type(task).__module__ == "tasks.markov"
    x, P = task.sample(64, make_generator(0))
    assert P[..., 1].max() <= 0.5 and x.shape == (64, 21)
    hi = make_task("markov_holdout", {"seq_len": 20, "p_lo": 0.5, "p_hi": 1.0})
    assert hi.sample(64, make_generator(0))[1][..., 1].min() >= 0.5
    for bad in ({"S": 3}, {"p_lo": 0.6, "p_hi": 0.5}, {"p_hi": 1.5}):
        with pytest.raises(InputError):
            make_task("markov_holdout", bad)


def test_holdout_task_is_scored_against_the_full_prior():
    """App. E.5 compares the model with add-β under the *full* prior, not the posterior mean
    of the restricted one; its chains follow their own kernels."""
    task = make_task("markov_holdout", {"seq_len": 4000, "order": 1, "p_lo": 0.7, "p_hi": 0.9})
    x, P = task.sample(2, make_generator(1))
    b = Batch(x[:, :-1], x[:, 1:])
    assert torch.equal(task.optimal_probs(b.tokens), add_beta_probs(b.tokens, 2, 1, 1.0))
    for row in range(2):
        after1 = x[row, 1:][x[row, :-1] == 1]
        assert abs(after1.double().mean().item() - P[row, 1, 1].item()) < 0.05
