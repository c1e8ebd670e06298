"""Copy-paper analyses: end-to-end on hand-set constructions and tiny untrained models (no
training), and every CLI refusing a checkpoint of the wrong kind with exit code 2."""

import json

import pytest
import torch

from analyses import (
    copy_bounds,
    copy_efficiency,
    duplicated_ngrams,
    length_generalization,
    ngram_heads,
    ngram_lookup,
)
from models.checkpoint import FORMAT, save_checkpoint
from models.constructions import build_hash_copy_transformer, save_hash_copy
from models.transformer import HookedTransformerLM, TransformerConfig

CLIS = {"ngram_heads": ngram_heads, "duplicated_ngrams": duplicated_ngrams,
        "length_generalization": length_generalization, "copy_efficiency": copy_efficiency,
        "copy_bounds": copy_bounds, "ngram_lookup": ngram_lookup}


def save_tiny(path, task_name="copy", task_config=None, history=(), **model_kw):
    cfg = dict(vocab_size=30, d_model=16, n_layers=2, n_heads=4, d_mlp=32, pe="hard_alibi")
    cfg.update(model_kw)
    model = HookedTransformerLM(TransformerConfig(**cfg))
    ck = {"format": FORMAT, "model": model.to_checkpoint_dict(),
          "task": {"name": task_name, "config": task_config or {"D": 26, "max_len": 12}},
          "train": {"config": {}, "seed": 0, "step": 0, "samples_seen": 0},
          "state_dict": model.state_dict(), "history": list(history)}
    return str(save_checkpoint(ck, path))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("ck")
    lookup_cfg = {"D": 26, "min_len": 10, "max_len": 30, "n": 3, "k": 1, "key": "suffix"}
    return {
        "hash": str(save_hash_copy(d / "hash.pt", n=3, D=26, max_len=16)),
        "copy_tiny": save_tiny(d / "copy.pt", history=[
            {"step": 1, "samples_seen": 32, "string_acc": 0.0, "char_acc": 0.1},
            {"step": 2, "samples_seen": 64, "string_acc": 0.6, "char_acc": 0.9}]),
        "lookup": save_tiny(d / "lookup.pt", "lookup", lookup_cfg),
        "classifier": save_tiny(d / "cls.pt", head="seq_cls", n_classes=3),
        "missing": str(d / "nope.pt"),
    }


WRONG = {  # analysis -> checkpoints of a kind it must refuse
    "ngram_heads": ["classifier", "missing"],
    "duplicated_ngrams": ["lookup", "missing"],
    "length_generalization": ["lookup"],
    "copy_efficiency": ["lookup", "hash"],  # hash: a construction has no training history
    "copy_bounds": ["lookup"],
    "ngram_lookup": ["copy_tiny", "hash"],
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_cli_rejects_wrong_checkpoint_kind(name, ckpts, tmp_path, capsys):
    for kind in WRONG[name]:
        code = CLIS[name].main([ckpts[kind], "--out", str(tmp_path)])
        err = capsys.readouterr().err.strip()
        assert code == 2, f"{name} accepted a {kind} checkpoint"
        assert err.startswith("error:") and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("*.png"))


def test_cli_rejects_a_non_transformer_for_ngram_heads(tmp_path, capsys):
    try:
        from models.registry import build_model

        m = build_model("mamba2", {"vocab_size": 30})
    except Exception as e:  # noqa: BLE001 - another engineer's model may not build yet
        pytest.skip(f"mamba2 does not build: {e}")
    ck = {"format": FORMAT, "model": m.to_checkpoint_dict(),
          "task": {"name": "copy", "config": {"D": 26}},
          "train": {"config": {}, "seed": 0, "step": 0, "samples_seen": 0},
          "state_dict": m.state_dict(), "history": []}
    path = save_checkpoint(ck, tmp_path / "m.pt")
    assert ngram_heads.main([str(path), "--out", str(tmp_path)]) == 2
    assert "transformer" in capsys.readouterr().err


def test_ngram_heads_finds_the_construction_copy_head(ckpts, tmp_path):
    code = ngram_heads.main([ckpts["hash"], "--out", str(tmp_path), "--lengths", "12",
                             "--batch-size", "8", "--draws", "2", "--n-max", "4"])
    assert code == 0
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert (tmp_path / "ngram_heads.png").exists()
    assert [(h["layer"], h["head"]) for h in r["match_heads"]] == [(1, 4)]  # the NoPE head
    assert r["match_heads"][0]["match_score"] > 0.99
    assert r["accuracy"]["string_acc"] == 1.0
    assert r["ablated"]["drop"]["string_acc"] >= 0.5
    # the hashing heads of the construction are its Hard-ALiBi heads in layer 0
    assert all(h["layer"] == 0 for h in r["hashing_heads"])


