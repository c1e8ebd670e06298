"""copy_efficiency at the medium level: samples-to-accuracy over seeds and lengths, the GSSM /
transformer ratios, their claims (on hand-made histories and dicts), the zoo's medium recipes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from analyses import copy_efficiency as ce
from analyses import zoo
from analyses.claims import Undecided
from analyses.copy_efficiency.claims import claim_fewer_samples, claim_gap_grows
from analyses.copy_efficiency.seeded import _run_of, compute_medium
from analyses.zoo import copy as zoo_copy
from models.checkpoint.io import read_checkpoint
from probes import sample_efficiency
from probes.sample_efficiency import gap_is_clear, mean_interval, medium_by_length, paper_gap
from seqprobe.errors import InputError


def history(reach_at: int | None, steps: int = 10, batch: int = 100) -> list[dict]:
    """String accuracy 0 until step ``reach_at`` (1.0 from there; None: never), 0.6 the step
    before: samples to 50 % is one step earlier than to 90 %."""
    rows = []
    for step in range(1, steps + 1):
        acc = 0.0 if reach_at is None or step < reach_at - 1 else 0.6 if step == reach_at - 1 \
            else 1.0
        rows.append({"step": step, "samples_seen": step * batch, "string_acc": acc,
                     "char_acc": acc})
    return rows


def runs(run_config: dict[tuple[str, int], list[int | None]]) -> list[dict]:
    """{(label, L): [reach step per seed]} -> compute_medium's runs."""
    return [{"label": label, "length": L, "seed": s, "history": history(r)}
            for (label, L), reach in run_config.items() for s, r in enumerate(reach)]


def test_compute_medium_means_ratios_and_per_seed_pairs():
    d = compute_medium(runs({("rope", 5): [2, 2, 4], ("hard_alibi", 5): [3, 3, 3],
                             ("mamba", 5): [4, 6, 8], ("lstm", 5): [6, None, 6]}))
    d = json.loads(json.dumps(d))  # as reproduce reads it
    m = d["by_length"]["5"]
    assert m["models"]["rope"]["string_0.9"]["mean"] == pytest.approx(800 / 3)
    assert m["models"]["rope"]["string_0.5"]["per_seed"] == [100, 100, 300]
    assert m["reference"] == "rope"  # fewest mean samples among the transformers
    mamba = m["ratio_to_reference"]["mamba"]
    assert mamba["ratio"] == pytest.approx(600 / (800 / 3))
    assert mamba["per_seed"] == [2.0, 3.0, 2.0]  # seed s over the reference's seed s
    assert (mamba["min"], mamba["max"], mamba["all_reached"]) == (2.0, 3.0, True)
    lstm = m["ratio_to_reference"]["lstm"]
    assert lstm["per_seed"] == [3.0, None, 1.5] and lstm["all_reached"] is False
    assert m["best_gssm"] == "mamba"  # the LSTM's mean is only a lower bound
    assert m["models"]["lstm"]["string_0.9"]["reached"] == 2
    rows = ce.table(d)
    assert rows[0][0] == "L" and any(r[1] == "rope" and r[-2] == "reference" for r in rows)
    ce.plot(d)  # draws
    # the LSTM (in the regime at L = 5: the trend predicts 17x) slower in every seed, the seed
    # that never got there at its bound (>= 1000 / 200): a t test on the log ratios decides it
    # with 3 seeds, where a sign test could not (issue 54 §3); Mamba at L = 5 (1.7x) is shown
    # beside it, not counted
    assert lstm["kind"] == ["exact", "lower bound", "exact"]
    holds = claim_fewer_samples(d)[1]
    assert holds is True
    d["by_length"]["5"]["ratio_to_reference"]["lstm"]["log_ratio"][1] = -3.0  # much faster
    assert claim_fewer_samples(d)[1] is not True


