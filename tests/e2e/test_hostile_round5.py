"""Reliability, fifth round (issue 48): each failure a hostile user found, reproduced, now one
clear line and a non-zero exit (or the right answer). The cache's folder-independence and the
FIFO / /dev/zero records are in tests/e2e/test_cache_anywhere.py, bench.gpu_check's in
tests/e2e/test_gpu_check.py."""

from __future__ import annotations

from tests import ROOT_DIR

import json
from pathlib import Path

import pytest

from analyses import zoo
from analyses.reproduce import seeds
from seqprobe.errors import InputError


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# ---------------------------------------------------------------------------- failure 7
@pytest.mark.parametrize("text", ["²", "٣", "1²", "abc", "-1", "1001"])
def test_a_bad_seed_offset_is_one_line_not_a_traceback(monkeypatch, capsys, text):
    monkeypatch.setenv(zoo.SEED_OFFSET_ENV, text)
    with pytest.raises(InputError, match="SEQPROBE_SEED_OFFSET"):
        zoo.seed_offset()
    for argv in (["--list", "copy/"], ["path", "copy/rope"]):
        assert zoo.main(argv) == 2
        line = _one_line(capsys)  # not every recipe "invalid" / "not trained"
        assert "SEQPROBE_SEED_OFFSET" in line and "not trained" not in line


# ---------------------------------------------------------------------------- failure 8
def _run_folder(tmp_path: Path, name: str, mean: float, level="quick", offset=None) -> Path:
    out = tmp_path / name
    out.mkdir()
    (out / "mamba_decay.json").write_text(json.dumps({"models": [
        {"label": "markov/mamba2", "mean": mean}]}))
    timings = {"level": level, **({} if offset is None else {"seed_offset": offset})}
    (out / "reproduce_timings.json").write_text(json.dumps(timings))
    return out


def test_seeds_refuses_one_run_counted_twice(tmp_path, capsys, monkeypatch):
    a = _run_folder(tmp_path, "s0", 0.99)
    monkeypatch.chdir(tmp_path)
    for argv in ([str(a), str(a)], [str(a), "s0/"], [str(a), "./s0"]):
        assert seeds.main(argv) == 2
        assert "same folder" in _one_line(capsys)
    (tmp_path / "link").symlink_to(a)
    assert seeds.main([str(a), "link"]) == 2
    assert "same folder" in _one_line(capsys)


def test_seeds_reads_each_folders_level_and_seed_offset(tmp_path, capsys):
    a = _run_folder(tmp_path, "a", 0.99, offset=0)
    b = _run_folder(tmp_path, "b", 0.97, offset=0)  # a copy of the same seeds' run
    assert seeds.main([str(a), str(b)]) == 2
    assert "both runs of seed offset 0" in _one_line(capsys)
    c = _run_folder(tmp_path, "c", 0.97, level="medium", offset=1)
    assert seeds.main([str(a), str(c)]) == 2
    assert "different levels" in _one_line(capsys)
    d = _run_folder(tmp_path, "d", 0.97, offset=3)
    assert seeds.main([str(a), str(d)]) == 0
    out = capsys.readouterr().out
    assert "seed offset 0 | seed offset 3" in out and "| yes |" in out


