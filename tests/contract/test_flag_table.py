"""One bound for every numeric flag of every command: each command's parser is built and every
numeric flag's type must be a bound's parser, so a flag added without a bound fails here. An
analysis' flag is made from a field of its settings dataclass (``seqprobe.cli.add_fields``:
the field's bound, checked again when the settings are built); another command's flag is a
row of ``seqprobe.flags.BOUNDS`` (``seqprobe.flags.flag(row)``). ``python -m models.train``'s
per-field flags take each config field's own bound (its metadata, ``seqprobe.flags.bound``):
every numeric field of every config class the registries find has one, checked for every
arch and task, so a new architecture's or task's field without one fails here, naming the
class and the field. ``models.train.launch`` bounds ``--nproc_per_node`` by the machine
before spawning anything."""

from __future__ import annotations

from tests import ROOT_DIR

import argparse
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

import models.train.launch as launcher
from models.registry import ARCHS, model_class
from models.train import cli as train_cli
from models.train_config import TrainConfig
from seqprobe import flags
from tasks.registry import TASKS, task_class

ROOT = ROOT_DIR
PACKAGES = ("analyses", "models", "bench", "probes", "tasks")
FIX = ("declare it as a bounded field of the command's settings dataclass and add its flag with "
       "seqprobe.cli.add_fields (a command that is not an analysis: type=seqprobe.flags.flag(ROW) "
       "and a row in seqprobe.flags.BOUNDS)")
FIX_FIELD = "give the config field metadata=seqprobe.flags.bound(LO, HI, why)"


def cli_modules() -> list[str]:
    """Every module run as a command: ``if __name__ == "__main__"`` in it, or the module whose
    ``main`` a package's ``__main__.py`` imports."""
    found = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text()
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if path.name == "__main__.py":
                m = re.search(r"^from (\S+) import main", text, re.M)
                if m:
                    found.add(m.group(1))
                    continue
            if '__name__ == "__main__"' in text and "def main(" in text:
                found.add(module)
    return sorted(found - {"models.train.cli", "models.train.launch"})  # checked below


class Captured(BaseException):  # a BaseException: no command's error handling catches it
    pass


def parsers_of(module: str, monkeypatch) -> list[argparse.ArgumentParser]:
    """The parser(s) ``module.main`` builds, captured when it parses (nothing runs)."""
    seen: list[argparse.ArgumentParser] = []

    def capture(self, *args, **kwargs):
        seen.append(self)
        raise Captured

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_intermixed_args", capture)
    main = importlib.import_module(module).main
    with pytest.raises(Captured):
        main([])
    out, todo = [], list(seen)
    while todo:  # sub-commands' parsers too
        p = todo.pop()
        out.append(p)
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo.extend(a.choices.values())
    return out


def unbounded(parser: argparse.ArgumentParser, where: str, fields: bool = False) -> list[str]:
    """The numeric flags of ``parser`` whose type is not a row of the table (with ``fields``:
    nor a config field's bound, models.train's flags), each with why."""
    bad = []
    for a in parser._actions:
        name = "/".join(a.option_strings) or a.dest
        row = getattr(a.type, "row", None)
        if row is not None:
            flag = row.split()[-1]  # "COMMAND --flag" rows: a command's own meaning
            owner = getattr(a.type, "settings_field", None)  # a settings field's flag (add_fields)
            known = (row in flags.BOUNDS or (fields and a.type.bound.kind in flags.KINDS)
                     or (owner is not None and a.type.bound == flags.field_bound(*owner)))
            if not known or flag not in a.option_strings:
                bad.append(f"{where} {name}: row {row!r} is not this flag's row")
        elif a.type in (int, float) or (a.type is not None and a.type not in (str, Path)):
            bad.append(f"{where} {name}: type {getattr(a.type, '__name__', a.type)} is not "
                       "bounded")
        elif (a.type is None and isinstance(a, argparse._StoreAction)
              and isinstance(a.default, (int, float)) and not isinstance(a.default, bool)):
            bad.append(f"{where} {name}: a number (default {a.default!r}) read as text")
    return bad


