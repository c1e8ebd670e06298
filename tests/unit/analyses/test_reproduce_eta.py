"""The reproduce ETA: estimated costs packed as the scheduler packs them, learned from the
jobs that finish, and the step-cost table it reads."""

import json
from dataclasses import replace

import pytest
import torch

from analyses.reproduce.eta import AnalysisSeconds, plan_eta, sources
from analyses.reproduce.plan import PLAN, TRAIN, Job, build_jobs
from analyses.zoo.dryrun import recipe_run_config
from models.train.costs import (
    FORMAT,
    Estimate,
    StepCosts,
    cost_key,
    evaluations,
    reference_seconds,
)
from seqprobe.sweep.eta import PRIOR_SHARE, Eta, makespan


def job(name, slots=1, after=()):
    return Job(name, (), slots, tuple(after))


def test_the_eta_of_a_fake_plan_is_the_longest_first_packing_of_its_costs():
    jobs = [job(n) for n in "abcde"]
    cost = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 3.0, "e": 3.0}
    # longest first on two slots: a | b, then c on b's slot (t=4), d on a's (t=5), e on c's
    # slot (t=7): the last ends at 10
    assert makespan(jobs, cost, workers=2) == 10.0
    assert makespan(jobs, cost, workers=1) == sum(cost.values())
    eta = Eta(jobs, 2, {n: Estimate(s, "table") for n, s in cost.items()})
    assert eta.remaining({}) == 10.0


def test_packing_respects_dependencies_and_two_slot_jobs():
    jobs = [job("train:a", slots=2), job("x"), job("y", after=["train:a"])]
    cost = {"train:a": 10.0, "x": 4.0, "y": 1.0}
    # the chain train:a -> y (the fake plan's longest) goes first and holds both slots;
    # x and y share them after
    assert makespan(jobs, cost, workers=2) == 14.0
    # a running job holds its slot for what is left of it
    assert makespan([job("x")], {"x": 4.0}, 1, running={"r": (3.0, 1)}) == 7.0


def test_finished_jobs_scale_the_rest_shrunk_toward_one():
    jobs = [job(n) for n in "abcd"]
    eta = Eta(jobs, 1, {n: Estimate(10.0, "table") for n in "abcd"})
    assert eta.ratio() == 1.0
    eta.done("a", 30.0, ok=True)  # three times slower than estimated
    prior = PRIOR_SHARE * 40.0
    assert eta.ratio() == pytest.approx((30.0 + prior) / (10.0 + prior))
    assert eta.remaining({}) == pytest.approx(3 * 10.0 * eta.ratio())
    eta.done("b", 0.0, ok=False)  # a failure teaches nothing of the cost
    assert eta.ratio() == pytest.approx((30.0 + prior) / (10.0 + prior))
    assert eta.remaining({}) == pytest.approx(2 * 10.0 * eta.ratio())


def test_the_last_runs_time_beats_the_table(tmp_path):
    costs, analyses = StepCosts(), AnalysisSeconds({"quick": {"x": 7.0, "y": 9.0}})
    jobs = [job("x"), job("y"), job("z")]
    eta = plan_eta(jobs, 1, "quick", costs, {"x": {"ok": True, "seconds": 2.0},
                                           "y": {"ok": False, "seconds": 1.0}}, analyses)
    assert eta.estimates["x"] == Estimate(2.0, "timings")
    assert eta.estimates["y"] == Estimate(9.0, "table")  # a failed run's time is no estimate
    assert eta.estimates["z"] == Estimate(8.0, "median")
    assert "1 from the last run's times" in sources(eta)


def test_a_training_job_costs_its_steps_times_the_tables_step(tmp_path):
    run_config = recipe_run_config("markov/transformer_1L", "quick")
    row = {"arch": run_config.arch, "step": 2.0, "eval": 100.0, "start": 600.0,
           "flops_per_step": 1e9}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": FORMAT, "rows": {cost_key(run_config): row}}))
    costs = replace(StepCosts.load(path), unit_s=0.005)  # fixed: times nothing
    evals = evaluations(run_config.train.steps, run_config.train.eval_every)
    want = 0.005 * (600.0 + run_config.train.steps * 2.0 + evals * 100.0)
    assert costs.run(run_config) == Estimate(pytest.approx(want), "table")
    eta = plan_eta([job(TRAIN + "markov/transformer_1L")], 2, "quick", costs, {})
    assert eta.remaining({}) == pytest.approx(want)
    # another size of the same architecture: the table's rate per FLOP
    other = recipe_run_config("markov/transformer_2L", "quick")
    assert costs.run(other).source == "flops"
    # no mamba2 row: projected from its FLOPs at the table's rate, and the ETA says so
    mamba = recipe_run_config("markov/mamba2", "quick")
    assert costs.run(mamba).source == "projection"
    assert StepCosts(unit_s=0.005).run(mamba) is None  # an empty table projects nothing


