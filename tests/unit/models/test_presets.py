"""The level tables: rows keyed (level, task, arch), levels as overlays on a base, one table per
paper in its zoo module (analyses.zoo.<paper>.TABLE), merged by analyses.zoo.levels; models/
holds the generic rows only."""

import pytest

from analyses import zoo
from analyses.zoo import copy as zoo_copy
from analyses.zoo import levels as zoo_levels
from analyses.zoo import spectral as zoo_spectral
from analyses.zoo.recipes import papers
from models.levels import GENERIC, LevelTable
from models.registry import ARCHS
from models.train import build
from seqprobe.cli import LEVELS
from seqprobe.errors import InputError
from tasks.registry import TASKS


def test_every_row_is_a_level_task_arch_and_model_task_train_parts():
    assert zoo_levels.TABLE.table  # the papers' rows are found
    for (level, task, arch), row in zoo_levels.TABLE.table.items():
        assert level in LEVELS
        assert task == "*" or task in TASKS
        assert arch == "*" or arch in ARCHS
        assert set(row) <= {"model", "task", "train"} and row
    with pytest.raises(InputError, match="unknown level 'huge'"):
        LevelTable({("huge", "copy", "*"): {"train": {}}})
    with pytest.raises(InputError, match="parts are model, task, train"):
        LevelTable({("quick", "copy", "*"): {"optim": {}}})


def test_each_paper_sets_its_own_tasks_rows_and_models_holds_no_papers_numbers():
    assert set(GENERIC.table) == {(lv, "*", "*") for lv in ("quick", "paper")}
    owners: dict[tuple, str] = {}
    for paper in papers():
        for key in getattr(paper, "TABLE", GENERIC).table:
            if key not in GENERIC.table:
                assert key not in owners, f"{key} set by {owners[key]} and {paper.__name__}"
                owners[key] = paper.__name__
    tasks = {task for _, task, _ in owners}
    assert {"copy", "lookup", "markov", "induction", "memorization"} <= tasks


def test_a_recipe_takes_its_papers_rows_and_a_bare_run_the_generic_ones():
    copy = zoo.recipe("copy/hard_alibi")
    assert copy.table is zoo_copy.TABLE
    run = copy.run_config("quick")
    assert run.task_dict["max_len"] == zoo_copy.TABLE.table[("quick", "copy", "*")]["task"][
        "max_len"]
    bare = build.make_run_config("transformer", "copy", "quick", model={"pe": "hard_alibi"})
    assert bare.train.steps == GENERIC.table[("quick", "*", "*")]["train"]["steps"]
    assert bare.hash() != zoo_levels.make_run_config("transformer", "copy", "quick").hash()


def test_a_level_with_a_base_is_an_overlay_on_it():
    table = zoo_copy.TABLE
    quick = table.rows("quick", "copy", "transformer")
    assert table.rows("medium", "copy", "transformer") == quick  # no rows yet
    medium = LevelTable({("medium", "copy", "*"): {"train": {"steps": 7}}})
    table = LevelTable.merged([table, medium])
    rows = table.rows("medium", "copy", "transformer")
    assert rows["train"]["steps"] == 7  # the medium row on top
    assert rows["model"] == quick["model"]  # the rest from quick
    assert rows["train"]["lr"] == quick["train"]["lr"]
    with pytest.raises(InputError, match="unknown level 'huge'.*quick, medium, large, paper"):
        table.rows("huge", "copy", "transformer")


def test_two_tables_that_set_one_row_differently_do_not_merge():
    a = LevelTable({("quick", "copy", "*"): {"train": {"steps": 1}}})
    b = LevelTable({("quick", "copy", "*"): {"train": {"steps": 2}}})
    assert LevelTable.merged([a, a]).table == a.table
    with pytest.raises(InputError, match="set twice"):
        LevelTable.merged([a, b])


def test_specific_rows_win_and_merging_leaves_the_table_alone():
    table = zoo_copy.TABLE
    rows = table.rows("quick", "copy", "transformer")
    assert rows["train"]["steps"] == table.table[("quick", "copy", "*")]["train"]["steps"]
    rows["train"]["steps"] = -1
    assert table.rows("quick", "copy", "transformer")["train"]["steps"] != -1


@pytest.mark.parametrize("arch", ["stu", "transformer", "mamba2"])
def test_paper_induction_models_are_the_quick_ones_at_twice_the_width(arch):
    quick = zoo_spectral.TABLE.table[("quick", "induction", arch)]["model"]
    paper = zoo_spectral.TABLE.table[("paper", "induction", arch)]["model"]
    assert paper == {k: 2 * v if k in ("d_model", "d_mlp") else v for k, v in quick.items()}


@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm"])
def test_paper_lookup_models_are_the_paper_copy_models(arch):
    table = zoo_copy.TABLE.table
    assert table[("paper", "lookup", arch)] == table[("paper", "copy", arch)]