def test_claims_read_compute_medium():
    # four lengths (a seed's slope needs four), rope at 200 samples in every seed, Mamba's
    # ratio rising with L in every seed (seeds differ, so the t tests have a spread)
    run_config = {**{("rope", L): [2, 2, 2, 2] for L in (10, 12, 16, 20)},
                  ("mamba", 10): [3, 4, 3, 4], ("mamba", 12): [5, 5, 4, 5],
                  ("mamba", 16): [6, 7, 6, 6], ("mamba", 20): [8, 9, 8, 9]}
    d = json.loads(json.dumps(compute_medium(runs(run_config))))
    stored = d["slopes"]["mamba"]  # each seed's slope, stored for a referee
    assert stored["seeds"] == [0, 1, 2, 3] and stored["kinds"] == ["exact"] * 4
    x = np.log([10, 12, 16, 20])
    assert stored["slopes"][0] == pytest.approx(np.polyfit(x, np.log([1.5, 2.5, 3, 4]), 1)[0])
    assert claim_gap_grows(d)[1] is True
    assert claim_fewer_samples(d)[1] is True
    for L, reach in zip((10, 12, 16, 20), ([9, 8, 9, 8], [6, 7, 6, 6], [5, 5, 4, 5],
                                           [3, 4, 3, 4]), strict=True):
        run_config[("mamba", L)] = reach
    d = json.loads(json.dumps(compute_medium(runs(run_config))))
    assert claim_gap_grows(d)[1] is False  # L = 10 -> 20: the paper's trend 3.3x -> 6.7x


def test_each_model_is_credited_with_its_best_lr():
    """Per model and L, the lr with the most seeds at 90 %, then the lowest median; the ratio
    pairs seeds at each model's own best lr."""
    run_config = {("rope", 5, 1e-3): [6, 6, 6], ("rope", 5, 1e-2): [2, 2, 9],  # median 2 < 6
                  ("mamba", 5, 1e-3): [4, 4, None],  # fastest, but a seed never got there
                  ("mamba", 5, 1e-2): [8, 8, 8], ("mamba", 5, 3e-3): [9, 9, 9]}
    d = json.loads(json.dumps(compute_medium(
        [{"label": label, "length": L, "seed": s, "lr": lr, "history": history(r),
          "params": 1000 if label == "rope" else 1100}
         for (label, L, lr), reach in run_config.items() for s, r in enumerate(reach)],
        {"paper": "the paper's", "not_matched": "scale"})))
    m = d["by_length"]["5"]
    assert m["best_lr"] == {"rope": 0.01, "mamba": 0.01}
    assert m["models"]["rope"]["lr"] == 0.01 and m["models"]["mamba"]["params"] == 1100
    assert m["sweep"]["mamba"]["0.001"]["string_0.9"]["reached"] == 2
    assert m["ratio_to_reference"]["mamba"]["per_seed"] == [4.0, 4.0, 8 / 9]
    assert sum(r["best_lr"] for r in d["runs"]) == 6  # 3 seeds of each model's best lr
    text, holds = claim_fewer_samples(d)
    # Mamba at L = 5 only, where the paper's trend predicts 1.7x: outside the regime
    assert isinstance(holds, Undecided) and "regime" in holds.reason
    assert "best lr of 0.001/0.003/0.01" in text and text.startswith("not matched: scale")
    assert "params mamba 1k, rope 1k" in text
    rows = ce.table(d)
    # each model's 1e-2 is the top of the lrs it was swept over: the optimum may lie beyond
    assert m["lr_edge"] == {"rope": "high", "mamba": "high"}
    assert rows[0][3] == "best lr" and any(
        r[1] == "mamba" and r[3] == "0.01 (at the high end of 0.001/0.003/0.01)" for r in rows)
    assert any(r[1] == "rope" and r[3] == "0.01 (at the high end of 0.001/0.01)" for r in rows)
    ce.plot(d)  # draws, the sweep panel too
    assert sample_efficiency.best_lr({"0.001": {"per_seed": [5, 5], "reached": 2},
                       "0.01": {"per_seed": [5, 5], "reached": 2}}) == "0.001"  # tie: lower


