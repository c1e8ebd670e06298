"""Cache keys never move, and the zoo's catalog (analyses/zoo/catalog.json) is never stale:
every zoo recipe at every level it has hashes to the key the catalog records, and the
catalog is exactly what ``python -m analyses.zoo catalog`` writes from the recipes as they
are. A changed key means every cached checkpoint of that run is retrained, so a refactor of
how runs are described must keep this file green; the generator refuses to move a recorded
key unless told (``--move-keys``).

A fine-tuned recipe's key covers its init checkpoint's bytes; those depend on training, so
here the parent is a stand-in: its model entry is the parent's own record and its digest a
fixed string (:data:`analyses.zoo.catalog.INIT_DIGEST`). Such a recipe's file is never served
from the catalog (tests/integration/test_zoo_catalog.py).

Regenerate after changing a recipe or a level row: ``python -m analyses.zoo catalog``.
"""

from __future__ import annotations

import pytest

from analyses.zoo import catalog


@pytest.fixture(scope="module")
def recorded() -> dict:
    return catalog.load()


@pytest.fixture(scope="module")
def current() -> dict:
    from analyses.zoo import runs

    return runs.catalog_now()


def test_every_recipe_keeps_its_cache_key(recorded, current):
    moved = catalog.moved_keys(recorded["keys"], current["keys"])
    assert not moved, f"{len(moved)} recipe keys moved or went, e.g. {moved[:5]}"


def test_the_catalog_is_current(recorded, current):
    # a source edited, a recipe changed or added to a recorded paper: one command brings it up
    # to date. A paper module added since is not recorded yet: its recipes are served the exact
    # way until the catalog is regenerated, and the others still from the catalog.
    fix = "regenerate it with `python -m analyses.zoo catalog`"
    changed = sorted(f for f, d in recorded["sources"].items() if current["sources"].get(f) != d)
    assert not changed, f"analyses/zoo/catalog.json is stale ({', '.join(changed)} changed): {fix}"
    new = set(current["sources"]) - set(recorded["sources"])
    assert new <= set(catalog.papers()), f"shared sources not recorded: {new}"
    stale = [n for n, e in recorded["recipes"].items() if current["recipes"].get(n) != e]
    stale += [n for n, e in current["recipes"].items()
              if e["module"] in recorded["sources"] and n not in recorded["recipes"]]
    assert not stale, f"recipes {stale[:5]} are not as the catalog records them: {fix}"
    for part in ("keys", "files"):
        recorded_here = {k: v for k, v in current[part].items()
                         if k.rsplit("@", 1)[0] in recorded["recipes"]}
        assert recorded[part] == recorded_here, f"its {part} are stale: {fix}"
    assert all(catalog.trusted(n) for n in recorded["recipes"])
    assert catalog.fresh() == (not new)


def test_the_fixture_can_fail(current):
    # the snapshot covers the runs it claims to: fine-tuned recipes (through the stand-in) and
    # every level that has recipes, the large one included
    keys = current["keys"]
    assert any(k.startswith("lookup_suffix/") and k.endswith("@quick") for k in keys)
    assert {k.rsplit("@", 1)[1] for k in keys} == {"quick", "medium", "large", "paper"}
    assert len(set(keys.values())) > 100  # distinct runs, distinct keys
    # a fine-tuned recipe has a recorded key but no file the catalog serves
    tuned = [k for k in keys if k.startswith("lookup_suffix/") and k.endswith("@quick")]
    assert tuned and all(k not in current["files"] for k in tuned)
    assert catalog.moved_keys({"copy/rope@quick": "000000000000"}, keys) != []