def test_an_architecture_the_table_never_measured_is_projected_not_left_out(tmp_path):
    """A new architecture has no row: its FLOPs (its class's ``flops_per_token``) at the rate
    of the rows there are, and the ETA's start line says "projected" for it."""
    from models.train.plan import plan_row

    run_config, new = recipe_run_config("markov/transformer_1L",
                                        "quick"), recipe_run_config("markov/mamba2",
                                                                                             "quick")
    row = {"arch": run_config.arch, "step": 2.0, "eval": 10.0, "start": 600.0,
           "flops_per_step": 1e9}
    costs = StepCosts({cost_key(run_config): row}, unit_s=0.005)
    found = costs.run(new)
    planned = plan_row(new.arch, new)
    step = 2.0 / 1e9 * planned["flops_per_token"] * planned["tokens_per_step"]
    evals = evaluations(new.train.steps, new.train.eval_every)
    want = 0.005 * (600.0 + new.train.steps * step + evals * 5.0 * step)
    assert found == Estimate(pytest.approx(want), "projection")
    jobs = [job(TRAIN + "markov/mamba2"), job(TRAIN + "markov/transformer_1L")]
    eta = plan_eta(jobs, 1, "quick", costs, {})
    assert eta.estimates[TRAIN + "markov/mamba2"].source == "projection"
    assert "1 from their FLOPs, projected" in sources(eta)
    assert "1 from the step-cost table" in sources(eta)


def test_the_reference_step_is_timed_on_one_thread_and_restores_the_threads():
    threads = torch.get_num_threads()
    assert 0 < reference_seconds() < 10
    assert torch.get_num_threads() == threads


def test_evaluations_count_the_final_one():
    assert evaluations(1000, 250) == 4 and evaluations(1000, 300) == 4
    assert evaluations(400, 0) == 1


def test_a_missing_or_foreign_table_is_empty(tmp_path):
    assert StepCosts.load(tmp_path / "none.json").rows == {}
    (tmp_path / "t.json").write_text('{"format": 1, "rows": {"k": {}}}')  # seconds, not units
    assert StepCosts.load(tmp_path / "t.json").rows == {}
    assert AnalysisSeconds.load(tmp_path / "none.json").seconds == {}
    assert AnalysisSeconds.load(tmp_path / "t.json").seconds == {}


def test_the_cost_tables_name_no_machine_paths():
    """The shipped tables say where their numbers come from in words, not as paths of the
    machine they were measured on (a /tmp folder nobody else has)."""
    from analyses.reproduce.eta import ANALYSIS_TABLE
    from models.train import costs, gpu_costs

    for path in (costs.TABLE, gpu_costs.TABLE, ANALYSIS_TABLE):
        assert "/tmp" not in path.read_text(), path
    assert AnalysisSeconds.load().seconds["quick"], "the plan's analysis seconds are shipped"


def test_the_shipped_table_estimates_every_job_of_the_quick_plan(tmp_path):
    costs = replace(StepCosts.load(), unit_s=0.005)
    assert costs.rows, "models/train/step_costs.json: run python -m bench.step_costs --quick"
    jobs = build_jobs(PLAN, "quick", tmp_path / "out", tmp_path / "empty-cache")
    eta = plan_eta(jobs, 2, "quick", costs, {})
    assert [j.name for j in jobs if j.name not in eta.estimates] == []
    assert all(e.source == "table" for e in eta.estimates.values())


def test_a_running_job_past_its_estimate_raises_the_ratio_before_it_ends():
    """A loaded machine shows in the ETA while its first long job still runs (issue 38)."""
    jobs = [job(n) for n in "abcd"]
    eta = Eta(jobs, 1, {n: Estimate(10.0, "table") for n in "abcd"})
    calm = eta.remaining({"a": 100.0}, now=105.0)  # a within its estimate: ratio 1
    assert calm == pytest.approx(5.0 + 30.0)
    late = eta.remaining({"a": 100.0}, now=130.0)  # a at 30 s of its 10: three times slower
    prior = PRIOR_SHARE * 40.0
    assert eta.ratio({"a": 30.0}) == pytest.approx((30.0 + prior) / (10.0 + prior))
    assert late == pytest.approx(3 * 10.0 * eta.ratio({"a": 30.0}))
    assert eta.ratio({"a": 5.0}) == 1.0


def test_a_forked_job_is_estimated_without_a_process_start_up(tmp_path):
    import sys

    from analyses.reproduce.eta import estimate
    costs = replace(StepCosts(rows={"k": {"start": 100.0, "step": 1.0, "eval": 1.0}}),
                    unit_s=0.02)
    analyses = AnalysisSeconds({"quick": {"x": 10.0}})
    forked = Job("x", (sys.executable, "-m", "tests.worker_pool_jobs"))
    spawned = Job("x", (sys.executable, "-c", "pass"))
    assert estimate(spawned, "quick", costs, {}, analyses).seconds == 10.0
    assert estimate(forked, "quick", costs, {}, analyses).seconds == pytest.approx(
        10.0 - 100 * 0.02)


def test_an_analysis_estimate_scales_with_the_machine_as_training_rows_do():
    """The table's analysis seconds were timed on idle cores; on a machine whose reference
    step is now twice as slow, an analysis is expected to take twice as long, as a training
    job (costed in reference steps) is."""
    import sys

    from analyses.reproduce.eta import estimate
    table = StepCosts(rows={"k": {"start": 0.0, "step": 1.0, "eval": 1.0, "ref_s": 0.005}})
    analyses = AnalysisSeconds({"quick": {"x": 10.0}})
    spawned = Job("x", (sys.executable, "-c", "pass"))
    assert estimate(spawned, "quick", replace(table, unit_s=0.005), {},
                    analyses).seconds == 10.0
    assert estimate(spawned, "quick", replace(table, unit_s=0.010), {},
                    analyses).seconds == 20.0