def test_reference_must_reach_in_every_seed():
    d = compute_medium(runs({("rope", 5): [2, None], ("nope", 5): [5, 5],
                             ("mamba", 5): [8, 8]}))
    assert d["by_length"]["5"]["reference"] == "nope"
    d = compute_medium(runs({("rope", 5): [2, None], ("mamba", 5): [8, 8]}))
    assert d["by_length"]["5"]["reference"] is None
    assert d["by_length"]["5"]["ratio_to_reference"] == {}


def verdict(claim, d):
    text, holds = claim(d)
    assert isinstance(text, str) and text
    return holds


def medium_json(ratios: dict[int, dict[str, list[float | None]]]) -> dict:
    """Hand-made medium result: at each L, per-seed GSSM / rope ratios (rope: 1000 samples)."""
    by_length = {}
    for L, per in ratios.items():
        rr = {}
        for g, xs in per.items():
            got = [x for x in xs if x is not None]
            rr[g] = {"ratio": sum(got) / len(got) if got else None, "per_seed": xs,
                     "min": min(got) if got else None, "max": max(got) if got else None,
                     "all_reached": len(got) == len(xs)}
        by_length[str(L)] = {"models": {"rope": {"string_0.9": {"mean": 1000.0}}},
                             "reference": "rope", "ratio_to_reference": rr}
    return {"level": "medium", "by_length": by_length}


def test_fewer_samples_claim_at_medium():
    """A result without per-seed log ratios (written before issue 54) is read from its
    per-seed ratios: a seed that never got there has no number there (its budget was not
    recorded). More cases, with bounds: tests/unit/analyses/test_copy_regime.py."""
    claim = claim_fewer_samples
    assert verdict(claim, medium_json({5: {"lstm": [1.5, 2.5, 2.0, 3.0]},
                                       8: {"mamba": [9.0, 6.0, 7.0, 8.0]}})) is True
    # the GSSM faster in every seed, at a length where the paper's trend predicts a clear gap
    # (Mamba 10x at L <= 30, ∝ L: 2.7x at 8)
    assert verdict(claim, medium_json({8: {"mamba": [0.8, 0.7, 0.75, 0.6]}})) is False
    # ... and at L <= 5, where it predicts 1.7x: not decided at this level
    und = verdict(claim, medium_json({5: {"mamba": [0.8, 0.7, 0.75, 0.6]}}))
    assert isinstance(und, Undecided) and "paper's regime" in und.reason
    # the LSTM (100x at 30) predicts a clear gap even at L <= 5
    assert verdict(claim, medium_json({5: {"lstm": [0.8, 0.7, 0.75, 0.6]}})) is False
    # one seed of four faster: either side
    und = verdict(claim, medium_json({8: {"mamba": [2.0, 1.5, 3.0, 0.8]}}))
    assert isinstance(und, Undecided) and "either side" in und.reason
    no_ref = medium_json({5: {"mamba": [2.0, 3.0]}})
    no_ref["by_length"]["5"]["reference"] = None
    und = verdict(claim, no_ref)  # no transformer got there
    assert isinstance(und, Undecided) and "learnt" in und.reason
    assert verdict(claim, medium_json({5: {}})) is None  # no GSSM


def test_gap_grows_claim():
    """Each seed's slope of log ratio on log L over four lengths, a t test of the slopes."""
    claim = claim_gap_grows
    grows = medium_json({5: {"mamba": [2.0, 1.5, 2.5, 2.0]}, 6: {"mamba": [3.0, 2.0, 3.5, 2.5]},
                         8: {"mamba": [4.0, 3.5, 5.0, 3.0]}, 10: {"mamba": [6.0, 5.0, 7.0, 5.5]}})
    assert verdict(claim, grows) is True
    shrinks = medium_json({5: {"lstm": [6.0, 5.0, 7.0, 6.5]}, 6: {"lstm": [5.0, 4.0, 6.0, 5.0]},
                           8: {"lstm": [4.0, 3.0, 4.5, 3.5]}, 10: {"lstm": [3.0, 2.0, 3.5, 2.5]}})
    assert verdict(claim, shrinks) is False
    # two lengths: a slope needs four
    und = verdict(claim, medium_json({5: {"mamba": [2.0] * 5}, 8: {"mamba": [9.0] * 5}}))
    assert isinstance(und, Undecided) and "at least 4" in und.reason
    assert claim({"samples_to_reach": {}}) is None  # quick: not a claim of that level


