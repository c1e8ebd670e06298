"""Every numeric flag is checked when it is parsed (issue 29 item 14): a value out of range,
NaN or not a number is one stderr line and exit 2 before anything is loaded; lengths are
checked against the model's context before any example is built; ``--n-examples 0`` is
refused, not replaced by the level's count."""

from __future__ import annotations

import argparse
import importlib
import math

import pytest

from analyses import length_generalization, ngram_heads, pretrained_copy
from analyses.common import Checkpoint
from analyses.zoo import copy as zoo_copy
from models.constructions import HashCopyConfig, save_hash_copy
from models.registry import ARCHS, model_class
from models.train import cli as train_cli
from models.train_config import TrainConfig
from seqprobe import flags
from seqprobe.errors import ConfigError
from tasks.copy import CopyConfig, DupNgramConfig
from tasks.lds import LDSConfig
from tasks.markov import MarkovConfig
from tasks.registry import TASKS, task_class
from tests.hf_fixtures import save_tiny_hf

HUGE = "1000000000"
BAD = {  # CLI module -> bad flags, each refused on its own
    "analyses.ngram_heads": [
        ["--batch-size", HUGE], ["--batch-size", "-1"], ["--batch-size", "1e9"],
        ["--lengths", HUGE], ["--lengths", "1"], ["--lengths", ","], ["--lengths", "5,x"],
        ["--n-max", HUGE], ["--n-max", "0"], ["--draws", HUGE], ["--draws", "0"],
        ["--top-k", "-1"], ["--top-k", "0"], ["--threshold", "nan"], ["--threshold", "2"],
        ["--seed", "-1"], ["--retries", "-1"]],
    "analyses.duplicated_ngrams": [
        ["--batch-size", HUGE], ["--lengths", HUGE], ["--n-examples", "0"],
        ["--n-examples", HUGE], ["--n", "0"], ["--reference-n", "-3"]],
    "analyses.length_generalization": [
        ["--lengths", HUGE], ["--n-examples", "0"], ["--n-examples", "-5"]],
    "analyses.ngram_lookup": [["--n-examples", "0"], ["--lengths", "0"]],
    "analyses.pretrained_copy": [
        ["--n-examples", HUGE], ["--n-examples", "0"], ["--lengths", HUGE], ["--entries", "2"],
        ["--batch-size", "-1"]],
    "analyses.copy_bounds": [["--D", "0"], ["--model-samples", "-1"], ["--n", "0"]],
    "analyses.bc_orthogonality": [["--layer", "-1"], ["--n-seqs", "0"], ["--trajectory", "-1"]],
    "analyses.mamba_decay": [["--n-seqs", "0"]],
    "analyses.markov_ablations": [["--steps", "0"], ["--jobs", "0"], ["--n-seqs", HUGE]],
    "analyses.markov_holdout": [["--seq-len", "0"], ["--n-seqs", "-1"]],
    "analyses.markov_laplace": [["--t-min", "-1"], ["--seq-len", HUGE]],
    "analyses.spectral_lds": [
        ["--T", HUGE], ["--lr", "nan"], ["--radius", "-1"], ["--qs", "0"], ["--qs", "2"],
        ["--qs", "1/0"], ["--seeds", "0"]],
    "analyses.state_probe": [["--alpha", "0"], ["--alpha", "inf"], ["--max-rows", "0"],
                             ["--buckets", "0"]],
    "analyses.stu_induction": [["--seeds", "0"], ["--n-eval", "0"], ["--qs", "nan"],
                               ["--lengths", "0"]],
    "analyses.reproduce.cli": [["--timeout", "nan"], ["--timeout", "-1"], ["--jobs", "0"]],
    "analyses.zoo": [["--jobs", "0"]],
    "analyses.memorization.cli": [
        ["--widths", "0,4"], ["--fractions", "0"], ["--fractions", "1.5"], ["--steps", "0"],
        ["--threshold", "nan"], ["--seeds", "0"], ["--n-examples", HUGE], ["--jobs", "0"]],
}
CASES = [(mod, argv) for mod, bad in BAD.items() for argv in bad]


@pytest.mark.parametrize("module, argv", CASES, ids=[f"{m.split('.')[-1]} {' '.join(a)}"
                                                     for m, a in CASES])