def test_every_numeric_flag_of_every_command_is_a_row_of_the_table(monkeypatch):
    modules = cli_modules()
    assert {"analyses.ngram_heads", "analyses.reproduce.cli", "analyses.zoo",
            "bench.step_costs"} <= set(modules), modules
    bad, used, settings = [], set(), set()
    for module in modules:
        for parser in parsers_of(module, monkeypatch):
            bad += unbounded(parser, module)
            made = [a.type.settings_field for a in parser._actions
                    if hasattr(a.type, "settings_field")]
            used |= {a.type.row for a in parser._actions
                     if hasattr(a.type, "row") and not hasattr(a.type, "settings_field")}
            settings |= {cls for cls, _ in made}
    assert not bad, f"unbounded numeric flags ({FIX}):\n" + "\n".join(bad)
    # the settings classes the analyses' flags are made from: every number bounded, each
    # checked when built (seqprobe.flags.Config)
    assert len(settings) >= 5, settings
    bad = [line for cls in settings for line in flags.unbounded_fields(cls)]
    bad += [f"{cls.__qualname__} is not a seqprobe.flags.Config" for cls in settings
            if not issubclass(cls, flags.Config)]
    assert not bad, "settings fields:\n" + "\n".join(bad)
    # the launcher's bound is a row too (its parser is torchrun's: test_launch_bounds_nproc);
    # models.train's flags are config fields, whose bounds are the fields' own (below)
    used.add("--nproc_per_node")
    assert not set(flags.BOUNDS) - used, f"rows no command uses: {set(flags.BOUNDS) - used}"


def config_classes() -> dict[str, type]:
    """Every config class a run is made of, found by the registries: the training config,
    each arch's model config and each task's config."""
    return {"TrainConfig": TrainConfig,
            **{model_class(a).config_cls.__name__: model_class(a).config_cls for a in ARCHS},
            **{task_class(t).config_cls.__name__: task_class(t).config_cls for t in TASKS}}


def test_every_numeric_config_field_carries_its_bound():
    classes = config_classes()
    assert {"TrainConfig", "TransformerConfig", "CopyConfig"} <= set(classes)
    bad = [line for cls in classes.values() for line in flags.unbounded_fields(cls)]
    assert not bad, "numeric config fields without a bound:\n" + "\n".join(bad)


def test_a_numeric_field_without_a_bound_fails_where_it_is_defined():
    """The check above can fail: it names the class, the field and the metadata to add; a
    subclass that changes a default keeps its base's bound; a default out of range fails."""

    @dataclasses.dataclass(frozen=True)
    class WidgetConfig:
        width: int = dataclasses.field(default=8, metadata=flags.bound(1, 64, "a width"))
        ratio: float = 0.5
        sizes: tuple[int, ...] = ()
        name: str = "w"
        on: bool = True
        bias: float | None = dataclasses.field(default=None,
                                               metadata=flags.bound(-1.0, 1.0, "a bias"))

    bad = flags.unbounded_fields(WidgetConfig)
    assert [b.split(" ")[0] for b in bad] == [f"{__name__}.{WidgetConfig.__qualname__}.ratio",
                                              f"{__name__}.{WidgetConfig.__qualname__}.sizes"]
    assert "field(default=0.5, metadata=bound(LO, HI" in bad[0] and "seqprobe.flags" in bad[0]

    @dataclasses.dataclass(frozen=True)
    class NarrowConfig(WidgetConfig):
        width: int = 16  # a new default: the base's bound still holds
        ratio: float = dataclasses.field(default=2.0, metadata=flags.bound(0.0, 1.0, "a share"))
        sizes: tuple[int, ...] = dataclasses.field(default=(), metadata=flags.bound(1, 9, "n"))

    assert flags.field_bound(NarrowConfig, "width") == flags.Bound("int", 1, 64, "a width")
    assert flags.field_bound(NarrowConfig, "sizes").kind == "ints"
    assert flags.field_bound(NarrowConfig, "bias").kind == "float"
    assert [b.split(" is out")[0] for b in flags.unbounded_fields(NarrowConfig)] == [
        f"{__name__}.{NarrowConfig.__qualname__}.ratio's default 2.0"]


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_numeric_field_flag_of_models_train_is_bounded(arch):
    for task in sorted(TASKS):
        parser, owners = train_cli.build_parser(arch, task)
        cls = {"train": TrainConfig, "model": model_class(arch).config_cls,
               "task": task_class(task).config_cls}
        by_dest = {a.dest: a for a in parser._actions}
        for dest, (part, name, tp) in owners.items():
            if train_cli.is_numeric(tp):
                parse = by_dest[dest].type
                assert getattr(parse, "row", None) == f"--{part}.{name}", (
                    f"models.train --{part}.{name} ({arch}, {task}) is unbounded: {FIX_FIELD}")
                assert parse.bound == flags.field_bound(cls[part], name)
        assert not unbounded(parser, f"models.train ({arch}, {task})", fields=True)