def test_medium_claims_say_the_setting():
    """With the zoo's setting and a sweep in the result, both claims' texts say what was
    trained (best lr per model and L, seeds) and what of the paper's setting is not matched;
    the verdicts are those of the ratios alone."""
    und = Undecided  # at L <= 6 the paper's trend predicts Mamba <= 2x: a fall or a faster
    for ratios, holds, fewer in (({4: {"mamba": [0.5, 0.6]}, 6: {"mamba": [1.5, 2.0]}}, und,
                                  und),  # grows in 2 seeds (too few); fewer not decided
                                 ({4: {"mamba": [2.0, 2.5]}, 6: {"mamba": [1.5, 2.0]}}, und,
                                  und)):  # falls (not decided at L <= 6); 2 seeds: too few
        d = medium_json(ratios)
        d["setting"] = zoo_copy.COPY_MEDIUM_SETTING
        for m in d["by_length"].values():
            m["best_lr"] = {"rope": 0.003, "mamba": 0.01}
            m["sweep"] = {"rope": {"0.003": {}, "0.01": {}}, "mamba": {"0.01": {}}}
            m["models"]["rope"] |= {"seeds": [0, 1], "params": 103966}
        text, verdict_ = claim_gap_grows(d)
        assert verdict_ is holds or isinstance(verdict_, holds)
        # what is not matched comes first
        assert text.startswith("not matched: " + zoo_copy.COPY_MEDIUM_SETTING["not_matched"])
        assert "best lr of 0.003/0.01 per L (L=4 rope 0.003, mamba 0.01" in text
        assert "params rope 104k" in text and "2 seeds" in text
        text, verdict_ = claim_fewer_samples(d)
        assert verdict_ is fewer or isinstance(verdict_, fewer)
        assert text.startswith("not matched: ")
        assert "setting: " + zoo_copy.COPY_MEDIUM_SETTING["paper"] in text


