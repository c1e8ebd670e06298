"""The preset table: literal rows keyed (level, task, arch), levels as overlays on a base."""

import pytest

from models.registry import ARCHS
from models.train import levels as presets
from seqprobe.cli import LEVELS
from seqprobe.errors import InputError
from tasks.registry import TASKS


def test_every_row_is_a_level_task_arch_and_model_task_train_parts():
    for (level, task, arch), row in presets.PRESETS.items():
        assert level in LEVELS
        assert task == "*" or task in TASKS
        assert arch == "*" or arch in ARCHS
        assert set(row) <= {"model", "task", "train"} and row


def test_a_level_with_a_base_is_an_overlay_on_it(monkeypatch):
    quick = presets.preset_overrides("quick", "copy", "transformer")
    assert presets.preset_overrides("medium", "copy", "transformer") == quick  # no rows yet
    monkeypatch.setitem(presets.PRESETS, ("medium", "copy", "*"), {"train": {"steps": 7}})
    rows = presets.preset_overrides("medium", "copy", "transformer")
    assert rows["train"]["steps"] == 7  # the medium row on top
    assert rows["model"] == quick["model"]  # the rest from quick
    assert rows["train"]["lr"] == quick["train"]["lr"]
    with pytest.raises(InputError, match="unknown preset 'huge'.*quick, medium, large, paper"):
        presets.preset_overrides("huge", "copy", "transformer")


def test_specific_rows_win_and_merging_leaves_the_table_alone():
    rows = presets.preset_overrides("quick", "copy", "transformer")
    assert rows["train"]["steps"] == presets.PRESETS[("quick", "copy", "*")]["train"]["steps"]
    rows["train"]["steps"] = -1
    assert presets.preset_overrides("quick", "copy", "transformer")["train"]["steps"] != -1


@pytest.mark.parametrize("arch", ["stu", "transformer", "mamba2"])
def test_paper_induction_models_are_the_quick_ones_at_twice_the_width(arch):
    quick = presets.PRESETS[("quick", "induction", arch)]["model"]
    paper = presets.PRESETS[("paper", "induction", arch)]["model"]
    assert paper == {k: 2 * v if k in ("d_model", "d_mlp") else v for k, v in quick.items()}


@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm"])
def test_paper_lookup_models_are_the_paper_copy_models(arch):
    assert presets.PRESETS[("paper", "lookup", arch)] == presets.PRESETS[("paper", "copy", arch)]
