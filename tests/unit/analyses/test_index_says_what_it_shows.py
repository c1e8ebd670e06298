"""The reproduce index says what it shows (issue 47 item 5): when, from which commit, with
which torch and on which machine it was made; which checkpoint each row comes from; a user's
own model never under the level's header; "not run" for an analysis that never ran here; an
analysis run by hand writes to its own folder, never over the reproduction's figure."""

from __future__ import annotations

import json
from pathlib import Path

from analyses.claims import Claim, Figure
from analyses.common import Checkpoint, base_parser, models_used
from analyses.ngram_heads import main as ngram_heads_main
from analyses.reproduce import cli as reproduce_cli
from analyses.reproduce.index import index_outcome, write_index
from analyses.reproduce.plan import Job
from figures.style import DEFAULT_OUT
from models.constructions import save_hash_copy

FIG = Figure("Figure F", "Paper Fig. 1", (Claim("x is big", lambda d: ("x = 3", True)),))
FIG_G = Figure("Figure G", "Paper Fig. 2", (Claim("y is big", lambda d: ("y = 1", True)),))
FIG_H = Figure("Figure H", "Paper Fig. 3")


def test_each_row_names_its_checkpoint_and_a_users_model_is_not_the_levels(tmp_path):
    own = tmp_path / "transformer-copy-abc.pt"
    own.write_bytes(b"weights")
    mine = tmp_path / "my_model.pt"
    mine.write_bytes(b"other weights")
    (tmp_path / "f.json").write_text(json.dumps({"models_used": models_used(
        [Checkpoint("copy/hard_alibi", str(own), "copy/hard_alibi", "quick")])}))
    (tmp_path / "g.json").write_text(json.dumps({"models_used": models_used(
        [Checkpoint("my_model", str(mine))])}))
    outcomes = [index_outcome(Job(n, (), figure=f), tmp_path, {})
                for n, f in (("f", FIG), ("g", FIG_G), ("h", FIG_H))]
    assert [o.state for o in outcomes] == ["ok", "ok", "not run"]
    write_index(outcomes, tmp_path, "quick")
    md = (tmp_path / "index.md").read_text()
    page = (tmp_path / "index.html").read_text()
    doc = json.loads((tmp_path / "index.json").read_text())
    # what made it, in all three
    for key in ("date", "commit", "torch", "machine"):
        assert doc["made"][key]
        assert str(doc["made"][key]) in page
    assert md.splitlines()[2].startswith("Made ") and "torch" in md.splitlines()[2]
    # the level's own recipe under the level's header, the user's model under its own
    level, other = md.split("# Other results in this folder: not the quick level's recipes")
    assert "## Figure F" in level and "copy/hard\\_alibi@quick \\(sha256 " in level
    assert "Figure G" not in level and "## Figure G" in other and "my\\_model.pt" in other
    assert "## Figure H" in level and "— not run" in level and "FAILED" not in md
    assert [r["analysis"] for r in doc["results"]] == ["f", "h"]
    assert [r["analysis"] for r in doc["other"]] == ["g"]
    assert doc["other"][0]["checkpoints"][0]["sha256"] == models_used(
        [Checkpoint("x", str(mine))])[0]["sha256"]
    assert doc["results"][1]["status"] == "not run"


def test_a_result_that_records_no_checkpoints_is_not_shown_as_the_levels(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps({"x": 3}))  # hand-written, or older
    write_index([index_outcome(Job("f", (), figure=FIG), tmp_path, {})], tmp_path, "quick")
    md = (tmp_path / "index.md").read_text()
    assert md.index("# Other results") < md.index("## Figure F")
    assert "checkpoints not recorded" in md


def test_index_only_over_a_users_model_and_missing_analyses(tmp_path, capsys):
    """The done-when: --index-only over a folder holding one analysis of a user's own model
    and no other result: "not run" for the rest, the model named, and nothing under the
    level's header that is not the level's recipe."""
    ckpt = save_hash_copy(tmp_path / "users_model.pt", n=3, D=26, max_len=16)
    out = tmp_path / "out"
    assert ngram_heads_main([str(ckpt), "--out", str(out), "--lengths", "6", "--batch-size",
                             "4", "--draws", "2", "--n-max", "3"]) == 0
    assert reproduce_cli.main(["--index-only", "--out", str(out)]) == 0
    md = (out / "index.md").read_text()
    level, other = md.split("# Other results in this folder: not the quick level's recipes")
    assert "FAILED" not in md and "— not run" in level
    assert "users\\_model.pt" in other and "n-gram match heads" in other.lower()
    assert "users\\_model" not in level and "![ngram_heads]" not in level
    doc = json.loads((out / "index.json").read_text())
    assert [r["analysis"] for r in doc["other"]] == ["ngram_heads"]
    assert all(r["status"] == "not run" for r in doc["results"])


def test_an_analysis_by_hand_writes_to_its_own_folder_under_the_current_one(tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = base_parser("ngram_heads", "d").parse_args([])
    assert args.out == str(Path("figures", "out", "ngram_heads"))  # relative: under the cwd
    assert (tmp_path / args.out).resolve() != (DEFAULT_OUT / "ngram_heads").resolve()
    assert base_parser("ngram_heads", "d").parse_args(["--out", "x"]).out == "x"


def test_the_index_names_each_claims_replicates_and_the_seeds_it_would_take(tmp_path):
    """Issue 46: a seeded claim's row in the index names its test, the unit it counts, n, and
    the seeds its design asks for; a claim without replicate tests adds no table."""
    from analyses import stats
    from analyses.claims import Reading

    def seeded(d):
        t = stats.sign_test(d["per_seed"], 0.0)
        return Reading("three seeds", t.verdict(), None, [("change up", t)])

    fig = Figure("Figure S", "Paper Fig. 4", (Claim("it grows", seeded),))
    (tmp_path / "s.json").write_text(json.dumps({"per_seed": [0.4, 0.5, 0.45]}))
    (tmp_path / "f.json").write_text(json.dumps({}))
    outcomes = [index_outcome(Job("s", (), figure=fig), tmp_path, {}),
                index_outcome(Job("f", (), figure=FIG), tmp_path, {})]
    write_index(outcomes, tmp_path, "medium")
    doc = json.loads((tmp_path / "index.json").read_text())
    rows = {r["analysis"]: r for r in doc["results"] + doc["other"]}
    (rep,) = rows["s"]["replicates"]
    assert (rep["claim"], rep["unit"], rep["n"], rep["power_side"], rep["power_n"]) == (
        "it grows", "seed", 3, "for", stats.design_sign(3, 3, 0.05).n)
    assert rep["inputs"] == [[0.4, 0.5, 0.45]] and rep["agree"] == "3/3 seeds"
    assert rows["f"]["replicates"] == []
    md = (tmp_path / "index.md").read_text()
    assert "| change up | exact one-sided sign test | seed | 3 | 3/3 seeds |" in md
    assert f"{rep['power_n']} \\(for the claim\\)" in md and md.count("Replicates:") == 1
    assert "class='replicates'" in (tmp_path / "index.html").read_text()
