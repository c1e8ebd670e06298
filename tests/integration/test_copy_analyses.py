"""Copy-paper analyses: end-to-end on hand-set constructions and tiny untrained models (no
training), every CLI refusing a checkpoint of the wrong kind with exit code 2, and the zoo
recipes each one trains with ``--train``."""

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
    zoo,
)
from models.checkpoint.layout import FORMAT
from models.checkpoint.write import save_checkpoint
from models.constructions import build_hash_copy_transformer, save_hash_copy
from models.registry import build_model
from models.transformer import HookedTransformerLM, TransformerConfig
from seqprobe.errors import InputError

CLIS = {"ngram_heads": ngram_heads, "duplicated_ngrams": duplicated_ngrams,
        "length_generalization": length_generalization, "copy_efficiency": copy_efficiency,
        "copy_bounds": copy_bounds, "ngram_lookup": ngram_lookup}


def save_model(path, model, task_name="copy", task_config=None, history=()):
    """An untrained model as a suite checkpoint of ``task_name``."""
    ck = {"format": FORMAT, "model": model.to_checkpoint_dict(),
          "task": {"name": task_name, "config": task_config or {"D": 26, "max_len": 12}},
          "train": {"config": {}, "seed": 0, "step": 0, "samples_seen": 0},
          "state_dict": model.state_dict(), "history": list(history)}
    return str(save_checkpoint(ck, path))


def save_tiny(path, task_name="copy", task_config=None, history=(), **model_kw):
    cfg = dict(vocab_size=30, d_model=16, n_layers=2, n_heads=4, d_mlp=32, pe="hard_alibi")
    cfg.update(model_kw)
    return save_model(path, HookedTransformerLM(TransformerConfig(**cfg)), task_name,
                      task_config, history)


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
        "markov": save_tiny(d / "markov.pt", "markov", {"S": 2, "seq_len": 32}, vocab_size=2),
        "lstm": save_model(d / "lstm.pt", build_model("lstm", {"d_model": 4, "n_layers": 2})),
        "missing": str(d / "nope.pt"),
    }


WRONG = {  # analysis -> checkpoints of a kind it must refuse
    "ngram_heads": ["classifier", "markov", "lstm", "missing"],
    "duplicated_ngrams": ["lookup", "markov", "missing"],
    "length_generalization": ["lookup"],
    "copy_efficiency": ["lookup", "hash"],  # hash: a construction has no training history
    "copy_bounds": ["lookup", "markov"],
    "ngram_lookup": ["copy_tiny", "hash", "markov"],
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_cli_rejects_wrong_checkpoint_kind(name, ckpts, tmp_path, capsys):
    for kind in WRONG[name]:
        code = CLIS[name].main([ckpts[kind], "--out", str(tmp_path)])
        err = capsys.readouterr().err.strip()
        assert code == 2, f"{name} accepted a {kind} checkpoint"
        assert err.startswith("error:") and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("*.png"))


