"""ngram_heads on SSMs through effective attention, and several checkpoints side by side
(tiny untrained models and the hash-copy construction; no training)."""

import json

import numpy as np
import pytest
import torch

from analyses import ngram_heads
from models import load
from models.checkpoint import FORMAT, save_checkpoint
from models.constructions import save_hash_copy
from models.registry import build_model

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
    assert ngram_heads.main([ckpts[arch], "--out", str(tmp_path), *SMALL]) == 0
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert (tmp_path / "ngram_heads.png").exists()
    assert r["heads"] == kind and r["n_heads"] == heads and r["data"] == "copy"
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


def test_side_by_side_of_different_tasks_uses_repeated_strings_over_shared_letters(ckpts,
                                                                                   tmp_path):
    assert ngram_heads.main([ckpts["mamba2"], ckpts["induction"], "--out", str(tmp_path),
                             *SMALL]) == 0
    r = json.loads((tmp_path / "ngram_heads.json").read_text())
    assert r["data"] == "repeat" and len(r["models"]) == 2
    assert [m["label"] for m in r["models"]] == ["mamba2", "mamba2'"]


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
    np.testing.assert_allclose(np.array(r["match_by_n"])[:, :, 0], np.array(r["target_score"]),
                               atol=1e-6)
    assert r["data"] == "induction"
