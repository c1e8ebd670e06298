"""Memorization: parameter counting and the capacity grid (issue 6) — training a cell, the
grid and its command line, the claims, the medium level's search (the datasets and their
loaders: tests/unit/tasks/test_memorization_data.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from analyses import common as mem_common
from analyses import memorization as am
from analyses.claims import Undecided
from analyses.memorization import cells as mem_cells
from analyses.memorization import claims as mem_claims
from analyses.memorization import cli as mem_cli
from analyses.memorization import grid as mem_grid
from analyses.memorization import search as mem_search
from analyses.memorization import stats as mem_stats
from analyses.memorization import sweep as mem_sweep
from analyses.zoo.levels import make_run_config
from models.registry import build_model
from models.train.loop import train
from probes.fits import fit_trends, line_fit
from seqprobe.errors import InputError
from tests.unit.tasks.test_memorization_data import CONLL


# ---------------------------------------------------------------------------- counting
def test_parameter_count_matches_a_hand_count():
    """|V| = 5, m = 4 (h = 2, k = 2), L = 1, q = 8, C = 3, by hand:
    embed 5·4 = 20; block: ln1 8 + W_Q,K,V,O 4·16 = 64 + biases 3·4 + 4 = 16 + ln2 8 +
    MLP 4·8 + 8 + 8·4 + 4 = 76 -> 172; ln_final 8; head 4·3 + 3 = 15. Total 215, 180 without
    the embedding and the head."""
    model = build_model("transformer", dict(vocab_size=5, d_model=4, n_heads=2, n_layers=1,
                                            d_mlp=8, pe="rope", causal=False,
                                            head="token_cls", n_classes=3))
    assert model.n_params() == 215 == mem_grid.param_count(4, 1, 5, 3, d_mlp=8)
    assert model.n_params(embeddings=False) == 180 == mem_grid.param_count(4, 1, 5, 3, 8, False)
    big = build_model("transformer", dict(vocab_size=40, d_model=24, n_heads=4, n_layers=3,
                                          pe="nope", causal=False, head="seq_cls", n_classes=7))
    assert big.n_params() == mem_grid.param_count(24, 3, 40, 7)
    assert big.n_params(embeddings=False) == mem_grid.param_count(24, 3, 40, 7, embeddings=False)


def test_fits_recover_exact_trends():
    n = [10, 20, 40, 80]
    lin = fit_trends(n, [100 + 3 * x for x in n], 4, "token")
    assert lin["linear"]["b"] == pytest.approx(3) and lin["linear"]["r2"] == pytest.approx(1)
    assert lin["linear"]["form"] == "a + b*N" and lin["points"] == 4
    sq = fit_trends(n, [50 + 2 * (4 * x) ** 0.5 for x in n], 4, "token")
    assert sq["theory"]["b"] == pytest.approx(2) and sq["theory"]["r2"] == pytest.approx(1)
    assert sq["theory"]["form"] == "a + b*sqrt(n*N)"
    assert sq["linear"]["r2"] < 1  # a square root is not a line
    seq = fit_trends(n, [7 + 5 * x**0.5 for x in n], 4, "sequence")  # √N, no n
    assert seq["theory"]["b"] == pytest.approx(5) and seq["theory"]["form"] == "a + b*sqrt(N)"
    assert fit_trends(n, [None, None, 5, None], 4, "sequence")["linear"] is None
    flat = line_fit(np.array([1.0, 2.0, 3.0]), np.array([4.0, 4.0, 4.0]))
    assert flat["b"] == pytest.approx(0) and flat["r2"] is None  # constant y: R² undefined


# ---------------------------------------------------------------------------- training
def test_train_cell_memorises_a_tiny_set():
    run_config = make_run_config("transformer", "memorization", "quick", model={"d_model": 16},
                     task_config={"n_examples": 8, "seq_len": 4},
                     train={"steps": 300, "warmup_steps": 10, "eval_every": 10})
    cell = mem_cells.train_cell(run_config, patience=0)
    assert cell["stop"] == "memorized" and cell["train_error"] < 0.005 and cell["steps"] < 300
    assert cell["steps"] % 10 == 0  # stopped right after the evaluation that saw it memorised
    assert cell["n_labels"] == 32 and cell["params_total"] == mem_grid.param_count(16, 2, 17, 2)


def test_train_cell_stops_on_a_plateau_and_reports_divergence(monkeypatch):
    """The stop rule's other two ends: no improvement for ``patience`` evaluations, and a
    non-finite loss (the loop's TrainingDiverged) as a cell, not an error."""
    run_config = make_run_config("transformer", "memorization", "quick", model={"d_model": 4},
                     task_config={"n_examples": 64, "seq_len": 8},
                     train={"steps": 300, "warmup_steps": 0, "eval_every": 2, "lr": 1e-4})
    cell = mem_cells.train_cell(run_config, patience=1)
    assert cell["stop"] == "plateau" and cell["steps"] < 300 and not cell["memorized"]
    assert cell["best_error"] <= cell["train_error"]
    import models.train.loss as loss_mod

    orig = loss_mod.nll  # --lr is bounded (seqprobe.flags.BOUNDS): the loss is made NaN instead
    monkeypatch.setattr(loss_mod, "nll", lambda logp, targets, reduction="mean": (
        orig(logp, targets, reduction) * (float("nan") if logp.requires_grad else 1.0)))
    wild = make_run_config("transformer", "memorization", "quick", model={"d_model": 8},
                     task_config={"n_examples": 8, "seq_len": 4},
                     train={"steps": 50, "warmup_steps": 0, "eval_every": 5, "lr": 10.0,
                            "grad_clip": 0})
    cell = mem_cells.train_cell(wild, patience=0)
    assert cell["stop"] == "diverged" and cell["steps"] < 50 and cell["loss"] != cell["loss"]
    assert 0 <= cell["train_error"] <= 1  # scored with the last finite weights


def test_stop_rule_counts_evaluations_without_improvement():
    class FakeRun:
        stop_reason = ""

    rule, run = mem_cells.StopRule(threshold=0.1, patience=2), FakeRun()
    assert not rule.on_eval(run, {"train_error": 0.5})
    assert not rule.on_eval(run, {"train_error": 0.4})  # improved: the count restarts
    assert not rule.on_eval(run, {"train_error": 0.4})
    assert rule.on_eval(run, {"train_error": 0.45}) and run.stop_reason == "plateau"
    run = FakeRun()
    assert mem_cells.StopRule(0.1, 0).on_eval(run, {"train_error": 0.05})
    assert run.stop_reason == "memorized"


def test_suite_trainer_runs_the_task_and_reports_train_error():
    run_config = make_run_config("transformer", "memorization", "quick", model={"d_model": 8},
                     task_config={"n_examples": 6, "labels_per": "sequence"},
                     train={"steps": 4, "eval_every": 2, "eval_batches": 1, "batch_size": 4})
    ck = train(run_config, progress=False)
    assert 0.0 <= ck["history"][-1]["train_error"] <= 1.0


def tiny_grid(out, **kw):
    return mem_sweep.compute("synthetic", kw.pop("level", "token"), "quick", out, widths=(4, 8),
                      fractions=(0.5, 1.0), task_config={"n_examples": 12, "seq_len": 4},
                      train={"steps": 30, "warmup_steps": 0, "eval_every": 10}, n_jobs=1,
                      progress=False, **kw)


def test_tiny_grid_end_to_end_and_resume(tmp_path, monkeypatch):
    result = tiny_grid(tmp_path)
    assert result["cells_trained"] == 4 and len(result["cells"]) == 4
    assert len(result["error"]) == 2 and len(result["error"][0]) == 2
    assert result["n_examples"] == [6, 12] and result["n_labels"] == [24, 48]
    assert result["params_total"][0] == mem_grid.param_count(4, 2, 17, 4)  # grid: C = 4
    saved = sorted(p.name for p in (tmp_path / "memorization_synthetic_token_cells").iterdir())
    assert saved == ["m00004_f050.json", "m00004_f100.json", "m00008_f050.json",
                     "m00008_f100.json"]
    # a second run reuses every saved cell and trains nothing
    monkeypatch.setattr(am.cells, "run_cell",
                        lambda *a, **k: pytest.fail("retrained a saved cell"))
    again = tiny_grid(tmp_path)
    assert again["cells_reused"] == 4 and again["error"] == result["error"]
    json.dumps(mem_common.to_jsonable(again))  # JSON-able
    # a changed stopping rule is a different cell: retrained (here: refused by the stub)
    with pytest.raises(pytest.fail.Exception):
        tiny_grid(tmp_path, threshold=0.01)


def test_cli_writes_figures_json_and_csv(tmp_path):
    argv = ["--data", "synthetic", "--labels-per", "sequence", "--widths", "4,8", "--fractions",
            "0.5,1", "--n-examples", "12", "--steps", "20", "--jobs", "1", "--out",
            str(tmp_path), "--no-progress"]
    assert mem_cli.main(argv) == 0
    name = "memorization_synthetic_sequence"
    for suffix in (".png", ".json", "_heatmap.png", "_params.png", "_cells.csv"):
        assert (tmp_path / f"{name}{suffix}").is_file()
    rows = list(csv.DictReader((tmp_path / f"{name}_cells.csv").open()))
    assert len(rows) == 4 and {r["d_model"] for r in rows} == {"4", "8"}
    data = json.loads((tmp_path / f"{name}.json").read_text())
    assert data["labels_per"] == "sequence" and data["level"] == "quick" and "param_counting" in data


def conll_argv(data: Path, out: Path) -> list[str]:
    """memorization's command line for a tiny CoNLL grid read from ``data``."""
    return ["--data", "conll", "--data-path", str(data), "--n-examples", "0", "--widths", "8",
            "--fractions", "1", "--steps", "3", "--jobs", "1", "--out", str(out), "--no-progress"]


def test_cli_runs_a_conll_grid_from_a_local_file(tmp_path):
    data = tmp_path / "eng.train"
    data.write_text(CONLL)
    argv = conll_argv(data, tmp_path / "out")
    assert mem_cli.main(argv) == 0
    result = json.loads((tmp_path / "out" / "memorization_conll_token.json").read_text())
    assert result["n_examples"] == [3] and result["n_labels"] == [9]  # 5 + 2 + 2 words
    assert result["config"]["model"]["n_classes"] == 9


@pytest.mark.parametrize("argv, match", [
    (["--data", "conll", "--data-path", "/nonexistent/eng.train"], "not found"),
    (["--data", "mnli", "--labels-per", "token", "--data-path", "x"], "has labels per sequence"),
    (["--data", "mnli", "--task", "token", "--data-path", "x"], "has labels per sequence"),
    (["--data", "conll"], "needs data_path"),
    (["--widths", "5", "--fractions", "1"], "divisible by n_heads"),
    (["--widths", "a,b"], "not an integer"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, match):
    assert mem_cli.main([*argv, "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1


def test_cli_refuses_checkpoints_it_would_ignore(tmp_path, capsys):
    assert mem_cli.main(["ckpt.pt", "--out", str(tmp_path)]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_reproduce_flags_run_the_token_grid(tmp_path, monkeypatch):
    """What the reproduce plan passes (``--quick --out DIR`` + FIGURE.extra_args) reaches
    compute as the synthetic token grid with five fractions, and names the outputs after it."""
    seen, real = {}, mem_sweep.compute

    def small(data, labels_per, level, out_dir, **kw):
        seen.update(data=data, labels_per=labels_per, level=level, fractions=kw["fractions"])
        return real(data, labels_per, level, out_dir, widths=(4,), fractions=(1.0,),
                    task_config={"n_examples": 4, "seq_len": 4},
                    train={"steps": 2, "warmup_steps": 0}, n_jobs=1, progress=False)

    monkeypatch.setattr(mem_sweep, "compute", small)  # the command imports it where it trains
    argv = ["--quick", "--out", str(tmp_path), *am.FIGURE.extra_args("quick")]
    assert mem_cli.main(argv) == 0
    assert seen == {"data": "synthetic", "labels_per": "token", "level": "quick",
                    "fractions": (0.2, 0.4, 0.6, 0.8, 1.0)}
    assert am.FIGURE.outputs == ("memorization_synthetic_token",)
    assert (tmp_path / "memorization_synthetic_token.json").is_file()
    assert "--fractions" not in am.FIGURE.extra_args("paper")
    assert tuple(am.FIGURE.recipes("quick")) == ()


# ---------------------------------------------------------------------------- claims
def mem_json(w=1.0, n=1.0, mins=(100, 100, 200), nondecreasing=True, rho=0.87):
    return {"trends": {"width_pairs_error_not_rising": w, "n_pairs_error_not_falling": n,
                       "spearman_error_vs_width": -0.9, "spearman_error_vs_n": None,
                       "spearman_min_params_vs_n": rho,
                       "min_params_nondecreasing": nondecreasing,
                       "n_memorized": sum(m is not None for m in mins)},
            "n_examples": [10, 20, 30], "min_params_non_embedding": list(mins),
            "fits": {"non_embedding": {"linear": {"r2": 0.75}}}}


def test_claim_trends_both_ways():
    text, ok = mem_claims.claim_trends(mem_json())
    assert ok and "100 %" in text and "-0.90" in text and "n/a" in text
    assert not mem_claims.claim_trends(mem_json(w=0.7))[1]  # error rises with width too often
    assert not mem_claims.claim_trends(mem_json(n=0.5))[1]
    assert mem_claims.claim_trends(mem_json(w=0.8, n=0.8))[1]  # the threshold itself holds


def test_claim_params_both_ways():
    text, ok = mem_claims.claim_params(mem_json())
    assert ok and "3/3 dataset sizes" in text and "R² 0.75" in text
    assert "Spearman vs N 0.87" in text
    # one search landing a width low does not flatten a rising series; a flat one fails
    text, ok = mem_claims.claim_params(mem_json(mins=(100, 80, 200, 300, 400), nondecreasing=False,
                                        rho=0.9))
    assert ok and "(not monotone)" in text
    assert not mem_claims.claim_params(mem_json(mins=(100, 80, 200), nondecreasing=False,
                                                rho=0.5))[1]
    assert not mem_claims.claim_params(mem_json(rho=None))[1]
    assert not mem_claims.claim_params(mem_json(mins=(None, None, 200)))[1]  # one N is no trend
    d = mem_json()
    d["fits"]["non_embedding"]["linear"] = None
    assert "R²" not in mem_claims.claim_params(d)[0]


# ---------------------------------------------------------------------------- medium: search
@pytest.mark.parametrize("guess", [None, 0, 3, 7, 11])
def test_search_finds_the_smallest_memorising_width_and_probes_each_once(guess):
    n = 12
    for answer in range(n + 1):  # answer == n: not even the widest memorises
        probed = []

        def memorises(i, answer=answer, probed=probed):
            probed.append(i)
            return i >= answer

        found = mem_search.search_min_width(n, memorises, guess)
        assert found == (answer if answer < n else None)
        assert len(probed) == len(set(probed)) <= 2 * 4 + 1  # gallop + bisect: O(log n)


def test_search_from_a_close_guess_takes_two_probes():
    probed = []
    assert mem_search.search_min_width(30, lambda i: probed.append(i) or i >= 17, guess=17) == 17
    assert probed == [17, 16]
    probed.clear()
    assert mem_search.search_min_width(30, lambda i: probed.append(i) or i >= 17, guess=16) == 17
    assert probed == [16, 17]


def test_power_fit_and_loglog_slope_recover_exact_shapes():
    from probes.fits import loglog_slope, power_fit

    n = np.array([32, 64, 128, 256, 512, 1024] * 2, dtype=float)
    for k in (0.5, 1.0):
        fit = power_fit(n, 300 + 7 * n**k, groups=n, boot=200)
        assert fit["k"] == pytest.approx(k) and fit["a"] == pytest.approx(300, rel=1e-6)
        assert fit["ci"][0] <= k <= fit["ci"][1]
    # one seed (one point per N): the interval resamples the N, and is not the point itself
    rng = np.random.default_rng(0)
    ns = np.array([16, 25, 38, 59, 91, 140, 215, 332, 512], dtype=float)
    noisy = 300 + 7 * ns * rng.uniform(0.85, 1.15, len(ns))
    one = power_fit(ns, noisy, groups=ns, boot=200)
    assert one["ci"][0] < one["k"] < one["ci"][1] and one["ci"][0] <= 1.0 <= one["ci"][1]
    assert 0 < one["boot_kept"] <= 200
    assert power_fit(ns, noisy, groups=ns, boot=200) == one  # seeded
    # two seeds that agree at every N: the N are still resampled, so the interval is not the
    # zero-width one that resampling only the seeds within each N would give
    agree = power_fit(np.r_[ns, ns], np.r_[noisy, noisy], groups=np.r_[ns, ns], boot=200)
    assert agree["k"] == one["k"] and agree["ci"][1] - agree["ci"][0] > 0.1
    ll = loglog_slope(n, 5 * n**0.75)
    assert ll["slope"] == pytest.approx(0.75) and ll["ci"][0] == pytest.approx(0.75)
    assert power_fit([1, 2], [3, 4])["k"] is None  # too few distinct N to fit three numbers
    assert line_fit(np.array([1.0, 2, 3]), np.array([2.0, 4, 6]))["rss"] == pytest.approx(0)


def search_json(verdict_inputs, small=(0.6, (0.4, 0.9)), large=(1.0, (0.8, 1.2))):
    """A search result whose non-embedding fits are (lin rss, sqrt rss, k CI), with the
    exponents (k, CI) over the smaller and the larger half of the N."""
    lin, sq, ci = verdict_inputs
    fit = {"linear": {"rss": lin, "rmse": lin**0.5, "r2": 0.99},
           "theory": {"rss": sq, "rmse": sq**0.5, "r2": 0.9},
           "power": {"k": sum(ci) / 2, "ci": list(ci)},
           "power_small": {"k": small[0], "ci": list(small[1])},
           "power_large": {"k": large[0], "ci": list(large[1])},
           "loglog": {"slope": 0.8, "ci": [0.7, 0.9]}}
    fit["verdict"] = mem_stats.shape_verdict(fit)
    n = [16, 25, 38, 59, 91, 140, 215, 332, 512]
    return {"search": {"seeds": [0, 1], "steps": [2000] * 6 + [8000] * 3}, "n_examples": n,
            "n_ratio": 32.0, "seq_len": 8, "fits": {"non_embedding": fit},
            "config": {"task": {"vocab": 16, "n_classes": 4},
                       "model": {"n_layers": 2, "n_heads": 1, "pe": "rope"},
                       "train": {"lr": 0.01, "schedule": "linear", "weight_decay": 0.0}}}


def test_shape_claims_both_ways():
    linear = search_json((1e4, 9e4, (0.85, 1.1)))
    text, ok = mem_claims.claim_linear(linear)
    assert ok is True and mem_claims.claim_sqrt(linear)[1] is False
    assert "k = 0.98 [95 % CI 0.85, 1.10]" in text and "9 N = 16…512 (32x), 2 seeds" in text
    assert "2,000 steps (8,000 at N = 215, 332, 512)" in text
    assert "verdict: linear" in text and "RMSE linear 100 vs a + b*sqrt(nN) 300" in text
    # our setting beside the paper's: what could not be matched
    assert "L = 2, h = 1" in text and "L = 6, h = 12, m in steps of 12, Adam lr 2e-5" in text
    sqrt = search_json((9e4, 1e4, (0.4, 0.7)))
    assert mem_claims.claim_sqrt(sqrt)[1] is True and mem_claims.claim_linear(sqrt)[1] is False
    # residuals favour one shape but the exponent's interval holds the other: undecided
    for undecided in (search_json((1e4, 9e4, (0.45, 1.1))), search_json((9e4, 1e4, (0.6, 1.05)))):
        assert "undecided" in mem_claims.claim_sqrt(undecided)[0]
        # neither shape shown: not decided at this level, not "does not hold" (nor n/a)
        for claim in (mem_claims.claim_sqrt, mem_claims.claim_linear):
            v = claim(undecided)[1]
            assert isinstance(v, Undecided) and "either shape" in v.reason
    assert mem_stats.shape_verdict({"linear": None, "theory": None, "power": {}}) == "undecided"
    grid = mem_json()  # the quick grid: too few N, the shape claims do not apply
    assert mem_claims.claim_sqrt(grid) is None and mem_claims.claim_linear(grid) is None
    assert mem_claims.claim_concave_small(grid) is None
    assert mem_claims.claim_trends(linear) is None  # and a search has no full grid for Fig. 1


def test_concavity_only_at_small_n_both_ways():
    text, ok = mem_claims.claim_concave_small(search_json((1e4, 9e4, (0.85, 1.1))))
    assert ok
    assert "N = 16…91: k = 0.60 [0.40, 0.90]" in text
    assert "N = 91…512: k = 1.00 [0.80, 1.20]" in text
    for small, large in (((0.6, (0.4, 0.9)), (0.6, (0.4, 0.95))),  # concave throughout
                         ((0.6, (0.4, 0.9)), (1.5, (1.2, 1.8))),  # convex at large N
                         ((1.4, (1.1, 1.7)), (1.0, (0.8, 1.2)))):  # convex at small N
        assert mem_claims.claim_concave_small(search_json((1e4, 9e4, (0.85, 1.1)), small,
                                                  large))[1] is False
    # the small half's interval holds k < 1 and k = 1: either shape, not decided
    v = mem_claims.claim_concave_small(search_json((1e4, 9e4, (0.85, 1.1)), (0.8, (0.5, 1.05)),
                                           (1.0, (0.8, 1.2))))[1]
    assert isinstance(v, Undecided) and "either shape" in v.reason
    d = search_json((1e4, 9e4, (0.85, 1.1)))
    d["fits"]["non_embedding"]["power_small"] = {"k": None, "ci": None}  # too few N
    text, ok = mem_claims.claim_concave_small(d)
    assert isinstance(ok, Undecided) and "N = 16…91: k n/a" in text


def test_step_budgets_lengthen_the_largest_n():
    ns = (16, 25, 38, 59)
    assert mem_search.step_budgets(ns, 2000, mem_grid.Long(largest=2, factor=4)) == {
        16: 2000, 25: 2000, 38: 8000, 59: 8000}
    assert mem_search.step_budgets(ns, 2000, None) == dict.fromkeys(ns, 2000)
    assert mem_search.step_budgets(ns, 2000, mem_grid.Long(largest=0,
                                                           factor=4)) == dict.fromkeys(ns, 2000)
    assert mem_search.step_budgets(ns, 10, mem_grid.Long(largest=9, factor=3)) == dict.fromkeys(ns,
                                                                                                30)
    with pytest.raises(InputError):
        mem_grid.Long(largest=1, factor=0)
    space = mem_grid.CellSpace("synthetic", "token", "medium",
                         {"n_examples": 16, "data": "synthetic", "labels_per": "token"},
                         {"n_heads": 1}, {})
    run_configs = mem_search.search_run_configs(space, (4,), (8, 16), 0, {16: 123})
    assert run_configs[(16, 4)].train.steps == 123 and run_configs[(8, 4)].train.steps == 2000
    assert run_configs[(16, 4)].hash() != mem_search.search_run_configs(space, (4,), (16,), 0)[
        (16, 4)].hash()  # a longer budget is another cell, never a reused shorter one
    assert mem_claims.budget_text({"n_examples": [8, 16], "search": {"steps": [2000, 2000]}}) == (
        "2,000 steps")


def fake_search(seed, widths_found):
    cells = [{"d_model": m, "n_examples": n, "n_labels": 8 * n, "seq_len": 8,
              "params_total": 10 * m * m + 100, "params_non_embedding": 10 * m * m,
              "memorized": True, "time_s": 1.0, "reused": False}
             for n, m in zip((10, 20, 40), widths_found, strict=True) if m is not None]
    return {"seed": seed, "min_width": list(widths_found), "cells": cells, "cpu_s": 1.0}


def test_summarise_search_pools_the_seeds():
    r = mem_stats.summarise_search([fake_search(1, (4, 6, 8)), fake_search(0, (4, 5, None))],
                            (10, 20, 40), tuple(range(2, 10)), 0.005, "token")
    sr = r["search"]
    assert sr["seeds"] == [0, 1] and sr["min_width"] == [[4, 5, None], [4, 6, 8]]
    assert sr["params"]["non_embedding"] == [[160, 250, None], [160, 360, 640]]
    assert r["min_params_non_embedding"] == [160, 305, 640]  # mean over the seeds found
    assert sr["summary"]["non_embedding"]["found"] == [2, 2, 1]
    assert r["min_width"] == [4.0, 5.5, None] and r["n_labels"] == [80, 160, 320]
    assert r["fits"]["non_embedding"]["points"] == 5 and r["n_ratio"] == 4
    assert r["trends"]["min_params_nondecreasing"] and r["trends"]["n_memorized"] == 3
    assert mem_cli.table(r)[1][:4] == [10, 80, 4, 4]


def tiny_search(out, **kw):
    return mem_sweep.compute("synthetic", "token", "medium", out, widths=(2, 4, 8),
                      fractions=(0.5, 1.0), task_config={"n_examples": 8, "seq_len": 4},
                      train={"steps": 30, "warmup_steps": 0, "eval_every": 10}, n_jobs=1,
                      progress=False, seeds=2, **kw)


def test_tiny_search_end_to_end_and_resume(tmp_path, monkeypatch):
    result = tiny_search(tmp_path)
    assert result["level"] == "medium" and result["search"]["seeds"] == [0, 1]
    assert result["config"]["model"]["n_heads"] == 1  # the medium grid's one head
    assert result["config"]["train"]["batch_size"] == 1024  # full batch
    assert result["cells_trained"] == len(result["cells"]) > 0
    # the medium row's uniform budget (here the test's 30 steps) at every N
    assert result["search"]["steps"] == [30, 30]
    assert {c["steps"] <= 30 for c in result["cells"]} == {True}
    saved = {p.name for p in (tmp_path / "memorization_synthetic_token_cells").iterdir()}
    assert {mem_cells.search_cell_name(c["n_examples"], c["d_model"], c["seed"])
            for c in result["cells"]} == saved
    json.dumps(mem_common.to_jsonable(result))
    monkeypatch.setattr(am.cells, "train_cell", lambda *a, **k: pytest.fail("retrained a cell"))
    again = tiny_search(tmp_path)
    assert again["cells_trained"] == 0 and again["search"] == result["search"]


def test_medium_is_a_level_of_the_figure():
    assert "medium" in am.FIGURE.levels
    assert mem_claims.plan_args("medium") == ["--data", "synthetic", "--labels-per", "token",
                                              "--no-progress"]
    labels = [label for label, _ in mem_grid.dry_run_cells("medium")]
    assert labels == ["memorization_synthetic_token/m48_f1",
                      "memorization_synthetic_token/m2_f0.03125"]
    largest, smallest = (build() for _, build in mem_grid.dry_run_cells("medium"))
    assert largest.model.n_heads == 1
    assert (largest.train.steps, smallest.train.steps) == (8000, 8000)  # 4x quick, every N
    assert mem_grid.dry_run_cells("quick")[0][1]().train.steps == 2000
