"""ngram_heads on SSMs through effective attention, several checkpoints side by side, and
HuggingFace models (pretrained LMs on repeated random tokens and repeated text; our models
exported to HF) — tiny untrained models and the hash-copy construction, no training."""

import dataclasses
import json
from collections import Counter

import numpy as np
import pytest
import torch

from analyses import ngram_heads
from analyses.claims import Undecided
from analyses.ngram_heads.claims import claim_ablation, claim_match_heads
from models import load
from models.checkpoint.layout import FORMAT
from models.checkpoint.write import save_checkpoint
from models.constructions import build_hash_copy_transformer, save_hash_copy
from models.hf.export import export
from models.registry import build_model
from models.transformer import HookedTransformerLM, TransformerConfig
from probes import effective_attention as ea
from probes.attention import pattern_scores
from probes.match_heads import MatchHeads, control_sets, find_match_heads
from seqprobe.errors import InputError

COPY = {"D": 26, "max_len": 12}
SMALL = ["--lengths", "6", "--batch-size", "4", "--draws", "2", "--n-max", "3"]


def save(path, arch, task="copy", task_config=None, **cfg):
    base = {"vocab_size": 30, "d_model": 8, "n_layers": 2}
    if arch in ("mamba2", "mamba"):
        base.update(d_state=4, d_conv=3)
    model = build_model(arch, {**base, **cfg})
    ck = {"format": FORMAT, "model": model.to_checkpoint_dict(),
          "task": {"name": task, "config": task_config or COPY},
          "train": {"config": {}, "seed": 0, "step": 0, "samples_seen": 0},
          "state_dict": model.state_dict(), "history": []}
    return str(save_checkpoint(ck, path))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("ssm")
    return {
        "mamba2": save(d / "mamba2.pt", "mamba2", n_heads=2),
        "mamba": save(d / "mamba.pt", "mamba"),
        "induction": save(d / "ind.pt", "mamba2", "induction", {"D": 4, "length": 10},
                          vocab_size=6, n_heads=2),
        "hash": str(save_hash_copy(d / "hash.pt", n=3, D=26, max_len=16)),
        "stu": save(d / "stu.pt", "stu", n_layers=1, filter_len=32, num_filters=4),
    }


@pytest.mark.parametrize("arch, kind, heads", [("mamba2", "ssd", 2), ("mamba", "s6", 16)])
def test_ssm_checkpoint_gets_per_head_scores_from_effective_attention(ckpts, tmp_path, arch,
                                                                        kind, heads):
    assert ngram_heads.main([ckpts[arch], "--out", str(tmp_path), "--per-head", *SMALL]) == 0
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert (tmp_path / "ngram_heads.png").exists()
    assert r["heads"] == kind and r["n_heads"] == heads and r["data"] == "copy"
    assert np.array(r["per_head_drop"]).shape == (2, heads)
    ms = np.array(r["match_score"])
    assert ms.shape == (2, heads) and ((ms >= 0) & (ms <= 1)).all()
    assert r["ablated"]["heads"] and len(r["random"]["runs"]) == 2
    # Mamba's channels are not searched one by one for feeding heads; Mamba-2's heads are
    assert r["feeding_searched"] == (kind == "ssd")
    assert len(r["feeding_heads"]) == (heads if kind == "ssd" else 0) * (
        max(h["layer"] for h in r["match_heads"]))


