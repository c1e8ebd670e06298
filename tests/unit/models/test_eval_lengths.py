"""The training-time evaluation of a task with a length distribution (copy, lookup) scores every
length of it, the same examples at every evaluation, and records the score at each length; tasks
without one are evaluated as before (issue 36)."""

from types import SimpleNamespace

import pytest
import torch

from analyses.zoo.levels import make_run_config
from models.registry import build_model
from models.train import distributed, runconfig
from models.train.callbacks import StopAt
from models.train.distributed import World
from models.train.evaluation import evaluate, per_length
from models.train_config import TrainConfig
from tasks.registry import make_task


class ShortCopier(torch.nn.Module):
    """A hand-written copy "model" that copies strings of at most ``up_to`` letters and gets
    every answer token of a longer one wrong (it predicts the next letter of the alphabet)."""

    def __init__(self, task, up_to: int):
        super().__init__()
        self.V, self.D, self.up_to = task.vocab.size, task.cfg.D, up_to
        self.copy, self.eos = task.vocab.id("COPY"), task.vocab.id("EOS")

    def forward(self, tokens):  # [batch, pos] -> [batch, pos, vocab]
        logits = torch.zeros(*tokens.shape, self.V)
        for r, row in enumerate(tokens.tolist()):
            if self.copy not in row:
                continue
            c = row.index(self.copy)
            L = c - 1  # <BOS> x_1 … x_L <COPY>
            for p in range(c, len(row)):
                j = p - c  # the answer token position p predicts
                if j < L:
                    x = row[1 + j]
                    logits[r, p, x if L <= self.up_to else (x + 1) % self.D] = 1.0
                elif j == L:
                    logits[r, p, self.eos] = 1.0
        return logits

    def log_probs(self, tokens):
        return self(tokens).log_softmax(-1)


def _cfg(**kw):
    return TrainConfig(**{"eval_batches": 2, "eval_batch_size": 4, "seed": 3, **kw})


@pytest.mark.parametrize("greedy", [True, False])
def test_a_model_that_copies_only_short_strings_is_not_perfect(greedy):
    task = make_task("copy", min_len=1, max_len=7)
    rec = evaluate(ShortCopier(task, up_to=3), task, _cfg(greedy_eval=greedy), torch.device("cpu"))
    assert rec["string_acc_at"] == {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.0}
    assert rec["string_acc"] == pytest.approx(3 / 7)  # the mean over the uniform lengths
    # a model that copies every length it is scored on
    perfect = evaluate(ShortCopier(task, up_to=7), task, _cfg(greedy_eval=greedy),
                       torch.device("cpu"))
    assert perfect["string_acc"] == 1.0 and set(perfect["string_acc_at"].values()) == {1.0}


def test_every_length_is_scored_by_the_same_number_of_strings(monkeypatch):
    task = make_task("copy", min_len=2, max_len=9)  # 8 lengths, 2 × 4 = 8 examples: 1 each
    seen = []
    real = task.eval_batch
    monkeypatch.setattr(task, "eval_batch", lambda n, g, length=None: (
        seen.append((length, n)), real(n, g, length))[1])
    cfg = _cfg()
    rec = evaluate(ShortCopier(task, 9), task, cfg, torch.device("cpu"))
    assert sorted(rec["string_acc_at"]) == list(range(2, 10))
    assert seen == [(L, 1) for L in range(2, 10)]
    # more examples than lengths: rounded up, in batches no larger than eval_batch_size
    seen.clear()
    evaluate(ShortCopier(task, 9), task, _cfg(eval_batches=5, eval_batch_size=3),
             torch.device("cpu"))
    assert per_length(8, _cfg(eval_batches=5, eval_batch_size=3)) == 2
    assert seen == [(L, 2) for L in range(2, 10)]
    seen.clear()  # 18 examples: 3 a length, in batches of 2 and 1
    evaluate(ShortCopier(task, 9), task, _cfg(eval_batches=9, eval_batch_size=2),
             torch.device("cpu"))
    assert seen == [(L, n) for L in range(2, 10) for n in (2, 1)]