def test_a_bad_numeric_flag_is_one_line_and_exit_2_before_any_work(module, argv, tmp_path,
                                                                    capsys):
    out = tmp_path / "out"
    code = importlib.import_module(module).main([*argv, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2, f"{module} accepted {argv}"
    assert len(err.splitlines()) == 1 and argv[0] in err, err
    assert not out.exists()  # refused before the output directory was made


@pytest.mark.parametrize("text", ["1e9", "-1", "2.5", "", "x", "nan"])
def test_bounded_int_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        flags.bounded_int(0, 100)(text)


def test_the_parsers_read_what_they_allow():
    assert flags.bounded_int(0, 100)(" 7 ") == 7
    assert flags.int_list(1, flags.MAX_LENGTH)("5,10, 20,") == (5, 10, 20)
    assert flags.int_list(1, 9, allow_empty=True)("") == ()
    assert flags.fraction_list(0, 1, open_lo=True)("1/4,0.5,1") == (0.25, 0.5, 1.0)
    alpha = flags.bounded_float(0.0, math.inf, open_lo=True)  # a ridge penalty
    assert flags.bounded_float(0.0, 1.0)("0") == 0.0 and alpha("1e-3") == 1e-3
    for bad in ("inf", "-inf", "nan", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            alpha(bad)
    assert math.isclose(flags.bounded_float(-1, 1)("-1"), -1.0)


def test_n_examples_0_is_refused_and_unset_takes_the_level(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(length_generalization, "load_copy_models",
                        lambda paths, device, archs: ({}, {}, 26))
    monkeypatch.setattr(length_generalization, "compute",
                        lambda models, D, lengths, n, seed, info: seen.append(n) or {})
    args = argparse.Namespace(level="quick", lengths=None, n_examples=None, seed=0, device="cpu")
    length_generalization._compute(args, [Checkpoint("c", "c.pt")])
    args.n_examples = 7
    length_generalization._compute(args, [Checkpoint("c", "c.pt")])
    assert seen == [zoo_copy.LENGTH_GENERALIZATION_LEVELS["quick"].n_examples, 7]


@pytest.fixture(scope="module")
def hash_ckpt(tmp_path_factory):
    return str(save_hash_copy(tmp_path_factory.mktemp("h") / "hash.pt", n=3, D=26, max_len=16))


def test_ngram_heads_refuses_a_batch_beyond_the_attention_budget(hash_ckpt, tmp_path, capsys):
    code = ngram_heads.main([hash_ckpt, "--batch-size", "4096", "--lengths", "4096", "--out",
                             str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "attention entries" in err, err


def test_ngram_heads_refuses_lengths_beyond_a_pretrained_lm_context(tmp_path, capsys):
    hf = save_tiny_hf("gpt_neox", tmp_path)  # 256 positions
    capsys.readouterr()  # what saving it printed
    code = ngram_heads.main([str(hf), "--lengths", "5,200", "--data", "repeat", "--out",
                             str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "beyond" in err and "context of 256" in err and "--lengths" in err


class _Model:
    """What evaluate_point reads of a pretrained LM: its arch and context."""

    arch = "gpt_neox"

    class cfg:  # noqa: N801 - stands in for the model's config object
        n_ctx = 16


def test_pretrained_copy_builds_one_prompt_of_a_point_beyond_the_context():
    built = []

    def build(k):
        built.append(k)
        return [pretrained_copy.Prompt(text="t", answer="a", end="\n", ids=list(range(40)),
                                       expected=[1, 2], budget=4)] * k

    ticks = []
    r, first = pretrained_copy.evaluate_point(_Model(), build, 10**6, 4, ticks.append)
    assert built == [1] and ticks == [10**6]  # the million prompts were never built
    assert r["acc"] is None and "exceed" in r["note"] and r["n"] == 10**6
    assert first.ids == list(range(40))


def test_flags_context_of_bounds_only_position_tables():
    class Cfg:
        n_ctx = 2**31 - 1

    m = type("M", (), {"cfg": Cfg()})()
    assert flags.context_of(m) is None
    Cfg.n_ctx = 64
    assert flags.context_of(m) == 64
    Cfg.is_stateful = True
    assert flags.context_of(m) is None


@pytest.mark.parametrize("build, argv, what", [
    (lambda: CopyConfig(D=10**7), ["--task", "copy", "--D", str(10**7)], "D"),
    (lambda: TrainConfig(lr=1e308), ["--lr", "1e308"], "lr"),
    (lambda: MarkovConfig(seq_len=0), ["--task", "markov", "--seq-len", "0"], "seq_len"),
])
def test_a_config_built_in_code_is_refused_with_the_command_lines_range(build, argv, what,
                                                                        tmp_path, capsys):
    """The field's bound holds however the config is made: in code (seqprobe.flags.Config)
    as on models.train's command line, the same range in both refusals."""
    with pytest.raises(ConfigError, match=f"Config.{what} .* is out of range") as e:
        build()
    in_code = str(e.value).split("out of range: ")[1]
    assert train_cli.main([*argv, "--out", str(tmp_path / "c.pt")]) == 2
    on_line = capsys.readouterr().err.strip()
    assert f"out of range: {in_code}" in on_line, (in_code, on_line)


def test_every_bounded_config_checks_its_bounds_when_built():
    """The registries' config classes and the analyses' settings are seqprobe.flags.Config:
    a subclass's own __post_init__ is wrapped, so the check runs once, before its own."""
    classes = [TrainConfig, *(model_class(a).config_cls for a in ARCHS),
               *(task_class(t).config_cls for t in TASKS)]
    assert [c.__name__ for c in classes if not issubclass(c, flags.Config)] == []
    for cls in (LDSConfig, HashCopyConfig):  # configs no registry finds: bounded, defaults in
        assert issubclass(cls, flags.Config) and flags.unbounded_fields(cls) == [], cls
    with pytest.raises(ConfigError, match="DupNgramConfig.n 0 is out of range"):
        DupNgramConfig(n=0)  # a subclass with its own __post_init__ (checks 2n + 1 <= min_len)
    with pytest.raises(ConfigError, match="LengthGeneralizationSettings.n_examples 0"):
        zoo_copy.LENGTH_GENERALIZATION_LEVELS["quick"].__class__(lengths=(5,), n_examples=0)
