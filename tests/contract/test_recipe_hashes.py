"""Cache keys never move: every zoo recipe at every level it has hashes to what
tests/data/recipe_hashes.json recorded. A changed hash
means every cached checkpoint of that run is retrained, so a refactor of how runs are
described must keep this file green.

A fine-tuned recipe's hash covers its init checkpoint's bytes; those depend on training, so
here the parent is a stand-in: its model entry is the parent's own record and its digest a
fixed string (``INIT_DIGEST``).

Regenerate only on purpose (a change that is meant to retrain): ``python -m
tests.contract.test_recipe_hashes``.
"""

from __future__ import annotations

from tests import ROOT_DIR

import json
import sys
import tempfile
from pathlib import Path

import pytest

from analyses import zoo
from models.train import build, cache, runconfig

DATA = ROOT_DIR / "tests" / "data" / "recipe_hashes.json"
RECORDED_LEVELS = ("quick", "medium", "paper")
INIT_DIGEST = "0123456789abcdef"


def _stub_init(monkeypatch, cache_dir: Path) -> None:
    """Parents of fine-tuned recipes as stand-in files: their model entry is the parent
    recipe's record, their digest :data:`INIT_DIGEST`."""
    records: dict[str, dict] = {}
    real_run_config = zoo.run_config

    def stub_run_config(name, level, cache_dir=cache_dir, train=None, device="cpu"):
        run = real_run_config(name, level, cache_dir, train, device)
        path = cache.cache_path(run, cache_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()  # the child's recipe asks only that its parent exists
        records[str(path)] = run.to_dict()["model"]
        return run

    monkeypatch.setattr(zoo, "run_config", stub_run_config)
    monkeypatch.setattr(build, "_init_model_entry", lambda path: records[str(path)])
    monkeypatch.setattr(runconfig, "file_digest", lambda path: INIT_DIGEST)


def snapshot(cache_dir: Path) -> dict[str, dict[str, str]]:
    """``{"recipes": {name@level: hash}}``."""
    recipes = {}
    for name, r in zoo.RECIPES.items():
        for level in RECORDED_LEVELS:
            if r.available(level):
                recipes[f"{name}@{level}"] = zoo.run_config(name, level, cache_dir).hash()
    return {"recipes": recipes}


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict[str, str]]:
    return json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def current(tmp_path_factory) -> dict[str, dict[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        cache_dir = tmp_path_factory.mktemp("cache")
        _stub_init(mp, cache_dir)
        # a key does not depend on whether the run fits this machine; the size check builds
        # every model on the meta device, most of this test's time
        mp.setattr(build, "check_run_size", lambda *a, **k: 0)
        return snapshot(cache_dir)


def test_every_recipe_keeps_its_cache_key(recorded, current):
    # no recorded recipe lost; a recipe added since has no key to keep yet (recorded when the
    # file is regenerated), so a new paper's recipes need no edit here
    lost = set(recorded["recipes"]) - set(current["recipes"])
    assert not lost, f"{len(lost)} recorded recipes no longer exist, e.g. {sorted(lost)[:5]}"
    moved = {k: (recorded["recipes"][k], h) for k, h in current["recipes"].items()
             if k in recorded["recipes"] and recorded["recipes"][k] != h}
    assert not moved, f"{len(moved)} recipe hashes moved, e.g. {sorted(moved.items())[:5]}"


def test_the_fixture_can_fail(recorded, current):
    # the snapshot covers the runs it claims to: fine-tuned recipes (through the stand-in) and
    # every level that has recipes
    assert any(k.startswith("lookup_suffix/") and k.endswith("@quick") for k in current["recipes"])
    assert {k.rsplit("@", 1)[1] for k in current["recipes"]} == set(RECORDED_LEVELS)
    assert len(set(current["recipes"].values())) > 100  # distinct runs, distinct keys


if __name__ == "__main__":
    with pytest.MonkeyPatch.context() as mp:
        with tempfile.TemporaryDirectory() as tmp:
            _stub_init(mp, Path(tmp))
            DATA.parent.mkdir(exist_ok=True)
            DATA.write_text(json.dumps(snapshot(Path(tmp)), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA}", file=sys.stderr)