def test_seeds_refuses_a_folder_without_results(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert seeds.main([str(tmp_path / "empty")]) == 2
    assert "no analysis results" in _one_line(capsys)


def test_seeds_md_that_cannot_be_written_is_one_line_before_reading(tmp_path, capsys):
    a = _run_folder(tmp_path, "a", 0.99, offset=0)
    blocker = tmp_path / "file"
    blocker.write_text("")
    for md in (a, blocker / "t.md"):  # `seeds D --md D`; a folder that is a file
        assert seeds.main([str(a), "--md", str(md)]) == 2
        assert "--md" in _one_line(capsys)
    assert sorted(p.name for p in a.iterdir()) == ["mamba_decay.json", "reproduce_timings.json"]


def test_training_under_an_address_space_limit_is_refused_in_one_line(tmp_path):
    """`ulimit -v` bounds the process whatever the RAM: the training size check reads it (as
    the evaluation's does), not the machine's total, so in-range length x batch is one line,
    not an allocator traceback."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    root = ROOT_DIR
    done = subprocess.run(
        [sys.executable, "-m", "models.train", "--task", "copy", "--arch", "transformer",
         "--steps", "2", "--batch_size", "4096", "--max_len", "512", "--no-progress",
         "--out", str(tmp_path / "x.pt")], cwd=root, preexec_fn=limit, capture_output=True,
        text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "needs at least" in err[0] and "ulimit -v" in err[0]
    assert not (tmp_path / "x.pt").exists()


def test_reproduce_out_that_cannot_be_created_or_indexed_is_one_line(tmp_path, monkeypatch,
                                                                     capsys):
    """`--out` under /proc or /sys passed the writability check and was a mkdir traceback;
    `--index-only --out /nonexistent` created it and indexed 15 FAILED with exit 0."""
    from analyses.reproduce import cli as reproduce_cli

    monkeypatch.chdir(tmp_path)
    for out in ("/proc/nope/x", "/sys/x"):
        for extra in ([], ["--index-only"]):
            assert reproduce_cli.main(["--only", "spectral_lds", "--out", out, *extra]) == 2
            assert "--out" in _one_line(capsys)
    for out in (tmp_path / "nowhere", tmp_path):  # missing; a folder with no results
        assert reproduce_cli.main(["--index-only", "--out", str(out)]) == 2
        assert "no analysis results" in _one_line(capsys)
    assert not (tmp_path / "nowhere").exists()


# ---------------------------------------------------------------------------- failure 6
def test_the_loader_reads_no_plugin_and_says_how_to_open_a_zoo_name(monkeypatch, tmp_path):
    """models.load once reached the zoo (a layer above) through an entry point, which a
    second installed package could claim; it now reads none: a zoo name goes through the
    resolver the zoo registers when imported (models.loading), or, with none registered, is
    one line naming the call that opens it."""
    import importlib.metadata

    import models
    from models import loading
    from seqprobe.errors import CheckpointError, InputError

    def no_plugins(**kw):
        raise AssertionError(f"the loader read entry points {kw}")

    monkeypatch.setattr(importlib.metadata, "entry_points", no_plugins)
    monkeypatch.setenv("SEQPROBE_CACHE", str(tmp_path))  # an empty cache: not trained
    with pytest.raises(InputError, match="not trained") as e:
        models.load("zoo:copy/rope")  # the zoo is imported here: its resolver answers
    assert "\n" not in str(e.value).strip()
    monkeypatch.setattr(loading, "NAME_RESOLVERS", {})  # a session that never imported the zoo
    with pytest.raises(CheckpointError, match=r"zoo.path\('copy/rope'\)"):
        models.load("zoo:copy/rope")


# ---------------------------------------------------------------------------- failure 4
@pytest.mark.parametrize("D", [60, 40])
def test_a_checkpoint_whose_task_does_not_fit_its_model_is_refused(tmp_path, D):
    """A 30-token model recording a copy task of D symbols + specials > 30: an IndexError
    traceback (or scores of garbage) before; one line now."""
    import models
    from models.checkpoint.write import save_checkpoint
    from seqprobe.errors import CheckpointError
    from tests.tiny import good_checkpoint

    ck = good_checkpoint()
    ck["task"]["config"]["D"] = D
    save_checkpoint(ck, tmp_path / "m.pt")
    with pytest.raises(CheckpointError, match="more than the model's vocab_size 30") as e:
        models.load(tmp_path / "m.pt")
    assert "\n" not in str(e.value)
    save_checkpoint(good_checkpoint(), tmp_path / "ok.pt")
    assert models.load(tmp_path / "ok.pt").task.vocab.size <= 30


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny transformer checkpoint exported to HF (GPT-NeoX): its directory."""
    from models.checkpoint.write import save_checkpoint
    from models.hf import export as export_hf
    from tests.tiny import good_checkpoint

    root = tmp_path_factory.mktemp("export")
    save_checkpoint(good_checkpoint(pe="rope"), root / "m.pt")
    export_hf.export(root / "m.pt", root / "hf", verify=False)
    return root / "hf"


def _edited_export(exported: Path, tmp_path: Path, edit) -> Path:
    import shutil

    out = tmp_path / "hf"
    shutil.copytree(exported, out)
    config = json.loads((out / "config.json").read_text())
    edit(config)
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["seqprobe"].update(arch="mamba2"), "says a mamba2 model, but config.json "
     "builds a gpt_neox one"),
    (lambda c: c["seqprobe"].update(arch="lstm"), "arch 'lstm' is none the exporter writes"),
    (lambda c: c["seqprobe"]["config"].update(d_model=1 << 20), "Config.d_model 1048576 is out of "
     "range"),
    (lambda c: c["seqprobe"].update(step=-5), "step -5 is not a step count"),
    (lambda c: c["seqprobe"]["config"].update(ln_eps=float("nan")), "Config.ln_eps nan is out"),
    (lambda c: c["seqprobe"].update(digest="md5:abc"), "digest 'md5:abc' is not"),
    (lambda c: c["seqprobe"]["task"]["config"].update(D=60), "more than the model's "
     "vocab_size 30"),
])
def test_an_export_whose_record_disagrees_with_its_model_is_refused(exported, tmp_path, edit,
                                                                    message):
    import models
    from models.hf.checks import HFError  # noqa: F401 - HFError and CheckpointError: one line

    out = _edited_export(exported, tmp_path, edit)
    with pytest.raises(InputError, match=message) as e:
        models.load(out)
    assert "\n" not in str(e.value)


