"""Sweeps on Ray (seqprobe/sweep.py): a Ray instance on this machine (``ray.init(num_cpus=2)``)
runs the memorization grid to the same cells as the local backend, reuses saved cells, and
reports a cell that fails on every attempt without stopping the others. A run without
``--ray`` never imports Ray.

Ray is installed by scripts/setup.sh (the dev extra), so this module runs in CI: a missing
Ray is an import error here, not a skip.
"""

from __future__ import annotations

from tests import ROOT_DIR

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray

import analyses.markov_ablations as ma
import analyses.memorization.cli as am
from analyses import common as mem_common
from analyses import zoo
from analyses.memorization import cells as mem_cells
from analyses.memorization import sweep as mem_sweep
from seqprobe.config import check
from seqprobe.errors import InputError
from seqprobe.sweep import Backend, Failed, RayCommand, backend_of, map_jobs

ROOT = ROOT_DIR
GRID_ARGV = ["--data", "synthetic", "--task", "token", "--widths", "4,8", "--fractions",
             "0.5,1", "--n-examples", "12", "--steps", "30", "--no-progress"]


@pytest.fixture(scope="module")
def local_ray():
    """One Ray instance for the module (its start-up is most of these tests' time);
    map_jobs uses it and leaves it running."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def tiny_grid(out, backend, **kw):
    return mem_sweep.compute("synthetic", "token", "quick", out, widths=(4, 8), fractions=(0.5,
                                                                                           1.0),
                      task_config={"n_examples": 12, "seq_len": 4},
                      train={"steps": 30, "warmup_steps": 0, "eval_every": 10},
                      progress=False, backend=backend, **kw)


def cell_differences(a: list[dict], b: list[dict]) -> list[str]:
    """Where two runs' cells differ: every field but the wall time, floats to rounding (BLAS
    reductions may round differently in another process)."""
    if [sorted(c) for c in a] != [sorted(c) for c in b]:
        return ["different fields"]
    out = []
    for ca, cb in zip(a, b, strict=True):
        for k in ca:
            x, y = ca[k], cb[k]
            same = (math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-6) or x != x and y != y
                    if isinstance(x, float) and isinstance(y, float) else x == y)
            if k != "time_s" and not same:
                out.append(f"m={ca['d_model']} f={ca['fraction']} {k}: {x} vs {y}")
    return out


def failing_cell(target: int, attempts_file: Path, real=mem_cells.run_cell):
    """``run_cell``, except that the cells of width ``target`` raise, each attempt noted in
    ``attempts_file``. A closure, so Ray ships it by value to its workers."""

    def run(run_config, *args):
        if run_config.model.d_model == target:
            with open(attempts_file, "a") as fh:
                fh.write(f"{run_config.task.fraction}\n")
            raise RuntimeError(f"cell m={target} cannot train")
        return real(run_config, *args)

    return run


def test_ray_grid_equals_local_and_a_second_run_trains_nothing(tmp_path, local_ray,
                                                               monkeypatch):
    local = tiny_grid(tmp_path / "local", Backend(workers=1))
    on_ray = tiny_grid(tmp_path / "ray", Backend(ray=True, workers=2))
    assert on_ray["cells_trained"] == 4 and on_ray["cells_failed"] == []
    assert on_ray["backend"].startswith("ray") and local["backend"].startswith("local")
    assert cell_differences(on_ray["cells"], local["cells"]) == []
    saved = sorted(p.name for p in (tmp_path / "ray" / "memorization_synthetic_token_cells")
                   .iterdir())
    assert saved == ["m00004_f050.json", "m00004_f100.json", "m00008_f050.json",
                     "m00008_f100.json"]
    # every cell is cached: nothing is handed to Ray (the stub would fail any task)
    monkeypatch.setattr(mem_cells, "run_cell", lambda *a: pytest.fail("ran a cached cell"))
    again = tiny_grid(tmp_path / "ray", Backend(ray=True, workers=2))
    assert again["cells_trained"] == 0 and again["cells_reused"] == 4
    assert again["cells"] == on_ray["cells"]  # read back from the saved files


def test_ray_retries_a_failing_cell_then_reports_it_and_the_others_land(tmp_path, local_ray,
                                                                       monkeypatch):
    attempts = tmp_path / "attempts.txt"
    monkeypatch.setattr(mem_cells, "run_cell", failing_cell(8, attempts))
    result = tiny_grid(tmp_path, Backend(ray=True, workers=2, retries=1))
    # both m=8 cells: tried 1 + retries times each, then reported
    assert sorted(attempts.read_text().split()) == ["0.5", "0.5", "1.0", "1.0"]
    failed = {(c["d_model"], c["fraction"]): c for c in result["cells_failed"]}
    assert set(failed) == {(8, 0.5), (8, 1.0)}
    assert all(c["attempts"] == 2 and "cannot train" in c["error"] for c in failed.values())
    assert result["cells_trained"] == 2
    by_cell = {(c["d_model"], c["fraction"]): c for c in result["cells"]}
    assert by_cell[(8, 0.5)]["failed"] and not by_cell[(4, 0.5)].get("failed")
    assert 0 <= by_cell[(4, 1.0)]["train_error"] <= 1
    cells = tmp_path / "memorization_synthetic_token_cells"
    assert sorted(p.name for p in cells.iterdir()) == ["m00004_f050.json", "m00004_f100.json"]
    json.dumps(mem_common.to_jsonable(result))


def test_a_failed_cell_is_marked_in_the_json_and_the_exit_code(tmp_path, monkeypatch,
                                                               capsys):
    """The local backend (no Ray) reports the same way: the JSON marks the cell, exit 1."""
    attempts = tmp_path / "attempts.txt"
    monkeypatch.setattr(mem_cells, "run_cell", failing_cell(8, attempts))
    out = tmp_path / "out"
    assert am.main([*GRID_ARGV, "--jobs", "1", "--retries", "0", "--out", str(out)]) == 1
    assert len(attempts.read_text().split()) == 2  # two m=8 cells, one attempt each
    data = json.loads((out / "memorization_synthetic_token.json").read_text())
    assert {(c["d_model"], c["fraction"]) for c in data["cells_failed"]} == {(8, 0.5),
                                                                            (8, 1.0)}
    assert data["error"][0][1] is None and data["error"][0][0] is not None
    assert "failed after 1 attempt(s)" in capsys.readouterr().out


def test_local_run_does_not_import_ray(tmp_path):
    argv = [*GRID_ARGV, "--widths", "4", "--fractions", "1", "--steps", "5", "--out",
            str(tmp_path)]
    code = ("import sys, analyses.memorization.cli as am; "
            f"rc = am.main({argv!r}); "
            "assert rc == 0, rc; assert 'ray' not in sys.modules, 'ray imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_command_runs_as_a_ray_task_and_a_failing_one_is_retried(tmp_path, local_ray):
    """RayCommand: what the reproduce plan's scheduler polls instead of a local process."""
    ok = RayCommand([sys.executable, "-c", "import os; print('hi', os.environ['X'])"],
                    Backend(ray=True), env={"X": "1"}, cwd=str(tmp_path))
    assert ok.wait() == 0 and ok.output.strip() == "hi 1"
    tries = tmp_path / "tries"
    bad = RayCommand([sys.executable, "-c", f"open({str(tries)!r}, 'a').write('x'); "
                      "print('boom'); raise SystemExit(3)"], Backend(ray=True, retries=1))
    assert bad.wait() == 3 and bad.poll() == 3 and bad.output.strip() == "boom"
    assert tries.read_text() == "xx"  # tried twice
    pid_file = tmp_path / "pid"
    slow = RayCommand([sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w')"
                       ".write(str(os.getpid())); time.sleep(60)"], Backend(ray=True))
    for _ in range(200):  # until the command has started
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    slow.kill()  # a timeout or Ctrl-C of the plan: the command goes with its worker
    assert slow.wait() != 0
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists() or "Z" in _state(pid):
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() or "Z" in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return "Z"


