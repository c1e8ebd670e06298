"""One level flag (seqprobe.cli): ``--level LEVEL``, the one spelling ``--help`` shows and the
docs write; the older ones (``--scale``, ``--quick`` / ``--medium`` / ``--large`` / ``--paper``,
``--train LEVEL`` and ``models.train``'s ``--preset``) are still read, as hidden aliases, so old
command lines keep working."""

import pytest

from analyses import zoo
from analyses.zoo import copy as zoo_copy
from models.train.cli import build_parser
from seqprobe.cli import OneLineParser, add_level_arguments, add_level_flag
from seqprobe.errors import ConfigError


def parse(argv, train=True):
    p = OneLineParser(prog="t")
    (add_level_arguments if train else add_level_flag)(p)
    p.add_argument("checkpoints", nargs="*")
    return p.parse_args(argv)


def test_help_shows_one_spelling_of_the_level():
    p = OneLineParser(prog="t")
    add_level_arguments(p)
    text = p.format_help()
    assert "--level LEVEL" in text
    for old in ("--scale", "--quick", "--medium", "--large", "--paper"):
        assert old not in text, old
    assert "--preset" not in build_parser("transformer", "copy")[0].format_help()


@pytest.mark.parametrize(("argv", "level"), [
    ([], "quick"), (["--level", "large"], "large"), (["--scale", "medium"], "medium"), (["--medium"], "medium"),
    (["--paper"], "paper"), (["--quick"], "quick"), (["--scale", "paper"], "paper")])
def test_every_spelling_of_a_scale_is_one_value(argv, level):
    assert parse(argv, train=False).level == level
    args = parse(argv)
    assert (args.level, args.train) == (level, None)


@pytest.mark.parametrize(("argv", "level"), [
    (["--train", "quick"], "quick"), (["--train", "paper"], "paper"),
    (["--medium", "--train"], "medium"), (["--scale", "medium", "--train"], "medium"),
    (["--medium", "--train", "medium"], "medium"), (["--train"], "quick"),
    (["--train", "medium", "--medium"], "medium")])
def test_train_trains_at_the_scale(argv, level):
    args = parse(argv)
    assert (args.level, args.train) == (level, level)


@pytest.mark.parametrize(("argv", "match"), [
    (["--paper", "--train", "quick"], "name two levels"),
    (["--train", "huge"], "--train takes a level"),
    (["--scale", "huge"], "invalid choice"),
    (["--medium", "--paper"], "not allowed with"),
    (["--scale", "paper", "--quick"], "not allowed with")])
def test_two_scales_or_an_unknown_one_are_refused(argv, match):
    with pytest.raises(ConfigError, match=match):
        parse(argv)


def test_a_checkpoint_after_train_is_a_clear_error_and_before_it_works():
    with pytest.raises(ConfigError, match="a checkpoint goes before --train"):
        parse(["--train", "ckpt.pt"])
    args = parse(["ckpt.pt", "--train"])
    assert (args.checkpoints, args.train) == (["ckpt.pt"], "quick")


def test_models_train_keeps_level_as_a_spelling_of_the_scale():
    p, _ = build_parser("transformer", "copy")
    assert p.parse_args(["--preset", "paper"]).level == "paper"
    assert p.parse_args(["--scale", "medium"]).level == "medium"
    assert p.parse_args(["--paper"]).level == "paper"
    assert p.parse_args([]).level == "quick"


def test_the_zoo_takes_the_scale_between_names(tmp_path, capsys):
    name = zoo_copy.copy_medium_name("rope", 4, 0, 1e-3)
    assert zoo.main(["--list", "--level", "medium", name, "--cache-dir", str(tmp_path)]) == 0
    assert "missing" in capsys.readouterr().out
    # quick: none, and --list lists only what exists at the level asked for (issue 37)
    assert zoo.main(["--list", name, "--cache-dir", str(tmp_path)]) == 2
    assert "has a quick version; their levels: medium" in capsys.readouterr().err
