"""One exception tree (seqprobe/errors.py): every exception class the packages define derives from
SeqprobeError, and the CLIs turn each into one stderr line and the right exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import models.train.cli as train_cli
from seqprobe.cli import EXIT_BAD_INPUT, EXIT_FAILED, run_cli
from seqprobe.errors import CheckpointError, ConfigError, InputError, RunError, SeqprobeError

PACKAGES = ("seqprobe", "tasks", "models", "probes", "analyses", "figures", "bench")
# Not errors: Ctrl-C and SIGTERM between two training steps or during an evaluation. A
# KeyboardInterrupt on purpose, so that no `except Exception` (a sweep's retry, a CLI's one line)
# swallows the user's stop.
NOT_ERRORS = {"models.train.loop.TrainingInterrupted",
              "models.train.evaluation.EvaluationStopped"}


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names = [pkg] + [m.name for m in pkgutil.walk_packages(mod.__path__, f"{pkg}.")
                         if not m.name.endswith("__main__")]
        for name in names:
            for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == name:
                    found[f"{name}.{cls.__qualname__}"] = cls
    return found


CLASSES = _exception_classes()
# warnings (a compile that fell back to eager) are Exception subclasses but never raised as errors
ERRORS = {k: v for k, v in CLASSES.items() if k not in NOT_ERRORS and not issubclass(v, Warning)}


def test_every_exception_class_of_the_packages_is_a_seqprobe_error():
    assert {"seqprobe.errors.SeqprobeError", "models.hf.HFError", "models.hf.export_map.ExportError",
            "models.train.loop.TrainingDiverged", "seqprobe.sweep.CommandFailed"} <= set(CLASSES)
    assert NOT_ERRORS <= set(CLASSES)  # an entry there that no longer exists is removed
    outside = sorted(k for k, cls in ERRORS.items() if not issubclass(cls, SeqprobeError))
    assert outside == []


def test_the_old_catches_still_hold():
    """``except InputError`` / ``except ValueError`` callers still catch what they caught."""
    assert issubclass(CheckpointError, InputError) and issubclass(ConfigError, ValueError)
    assert not issubclass(RunError, InputError) and issubclass(RunError, RuntimeError)


def _instance(cls: type[BaseException], message: str) -> BaseException:
    try:
        return cls(message)
    except TypeError:  # a constructor with fields of its own (CommandFailed's returncode)
        e = cls.__new__(cls)
        BaseException.__init__(e, message)
        return e


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_a_cli_prints_one_line_for_each(name, capsys):
    cls = ERRORS[name]
    e = _instance(cls, f"{name} went wrong")

    def body(argv):
        raise e

    code = run_cli(body, [])
    err = capsys.readouterr().err
    assert err == f"error: {name} went wrong\n"
    assert code == (EXIT_BAD_INPUT if issubclass(cls, InputError) else EXIT_FAILED)


@pytest.mark.parametrize("cls, code", [(ConfigError, EXIT_BAD_INPUT), (RunError, EXIT_FAILED)])
def test_the_train_cli_prints_one_line_too(cls, code, tmp_path, monkeypatch, capsys):
    def train(*args, **kwargs):
        raise cls("it went wrong")

    monkeypatch.setattr(train_cli, "train", train)
    argv = ["--task", "copy", "--arch", "lstm", "--out", str(tmp_path / "c.pt"),
            "--no-progress", "--steps", "1"]
    assert train_cli.main(argv) == code
    assert capsys.readouterr().err.splitlines()[-1] == "error: it went wrong"
