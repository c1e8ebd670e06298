"""The large level (issue 36 §2): its place among the levels, its recipes' counts and settings,
the copy models matched at ~1M parameters, the inverted memorization search (on an oracle), the
plan's placement of its jobs, and ``reproduce --large --list``."""

from __future__ import annotations

import argparse
import os

import pytest
import torch

from analyses import copy_efficiency, markov_holdout, ngram_lookup, stu_induction, zoo
from analyses.copy_efficiency.seeded import compute_large
from analyses.memorization import inverse
from analyses.memorization.cells import CellSettings, CellStore, cell_key, search_cell_name
from analyses.memorization.claims import FIGURE as MEMORIZATION
from analyses.memorization.grid import GRIDS, LARGE_SIZES, CellSpace
from analyses.reproduce import cli as reproduce_cli
from analyses.reproduce import plan as reproduce_plan
from analyses.reproduce.plan import PLAN, build_jobs, default_workers, placement
from analyses.stu_induction import claims as stu_claims
from analyses.zoo import copy as zoo_copy
from analyses.zoo import markov as zoo_markov
from analyses.zoo import spectral as zoo_spectral
from analyses.zoo.copy import COPY_LARGE_PARAMS
from models import levels
from models.registry import build_model
from seqprobe.cli import LEVELS
from seqprobe.errors import InputError
from tasks.registry import make_task

LARGE = [r for r in zoo.RECIPES.values() if "large" in r.levels]


# ---------------------------------------------------------------------------- the level
def test_large_sits_between_medium_and_paper_and_starts_from_medium():
    assert LEVELS == ("quick", "medium", "large", "paper")
    assert levels.BASE["large"] == "medium"
    assert zoo_copy.TABLE.rows("large", "copy", "mamba") == zoo_copy.TABLE.rows(
        "medium", "copy", "mamba")
    assert set(levels.SEEDED) == {"medium", "large"}


def test_large_recipes_exist_at_large_only_and_count_as_the_issue_says():
    assert all(r.levels == ("large",) for r in LARGE)
    by = {}
    for r in LARGE:
        by.setdefault(r.name.split("/")[0], []).append(r)
    # copy: 5 models x 3 lengths x 4 lrs x 3 seeds; the plan trains the seed-0 sweep
    assert len(by["copy_large"]) == 5 * 3 * 4 * 3
    assert len(zoo_copy.copy_large_recipes()) == 5 * 3 * 4
    # STU: 2 models x 4 q x 2 lrs x 16 seeds
    assert len(by["induction_large"]) == 2 * 4 * 2 * 16
    assert len(zoo_spectral.induction_large_recipes()) == 2 * 4 * 2 * 16
    assert len(by["lookup_large_prefix"]) == 3 * 2
    # Markov: 3 widths x 5 seeds, at batch 64 and the batch-16 CPU fallback
    assert len(by["markov_holdout_large"]) == 2 * 3 * 5
    assert len(zoo_markov.markov_holdout_large_recipes()) == 15
    for r in LARGE:
        zoo.run_config(r.name, "large")  # every one builds and validates
    with pytest.raises(InputError, match="no large version"):
        zoo.run_config("copy/rope", "large")


def test_copy_large_settings():
    for L in (10, 20, 30):
        for lr in (3e-4, 1e-3, 3e-3, 1e-2):
            run = zoo.run_config(zoo_copy.copy_large_name("mamba", L, 2, lr), "large")
            assert run.task_dict["D"] == 26 and run.task_dict["min_len"] == 1
            assert run.task_dict["max_len"] == L
            t = run.train
            assert (t.context, t.batch_size, t.stop_at, t.lr, t.seed) == (420, 64, 0.9, lr, 2)
    with pytest.raises(InputError, match="allowed at large"):
        zoo_copy.copy_large_recipes(["nope"])
    with pytest.raises(InputError, match="seeds are 0..2"):
        zoo_copy.copy_large_recipes(seeds=[3])


@pytest.mark.parametrize("label", zoo_copy.COPY_LARGE_LABELS)
def test_copy_large_models_are_matched_at_a_million_parameters(label):
    run = zoo.run_config(zoo_copy.copy_large_name(label, 30, 0, 1e-3), "large")
    with torch.device("meta"):
        n = sum(p.numel() for p in build_model(run.arch, run.model).parameters())
    assert abs(n / COPY_LARGE_PARAMS - 1) <= 0.10, f"{label}: {n:,} parameters"


