"""RunConfig: typed sections, one canonical form, one hash (its rule in models.train.runconfig);
tests/contract/test_recipe_hashes.py checks that the rule keeps every existing cache key (recorded in
analyses/zoo/catalog.json)."""

import dataclasses
import json

import pytest
import torch

from analyses.zoo.levels import make_run_config
from models.registry import ARCHS, model_class
from models.train.runconfig import FORMAT1_FIELDS, RunConfig
from models.train_config import TrainConfig
from models.transformer import TransformerConfig
from seqprobe.config import config_to_dict, former_names
from seqprobe.errors import InputError
from tasks.copy import CopyConfig
from tasks.registry import TASKS, task_class


def run(**train) -> RunConfig:
    return RunConfig.build("transformer", "copy", {"d_model": 16, "n_layers": 2},
                           {"max_len": 6}, train)


def test_sections_are_typed_and_names_follow_from_them():
    rc = run(steps=7)
    assert isinstance(rc.model, TransformerConfig) and isinstance(rc.task, CopyConfig)
    assert (rc.arch, rc.task_name, rc.train.steps) == ("transformer", "copy", 7)
    with pytest.raises(InputError, match="unknown key"):
        RunConfig.build("transformer", "copy", {"d_modle": 16})
    with pytest.raises(InputError, match="must be a TrainConfig"):
        RunConfig(TransformerConfig(), CopyConfig(), {"steps": 3})
    with pytest.raises(InputError, match="no arch's model config"):
        RunConfig(CopyConfig(), CopyConfig())


def test_every_config_class_names_one_arch_or_task():
    # the names are read back from the config classes, so no two may share one
    assert len({model_class(a).config_cls for a in ARCHS}) == len(ARCHS)
    assert len({task_class(t).config_cls for t in TASKS}) == len(TASKS)


def test_dict_json_and_checkpoint_round_trips():
    rc = run(steps=7, lr=3e-3)
    assert RunConfig.from_dict(rc.to_dict()) == rc
    assert RunConfig.from_dict(json.loads(json.dumps(rc.to_dict()))).hash() == rc.hash()
    ck = {"model": rc.to_dict()["model"], "task": rc.to_dict()["task"],
          "train": {"config": rc.to_dict()["train"], "step": 7, "seed": 0}}
    assert RunConfig.from_checkpoint(ck) == rc
    assert json.loads(rc.to_json()) == rc.canonical()


def test_make_run_config_gives_one_whose_record_has_its_hash():
    run_config = make_run_config("transformer", "copy", "quick", model={"d_model": 16,
                                                                        "n_layers": 1})
    assert isinstance(run_config, RunConfig)
    record = run_config.to_dict()
    # the checkpoint's model entry is the fields the run sets (the task's vocabulary among
    # them), its task entry the whole task config
    assert record["model"]["config"] == run_config.model_dict
    assert {"d_model", "n_layers",
            "vocab_size"} <= set(run_config.model_dict) <= run_config.model_keys
    assert "d_mlp" not in run_config.model_dict  # a default the run does not set
    assert record["task"]["config"] == run_config.task_dict == config_to_dict(run_config.task)
    ck = {"model": record["model"], "task": record["task"], "train": {"config": record["train"]}}
    assert RunConfig.from_checkpoint(ck) == run_config
    assert RunConfig.from_checkpoint(ck).hash() == run_config.hash()


def test_the_one_rule_fields_at_default_are_left_out_unless_pinned():
    rc = run()
    canon = rc.canonical()
    # train: a format-1 field is written at its default, a later one is not
    assert canon["train"]["beta1"] == TrainConfig().beta1
    assert "precision" not in FORMAT1_FIELDS["TrainConfig"]
    assert "precision" not in canon["train"] and "compile" not in canon["train"]
    assert run(precision="bf16").canonical()["train"]["precision"] == "bf16"
    assert run(precision="bf16").hash() != rc.hash()
    # model: the fields the run sets are written even at their defaults; the rest are not
    default_layers = TransformerConfig().n_layers
    pinned = RunConfig.build("transformer", "copy", {"n_layers": default_layers})
    bare = RunConfig(TransformerConfig(), CopyConfig())
    assert pinned.model == bare.model and pinned.hash() != bare.hash()
    assert pinned.canonical()["model"] == {"n_layers": default_layers}
    assert bare.canonical()["model"] == {}
    # a value that differs from the default is always set
    assert "d_model" in RunConfig(TransformerConfig(d_model=16), CopyConfig()).model_keys