def test_a_huge_config_json_is_not_read_by_the_analyses(exported, tmp_path, monkeypatch):
    """analyses.common.export_of_dir read config.json whole before the loader's size check (a
    1 GB file: 2.6 GB RSS; a sparse 3 GB one: MemoryError)."""
    import shutil

    from analyses.common import export_of_dir, load_model

    out = tmp_path / "hf"
    shutil.copytree(exported, out)
    with open(out / "config.json", "r+b") as f:
        f.truncate(3 << 30)  # sparse: no disk used
    read = []
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: read.append(self) or
                        real(self, *a, **k))
    assert export_of_dir(out) is None and not any(p.name == "config.json" for p in read)
    with pytest.raises(InputError, match="config.json") as e:
        load_model(str(out))
    assert "\n" not in str(e.value)
    (out / "config.json").unlink()
    (out / "config.json").write_text("[" * 100000)  # a RecursionError in json before
    assert export_of_dir(out) is None


def test_an_export_loaded_by_models_load_puts_bos_first_as_the_suite_model(exported):
    """Issue 47, item 2: `models.load(export).generate` copied wrong, its ids without the
    `<BOS>` the suite model (and the task) puts first."""
    import models

    suite = models.load(exported.parent / "m.pt")
    hf = models.load(exported)
    text = "abcd<COPY>"
    assert hf.to_tokens(text).tolist() == suite.to_tokens(text).tolist()
    assert hf.to_tokens(text)[0, 0].item() == suite.task.vocab.id("BOS")
    ours = suite.generate(suite.to_tokens(text), max_new_tokens=4, do_sample=False,
                          verbose=False)
    theirs = hf.generate(hf.to_tokens(text), max_new_tokens=4, do_sample=False, verbose=False)
    assert theirs.tolist() == ours.tolist()


# ---------------------------------------------------------------------------- warnings
def test_a_symlink_loop_as_cache_is_one_line_not_all_missing(tmp_path, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for argv in (["--list", "--cache-dir", str(loop)], ["path", "copy/rope", "--cache-dir",
                                                        str(loop)],
                 ["train", "copy/rope", "--cache-dir", str(loop)]):
        assert zoo.main(argv) == 2
        assert "leads nowhere" in _one_line(capsys)


def test_run_records_nested_too_deep_or_with_nan_are_one_clean_line():
    from models.train.runconfig import RunConfig
    from seqprobe.errors import ConfigError

    with pytest.raises(ConfigError, match="nested too deep"):
        RunConfig.from_json("[" * 100000)
    with pytest.raises(ConfigError) as e:
        RunConfig.from_json('{"model": NaN}')
    assert str(e.value).count("run record") == 1 and "NaN is not a JSON number" in str(e.value)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a machine without CUDA")
@pytest.mark.parametrize("level", ["--large", "--paper"])
def test_a_gpu_level_on_a_machine_without_one_is_refused_unless_asked(tmp_path, monkeypatch,
                                                                      capsys, level):
    """`reproduce --paper` / `--large` on a CPU machine started runs with ETAs of days."""
    from analyses.reproduce import cli as reproduce_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(reproduce_cli, "run_plan", lambda *a, **k: pytest.fail("ran"))
    assert reproduce_cli.main([level, "--out", str(tmp_path / "o")]) == 2
    line = _one_line(capsys)
    assert "no CUDA device" in line and "--device cpu" in line
    assert not (tmp_path / "o").exists()
    assert reproduce_cli.main([level, "--list"]) == 0  # estimating it here is fine


def test_a_nan_measurement_is_not_decided_never_does_not_hold():
    """NaN compares False with every threshold: an accuracy of NaN read as "does not hold"."""
    from analyses import mamba_decay
    from analyses.claims import Undecided, verdict_text

    read = mamba_decay.claim_markov({"models": [{"label": "m", "mean": float("nan")}]})
    assert isinstance(read[1], Undecided) and "no number to decide on" in verdict_text(read[1])
    assert mamba_decay.claim_markov({"models": [{"label": "m", "mean": 0.5}]})[1] is False