def test_stu_lookup_and_markov_large_settings():
    run = zoo.run_config("induction_large/stu_shared_L128_lr3e-3_s15", "large")
    assert run.task_dict["length"] == 128 and run.model_dict["mixture"] == "shared"
    assert (run.train.lr, run.train.stop_at, run.train.schedule) == (3e-3, 0.0, "cosine")
    assert {zoo_spectral.induction_length(q) for q in zoo_spectral.INDUCTION_LARGE_QS} == {16, 32,
                                                                                           64, 128}
    run = zoo.run_config("lookup_large_prefix/lstm_s1", "large")
    assert (run.task_dict["D"], run.task_dict["min_len"], run.task_dict["max_len"]) == (26, 5, 30)
    assert run.task_dict["key"] == "prefix" and run.train.context == 420
    assert run.train.schedule == "linear" and run.train.stop_at == 0.0
    assert max(zoo_copy.NGRAM_LOOKUP_LEVELS["large"].lengths) == 100
    for w in (8, 16, 32):
        run = zoo.run_config(zoo_markov.markov_holdout_large_recipes([w])[4], "large")
        t = run.train
        assert (t.steps, t.batch_size, run.task_dict["seq_len"], t.seed) == (10000, 64, 512, 4)
        assert run.model_dict["d_model"] == run.model_dict["d_state"] == w
        cpu = zoo.run_config(zoo_markov.markov_holdout_large_recipes([w], cpu_batch=True)[0],
                             "large")
        assert cpu.train.batch_size == 16 and cpu.train.steps == 10000


def test_the_five_analyses_have_large_and_their_recipes():
    figs = {"copy_efficiency": copy_efficiency.FIGURE, "stu_induction": stu_induction.FIGURE,
            "ngram_lookup": ngram_lookup.FIGURE, "markov_holdout": markov_holdout.FIGURE,
            "memorization": MEMORIZATION}
    for name, fig in figs.items():
        assert "large" in fig.levels, name
    assert list(copy_efficiency.FIGURE.recipes("large")) == zoo_copy.copy_large_recipes()
    assert list(stu_induction.FIGURE.recipes("large")) == zoo_spectral.induction_large_recipes()
    assert list(ngram_lookup.FIGURE.recipes("large")) == zoo_copy.lookup_large_recipes()
    assert list(markov_holdout.FIGURE.recipes("large")) == zoo_markov.markov_holdout_large_recipes(
        cpu_batch=markov_holdout.large_cpu_batch())
    assert [n for n in PLAN if "large" in reproduce_plan.figure_of(n).levels] == [
        "copy_efficiency", "ngram_lookup", "markov_holdout", "memorization", "stu_induction"]


# ---------------------------------------------------------------------------- copy: lr then seeds
def _history(reach_at: int | None, steps: int = 10) -> list[dict]:
    return [{"step": s, "samples_seen": 100 * s,
             "string_acc": 1.0 if reach_at is not None and s >= reach_at else 0.0}
            for s in range(1, steps + 1)]


def test_copy_large_takes_each_models_best_sweep_lr_to_the_other_seeds():
    # seed 0: rope fastest at 1e-3, mamba at 1e-2 (3e-4 never gets there)
    reach = {("rope", 1e-3): 2, ("rope", 3e-3): 4, ("mamba", 1e-2): 6, ("mamba", 3e-4): None}
    runs = [{"label": lab, "length": 10, "seed": 0, "lr": lr, "params": 1, "history": _history(r)}
            for (lab, lr), r in reach.items()]
    asked = []

    def train(names):
        asked.extend(names)
        return [{"label": n.split("/")[1].split("_")[0], "length": 10,
                 "seed": int(n[-1]), "lr": 1e-3 if "rope" in n else 1e-2, "params": 1,
                 "history": _history(3)} for n in names]

    result = compute_large(runs, train)
    assert sorted(asked) == sorted(zoo_copy.copy_large_name(lab, 10, s, lr)
                                   for lab, lr in (("rope", 1e-3), ("mamba", 1e-2))
                                   for s in (1, 2))
    assert result["level"] == "large"
    m = result["by_length"]["10"]["models"]  # JSON keys
    assert m["rope"]["lr"] == 1e-3 and m["mamba"]["lr"] == 1e-2
    assert len(m["rope"]["seeds"]) == 3 and len(m["mamba"]["seeds"]) == 3
    assert set(result["lr_sweep"]["10"]["mamba"]) == {"0.01", "0.0003"}