def test_a_flag_without_a_row_fails_here(monkeypatch):
    """The check above can fail: a parser with an int flag, or a number read as text."""
    p = argparse.ArgumentParser()
    p.add_argument("--widgets", type=int)
    p.add_argument("--ratio", default=0.5)
    p.add_argument("--seed", type=flags.flag("--seed"))
    p.add_argument("--jobs", type=flags.flag("--seed"))
    assert [b.split(":")[0] for b in unbounded(p, "x")] == ["x --widgets", "x --ratio",
                                                             "x --jobs"]
    with pytest.raises(KeyError, match="seqprobe.flags.BOUNDS"):
        flags.flag("--widgets")


@pytest.mark.parametrize("argv, phrase", [
    (["--lr", "1e308"], "--train.lr: 1e308 is out of range"),
    (["--seed", str(2**64)], "--train.seed: 18446744073709551616 is out of range"),
    (["--seed", "-1"], "--train.seed: -1 is out of range"),
    (["--D", "1000000000"], "--task.D: 1000000000 is out of range"),
    (["--steps", "1e21"], "--train.steps: '1e21' is not an integer"),
    (["--steps", str(10**21)], "--train.steps: 1000000000000000000000 is out of range"),
    (["--warmup-steps", str(10**20)], "--train.warmup_steps: 100000000000000000000 is out"),
    (["--eval-batches", str(10**11)], "--train.eval_batches: 100000000000 is out of range"),
])
def test_models_train_refuses_the_issues_flags_in_one_line(argv, phrase, tmp_path, capsys):
    out = tmp_path / "ckpt.pt"
    assert train_cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and phrase in err, err
    assert not out.exists()


@pytest.mark.parametrize("nproc, phrase", [
    ("100000", "must be 1..1024"), ("0", "must be 1..1024"), ("-2", "must be 1..1024"),
    ("two", "'two' is not an integer"), ("3", "this machine has 2 CPU cores")])
def test_launch_bounds_nproc_before_spawning(nproc, phrase, monkeypatch, capsys):
    monkeypatch.setattr(launcher, "machine_slots", lambda: (2, "CPU cores"))
    spawned = []
    monkeypatch.setattr(launcher.torchrun, "run", spawned.append)
    assert launcher.main(["--nproc_per_node", nproc, "-m", "models.train"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--nproc_per_node" in err and phrase in err, err
    assert not spawned
    for ok in ("2", "auto"):  # within the machine: torchrun runs
        assert launcher.main(["--nproc_per_node", ok, "-m", "models.train"]) == 0
    assert len(spawned) == 2