def test_medium_recipes_in_the_zoo():
    M = zoo_copy.COPY_MEDIUM
    names = zoo_copy.copy_medium_recipes(sweep=True)
    n = (len(M["swept_lengths"]) * len(M["labels"]) * len(M["sweep_seeds"]) * len(M["lrs"]))
    assert len(names) == len(set(names)) == n
    # the plan trains each model of the plan at its chosen lr at the verdict's seeds only
    chosen = zoo_copy.copy_medium_recipes()
    assert ce.FIGURE.recipes("medium") == chosen
    assert len(chosen) == len(M["lengths"]) * len(M["labels"]) * len(M["seeds"])
    # the lrs were chosen on seeds that are not the verdict's (issue 54 §5)
    assert not set(M["seeds"]) & set(M["sweep_seeds"])
    assert not {n.rsplit("_s", 1)[1] for n in chosen} & {str(s) for s in M["sweep_seeds"]}
    for L, lrs in zoo_copy.COPY_MEDIUM_LR.items():
        assert L in M["lengths"] and set(lrs) == set(zoo_copy.COPY_MEDIUM_LABELS)
        assert set(lrs.values()) <= set(M["lrs"])
    # a length beyond the sweep takes each model's lr at the longest swept length
    assert zoo_copy.COPY_MEDIUM_LR[M["lengths"][-1]] == zoo_copy.COPY_MEDIUM_LR[
        max(M["swept_lengths"])]
    assert "medium" in ce.FIGURE.levels
    for name in [*names, *chosen]:
        r = zoo.recipe(name)
        assert r.available("medium") and not r.available("quick") and not r.available("paper")
    L = M["lengths"][-1]
    run_config = zoo.run_config(zoo_copy.copy_medium_name("mamba2", L, 2, 3e-3), "medium")
    assert (run_config.task.min_len, run_config.task.max_len) == (1, L)  # lengths <= L
    train = run_config.train
    assert train.seed == 2 and train.stop_at == 0.9 and train.lr == 3e-3
    assert train.steps == zoo_copy.COPY_MEDIUM_LONG_TRAIN[L]["steps"]  # the longer cap
    short = zoo.run_config(zoo_copy.copy_medium_name("mamba2", 4, 2, 3e-3), "medium")
    assert short.train.steps == zoo_copy.COPY_MEDIUM_TRAIN["steps"]
    rope = zoo.run_config(zoo_copy.copy_medium_name("rope", L, 0, 1e-2), "medium")
    assert rope.model.rotary_frac == 0.25 and rope.model.parallel_residual is True
    hashes = {zoo.run_config(zoo_copy.copy_medium_name("rope", L, s, lr), "medium").hash()
              for s in M["seeds"] for lr in M["lrs"]}
    assert len(hashes) == len(M["seeds"]) * len(M["lrs"])
    L0 = M["lengths"][0]
    assert zoo_copy.copy_medium_recipes(["lstm"], sweep=True)[0] == zoo_copy.copy_medium_name(
        "lstm", L0, M["sweep_seeds"][0], M["lrs"][0])
    assert zoo_copy.copy_medium_recipes(["lstm"])[0] == zoo_copy.copy_medium_name(
        "lstm", L0, M["seeds"][0], zoo_copy.COPY_MEDIUM_LR[L0]["lstm"])
    with pytest.raises(InputError, match="unknown model 'gpt'"):
        zoo_copy.copy_medium_recipes(["gpt"])


def test_medium_models_are_parameter_matched():
    """Every medium copy model within ±20 % of the RoPE transformer's parameter count (the
    paper matches Mamba and the transformers), counted on the meta device."""
    from models.train.build import run_size
    from tasks.registry import make_task

    L = zoo_copy.COPY_MEDIUM["lengths"][-1]
    counts = {}
    for label in zoo_copy.COPY_MEDIUM_LABELS:
        run_config = zoo.run_config(zoo_copy.copy_medium_name(label, L, 0, 1e-3), "medium")
        counts[label] = run_size(run_config, make_task("copy", run_config.task_dict))[0]
    for label, n in counts.items():
        assert 0.8 <= n / counts["rope"] <= 1.2, (label, n, counts["rope"])


def test_run_of_reads_label_length_and_seed(tmp_path):
    from models.train.loop import train

    L = zoo_copy.COPY_MEDIUM["lengths"][0]
    run_config = zoo.run_config(zoo_copy.copy_medium_name("lstm", L, 1, 3e-3), "medium",
                    train={"steps": 3, "eval_every": 1, "stop_at": 0.0})
    run_config = run_config.replace(model={"d_model": 8, "n_layers": 1})
    torch.manual_seed(0)
    train(run_config, tmp_path / "m.pt", "cpu", progress=False)
    run = _run_of(str(tmp_path / "m.pt"))
    assert (run["label"], run["length"], run["seed"], run["lr"]) == ("lstm", L, 1, 3e-3)
    assert run["params"] == sum(p.numel() for p in read_checkpoint(
        tmp_path / "m.pt")["state_dict"].values())
    assert len(run["history"]) == 3


