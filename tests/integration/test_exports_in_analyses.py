"""A suite export (``python -m models.hf.export``) in every analysis that takes a path (issue 37):
an analysis that reads only a model's outputs takes it as the checkpoint it came from — its
task, its token ids, the same numbers — and one that reads the suite model itself (config,
hooks, training record) refuses it in one line naming what to give instead. Before, an export
was a pretrained LM: ``length_generalization`` asked its task tokenizer for a "\\n\\n" separator
("the separator must be at least one token") and ``pretrained_copy`` tracebacked in the
tokenizer ("unknown token but unk_id is missing")."""

from __future__ import annotations

import importlib
import json

import pytest
import torch

import models
from analyses.zoo.levels import make_run_config
from models.checkpoint.layout import make_checkpoint
from models.checkpoint.write import save_checkpoint
from models.hf import export as export_hf
from models.registry import HF_ARCHS
from tests.tiny import TINY_RUN

# analysis -> (the task of the tiny model it gets, the flags of a tiny setting)
TAKES_EXPORTS = {
    "length_generalization": ("copy", ["--lengths", "2,4,8", "--n-examples", "24"]),
    "duplicated_ngrams": ("copy", ["--lengths", "8", "--n", "1,2", "--n-examples", "16"]),
    "ngram_heads": ("copy", ["--batch-size", "8", "--lengths", "6", "--n-max", "3",
                             "--draws", "2"]),
    "markov_laplace": ("markov", ["--n-seqs", "8", "--seq-len", "40", "--t-min", "5"]),
}
# each reads the suite model itself: its config (copy_bounds, markov_holdout), training record
# (copy_efficiency's history, ngram_lookup's fine-tune steps), hooks and state (state_probe,
# bc_orthogonality, mamba_decay, markov_ablations, stu_induction)
REFUSE_EXPORTS = ("copy_bounds", "copy_efficiency", "ngram_lookup", "state_probe",
                  "bc_orthogonality", "mamba_decay", "markov_ablations", "markov_holdout",
                  "stu_induction")
# results' entries that name where a model came from or how it was trained (an export keeps
# no training record), not what the analysis measured
PROVENANCE_KEYS = {"train", "checkpoints", "checkpoint", "models_used", "path", "paths", "steps",
                   "samples_seen", "context", "source"}
# ngram_heads describes the model as loaded: an export's is an HF model ("hf_transformer",
# TransformerLens' config, which has no "pe")
DESCRIPTION_KEYS = {"ngram_heads": {"pe", "arch"}}


def export_pair(tmp_path, task: str, seed: int = 0):
    """A tiny RoPE transformer trained on nothing (weights moved off init so its predictions
    vary by position), saved as a checkpoint and exported: (the .pt, the export dir)."""
    task_cfg = {"copy": {"D": 9, "min_len": 1, "max_len": 8}, "markov": {}}[task]
    run_config = make_run_config("transformer", task, "quick", {**TINY_RUN, "pe": "rope"},
                     task_cfg)
    torch.manual_seed(seed)
    model = models.build_model(run_config.arch, run_config.model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    pt = tmp_path / f"{task}.pt"
    save_checkpoint(make_checkpoint(run_config.arch, run_config.model_dict, run_config.task_name,
                                    run_config.task_dict,
                                    {"step": 0}, model.state_dict()), pt)
    hf = tmp_path / "hf" / task  # the same stem: analyses label a file by it
    export_hf.export(pt, hf, verify=False)
    return pt, hf


def run_main(name, argv, capsys):
    code = importlib.import_module(f"analyses.{name}").main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_same(a, b, where="result"):
    """``a`` and ``b`` equal, floats to 1e-4 (the export's logits differ in the last bits)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {set(a) ^ set(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, str):
        assert b == pytest.approx(a, abs=1e-4), f"{where}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def measured(result, skip=frozenset()):
    """The result without its provenance entries (PROVENANCE_KEYS, and ``skip``)."""
    if isinstance(result, dict):
        return {k: measured(v, skip) for k, v in result.items()
                if k not in PROVENANCE_KEYS | skip}
    if isinstance(result, list):
        return [measured(v, skip) for v in result]
    return result


@pytest.mark.parametrize("name", sorted(TAKES_EXPORTS))
def test_an_export_gives_its_checkpoints_numbers(name, tmp_path, capsys):
    task, flags_ = TAKES_EXPORTS[name]
    pt, hf = export_pair(tmp_path, task)
    results = {}
    for label, path in (("pt", pt), ("hf", hf)):
        out = tmp_path / f"out_{label}"
        code, _, err = run_main(name, [path, "--out", out, *flags_], capsys)
        assert code == 0, err
        (js,) = out.glob("*.json")
        results[label] = json.loads(js.read_text())
    skip = DESCRIPTION_KEYS.get(name, set())
    assert_same(measured(results["pt"], skip), measured(results["hf"], skip))


@pytest.mark.parametrize("name", REFUSE_EXPORTS)
def test_an_analysis_that_reads_the_suite_model_refuses_an_export_in_one_line(name, tmp_path,
                                                                            capsys):
    _, hf = export_pair(tmp_path, "copy")
    code, _, err = run_main(name, [hf, "--out", tmp_path / "out"], capsys)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, err
    assert "suite export" in lines[0] and "give the checkpoint it was exported from" in lines[0]
    assert not (tmp_path / "out").exists()  # refused before any work


def test_pretrained_copy_refuses_an_export_in_one_line(tmp_path, capsys):
    """It prompts pretrained LMs with words and numbers an export's task vocabulary has no
    tokens for; it says so and names the analyses that take the export."""
    _, hf = export_pair(tmp_path, "copy")
    code, _, err = run_main("pretrained_copy", [hf, "--out", tmp_path / "out"], capsys)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, err
    assert "suite export" in lines[0] and "length_generalization" in lines[0]


def test_the_export_is_labelled_and_scored_as_its_checkpoint(tmp_path):
    """What the copy analyses read of an export: its checkpoint's label, alphabet and task."""
    from analyses.common import export_of, is_pretrained
    from analyses.copy_models import copy_prompts, load_copy_models

    pt, hf = export_pair(tmp_path, "copy")
    ms, info, D = load_copy_models([str(pt), str(hf)], "cpu",
                                   ("transformer", *HF_ARCHS))
    assert list(ms) == ["rope", "rope'"] and D == 9
    exported = ms["rope'"]
    assert export_of(exported)["arch"] == "transformer" and not is_pretrained(exported)
    assert info["rope'"]["max_len"] == info["rope"]["max_len"] == 8
    task = ms["rope"].task
    assert copy_prompts(exported, task) is task  # the task's own tokens, no text prompts