def test_map_jobs_local_pool_keeps_order_and_reports_failures():
    # math.sqrt: a light function for the pool's workers to import
    res = map_jobs(math.sqrt, [(4,), (-1,), (9,)], Backend(workers=2, retries=1), progress=False)
    assert res[0] == 2 and res[2] == 3
    assert res[1] == Failed("ValueError: math domain error", 2)
    # bad input fails the same way every time: reported at once, not retried
    res = map_jobs(check, [(True, "fine"), (False, "bad cell")], Backend(retries=3),
                   progress=False)
    assert res == [None, Failed("InputError: bad cell", 1)]


@pytest.mark.parametrize("ray_flag, address", [("local", None), ("auto", "auto"),
                                               ("ray://head:10001", "ray://head:10001"),
                                               ("10.0.0.1:6379", "10.0.0.1:6379")])
def test_backend_of_flags(ray_flag, address):
    class Args:
        ray, retries = ray_flag, 3

    b = backend_of(Args(), workers=4, device="cuda")
    assert b.ray and b.address == address and b.num_gpus == 1 and b.retries == 3
    assert not backend_of(type("A", (), {"ray": None})(), device="cpu").ray


def test_bad_ray_address_is_one_line_exit_2(tmp_path, capsys):
    assert am.main([*GRID_ARGV, "--out", str(tmp_path), "--ray", "ckpt.pt"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a Ray address" in err and len(err.splitlines()) == 1
    assert zoo.main(["train", "markov/mamba2", "--ray", "x.pt"]) == 2
    assert "not a Ray address" in capsys.readouterr().err
    with pytest.raises(InputError, match="retries"):
        Backend(retries=-1)


def test_markov_ablation_recipes_train_as_ray_tasks_once(tmp_path, local_ray, monkeypatch):
    """The zoo's ablation recipes (here two steps each) train on Ray; the analysis
    scores them; a second run finds them cached and hands nothing to Ray."""
    argv = ["--train", "quick", "--groups", "window", "--steps", "2", "--n-seqs", "4",
            "--cache-dir", str(tmp_path / "ck"), "--out", str(tmp_path / "out"), "--ray"]
    assert ma.main(argv) == 0
    data = json.loads((tmp_path / "out" / "markov_ablations.json").read_text())
    assert len(data["models"]) == len(ma.GROUPS["window"]) and data["failed"] == []
    assert len(list((tmp_path / "ck").glob("*.pt"))) == len(ma.GROUPS["window"])
    monkeypatch.setattr(zoo.runs, "_train_group", lambda *a: pytest.fail("retrained a recipe"))
    again = zoo.train_recipes(list(ma.GROUPS["window"]), "quick", tmp_path / "ck", "cpu",
                              Backend(ray=True), train={"steps": 2}, progress=False)
    assert sorted(str(p) for p in again.values()) == sorted(data["checkpoints"])


def test_reproduce_runs_its_job_graph_on_ray(tmp_path, local_ray, monkeypatch):
    import seqprobe.sweep.commands as rp
    from analyses.reproduce.index import run_plan
    from analyses.reproduce.plan import Job

    started = []

    class Counted(RayCommand):
        def __init__(self, argv, *a, **kw):
            started.append(argv)
            super().__init__(argv, *a, **kw)

    monkeypatch.setattr(rp, "RayCommand", Counted)

    def task(name, code, after=()):
        return Job(name, (sys.executable, "-c", code), 1, after, figure=None)

    order = tmp_path / "order.txt"
    write = f"open({str(order)!r}, 'a').write('{{}}\\n'.format"
    tasks = [task("a", f"{write}('a'))"), task("b", "raise SystemExit('boom')"),
             task("c", f"{write}('c'))", after=("a",)), task("d", "print(1)", after=("b",))]
    outs = {o.job.name: o for o in run_plan(tasks, tmp_path, workers=4, poll=0.05,
                                              backend=Backend(ray=True, retries=0))}
    assert outs["a"].ok and outs["c"].ok and not outs["b"].ok
    assert not outs["d"].ok  # needs the failed b: skipped, not run
    assert order.read_text().split() == ["a", "c"]  # c waited for a
    assert "boom" in (tmp_path / "logs" / "b.log").read_text()  # the Ray job's output came back
    assert len(started) == 3  # a, b, c went to Ray; d never started


def test_an_analysis_trains_its_recipes_as_ray_tasks_and_a_failure_is_one_line(
        tmp_path, monkeypatch, capsys):
    import analyses.mamba_decay as md

    calls = []

    def fake_train_recipes(names, level, cache_dir, device, backend, **kw):
        calls.append((list(names), backend))
        return {n: Failed("boom", 3) for n in names}

    monkeypatch.setattr(zoo, "train_recipes", fake_train_recipes)
    code = md.main(["--train", "quick", "--ray", "--out", str(tmp_path / "o"),
                    "--cache-dir", str(tmp_path / "c")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert calls and calls[0][1].ray and calls[0][0] == list(md.FIGURE.recipes("quick"))
    assert code == 2 and len(err) == 1 and "training failed" in err[0] and "boom" in err[0]


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1", "auto"])
def test_an_address_with_no_cluster_is_one_line_within_seconds(tmp_path, capsys, monkeypatch,
                                                                address):
    """Within seconds: the address is probed (one socket connect, seqprobe.sweep.RAY_PROBE_S)
    and refused before ``ray.init``, which retries an unreachable address for minutes."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # no ray_current_cluster file

    def init(*a, **k):
        raise AssertionError("ray.init reached for an address nothing answers at")

    monkeypatch.setattr(ray, "init", init)
    assert zoo.main(["train", "markov/mamba2", "--ray", address, "--cache-dir",
                     str(tmp_path / "ck")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--ray {address}" in err
    assert ("nothing answers there" if address != "auto" else "no Ray cluster is running") in err
