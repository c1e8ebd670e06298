"""The checkpoint zoo: every recipe is a valid run, recipes are served through the one cache,
and a fine-tuned recipe trains its init recipe first."""

import pytest

from analyses import zoo
from analyses.zoo import recipes
from models.checkpoint.io import read_checkpoint
from seqprobe.errors import InputError

TINY = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"min_len": 1, "max_len": 6},
        "train": {"steps": 3, "batch_size": 4, "eval_every": 0, "eval_batches": 1,
                  "eval_batch_size": 4, "warmup_steps": 1}}


@pytest.mark.parametrize("name", [n for n, r in zoo.RECIPES.items()
                                  if r.available("quick") and "quick" not in r.init_from])
def test_every_quick_recipe_is_a_valid_run(name, tmp_path):
    run_config = zoo.run_config(name, "quick", tmp_path)
    r = zoo.recipe(name)
    assert (run_config.arch, run_config.task_name) == (r.arch, r.task)
    for key, value in r.parts("quick")["model"].items():
        assert run_config.model_dict[key] == value  # the recipe's overrides reach the run


def test_unknown_recipe_and_missing_level_are_clear_errors():
    with pytest.raises(InputError, match="unknown recipe 'copy/nothing'.*copy/hard_alibi"):
        zoo.recipe("copy/nothing")
    with pytest.raises(InputError, match="no quick version"):
        zoo.recipe("markov_ablation/noconv_width/no_conv_d1000").parts("quick")


@pytest.mark.parametrize("name", [n for n, r in zoo.RECIPES.items()
                                  if r.available("medium") and "medium" not in r.init_from])
def test_every_medium_recipe_is_a_valid_run(name, tmp_path):
    run_config = zoo.run_config(name, "medium", tmp_path)
    for key, value in zoo.recipe(name).parts("medium")["model"].items():
        assert run_config.model_dict[key] == value


def test_a_recipe_exists_at_the_levels_it_lists():
    default = zoo.Recipe("test/q", "copy", "transformer")
    medium = zoo.Recipe("test/m", "copy", "transformer", levels=("medium",))
    assert default.levels == ("quick", "paper") and not default.available("medium")
    assert medium.available("medium") and not medium.available("quick")
    with pytest.raises(InputError, match="no medium version"):
        default.parts("medium")
    with pytest.raises(InputError, match="not among its levels"):
        zoo.Recipe("test/x", "copy", "transformer", by_level={"quick": {}}, levels=("medium",))
    with pytest.raises(InputError, match="unknown levels"):
        zoo.Recipe("test/x", "copy", "transformer", levels=("huge",))
    with pytest.raises(InputError, match="not set to None"):
        zoo.Recipe("test/x", "copy", "transformer", by_level={"quick": None})


def test_level_overrides_go_on_top_of_the_common_ones():
    r = zoo.Recipe("test/r", "copy", "transformer", {"train": {"steps": 5, "lr": 1e-2}},
                   {"paper": {"train": {"steps": 9}}})
    assert r.parts("quick")["train"] == {"steps": 5, "lr": 1e-2}
    assert r.parts("paper")["train"] == {"steps": 9, "lr": 1e-2}


def test_building_the_table_leaves_no_loop_variables_behind():
    leaked = [n for n in vars(recipes) if n.startswith("_") and n[1:2].islower()
              and not callable(getattr(recipes, n)) and not n.startswith("__")]
    assert not leaked, leaked
    assert recipes.build_recipes().keys() == zoo.RECIPES.keys()


@pytest.fixture
def tiny_recipes(monkeypatch):
    parent = zoo.Recipe("test/copy", "copy", "transformer", TINY)
    child = zoo.Recipe("test/lookup", "lookup", "transformer",
                       {"task": {"min_len": 4, "max_len": 6, "n": 2, "k": 1},
                        "train": TINY["train"]},
                       init_from={"quick": "test/copy"})
    for r in (parent, child):
        monkeypatch.setitem(zoo.RECIPES, r.name, r)
    return parent, child


def test_an_untrained_init_recipe_is_a_query_and_a_typed_error(tiny_recipes, tmp_path):
    assert zoo.untrained_init("test/lookup", "quick", tmp_path) == "test/copy"
    assert zoo.untrained_init("test/copy", "quick", tmp_path) is None  # no init recipe
    with pytest.raises(zoo.NotTrained, match="starts from test/copy"):
        zoo.run_config("test/lookup", "quick", tmp_path)
    assert zoo._cached("test/lookup", "quick", tmp_path, None) is None


def test_a_recipe_is_trained_once_and_its_init_recipe_first(tiny_recipes, tmp_path):
    assert zoo.status("test/lookup", "quick", tmp_path) == "needs test/copy"
    path = zoo.checkpoint("test/lookup", "quick", tmp_path, "cpu", progress=False)
    ck = read_checkpoint(path)
    assert ck["task"]["name"] == "lookup" and ck["train"]["config"]["init_from"]
    assert zoo.status("test/copy", "quick", tmp_path) == "cached"
    assert zoo.status("test/lookup", "quick", tmp_path) == "cached"
    mtime = path.stat().st_mtime_ns
    assert zoo.checkpoint("test/lookup", "quick", tmp_path, "cpu", progress=False) == path
    assert path.stat().st_mtime_ns == mtime  # reused, not retrained


def test_the_zoo_cli_lists_and_trains(tiny_recipes, tmp_path, capsys):
    assert zoo.main(["--list", "test/", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "test/copy" in out and "missing" in out and "needs test/copy" in out
    # flags may sit between `train` and the names
    assert zoo.main(["train", "--cache-dir", str(tmp_path), "--device", "cpu",
                     "--no-progress", "test/copy"]) == 0
    assert zoo.status("test/copy", "quick", tmp_path) == "cached"
    assert zoo.main(["train", "test/nothing", "--cache-dir", str(tmp_path)]) == 2