def test_sweep_flag_trains_every_lr_and_only_at_medium():
    import argparse

    sweep = argparse.Namespace(train="medium", models="lstm", sweep=True)
    assert ce._recipes(sweep) == zoo_copy.copy_medium_recipes(["lstm"], sweep=True)
    chosen = argparse.Namespace(train="medium", models="lstm", sweep=False)
    assert ce._recipes(chosen) == zoo_copy.copy_medium_recipes(["lstm"])
    with pytest.raises(InputError, match="--sweep goes with --train medium"):
        ce._recipes(argparse.Namespace(train="quick", models=None, sweep=True))


def test_paper_trend_and_the_bootstrap_of_the_ratio_change():
    # Fig. 9b / 1a: Mamba 10x at L <= 30, 100x at 300 -> ∝ L; the LSTM 100x at 30
    assert paper_gap("mamba", 300) == pytest.approx(100) and paper_gap("mamba", 6) == 2.0
    assert not gap_is_clear("mamba", 6) and gap_is_clear("mamba", 7)
    assert gap_is_clear("lstm", 4) and paper_gap("rope", 6) is None
    lo, hi = mean_interval([1.0, 2.0, 3.0])  # all 27 resamples: exact
    assert lo > 1.0 and hi < 3.0 and mean_interval([1.0, 2.0, 3.0]) == (lo, hi)
    lo, hi = mean_interval([-1.0, 0.5, 2.0])
    assert lo < 0 < hi
    many = [float(x) for x in range(20)]  # seeded draws: the same interval every call
    assert mean_interval(many) == mean_interval(many) and mean_interval(many)[0] > 5


def test_samples_to_90_are_read_at_exactly_L_with_the_distribution_beside():
    """Fig. 1a's caption scores at exactly L: a run whose mean over 1..L reaches 90 % before its
    length-L strings do is credited when the length-L score gets there."""
    def hist(dist_at: int, exact_at: int, L: int) -> list[dict]:
        return [{"step": t, "samples_seen": 100 * t, "string_acc": float(t >= dist_at),
                 "char_acc": 1.0,
                 "string_acc_at": {ell: float(t >= (exact_at if ell == L else dist_at))
                                   for ell in range(1, L + 1)}} for t in range(1, 11)]
    runs = [{"label": "rope", "length": 4, "seed": s, "lr": 1e-3, "history": hist(2, 3, 4)}
            for s in range(2)]
    runs += [{"label": "mamba", "length": 4, "seed": s, "lr": 3e-3, "history": hist(3, 9, 4)}
             for s in range(2)]
    d = json.loads(json.dumps(compute_medium(runs)))  # JSON: the {L: acc} keys as strings
    m = d["by_length"]["4"]
    assert m["scored_at"] == "exactly L"
    assert m["models"]["rope"]["string_0.9"]["per_seed"] == [300, 300]
    assert m["models"]["rope"]["dist_string_0.9"]["per_seed"] == [200, 200]
    assert m["ratio_to_reference"]["mamba"]["per_seed"] == [3.0, 3.0]  # 900 / 300
    # medium runs at their one chosen lr are flagged against the grid that chose it
    assert m["lr_grid"]["rope"] == list(zoo_copy.COPY_MEDIUM_LR_GRID[4]["rope"])
    assert m["lr_edge"] == {"rope": None, "mamba": None}  # both inside the wide grid
    # a choice made on a grid whose end it sits at is flagged: one grid per model and L
    _, at = medium_by_length(runs, {4: {"rope": (1e-3, 3e-3), "mamba": (1e-3, 3e-3)}})
    assert at[4]["lr_edge"] == {"rope": "low", "mamba": "high"}
    rows = ce.table(d)
    assert rows[0][7] == "→90% over 1..L" and any(r[7] == "200 ± 0" for r in rows)
    ce.plot(d)
    # a run from before per-length scores: every run at that L read over the distribution
    runs[0]["history"] = [{k: v for k, v in h.items() if k != "string_acc_at"}
                          for h in runs[0]["history"]]
    m = compute_medium(runs)["by_length"]["4"]
    assert m["scored_at"] == "training distribution"
    assert m["models"]["mamba"]["string_0.9"]["per_seed"] == [300, 300]