# ---------------------------------------------------------------------------- memorization
def _oracle(f: dict[int, int], calls: list):
    """A cell that memorises iff N <= f(width), with the fields the summary reads and its key
    (as cells.run_cell tags it)."""
    def train_cell(run_config, settings):
        n = round(run_config.task.fraction * run_config.task.n_examples)
        m = run_config.model.d_model
        calls.append((m, n))
        return {"n_examples": n, "d_model": m, "memorized": n <= f[m], "seq_len": 8,
                "n_labels": 8 * n, "params_total": 100 * m * m,
                "params_non_embedding": 90 * m * m,
                "key": cell_key(run_config, settings.threshold,
                                settings.patience) if settings else ""}
    return train_cell


@pytest.mark.parametrize("ladder", [tuple(range(1, 200)), LARGE_SIZES, (5,)])
def test_search_max_n_finds_the_largest_memorised_size_exactly(ladder):
    for f in (0, ladder[0], *ladder[:: max(1, len(ladder) // 7)], ladder[-1], 10 ** 6, 37):
        probed: list[int] = []

        def memorises(i, f=f, probed=probed):
            probed.append(i)
            return ladder[i] <= f

        i = inverse.search_max_n(len(ladder), memorises)
        want = max((j for j, n in enumerate(ladder) if n <= f), default=None)
        assert i == want, (f, i, want)
        assert len(probed) == len(set(probed))  # each size probed once
        assert len(probed) <= max(1, len(ladder)).bit_length() + 1


def test_the_inverted_search_per_width_and_its_saved_cells(tmp_path):
    space = CellSpace.of("synthetic", "token", "large", {"n_examples": 256})
    sizes = tuple(n for n in LARGE_SIZES if n <= 256)
    f = {4: 20, 7: 100, 12: 10 ** 6}
    calls: list = []
    store = CellStore(tmp_path / "cells").open()
    out = []
    for m in f:
        job = inverse.MaxNJob(space, m, sizes, 0, CellSettings(), store)
        out.append(inverse.run_max_n(job, _oracle(f, calls)))
    assert [r["max_n"] for r in out] == [max(n for n in sizes if n <= f[m]) for m in f]
    assert [r["at_top"] for r in out] == [False, False, True]
    assert all((tmp_path / "cells" / search_cell_name(c["n_examples"], 4, 0)).exists()
               for c in out[0]["cells"])
    # a second run reuses every cell: the oracle is not asked again
    again: list = []
    job = inverse.MaxNJob(space, 7, sizes, 0, CellSettings(), store)
    r = inverse.run_max_n(job, _oracle(f, again))
    assert r["max_n"] == out[1]["max_n"] and not again
    assert all(c["reused"] for c in r["cells"])


def test_the_nested_data_sets_are_prefixes_of_one_set():
    space = CellSpace.of("synthetic", "token", "large")
    total = space.task_config["n_examples"]
    sets = {}
    for n in (LARGE_SIZES[0], LARGE_SIZES[len(LARGE_SIZES) // 2], LARGE_SIZES[-1]):
        run = space.run_config(4, n / total, seed=1)
        task = make_task("memorization", run.task_dict)
        assert task.n_used == n
        sets[n] = (task.tokens, task.labels)
    small, mid, big = sorted(sets)
    for a, b in ((small, mid), (mid, big)):
        assert torch.equal(sets[a][0], sets[b][0][:a]) and torch.equal(sets[a][1], sets[b][1][:a])


def test_the_large_grid_is_eight_widths_over_30x_in_parameters():
    row = GRIDS[("large", "synthetic", "token")]
    assert row.search.method == inverse.METHOD and row.search.seeds == 2
    assert row.search.n_examples == LARGE_SIZES == inverse.n_ladder(8, 4096, 8)
    assert row.train["batch_size"] >= max(LARGE_SIZES)  # full batch at every N
    space = CellSpace.of("synthetic", "token", "large")
    params = []
    for m in (min(row.widths), max(row.widths)):
        run = space.run_config(m, 1.0)
        with torch.device("meta"):
            params.append(sum(p.numel() for p in build_model(run.arch, run.model).parameters()))
    assert len(row.widths) == 8 and 25 <= params[1] / params[0] <= 40


def test_summarise_max_n_fits_the_points_and_keeps_lower_bounds_out():
    f = {4: 20, 7: 60, 12: 200, 20: 10 ** 6}
    sizes = tuple(range(1, 400))
    runs = []
    for s in (0, 1):
        for m, top in f.items():
            calls: list = []
            cell = _oracle(f, calls)
            n = min(top, sizes[-1]) - s  # the two seeds land one apart
            runs.append({"seed": s, "d_model": m, "max_n": n, "at_top": top >= sizes[-1],
                         "cells": [cell(argparse.Namespace(
                             task=argparse.Namespace(fraction=1.0, n_examples=n),
                             model=argparse.Namespace(d_model=m)), None)]})
    res = inverse.summarise_max_n(runs, tuple(f), sizes, "token", 8000)
    assert res["min_width"] == [4, 7, 12]  # width 20 memorised the whole ladder: left out
    assert res["n_examples"] == [19.5, 59.5, 199.5]
    assert res["min_params_non_embedding"] == [90 * 16, 90 * 49, 90 * 144]
    assert res["search"]["at_top"][0] == [False, False, False, True]
    assert res["fits"]["non_embedding"]["power"]["k"] is not None
    assert res["trends"]["min_params_nondecreasing"] is True
    assert inverse.table_max_n(res)[4][3] == f">={sizes[-1]}"


# ---------------------------------------------------------------------------- plan
def test_the_plan_puts_every_sweep_on_the_gpu_as_ensembles(tmp_path):
    assert default_workers("large") == (os.cpu_count() or 1)
    assert placement("stu_induction", "large") == ("auto", None)
    assert placement("markov_holdout", "large") == ("auto", None)
    assert placement("memorization", "large")[0] == "cpu"
    assert placement("stu_induction", "medium") == (None, None)
    jobs = {j.name: j for j in build_jobs(["markov_holdout", "copy_efficiency"], "large",
                                          tmp_path / "out", tmp_path / "ck", 16, auto="cuda")}
    mk = jobs["markov_holdout"]
    assert mk.device == "auto" and mk.argv[mk.argv.index("--device") + 1] == "auto"
    first = markov_holdout.FIGURE.recipes("large")[0]
    train = next(j for j in jobs.values() if first in j.recipes)
    assert train.argv[train.argv.index("--device") + 1] == "auto" and "--large" in train.argv
    # on a GPU a sweep of one model is one ensemble: the 5 seeds of each width together
    assert len(train.recipes) == 5 and all(r in train.argv for r in train.recipes)
    ce = jobs["copy_efficiency"]
    assert ce.argv[ce.argv.index("--device") + 1] == "auto" and "--jobs" in ce.argv
    # planned for the 16 cores asked for, not this machine's: the plan of a GPU machine
    assert ce.slots == placement("copy_efficiency", "large", 16)[1] == 8
    copy = [j for j in jobs.values() if j.recipes and j.recipes[0].startswith("copy_large/")]
    assert sum(len(j.recipes) for j in copy) == 60 and len(copy) == 5  # one per architecture
    # on CPU cores "auto" runs the sweep's runs side by side; asked for, ensembles split one
    # per core
    cpu = build_jobs(["markov_holdout"], "large", tmp_path / "out", tmp_path / "ck", 2,
                     auto="cpu")
    assert [len(j.recipes) for j in cpu if j.recipes] == [1] * 15
    cpu = build_jobs(["markov_holdout"], "large", tmp_path / "out", tmp_path / "ck", 2,
                     ensembles="on", auto="cpu")
    assert sorted(len(j.recipes) for j in cpu if j.recipes) == [2, 2, 2, 3, 3, 3]
    medium = build_jobs(["markov_holdout"], "medium", tmp_path / "out", tmp_path / "ck")
    assert all("--device" not in j.argv for j in medium)  # the other levels as they were


def test_reproduce_large_list(capsys):
    assert reproduce_cli.main(["--large", "--list", "--only", "stu_induction",
                           "--only", "markov_holdout"]) == 0
    out = capsys.readouterr().out
    assert "stu_induction" in out and "(on auto, 1 core)" in out
    assert "induction_large/stu_L16_lr1e-3_s0-15" in out


def test_markov_holdout_cpu_batch_picks_the_batch_16_runs():
    args = argparse.Namespace(train="large", cpu_batch=True)
    assert markov_holdout._recipes(args) == zoo_markov.markov_holdout_large_recipes(cpu_batch=True)
    with pytest.raises(InputError, match="goes with --train large"):
        markov_holdout._recipes(argparse.Namespace(train="medium", cpu_batch=True))


def test_stu_claims_of_models_the_large_level_does_not_train_are_left_out():
    row = {"arch": "stu", "train_length": 16, "longest": {"median": 1.0}}
    d = {"level": "large", "rows": [row], "lengths": [16, 256]}
    assert stu_claims.claim_vs_baselines(d) is None
    assert stu_claims.claim_blank_zero(d) is None
    assert stu_claims.claim_vs_baselines({**d, "level": "medium"})[1] is False


@pytest.mark.parametrize("gpu", [True, False])
def test_markov_large_takes_table_7s_batch_with_a_gpu_and_16_without(monkeypatch, gpu):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    names = list(markov_holdout.FIGURE.recipes("large"))
    assert names == zoo_markov.markov_holdout_large_recipes(cpu_batch=not gpu)
    assert {zoo.run_config(n, "large").train.batch_size for n in names} == {64 if gpu else 16}
    assert ("--cpu-batch" in markov_holdout.FIGURE.extra_args("large")) is not gpu
    assert markov_holdout.FIGURE.extra_args("medium") == ()


def test_the_large_list_for_a_gpu_is_a_plan_of_calls_each_within_one_lent_call(capsys):
    import re

    assert reproduce_cli.main(["--large", "--list", "--device", "cuda", "--jobs", "16"]) == 0
    out = capsys.readouterr().out
    calls = re.findall(r"call (\d+): ([\d.]+) min", out)
    n = re.search(r"^(\d+) calls;", out, re.M)
    assert calls and n and int(n[1]) == len(calls)
    assert all(float(m) <= 9.0 for _, m in calls), out
    assert "OVER" not in out
    assert "memorization" in out and "ensemble projection" in out
    assert "bash scripts/gpu_call.sh" in out and "torch.compile" in out


def test_parts_split_merge_and_refusals(tmp_path):
    from analyses.reproduce.parts import merge, parse_part, split
    from seqprobe.errors import InputError

    cost = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 1.0}
    wall = lambda part: sum(cost[n] for n in part)  # noqa: E731 - one job at a time
    assert split(list(cost), wall, budget=7) == [["a", "d"], ["b", "c"]]
    assert split(list(cost), wall, budget=100) == [list(cost)]
    assert split(list(cost), wall, budget=1, parts=3) == [["a"], ["b"], ["c", "d"]]
    assert parse_part("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "x", "1/0"):
        with pytest.raises(InputError):
            parse_part(bad)
    p1, p2, out = tmp_path / "p1", tmp_path / "p2", tmp_path / "out"
    for p, name in ((p1, "a"), (p2, "b")):
        p.mkdir()
        (p / f"{name}.json").write_text("{}")
        (p / "index.json").write_text("{}")
    assert merge([p1, p2], out) == ["a.json", "b.json"]
    (p2 / "a.json").write_text("{}")
    with pytest.raises(InputError, match="a.json is in both"):
        merge([p1, p2], tmp_path / "out2")


def test_gpu_run_packs_results_without_checkpoints(tmp_path):
    import tarfile

    from bench.gpu_run import main, pack

    res = tmp_path / "res"
    (res / "logs").mkdir(parents=True)
    (res / "a.json").write_text("{}")
    (res / "a.png").write_bytes(b"png")
    (res / "m.pt").write_bytes(b"weights")
    (res / "logs" / "train-x.log").write_text("x" * 10000 + "the end")
    size = pack(res, tmp_path / "p.tar.gz")
    with tarfile.open(tmp_path / "p.tar.gz") as tar:
        names = tar.getnames()
        tail = tar.extractfile("logs/train-x.log").read()
    assert size > 0 and sorted(names) == ["a.json", "a.png", "logs/train-x.log"]
    assert tail.endswith(b"the end") and len(tail) < 10000
    assert main(["--out", str(tmp_path / "o"), "--part", "3/2"]) == 2  # one line, exit 2
    (tmp_path / "file").write_text("x")
    assert main(["--out", str(tmp_path / "file"), "--part", "1/2"]) == 2  # not a traceback