def test_duplicated_ngrams_of_a_construction_drop_exactly_at_its_n():
    model = build_hash_copy_transformer(3, 26)
    r = duplicated_ngrams.compute({"c3": model}, 26, n_values=[1, 2, 3, 4], lengths=[14],
                                  n_examples=64, batch_size=64, progress=False)
    entry = r["curves"]["c3"][0]
    acc = [row["string_acc"] for row in entry["by_n"]]
    assert min(acc[:2]) > 0.85 and max(acc[2:]) < 0.6, acc
    assert entry["first_drop_n"] == 3


def test_copy_bounds_construction_error_is_within_the_bounds():
    rows = copy_bounds.construction_errors([2], [10, 30], D=5, count_samples=400,
                                           model_samples=8, progress=False)
    for r in rows:
        assert r["error_given_no_repeat"] in (0.0, None)
        assert r["error"] <= r["p_ngram"] + 1e-9 <= r["bound"] + 1e-9 or r["bound"] >= 1
    assert rows[1]["p_ngram"] > rows[0]["p_ngram"]


def test_length_generalization_and_lookup_run_end_to_end(ckpts, tmp_path):
    assert length_generalization.main([ckpts["hash"], ckpts["copy_tiny"], "--out", str(tmp_path),
                                       "--lengths", "8,40", "--n-examples", "16"]) == 0
    r = json.loads((tmp_path / "length_generalization.json").read_text())
    hash_label = next(k for k in r["curves"] if k.startswith("construction"))
    assert [x["string_acc"] for x in r["curves"][hash_label]][0] == 1.0
    assert ngram_lookup.main([ckpts["lookup"], "--out", str(tmp_path), "--lengths", "12,40",
                              "--n-examples", "8"]) == 0
    r = json.loads((tmp_path / "ngram_lookup.json").read_text())
    assert list(r["curves"]["suffix"]) == ["hard_alibi"] and r["curves"]["prefix"] == {}


def test_quick_lookup_fine_tunes_the_copy_checkpoint(tmp_path, monkeypatch):
    from models.checkpoint import read_checkpoint

    tiny = {"steps": 2, "batch_size": 4, "eval_every": 0, "eval_batches": 1, "eval_batch_size": 4,
            "warmup_steps": 1}
    monkeypatch.setitem(length_generalization.PRESETS, "quick",
                        {**length_generalization.PRESETS["quick"], "train": tiny,
                         "train_by_label": {}, "task": {"max_len": 8}})
    monkeypatch.setitem(ngram_lookup.PRESETS, "quick", {**ngram_lookup.PRESETS["quick"],
                                                        "train": tiny})
    paths = ngram_lookup.train_lookup_models("quick", str(tmp_path), "cpu", ["hard_alibi"],
                                             progress=False)
    copy = list(tmp_path.glob("transformer-copy-*.pt"))
    assert len(paths) == 2 and len(copy) == 1
    for path, key in zip(paths, ngram_lookup.KEYS, strict=True):
        ck = read_checkpoint(path)
        assert ck["task"]["config"]["key"] == key
        assert ck["train"]["config"]["init_from"] == str(copy[0])
        assert ck["model"]["config"] == read_checkpoint(copy[0])["model"]["config"]
    # a second call reuses every checkpoint; --init none trains from random init elsewhere
    assert ngram_lookup.train_lookup_models("quick", str(tmp_path), "cpu", ["hard_alibi"],
                                            progress=False) == paths
    scratch = ngram_lookup.train_lookup_models("quick", str(tmp_path), "cpu", ["hard_alibi"],
                                               progress=False, init="none")
    assert set(scratch).isdisjoint(paths)
    assert not read_checkpoint(scratch[0])["train"]["config"]["init_from"]


def test_copy_efficiency_reads_histories(ckpts, tmp_path):
    assert copy_efficiency.main([ckpts["copy_tiny"], "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "copy_efficiency.json").read_text())
    assert r["samples_to_reach"]["hard_alibi"]["string_0.5"] == 64
    assert r["samples_to_reach"]["hard_alibi"]["string_0.9"] is None


def test_probe_batches_for_non_copy_tasks_repeat_random_tokens():
    model = HookedTransformerLM(TransformerConfig(vocab_size=12, d_model=16, n_heads=4))
    data = ngram_heads.probe_batches(model, "induction", {}, [6], 3, seed=0)
    (batch, period), = data
    tokens = torch.cat([batch.prompts, batch.answers], 1)
    assert period == 6 and torch.equal(tokens[:, :6], tokens[:, 6:12])
