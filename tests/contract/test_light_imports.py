"""Reading a model needs no training code: an analysis' ``--help`` and its one-line refusals
import no training (``models.train``), no HuggingFace stack (``transformers``), no scheduler
(``seqprobe.sweep``, ``analyses.reproduce``); the zoo's ``--list`` and ``path`` refusal import
not even torch. Checked on what a fresh interpreter imports (``python -X importtime``); how long
they take is bench/bench_startup.py's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyses.zoo import catalog
from seqprobe import registry
from tests import ROOT_DIR

ROOT = ROOT_DIR
FORBIDDEN = ("models.train", "transformers", "transformer_lens", "seqprobe.sweep",
             "analyses.reproduce", "analyses.zoo.runs")


def imported(argv: list[str], tmp_path: Path) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules ``python -X importtime -m ...argv`` imports, and the finished process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SEQPROBE_CACHE": str(tmp_path / "cache")}
    env.pop("SEQPROBE_SEED_OFFSET", None)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", *argv], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    mods = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}
    return mods - {"package"}, proc


def forbidden(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


ANALYSES = registry.table("analyses")  # every analysis, as the registry lists them


@pytest.mark.parametrize("name", list(ANALYSES))
def test_an_analysis_help_imports_no_training_hf_or_scheduler(name, tmp_path):
    module = ANALYSES[name]
    mods, proc = imported([module, "--help"], tmp_path)
    assert proc.returncode == 0 and "--out" in proc.stdout, proc.stderr[-2000:]
    assert "analyses.common" in mods  # the parse saw the imports (each runs through run_analysis)
    assert forbidden(mods) == []


# the shared refusal of a zoo name (analyses.common), and pretrained_copy's own of a suite model
@pytest.mark.parametrize("module, says", [("analyses.ngram_heads", "unknown recipe 'no/such'"),
                                          ("analyses.pretrained_copy", "a suite checkpoint")])
def test_an_analysis_refusal_imports_none_of_them_either(module, says, tmp_path):
    mods, proc = imported([module, "zoo:no/such", "--out", str(tmp_path)], tmp_path)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr[-2000:]
    assert forbidden(mods) == []


@pytest.mark.skipif(not catalog.cpu_device("auto"), reason="a GPU machine's --list resolves "
                    "its runs for the GPU: the exact way, with torch")
@pytest.mark.parametrize("argv", [["--list"], ["--list", "--large"], ["path", "no/such"],
                                  ["path", "copy/hard_alibi"]])
def test_the_zoo_lists_and_refuses_without_torch(argv, tmp_path):
    mods, proc = imported(["analyses.zoo", *argv], tmp_path)
    assert proc.returncode == (0 if argv[0] == "--list" else 2), proc.stderr[-500:]
    assert "analyses.zoo" in mods
    assert forbidden(mods) == [] and "torch" not in mods


def test_the_check_can_fail():
    assert forbidden({"models.train.loop", "transformers", "seqprobe"}) == [
        "models.train.loop", "transformers"]
    assert forbidden({"models.train_config", "transformers_extra"}) == []


def test_reading_the_cache_imports_only_what_keys_a_run():
    """``zoo:NAME`` of a cached model checks the file is the run's own (models.train.cache):
    that needs the run's key (runconfig, build; the level rows are models.levels), never the loop
    that trains."""
    code = ("import sys, models.train.cache, analyses.zoo.catalog; "
            "print(' '.join(m for m in sys.modules if m.startswith('models.train.')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(proc.stdout.split()) <= {"models.train.cache", "models.train.build",
                                        "models.train.runconfig"}