@pytest.mark.parametrize("kind", ["stu"])
def test_a_model_with_no_heads_is_one_line(ckpts, tmp_path, capsys, kind):
    assert ngram_heads.main([ckpts[kind], "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no effective attention" in err, err


def test_side_by_side_scores_transformer_and_ssm_heads_on_the_same_data(ckpts, tmp_path):
    code = ngram_heads.main([ckpts["hash"], ckpts["mamba2"], "--out", str(tmp_path),
                             "--lengths", "12", "--batch-size", "8", "--draws", "2",
                             "--n-max", "4"])
    assert code == 0
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert (tmp_path / "ngram_heads.png").exists()
    hash_r, ssm = r["models"]
    assert r["data"] == "copy" and [m["heads"] for m in r["models"]] == ["attention", "ssd"]
    # alone or beside an SSM, the construction's NoPE head is found the same way
    assert [(h["layer"], h["head"]) for h in hash_r["match_heads"]] == [(1, 4)]
    assert hash_r["match_heads"][0]["match_score"] > 0.99
    assert hash_r["accuracy"]["string_acc"] == 1.0
    assert np.array(ssm["match_score"]).shape == (2, 2)


def test_side_by_side_of_different_tasks_probes_each_on_its_task_or_on_shared_repeats(
        ckpts, tmp_path):
    assert ngram_heads.main([ckpts["mamba2"], ckpts["induction"], "--out", str(tmp_path),
                             "--batch-size", "4", "--draws", "1", "--n-max", "2"]) == 0
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert [m["data"] for m in r["models"]] == ["copy", "induction"] and r["data"] == "task"
    assert [m["label"] for m in r["models"]] == ["mamba2", "mamba2'"]
    assert r["models"][1]["lengths"] == [10]  # the induction model's training length
    assert ngram_heads.main([ckpts["mamba2"], ckpts["induction"], "--out", str(tmp_path),
                             "--data", "repeat", *SMALL]) == 0
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert r["data"] == "repeat" and [m["data"] for m in r["models"]] == ["repeat", "repeat"]


def test_induction_task_data_targets_the_token_after_the_first_flag(ckpts):
    """With --data task, the one query per row (the last flag) has exactly one 1-gram match,
    the recalled token after the first flag, which is also its target: both scores agree."""
    model = load(ckpts["induction"])
    task = model.checkpoint["task"]
    (batch, period), = ngram_heads.probe_batches(model, "induction", task["config"], [10], 16,
                                                 seed=0, data="task")
    flag = int(batch.prompts[0, -1])
    first = (batch.prompts == flag).int().argmax(1)
    assert torch.equal((10 - period[:, 0]), first + 1)  # target position = first flag + 1
    r = ngram_heads.compute(model, "induction", task["config"], n_max=2, lengths=[10],
                            batch_size=16, draws=1, data="task", progress=False)
    # match_by_n is at each head's better lag; the lag-0 scores (the successor) are the target's
    lag0 = pattern_scores(model, [(batch, period)], 2, patterns=ea.head_patterns)["match"][0]
    np.testing.assert_allclose(lag0[:, :, 0].numpy(), np.array(r["target_score"]), atol=1e-6)
    assert r["data"] == "induction"


HF_SMALL = ["--lengths", "5,7", "--batch-size", "3", "--draws", "1", "--n-max", "2"]


def test_a_pretrained_lm_is_probed_on_repeated_random_tokens_and_on_repeated_text(
        hf_dirs, tmp_path, capsys):
    assert ngram_heads.main([str(hf_dirs["gpt_neox"]), str(hf_dirs["mamba2"]), "--out",
                             str(tmp_path), *HF_SMALL]) == 0
    out = capsys.readouterr().out
    assert "not natural text" in out  # the offline default text says what it is
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert (tmp_path / "ngram_heads.png").exists() and r["text_source"] == "generated"
    assert [(m["label"], m["data"], m["heads"]) for m in r["models"]] == [
        ("gpt_neox repeat", "repeat", "attention"), ("gpt_neox text", "text", "attention"),
        ("mamba2 repeat", "repeat", "ssd"), ("mamba2 text", "text", "ssd")]
    assert np.array(r["models"][2]["match_score"]).shape == (2, 4)
    assert all(m["ablated"]["heads"] for m in r["models"])


def test_a_pretrained_mamba_on_a_named_text_file(hf_dirs, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat and the dog sat on the log. " * 4)
    assert ngram_heads.main([str(hf_dirs["mamba"]), "--data", "text", "--text", str(text), "--out",
                             str(tmp_path), *HF_SMALL]) == 0
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert r["data"] == "text" and r["heads"] == "s6" and r["text_source"] == str(text)
    assert np.array(r["match_score"]).shape == (2, 64)  # channels: expand · d_model


def test_a_pretrained_lm_has_no_task_data(hf_dirs, tmp_path, capsys):
    assert ngram_heads.main([str(hf_dirs["gpt_neox"]), "--data", "task", "--out",
                             str(tmp_path)]) == 2
    assert "no task" in capsys.readouterr().err


def test_our_model_exported_to_hf_gives_the_same_scores_as_its_checkpoint(tmp_path):
    """An export keeps our token ids and says which task it learned: ngram_heads probes it on
    the same copy examples and finds the same heads and scores."""
    model = HookedTransformerLM(TransformerConfig(vocab_size=30, d_model=32, n_layers=2,
                                                  n_heads=4, d_mlp=64, pe="rope"))
    path = save_checkpoint({"format": FORMAT, "model": model.to_checkpoint_dict(),
                            "task": {"name": "copy", "config": COPY},
                            "train": {"config": {}, "seed": 0, "step": 0, "samples_seen": 0},
                            "state_dict": model.state_dict(), "history": []}, tmp_path / "r.pt")
    export(path, tmp_path / "hf")
    results = []
    for src in (path, tmp_path / "hf"):
        out = tmp_path / f"out_{len(results)}"
        assert ngram_heads.main([str(src), "--out", str(out), "--threshold", "0.1",
                                 *SMALL]) == 0
        results.append(json.loads((out / "ngram_heads.json").read_text()))
    ours, theirs = results
    assert theirs["data"] == ours["data"] == "copy"
    np.testing.assert_allclose(theirs["match_score"], ours["match_score"], atol=1e-4)
    assert [(h["layer"], h["head"]) for h in theirs["match_heads"]] == [
        (h["layer"], h["head"]) for h in ours["match_heads"]]


def test_the_match_head_finder_returns_a_frozen_result_and_the_settings_are_checked():
    """probes.match_heads.find_match_heads on the hash-copy construction: its NoPE head, as a
    frozen MatchHeads; HeadsConfig refuses bad settings in one InputError."""
    model = build_hash_copy_transformer(3, 26)
    data = ngram_heads.probe_batches(model, "copy", COPY, [12], 4, seed=0)
    found = find_match_heads(model, data, n_max=4)
    assert isinstance(found, MatchHeads) and found.heads == ((1, 4),) and found.threshold_met
    assert found.match_score.shape == found.best_n.shape == found.target.shape
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.heads = ()
    assert ngram_heads.HeadsConfig(lengths=[6, 8]).lengths == (6, 8)
    for bad in ({"top_k": 0}, {"threshold": float("nan")}, {"lengths": [1]}, {"mode": "x"},
                {"data": "y"}, {"draws": 0}):
        with pytest.raises(InputError):
            ngram_heads.HeadsConfig(**bad)


def test_control_sets_are_drawn_without_replacement_or_all_of_them():
    pool = [(0, h) for h in range(4)] + [(1, h) for h in range(4)]
    # C(8, 1) = 8 <= 10: every head once, in order, no draw
    sets, exhaustive = control_sets(pool, 1, 10, seed=0)
    assert exhaustive and sets == [[h] for h in pool]
    # C(8, 2) = 28 > 10: 10 distinct pairs, every head in 2 or 3 of them (shuffles cut into
    # disjoint pairs), the same for the same seed
    sets, exhaustive = control_sets(pool, 2, 10, seed=0)
    assert not exhaustive and len({tuple(s) for s in sets}) == 10
    counts = Counter(h for s in sets for h in s)
    assert set(counts) == set(pool) and max(counts.values()) - min(counts.values()) <= 1
    assert sets == control_sets(pool, 2, 10, seed=0)[0]
    assert control_sets(pool, 2, 28, seed=0)[1] is True  # all 28 pairs
    assert control_sets(pool, 0, 10, seed=0) == ([], True)


def test_ablation_claim_reports_the_random_sets_spread():
    d = {"ablated": {"drop": {"string_acc": 0.99}},
         "random": {"string_drop_mean": 0.2, "string_drop_min": 0.0, "string_drop_max": 0.9,
                    "string_drop_quartiles": [0.0, 0.05, 0.3], "n_sets": 14,
                    "exhaustive": True}}
    text, ok = claim_ablation(d)
    assert ok is True and "mean 20 pts, range 0–90, IQR 0–30, all 14 sets" in text
    d["random"]["string_drop_mean"] = 0.6  # random sets as costly on average: no
    assert claim_ablation(d)[1] is False


def test_ablation_claim_reads_the_same_layer_control_first():
    """Quick seed 2's copy model: its match heads read through four layer-0 hashing heads, so
    random heads from anywhere often hit the circuit (mean drop 57 pts) while the match heads'
    own layer costs nothing; the claim reads the same-layer control, the text shows both."""
    d = {"ablated": {"drop": {"string_acc": 0.97}},
         "random": {"string_drop_mean": 0.57, "n_sets": 24},
         "random_same_layer": {"string_drop_mean": 0.0, "n_sets": 15}}
    text, ok = claim_ablation(d)
    assert ok is True and "same layers: mean 0 pts" in text and "from anywhere: mean 57" in text
    d["random_same_layer"]["string_drop_mean"] = 0.6  # the same layer as costly: no
    assert claim_ablation(d)[1] is False
    d["random_same_layer"] = {"string_drop_mean": None}  # no same-layer heads: from anywhere
    assert claim_ablation(d)[1] is False and claim_ablation(d).margin.value == 0.57


def test_a_model_that_does_not_copy_leaves_both_claims_undecided():
    """No copying mechanism can be read from a model that does not copy: "not decided", with
    the reason, never "does not hold"; one that copies is read as before."""
    d = {"threshold": 0.5, "threshold_met": False,
         "match_heads": [{"layer": 0, "head": 1, "match_score": 0.1}],
         "accuracy": {"string_acc": 0.3}, "ablated": {"drop": {"string_acc": 0.2}},
         "random": {"string_drop_mean": 0.1}}
    for claim in (claim_match_heads, claim_ablation):
        verdict = claim(d)[1]
        assert isinstance(verdict, Undecided) and "copies 30%" in str(verdict)
    d["accuracy"]["string_acc"] = 0.95
    assert claim_match_heads(d)[1] is False and claim_ablation(d)[1] is False
