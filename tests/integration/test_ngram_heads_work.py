"""ngram_heads does only the work its numbers need (issue 47 item 4): greedy accuracy decodes
only the rows a teacher-forced pass cannot settle, with the same predictions as decoding every
row; the progress bar's total is the work done, so it completes."""

import pytest
import torch

from analyses import ngram_heads
from models.constructions import build_hash_copy_transformer
from models.generation import greedy_decode
from probes import effective_attention as ea
from probes.copying import accuracy_on
from probes.match_heads import (
    accuracy,
    control_plan,
    find_match_heads,
    greedy_predictions,
    mean_activations,
)

COPY = {"D": 26, "max_len": 12}


@pytest.fixture(scope="module")
def model():
    return build_hash_copy_transformer(3, 26).eval()


@pytest.mark.parametrize("mode, ablate, copies", [
    ("mean", [], "all"), ("mean", [(1, 4)], "none"), ("zero", [(0, 0)], "some"),
    ("zero", [(0, 3)], "some")])
def test_greedy_predictions_are_greedy_decoding_row_for_row(model, mode, ablate, copies):
    """The construction copies every row; with its match head ablated it copies none, and
    with one hashing head zeroed some: in each case the same tokens as decoding every row."""
    data = ngram_heads.probe_batches(model, "copy", COPY, [6, 12], 16, seed=0)
    means = mean_activations(model, data)
    with ea.ablated_heads(model, ablate, mode, means):
        for batch, _ in data:
            want = greedy_decode(model, batch.prompts, batch.answers.shape[1])
            got = greedy_predictions(model, batch.prompts, batch.answers)
            assert torch.equal(got, want)
        fast = accuracy(model, data)
        slow = accuracy_on(model, (b for b, _ in data), greedy=True)
    assert fast == slow
    s = fast["string_acc"]
    assert {"all": s == 1, "none": s == 0, "some": 0 < s < 1}[copies], fast


def test_the_progress_bar_total_is_the_work_done(model, monkeypatch):
    """The bar counts the control sets that exist (fewer than 2 x draws where a pool has
    fewer), the feeding search's candidates and --per-head's heads: it ends at its total."""
    bars = []

    class Bar:
        def __init__(self, total, **kw):
            self.total, self.n = total, 0
            bars.append(self)

        def update(self, k=1):
            self.n += k

        def close(self):
            pass

    monkeypatch.setattr(ngram_heads, "tqdm", Bar)
    draws = 50  # more than the same-layer pool has sets of the match heads' size
    result = ngram_heads.compute(model, "copy", COPY, lengths=[8], batch_size=4, n_max=3,
                                 draws=draws, per_head=True)
    bar, = bars
    data = ngram_heads.probe_batches(model, "copy", COPY, [8], 4, seed=0)
    top = list(find_match_heads(model, data, 3).heads)
    sets = sum(len(s) for s, _ in control_plan(model, top, draws, 0).values())
    assert sets < 2 * draws  # the old total (3 + 2 x draws + ...) was never reached
    assert bar.n == bar.total
    assert result["random"]["n_sets"] + result["random_same_layer"]["n_sets"] == sets
