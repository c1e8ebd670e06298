"""A run record is exact (issue 39 items 1 and 4): over generated ``RunConfig`` dicts, an unknown
key at any level, a value of the wrong type and a duplicated JSON key are refused with one
suite error naming the key; every dict that is accepted round-trips (``from_dict(to_dict(x))``,
and through JSON) to the same hash."""

from __future__ import annotations

import copy
import dataclasses
import json
import typing

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from models.registry import model_class
from models.train.runconfig import RunConfig
from models.train_config import TrainConfig
from seqprobe.errors import ConfigError, InputError, SeqprobeError
from tasks.registry import task_class

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# small, valid records of three archs and three tasks (to_dict form)
BASES = [
    RunConfig.build("lstm", "copy", {"d_model": 8, "n_layers": 1, "vocab_size": 30},
                    {"D": 26, "min_len": 1, "max_len": 6}, {"steps": 5}).to_dict(),
    RunConfig.build("transformer", "lookup", {"d_model": 16, "n_heads": 2, "vocab_size": 40},
                    {}, {"steps": 7, "lr": 3e-3, "seed": 2}).to_dict(),
    RunConfig.build("mamba2", "markov", {"d_model": 8, "vocab_size": 2}, {"seq_len": 32},
                    {"schedule": "cosine", "eval_every": 0}).to_dict(),
]
TRAIN_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig) if f.init}
HINTS = typing.get_type_hints(TrainConfig)


def _section_fields(base: dict, where: str) -> dict[str, type]:
    """The annotated fields of one config section of ``base`` (``model``/``task``/``train``)."""
    cls = {"model": lambda: model_class(base["model"]["arch"]).config_cls,
           "task": lambda: task_class(base["task"]["name"]).config_cls,
           "train": lambda: TrainConfig}[where]()
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _config(record: dict, where: str) -> dict:
    return record["train"] if where == "train" else record[where]["config"]


# ---------------------------------------------------------------------------- values
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)


def wrong_for(tp) -> st.SearchStrategy:
    """Values that are not of annotation ``tp`` (bool is not an int here, nor an int a bool)."""
    texts = st.text(max_size=6)
    lists = st.lists(st.integers(), min_size=1, max_size=2)
    if tp is bool:
        return st.one_of(st.integers(), texts, st.none(), lists)
    if tp is int:
        return st.one_of(st.booleans(), texts, st.none(), lists,
                         st.floats(allow_nan=False).filter(lambda v: v != int(v)
                                                          if v == v and abs(v) < 1e300 else True))
    if tp is float:
        return st.one_of(st.booleans(), texts, st.none(), lists)
    if tp is str:
        return st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), lists)
    if typing.get_origin(tp) is tuple:
        return st.one_of(texts, st.integers(), st.dictionaries(texts, st.integers(), max_size=1))
    args = typing.get_args(tp)
    if bool in args and str in args:  # compile: bool | str
        return st.one_of(st.integers(), st.floats(allow_nan=False), st.none(), lists)
    if float in args and type(None) in args:  # float | None
        return st.one_of(texts, st.booleans(), lists)
    return st.nothing()


def _ok_or_refused(record) -> RunConfig | None:
    """The run, or None when it is refused with a suite error (anything else fails the test)."""
    try:
        return RunConfig.from_dict(record)
    except SeqprobeError as e:
        assert len(str(e).splitlines()) == 1, str(e)
        return None


# ---------------------------------------------------------------------------- properties
@FAST
@given(base=st.sampled_from(BASES), data=st.data())
def test_an_unknown_key_at_any_level_is_refused_naming_it(base, data):
    record = copy.deepcopy(base)
    where = data.draw(st.sampled_from(["record", "model", "task", "model.config", "task.config",
                                       "train"]))
    target = {"record": record, "model": record["model"], "task": record["task"],
              "model.config": record["model"]["config"],
              "task.config": record["task"]["config"], "train": record["train"]}[where]
    allowed = {"record": {"model", "task", "train"}, "model": {"arch", "config"},
               "task": {"name", "config"},
               "model.config": set(_section_fields(base, "model")),
               "task.config": set(_section_fields(base, "task")),
               "train": set(TRAIN_FIELDS)}[where]
    key = data.draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in allowed))
    target[key] = data.draw(json_value)
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict(record)
    assert repr(key) in str(e.value) and len(str(e.value).splitlines()) == 1


@FAST
@given(base=st.sampled_from(BASES), data=st.data())
def test_a_value_of_the_wrong_type_is_refused(base, data):
    record = copy.deepcopy(base)
    where = data.draw(st.sampled_from(["model", "task", "train", "section"]))
    if where == "section":  # a whole section that is not a dict
        part = data.draw(st.sampled_from(["model", "task", "train", "model.config",
                                          "task.config"]))
        bad = data.draw(st.one_of(st.text(max_size=5), st.integers(), st.lists(st.integers(),
                                                                              max_size=2)))
        if part in ("model", "task", "train"):
            record[part] = bad
        else:
            record[part.split(".")[0]]["config"] = bad
    else:
        fields = _section_fields(base, where)
        name = data.draw(st.sampled_from(sorted(fields)))
        strategy = wrong_for(fields[name])
        if strategy.is_empty:
            return
        _config(record, where)[name] = data.draw(strategy)
    with pytest.raises(InputError) as e:
        RunConfig.from_dict(record)
    assert len(str(e.value).splitlines()) == 1