def test_a_field_added_later_needs_nothing_to_keep_old_keys(monkeypatch):
    """What adding a TrainConfig field does: the format-1 list does not name it, so at its
    default it is not in the canonical form. Shown by taking a listed field off the list."""
    rc = run()
    trimmed = tuple(f for f in FORMAT1_FIELDS["TrainConfig"] if f != "save_every")
    monkeypatch.setitem(FORMAT1_FIELDS, "TrainConfig", trimmed)
    assert "save_every" not in rc.canonical()["train"]
    assert "save_every" in run(save_every=5).canonical()["train"]


def test_format1_lists_name_fields_that_exist_and_are_pinned():
    """FORMAT1_FIELDS is frozen data (the fields a format-1 hash covered): each class it names
    is still a run's config class, each field it records still exists (else old keys would
    move; a renamed one keeps the name it hashed), and a run at the defaults writes exactly
    those fields. A config class added later has no row and needs none (the next test)."""
    classes = {c.__name__: c for c in [TrainConfig, *(task_class(t).config_cls for t in TASKS)]}
    assert "TrainConfig" in FORMAT1_FIELDS and "CopyConfig" in FORMAT1_FIELDS
    for name, fields in FORMAT1_FIELDS.items():
        assert name in classes, f"{name}: a format-1 class is no run's config (keys would move)"
        # a renamed field keeps its hashed name (its metadata's "was": seqprobe.config)
        have = {f.name for f in dataclasses.fields(classes[name])} | set(
            former_names(classes[name]))
        assert set(fields) <= have, f"{name}: a format-1 field was removed (keys would move)"
        if name != "TrainConfig":
            canon = RunConfig(TransformerConfig(), classes[name]()).canonical()
            assert set(canon["task_config"]) == set(fields), name
    train = RunConfig(TransformerConfig(), CopyConfig()).canonical()["train"]
    assert set(train) == set(FORMAT1_FIELDS["TrainConfig"])


def test_a_config_class_without_a_format1_row_pins_nothing(monkeypatch):
    """What a task added after format 1 gets: no row, so its defaults are left out of the
    hash and the fields it sets are written. Shown by taking a listed class off the list."""
    monkeypatch.delitem(FORMAT1_FIELDS, "CopyConfig")
    assert RunConfig(TransformerConfig(), CopyConfig()).canonical()["task_config"] == {}
    assert run().canonical()["task_config"] == {"max_len": 6}


def test_int_and_float_spellings_are_one_run():
    assert run(lr=1).hash() == run(lr=1.0).hash()
    assert run(lr=1).hash() != run(lr=2).hash()


def test_init_from_is_hashed_by_the_files_bytes(tmp_path):
    a, b, c = tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "c.pt"
    a.write_bytes(b"one")
    b.write_bytes(b"one")
    c.write_bytes(b"two")
    assert run(init_from=str(a)).hash() == run(init_from=str(b)).hash()  # moved: same run
    assert run(init_from=str(a)).hash() != run(init_from=str(c)).hash()  # retrained: another
    assert run(init_from=str(a)).hash() != run().hash()


def test_replace_overrides_sections_and_sets_model_fields():
    rc = run()
    other = rc.replace(model={"n_heads": rc.model.n_heads}, train={"steps": 9})
    assert other.train.steps == 9 and "n_heads" in other.model_keys
    assert config_to_dict(other.task) == config_to_dict(rc.task)


def test_a_loaded_model_names_the_run_that_made_it(tmp_path):
    """RunConfig.of(m): a trained checkpoint's model gives its RunConfig's hash (the cache key);
    a model built in code gives its whole config; one without a task is refused."""
    import models
    from models.train.loop import train

    run_config = make_run_config("transformer", "copy", "quick", model={"d_model": 16,
                                                                        "n_layers": 1},
                     task_config={"max_len": 6}, train={"steps": 2, "eval_every": 0})
    train(run_config, tmp_path / "m.pt", "cpu", progress=False)
    m = models.load(tmp_path / "m.pt")
    # the record holds what the CPU used ("auto" resolved), which keys as the RunConfig did
    assert RunConfig.of(m).hash() == run_config.hash()
    assert RunConfig.of(m) == run_config.resolved(torch.device("cpu"))
    scratch = models.build_model("transformer", {"vocab_size": 30, "d_model": 16})
    with pytest.raises(InputError, match="without a task"):
        RunConfig.of(scratch)
    scratch.set_task("copy", {"D": 26})
    rc = RunConfig.of(scratch)
    assert rc.model == scratch.config and rc.train == TrainConfig()
    assert RunConfig.of(models.load(scratch.save(tmp_path / "s.pt"))) == rc
