"""The docs' "Adding a paper" (docs/adding-a-paper.md), done for real with a toy fifth paper.

The toy (tests/toy_paper.py) brings a new architecture (``echo``: its own config class with a
numeric field no other has, ``decay``, and its contract), a new task (``toy_echo``, whose
length field is ``span``), a probe, its zoo module (level rows and a recipe at quick and
medium), an analysis with two claims, its scale sentences and a numeric option of its own
(``--rows``, a bounded settings field: no row in ``seqprobe.flags``), and its readers' tests;
the one edit to an existing file is its five rows in seqprobe/registry.toml. They are written
into a copy of this repository (its ``git ls-files``, as they are on disk), where everything
runs in fresh processes with the copy as the working directory: the suite's registry reads the
toy as it reads a real paper, and nothing is patched or put back by hand.

Then, in the copy: it is found (the registries), planned and costed (``python -m
analyses.reproduce --level quick --list``: its training job projected from its FLOPs), trained
(its quick recipe, a few CPU steps) and read into the index (a quick reproduce of the toy alone),
and every suite-wide check runs with it there: the flag-bound table, the model contract, the
hand-kept lists (the registry's tables, recipe levels, independence), the claim-margin check,
the plan-wide reproduce checks (main, claims, recipes, scale line), the recipe hashes and the
layer checks (lint-imports, cycles, hidden links).
"""

from __future__ import annotations

from tests import ROOT_DIR

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import toy_paper
from tests.toy_paper import ARCH, NAME, RECIPE

ROOT = ROOT_DIR
MAX_FILES = 7  # 5 new files, the registry's rows, and the paper's tests

# The suite-wide checks run in the copy with the toy in it (test ids, pytest -k below)
SUITE_CHECKS = ("tests/contract/test_flag_table.py", "tests/contract/test_model_contract.py",
                "tests/contract/test_hand_kept_lists.py", "tests/contract/test_recipe_hashes.py",
                "tests/unit/analyses/test_claim_margins.py", "tests/integration/test_reproduce.py", "tests/contract/test_layers.py",
                f"tests/test_{NAME}.py")
# the architecture-wide tests of the contract for the toy's arch alone; of the claim margins,
# the PLAN-wide check; of the reproduce tests, the PLAN-wide ones; of the layers, the ones
# over the whole graph
SELECT = (f"(test_model_contract and ({ARCH} or tiny_config or fast_path_is_tested)) or "
          "(test_claim_margins and every_planned) or test_flag_table or test_hand_kept or "
          "test_recipe_hashes or (test_layers and (linter or hidden or circle)) or "
          "(test_reproduce and (every_plan_name or scale_line_from_the_planned)) or "
          f"test_{NAME}")

SCRIPT = f"""
import json, sys
from pathlib import Path
from analyses import zoo
from analyses.reproduce import cli
from analyses.zoo.levels import TABLE
from models.registry import ARCHS
from tasks.registry import TASKS
from models.train.plan import plan_row

out, cache = Path(sys.argv[1]), Path(sys.argv[2])
recipe = zoo.RECIPES[{RECIPE!r}]
found = {{"arch": ARCHS[{ARCH!r}], "task": TASKS[{NAME!r}], "levels": list(recipe.levels),
         "medium_model": dict(TABLE.rows("medium", {NAME!r}, {ARCH!r})["model"]),
         "flops": plan_row({RECIPE!r}, recipe.run_config("quick"))["flops_per_token"]}}
print("FOUND " + json.dumps(found), flush=True)
from analyses import toy_echo  # its own numeric option, refused out of its field's bound
print("ROWS " + str(toy_echo.main(["--rows", "0", "--out", str(out / "refused")])), flush=True)
common = ["--level", "quick", "--only", {NAME!r}, "--out", str(out), "--cache-dir", str(cache),
          "--jobs", "1"]
print("LIST", flush=True)
assert cli.main([*common, "--list"]) == 0
print("RUN", flush=True)
sys.exit(cli.main(common))
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): _digest(p) for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _copy_repo(dest: Path) -> None:
    """This checkout's files as they are on disk: the tracked ones and the untracked ones git
    does not ignore (another change in progress is copied as it stands)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / rel)


def _env(repo: Path) -> dict[str, str]:
    # the copy first on the path: the editable install would otherwise serve this checkout
    return {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A copy of the repository with the toy paper written into it; the files it changed;
    the outputs of the suite's checks and of the reproduce script run there (side by side)."""
    base = tmp_path_factory.mktemp("toy")
    repo = base / "repo"
    _copy_repo(repo)
    before = _tree(repo)
    for rel, text in toy_paper.sources().items():
        (repo / rel).write_text(text)
    tables = repo / toy_paper.REGISTRY_FILE
    tables.write_text(toy_paper.register(tables.read_text()))
    after = _tree(repo)
    touched = sorted(p for p in after if before.get(p) != after[p])
    env = _env(repo)
    checks = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-x", "-n0", "-p", "no:cacheprovider", "-m", "not slow",
         "-k", SELECT, *SUITE_CHECKS], cwd=repo, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(base / "out"), str(base / "ck")],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    checks_out = checks.communicate(timeout=600)[0]
    return {"repo": repo, "out": base / "out", "touched": touched, "run": run,
            "checks": (checks.returncode, checks_out)}


def test_the_toy_touches_at_most_seven_files(toy):
    assert toy["touched"] == sorted([*toy_paper.FILES, toy_paper.REGISTRY_FILE])
    assert len(toy["touched"]) <= MAX_FILES, toy["touched"]


def test_every_suite_wide_check_passes_with_the_toy(toy):
    rc, out = toy["checks"]
    assert rc == 0, out[-4000:]
    # they ran (a -k that selected nothing would pass too): the toy's own tests among them
    assert " passed" in out and " error" not in out, out[-2000:]


def test_the_toy_is_found_planned_costed_trained_and_read_into_the_index(toy):
    run = toy["run"]
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    found_line = next(s for s in run.stdout.splitlines() if s.startswith("FOUND "))
    found = json.loads(found_line.removeprefix("FOUND "))
    # found: the registry names the new files
    assert found["arch"] == f"models.{ARCH}:EchoLM" and found["task"] == f"tasks.{NAME}:EchoTask"
    assert found["levels"] == ["quick", "medium"] and found["medium_model"]["decay"] == 0.8
    assert found["flops"] > 0  # the class's own FLOPs per token
    # the analysis' own numeric option (a settings field, no row in seqprobe.flags): bounded
    assert "ROWS 2" in run.stdout and "--rows: 0 is out of range: must be 1..4096" in run.stderr
    # planned and costed: the --list output names it and projects its training from FLOPs
    listing = run.stdout.split("\nLIST\n", 1)[1].split("\nRUN\n", 1)[0]
    assert NAME in listing and "Toy paper Fig. 1" in listing and RECIPE in listing
    assert "1 from their FLOPs, projected" in listing, listing
    # trained and read: the result, and the index with the two claims and the scale sentence
    result = json.loads((toy["out"] / f"{NAME}.json").read_text())
    assert [r["label"] for r in result["models"]] == [RECIPE] and result["rows"] == 16
    index = (toy["out"] / "index.md").read_text()
    assert "## Toy: an echo repeats a letter" in index
    assert "the model repeats the letter" in index and "at twice the trained span" in index
    assert "next-token accuracy" in index and "accuracy at twice the span" in index
    assert "an echo model on a letter repeated 6 times" in index