def _dumps_with_duplicate(obj, path: tuple, key: str, value) -> str:
    """JSON text of ``obj`` in which the object at ``path`` names ``key`` twice (the second
    time with ``value``)."""
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            inner = path[1:] if path and path[0] == k else (None,)  # (None,): no duplicate
            items.append(f"{json.dumps(k)}: {_dumps_with_duplicate(v, inner, key, value)}")
        if path == ():
            items.append(f"{json.dumps(key)}: {json.dumps(value)}")
        return "{" + ", ".join(items) + "}"
    return json.dumps(obj)


@FAST
@given(base=st.sampled_from(BASES), data=st.data())
def test_a_duplicated_json_key_is_refused_naming_it(base, data):
    path = data.draw(st.sampled_from([(), ("model",), ("task",), ("model", "config"),
                                      ("task", "config"), ("train",)]))
    obj = base
    for p in path:
        obj = obj[p]
    if not obj:
        return
    key = data.draw(st.sampled_from(sorted(obj)))
    # the same value again is refused too: JSON cannot say which of two was meant
    value = data.draw(st.one_of(st.just(obj[key]), json_scalar))
    text = _dumps_with_duplicate(base, path, key, value)
    with pytest.raises(ConfigError, match="duplicate key") as e:
        RunConfig.from_json(text)
    assert repr(key) in str(e.value)
    assert RunConfig.from_json(json.dumps(base)).hash() == RunConfig.from_dict(base).hash()


train_values = {
    "steps": st.integers(1, 10**6), "batch_size": st.integers(1, 512),
    "lr": st.floats(1e-6, 1.0), "weight_decay": st.floats(0, 1), "beta1": st.floats(0, 0.99),
    "beta2": st.floats(0, 0.999), "warmup_steps": st.integers(0, 10**4),
    "schedule": st.sampled_from(["linear", "cosine", "constant"]),
    "grad_clip": st.floats(0, 10), "context": st.sampled_from([0, 64, 128]),
    "eval_every": st.integers(0, 500), "stop_at": st.sampled_from([0.0, 0.5, 0.9, 1]),
    "eval_batches": st.integers(1, 8), "eval_batch_size": st.integers(1, 128),
    "greedy_eval": st.booleans(), "save_every": st.integers(0, 100),
    "seed": st.integers(0, 2**63 - 1), "device_type": st.sampled_from(["auto", "cpu", "cuda"]),
    "precision": st.sampled_from(["auto", "fp32", "bf16"]),
    "compile": st.sampled_from([True, False, "auto"]), "checkpoint_blocks": st.booleans(),
    "micro_batch": st.integers(0, 16),
    # out of range or of another type, so that refusals are drawn too
    "bad": st.fixed_dictionaries({}, optional={
        "seed": st.integers(-5, -1) | st.just(2**64), "lr": st.just(1e308) | st.just(0.0),
        "steps": st.just(10**21), "eval_batches": st.just(10**11), "stop_at": st.just(2.0)}),
}


@FAST
@given(base=st.sampled_from(BASES), data=st.data())
def test_every_accepted_record_round_trips_to_the_same_hash(base, data):
    record = copy.deepcopy(base)
    names = data.draw(st.lists(st.sampled_from(sorted(set(train_values) - {"bad"})),
                               unique=True, max_size=8))
    for name in names:
        record["train"][name] = data.draw(train_values[name])
    if data.draw(st.booleans()):
        record["train"].update(data.draw(train_values["bad"]))
    if data.draw(st.booleans()):
        del record["train"]  # a record without training: the default one
    run = _ok_or_refused(record)
    event("refused" if run is None else "accepted")
    if run is None:
        return
    again = RunConfig.from_dict(run.to_dict())
    assert again == run and again.hash() == run.hash()
    assert RunConfig.from_json(json.dumps(run.to_dict())).hash() == run.hash()


# ---------------------------------------------------------------------------- the API's errors
def test_the_api_refuses_with_the_suites_error_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="train must be a dict, got str 'abc'"):
        RunConfig.from_dict(train="abc")
    with pytest.raises(ConfigError, match="train must be a dict"):
        RunConfig.from_dict({**BASES[0], "train": "abc"})
    with pytest.raises(ConfigError, match=r"unknown key 'trian' \(did you mean 'train'\?\)"):
        RunConfig.from_dict({**BASES[0], "trian": {"steps": 3}})
    with pytest.raises(ConfigError, match=r"unknown key 'confg' \(did you mean 'config'\?\)"):
        RunConfig.from_dict({**BASES[0], "model": {"arch": "lstm", "confg": {}}})
    with pytest.raises(ConfigError, match=r"\['stpes'\] \(did you mean 'steps'\?\)"):
        RunConfig.from_dict({**BASES[0], "train": {"stpes": 3}})
    run = RunConfig.from_dict(BASES[0]).replace(train={"init_from": str(tmp_path / "gone.pt")})
    with pytest.raises(InputError, match="init_from .*gone.pt: cannot read it"):
        run.hash()
    with pytest.raises(ConfigError, match="duplicate key 'steps'"):
        RunConfig.from_json(json.dumps(BASES[0])[:-2] + ', "steps": 9}}')
    with pytest.raises(ConfigError, match="NaN is not a JSON number"):
        RunConfig.from_json(json.dumps(BASES[0]).replace('"lr": 0.001', '"lr": NaN'))