def test_the_same_examples_at_every_evaluation_and_the_rngs_untouched():
    task = make_task("copy", min_len=1, max_len=5)
    run_config = make_run_config("lstm", "copy", "quick", model={"d_model": 8, "n_layers": 1},
                     task_config={"min_len": 1, "max_len": 5})
    torch.manual_seed(0)
    model = build_model(run_config.arch, run_config.model)
    before = torch.get_rng_state()
    a = evaluate(model, task, _cfg(), torch.device("cpu"))
    b = evaluate(model, task, _cfg(), torch.device("cpu"))
    assert a == b and torch.equal(before, torch.get_rng_state())
    assert sorted(a["string_acc_at"]) == [1, 2, 3, 4, 5] and "eval_loss" in a


def test_lookup_is_scored_at_every_string_length():
    task = make_task("lookup", D=8, min_len=5, max_len=9, n=3, k=1, key="prefix")
    run_config = make_run_config("lstm", "lookup", "quick", model={"d_model": 8, "n_layers": 1},
                     task_config={"D": 8, "min_len": 5, "max_len": 9, "key": "prefix"})
    rec = evaluate(build_model(run_config.arch, run_config.model), task, _cfg(),
                   torch.device("cpu"))
    # keyed by the string's length, not the answer's (k = 1 token)
    assert sorted(rec["string_acc_at"]) == [5, 6, 7, 8, 9]


def test_a_task_without_lengths_is_evaluated_as_before():
    task = make_task("markov", S=2, order=1, seq_len=16)
    assert not hasattr(task, "eval_lengths")
    run_config = make_run_config("lstm", "markov", "quick", model={"d_model": 8, "n_layers": 1},
                     task_config={"S": 2, "order": 1, "seq_len": 16})
    rec = evaluate(build_model(run_config.arch, run_config.model), task, _cfg(),
                   torch.device("cpu"))
    assert "string_acc_at" not in rec and "loss_gap" in rec


def test_ranks_together_give_the_single_process_record(monkeypatch):
    task = make_task("copy", min_len=1, max_len=6)
    model = ShortCopier(task, up_to=4)
    cfg = _cfg(eval_batches=3, eval_batch_size=2)
    single = evaluate(model, task, cfg, torch.device("cpu"))

    class Gathered(Exception):
        pass

    def keep(obj):
        raise Gathered(obj)

    monkeypatch.setattr(distributed, "gather", keep)  # each rank's part of the scores
    parts = []
    for rank in (0, 1):
        with pytest.raises(Gathered) as e:
            evaluate(model, task, cfg, torch.device("cpu"), world=World(rank=rank, size=2))
        parts.append(e.value.args[0])
    assert all(parts) and len(parts[0]) + len(parts[1]) == 3 + 6  # 3 loss batches, 6 lengths
    monkeypatch.setattr(distributed, "gather", lambda obj: parts)
    for rank in (0, 1):
        assert evaluate(model, task, cfg, torch.device("cpu"),
                        world=World(rank=rank, size=2)) == single


def test_length_tasks_hash_their_evaluation():
    copy = make_run_config("lstm", "copy", "quick")
    markov = make_run_config("lstm", "markov", "quick")
    assert copy.canonical()["eval"] == runconfig.LENGTH_EVAL
    assert "eval" not in markov.canonical()


def test_stop_at_waits_for_every_length():
    run = SimpleNamespace(run_config=SimpleNamespace(task_name="copy"), step=7, stop_reason=None)
    stop = StopAt(0.9)
    # the mean over lengths is past the level, the longest strings are not
    assert stop.on_eval(run, {"string_acc": 0.95, "string_acc_at": {1: 1.0, 2: 1.0, 3: 0.85}}
                        ) is None and run.stop_reason is None
    assert stop.on_eval(run, {"string_acc": 0.97, "string_acc_at": {1: 1.0, 2: 1.0, 3: 0.9}})
    assert "lowest 0.9 at L=3" in run.stop_reason
    # a task scored without lengths stops on its one accuracy, as before
    run.stop_reason = None
    assert stop.on_eval(run, {"string_acc": 0.9})
    assert run.stop_reason == "stop_at: string_acc 0.9 >= 0.9 at step 7"