def test_ngram_heads_refuses_a_markov_checkpoint_by_its_task(ckpts, tmp_path, capsys):
    assert ngram_heads.main([ckpts["markov"], "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "task is 'markov'" in err and "copy" in err, err
    assert not (tmp_path / "ngram_heads.json").exists()


def test_ngram_heads_refuses_a_non_transformer(ckpts, tmp_path, capsys):
    assert ngram_heads.main([ckpts["lstm"], "--out", str(tmp_path)]) == 2
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
    # both of the paper's claims read off this JSON hold for the construction
    assert [c.measure(r)[1] for c in ngram_heads.FIGURE.claims] == [True, True]


def test_duplicated_ngrams_of_a_construction_drop_exactly_at_its_n():
    model = build_hash_copy_transformer(3, 26)
    r = duplicated_ngrams.compute({"c3": model}, 26, n_values=[1, 2, 3, 4], lengths=[14],
                                  n_examples=64, batch_size=64, progress=False)
    entry = r["curves"]["c3"][0]
    acc = [row["string_acc"] for row in entry["by_n"]]
    assert min(acc[:2]) > 0.85 and max(acc[2:]) < 0.6, acc
    assert entry["first_drop_n"] == 3


def test_duplicated_ngrams_cli_labels_models_and_adds_the_reference(ckpts, tmp_path):
    assert duplicated_ngrams.main([ckpts["copy_tiny"], "--out", str(tmp_path), "--n", "1,2",
                                   "--lengths", "6", "--n-examples", "8",
                                   "--reference-n", "2"]) == 0
    r = json.loads((tmp_path / "duplicated_ngrams.json").read_text())
    assert list(r["curves"]) == ["hard_alibi", "construction n=2"]
    assert r["train_max_len"] == 12 and r["checkpoints"] == [ckpts["copy_tiny"]]


def test_copy_bounds_construction_error_is_within_the_bounds():
    rows = copy_bounds.construction_errors([2], [10, 30], D=5, count_samples=400,
                                           model_samples=8, progress=False)
    for r in rows:
        assert r["error_given_no_repeat"] in (0.0, None)
        assert r["error"] <= r["p_ngram"] + 1e-9 <= r["bound"] + 1e-9 or r["bound"] >= 1
    assert rows[1]["p_ngram"] > rows[0]["p_ngram"]


def test_copy_bounds_cli_bounds_a_gssm_checkpoint(ckpts, tmp_path):
    assert copy_bounds.main([ckpts["lstm"], "--out", str(tmp_path), "--n", "3", "--lengths",
                             "20", "--count-samples", "100", "--model-samples", "4"]) == 0
    r = json.loads((tmp_path / "copy_bounds.json").read_text())
    (e,) = r["checkpoints"]
    assert e["label"] == "lstm" and e["state_floats"] == 2 * 2 * 4  # (h, c) per layer
    assert e["bounds"]["32"]["state_bits"] == 32 * e["state_floats"]
    # 512 bits: the bound is positive beyond L* = 512 / log2 26 ≈ 109 < 160, the longest test
    assert copy_bounds.FIGURE.claims[2].measure(r)[1] is not None
    assert copy_bounds.main([ckpts["lstm"], "--out", str(tmp_path), "--D", "10"]) == 2


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
    rows = r["curves"]["suffix"]["hard_alibi"]
    assert [x["L"] for x in rows] == [12, 40] and all("string_acc" in x for x in rows)


def test_copy_efficiency_reads_histories(ckpts, tmp_path):
    assert copy_efficiency.main([ckpts["copy_tiny"], "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "copy_efficiency.json").read_text())
    assert r["samples_to_reach"]["hard_alibi"]["string_0.5"] == 64
    assert r["samples_to_reach"]["hard_alibi"]["string_0.9"] is None


def test_probe_batches_for_non_copy_tasks_repeat_random_tokens():
    model = HookedTransformerLM(TransformerConfig(vocab_size=12, d_model=16, n_heads=4))
    data = ngram_heads.probe_batches(model, "induction", {}, [6], 3, seed=0, data="repeat")
    (batch, period), = data
    tokens = torch.cat([batch.prompts, batch.answers], 1)
    assert period == 6 and torch.equal(tokens[:, :6], tokens[:, 6:12])
    assert int(tokens.max()) < 4  # the induction task's letters, not its special tokens


def test_an_induction_model_is_probed_on_its_own_task_by_default():
    model = HookedTransformerLM(TransformerConfig(vocab_size=12, d_model=16, n_heads=4))
    (batch, period), = ngram_heads.probe_batches(model, "induction", {"D": 4, "length": 16},
                                                 [16], 3, seed=0)
    assert period.shape == (3, 1)  # one flag-recall period per row, not a repeat of length L
    assert ngram_heads.data_name("induction") == "induction"
    assert ngram_heads.data_name("induction", "repeat") == "repeat"


# ---------------------------------------------------------------------------- recipes
def test_each_analysis_trains_the_recipes_it_trained_before():
    def recipes(mod, level):
        return list(mod.FIGURE.recipes(level))

    for mod in (ngram_heads, duplicated_ngrams):
        assert recipes(mod, "quick") == ["copy/hard_alibi"]
    assert recipes(copy_bounds, "quick") == ["copy/lstm"]
    assert recipes(copy_bounds, "paper") == ["copy/mamba", "copy/lstm"]
    assert recipes(length_generalization, "quick") == [
        "copy/hard_alibi", "copy/nope", "copy/rope", "copy/lstm", "copy/mamba2"]
    for level in ("quick", "paper"):  # copy_efficiency reads length_generalization's models
        assert recipes(copy_efficiency, level) == recipes(length_generalization, level)
    assert recipes(ngram_lookup, "quick") == [
        "lookup_suffix/hard_alibi", "lookup_prefix/hard_alibi",
        "lookup_suffix/lstm", "lookup_prefix/lstm"]
    assert len(recipes(ngram_lookup, "paper")) == 12


def test_lookup_recipes_fine_tune_the_copy_models_or_start_from_scratch(tmp_path):
    quick = ngram_lookup.lookup_recipes("quick", ["hard_alibi"])
    assert quick == ngram_lookup.lookup_recipes("quick", ["hard_alibi"], "copy")
    assert all(zoo.dependencies(n, "quick") == ["copy/hard_alibi"] for n in quick)
    scratch = ngram_lookup.lookup_recipes("quick", ["hard_alibi"], "none")
    assert scratch == ["lookup_scratch_suffix/hard_alibi", "lookup_scratch_prefix/hard_alibi"]
    assert all(zoo.dependencies(n, "quick") == [] for n in scratch)
    for a, b in zip(quick, scratch, strict=True):  # same task and training, other start
        assert zoo.recipe(a).parts("quick") == zoo.recipe(b).parts("quick")
        # at paper both train from random init: one run, one cache entry
        assert zoo.run_config(a, "paper", tmp_path).hash() == zoo.run_config(b, "paper", tmp_path).hash()
    with pytest.raises(InputError, match="--init copy"):
        ngram_lookup.lookup_recipes("paper", ["lstm"], "copy")
    with pytest.raises(InputError, match="unknown recipe 'lookup_suffix/gpt'"):
        zoo.recipe(ngram_lookup.lookup_recipes("quick", ["gpt"])[0])


def test_analyses_refuse_unknown_models_before_training(tmp_path, capsys):
    for argv in ([ngram_lookup, "--models", "gpt"], [length_generalization, "--models", "gpt"],
                 [copy_efficiency, "--models", "gpt"], [copy_bounds, "--archs", "rope"]):
        mod, *flags = argv
        assert mod.main(["--train", "quick", "--cache-dir", str(tmp_path / "ck"),
                         "--out", str(tmp_path), *flags]) == 2
        assert capsys.readouterr().err.startswith("error:")
    assert not (tmp_path / "ck").exists()  # nothing trained


TINY_TRAIN = {"steps": 2, "batch_size": 4, "eval_every": 0, "eval_batches": 1,
              "eval_batch_size": 4, "warmup_steps": 1}


def test_train_quick_fine_tunes_the_zoo_copy_model_for_lookup(tmp_path, monkeypatch):
    """``--train quick`` serves the analysis its recipes: here tiny stand-ins for
    copy/hard_alibi and the two lookup recipes that start from it."""
    copy = zoo.Recipe("copy/hard_alibi", "copy", "transformer",
                      {"model": {"pe": "hard_alibi", "d_model": 16, "n_layers": 2, "n_heads": 4},
                       "task": {"min_len": 1, "max_len": 6}, "train": TINY_TRAIN})
    monkeypatch.setitem(zoo.RECIPES, copy.name, copy)
    for key in ngram_lookup.KEYS:
        r = zoo.Recipe(f"lookup_{key}/hard_alibi", "lookup", "transformer",
                       {"task": {"min_len": 6, "max_len": 8, "n": 2, "k": 1, "key": key},
                        "train": TINY_TRAIN}, init_from={"quick": copy.name})
        monkeypatch.setitem(zoo.RECIPES, r.name, r)
    cache = tmp_path / "ck"
    assert ngram_lookup.main(["--train", "quick", "--models", "hard_alibi", "--cache-dir",
                              str(cache), "--out", str(tmp_path), "--lengths", "8,12",
                              "--n-examples", "4"]) == 0
    r = json.loads((tmp_path / "ngram_lookup.json").read_text())
    copy_path = str(zoo.checkpoint(copy.name, "quick", cache, "cpu", progress=False))
    for key in ngram_lookup.KEYS:
        assert list(r["curves"][key]) == ["hard_alibi"]
        assert r["train"][key]["hard_alibi"]["init_from"] == copy_path
    # the copy analyses read the same cached copy model
    assert duplicated_ngrams.main(["--train", "quick", "--cache-dir", str(cache), "--out",
                                   str(tmp_path), "--n", "1", "--lengths", "6",
                                   "--n-examples", "4", "--reference-n", ""]) == 0
    d = json.loads((tmp_path / "duplicated_ngrams.json").read_text())
    assert d["checkpoints"] == [copy_path]
