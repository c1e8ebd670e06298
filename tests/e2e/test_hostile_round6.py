"""Reliability, sixth round (issue 56): each failure a hostile user found, reproduced, now one
clear line and a non-zero exit (or the right answer), with nothing lost."""

from __future__ import annotations

from tests import ROOT_DIR

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from analyses.claims import Claim, Figure
from analyses.reproduce import cli as reproduce_cli
from analyses.reproduce.index import index_outcome, read_timings, run_plan
from analyses.reproduce.parts import merge
from analyses.reproduce.plan import Job
from models.checkpoint.write import exclusive_writer
from models.hf.export import export_lock
from models.train.cache import cache_path
from models.train.ensemble import train_ensemble
from seqprobe.atomic import open_own, output_lock
from seqprobe.errors import InputError
from seqprobe.sweep.commands import own_log
from tests.reliability_helpers import QUICK, one_line, run_main
from tests.unit.models.test_ensemble import _run_configs

SECRET = b"the victim's bytes\n"


def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_bytes(SECRET)
    return v


def _planted(tmp_path: Path, at: Path) -> Path:
    """A symbolic link at ``at`` to a victim file; returns the victim."""
    v = _victim(tmp_path)
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(v)
    return v


# ---------------------------------------------------------------------------- failure 1
def test_train_refuses_a_planted_checkpoint_lock(tmp_path, capsys):
    out = tmp_path / "x.pt"
    v = _planted(tmp_path, tmp_path / ".x.pt.lock")
    code, _, err = run_main([*QUICK, "--out", str(out)], capsys)
    assert code != 0 and v.read_bytes() == SECRET and not out.exists()
    assert "symbolic link" in one_line(err)


def test_an_analysis_output_lock_follows_no_link(tmp_path):
    v = _planted(tmp_path, tmp_path / "O" / ".ngram_heads.lock")
    with pytest.raises(InputError, match="symbolic link"), \
            output_lock(tmp_path / "O", "ngram_heads"):
        pass
    assert v.read_bytes() == SECRET


def test_an_ensemble_member_lock_follows_no_link(tmp_path):
    run_configs = _run_configs("lstm")[:2]
    paths = [cache_path(s.resolved(torch.device("cpu")), tmp_path / "c") for s in run_configs]
    v = _planted(tmp_path, paths[1].parent / f".{paths[1].name}.lock")
    with pytest.raises(InputError, match="symbolic link"):
        train_ensemble(run_configs, paths, device="cpu", progress=False)
    assert v.read_bytes() == SECRET and not any(p.exists() for p in paths)


def test_a_job_log_follows_no_link(tmp_path):
    log = tmp_path / "O" / "logs" / "ngram_heads.log"
    v = _planted(tmp_path, log)
    with pytest.raises(InputError, match="symbolic link"):
        own_log(log)
    assert v.read_bytes() == SECRET


def test_a_job_log_that_is_a_hard_link_is_not_written(tmp_path):
    log = tmp_path / "logs" / "x.log"
    log.parent.mkdir()
    v = _victim(tmp_path)
    os.link(v, log)
    with pytest.raises(InputError, match="hard link"):
        own_log(log)
    assert v.read_bytes() == SECRET


def test_the_export_lock_follows_no_link(tmp_path):
    v = _planted(tmp_path, tmp_path / ".exp.export.lock")
    with pytest.raises(InputError, match="symbolic link"), export_lock(tmp_path / "exp"):
        pass
    assert v.read_bytes() == SECRET


def test_a_fifo_in_place_of_a_lock_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / ".x.pt.lock")
    with pytest.raises(InputError, match="not a regular file"), \
            exclusive_writer(tmp_path / "x.pt"):
        pass


def test_open_own_keeps_an_existing_own_file(tmp_path):
    p = tmp_path / "own.lock"
    p.write_bytes(b"12\n")
    fd = open_own(p)
    try:
        assert os.read(fd, 8) == b"12\n"  # not truncated by the open
    finally:
        os.close(fd)


def test_a_planted_log_stops_the_run_before_any_job(tmp_path):
    out = tmp_path / "O"
    v = _planted(tmp_path, out / "logs" / "b.log")
    jobs = [Job(n, ("python", "-c", f"open({str(out / n)!r}, 'w')")) for n in ("a", "b")]
    with pytest.raises(InputError, match="b.log.*symbolic link"):
        run_plan(jobs, out, poll=0.05)
    assert v.read_bytes() == SECRET and not (out / "a").exists()


# ---------------------------------------------------------------------------- failure 2
def _parts(tmp_path: Path) -> tuple[Path, Path, Path]:
    p1, p2 = tmp_path / "p1", tmp_path / "p2"
    for p, name in ((p1, "a"), (p2, "b")):
        p.mkdir()
        (p / f"{name}.json").write_text('{"x": 3}')
        (p / "reproduce_timings.json").write_text(
            json.dumps({"level": "quick", name: {"ok": True, "seconds": 1.0}}))
    return p1, p2, tmp_path / "out"


@pytest.mark.parametrize("plant", ["victim", "dev-zero", "fifo", "dir"])
def test_merge_refuses_a_part_that_is_no_plain_file(tmp_path, plant):
    p1, p2, out = _parts(tmp_path)
    bad = p2 / "c.json"
    if plant == "victim":
        bad.symlink_to(_victim(tmp_path))
    elif plant == "dev-zero":
        bad.symlink_to("/dev/zero")
    elif plant == "fifo":
        os.mkfifo(bad)
    else:
        bad.mkdir()
    match = {"victim": "symbolic link", "dev-zero": "symbolic link", "fifo": "not a regular",
             "dir": "is a directory"}[plant]
    with pytest.raises(InputError, match=match):
        merge([p1, p2], out)
    assert not out.exists()  # nothing copied before the refusal


def test_merge_writes_through_no_link_in_the_output(tmp_path):
    p1, p2, out = _parts(tmp_path)
    out.mkdir()
    v = _victim(tmp_path)
    (out / "a.json").symlink_to(v)
    with pytest.raises(InputError, match="symbolic link"):
        merge([p1, p2], out)
    assert v.read_bytes() == SECRET


def test_merge_into_a_file_is_one_line(tmp_path, capsys):
    p1, p2, _ = _parts(tmp_path)
    f = tmp_path / "file"
    f.write_text("x")
    assert reproduce_cli.main(["--index-only", "--merge", str(p1), str(p2), "--out", str(f),
                               "--only", "spectral_lds"]) == 2
    assert "is a file" in one_line(capsys.readouterr().err) and f.read_text() == "x"


def test_a_part_that_failed_an_analysis_shows_it_failed(tmp_path):
    fig = Figure("F", "P", (Claim("x >= 2", lambda d: (f"x = {d['x']}", d["x"] >= 2)),))
    p1, p2, out = _parts(tmp_path)
    (p2 / "reproduce_timings.json").write_text(
        json.dumps({"level": "quick", "b": {"ok": False, "seconds": 2.0}}))
    assert merge([p1, p2], out) == ["a.json", "b.json"]
    timings = read_timings(out / "reproduce_timings.json")
    assert timings["b"]["ok"] is False and timings["a"]["ok"] is True
    assert not index_outcome(Job("b", (), figure=fig), out, timings["b"]).ok
    assert index_outcome(Job("a", (), figure=fig), out, timings["a"]).ok


def test_merge_refuses_parts_of_another_level(tmp_path):
    p1, p2, out = _parts(tmp_path)
    (p2 / "reproduce_timings.json").write_text(json.dumps({"level": "medium"}))
    with pytest.raises(InputError, match="different levels"):
        merge([p1, p2], out)
    with pytest.raises(InputError, match="not medium"):
        merge([p1], out, "medium")


# ---------------------------------------------------------------------------- failure 3
def _full_disk(monkeypatch, full: Path, message: str):
    """torch.save into ``full`` fails as torch's zip writer fails on a full disk."""
    import models.checkpoint.write as write
    real = torch.save

    def save(obj, f, *a, **kw):
        if Path(os.readlink(f"/proc/self/fd/{f.fileno()}")).parent == full:
            f.write(b"PK\x03\x04partial")
            raise RuntimeError(message)
        return real(obj, f, *a, **kw)

    monkeypatch.setattr(write.torch, "save", save)


@pytest.mark.parametrize("message", [
    "[enforce fail at inline_container.cc:595] . unexpected pos 4160 vs 4054",
    "PytorchStreamWriter failed writing file data/0: file write failed",
    "[Errno 28] No space left on device"])
def test_a_full_disk_saves_the_finished_steps_elsewhere_and_says_where(
        tmp_path, capsys, monkeypatch, message):
    from models.checkpoint.io import read_checkpoint
    full, rescue = tmp_path / "full", tmp_path / "rescue"
    full.mkdir()
    rescue.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(rescue))
    _full_disk(monkeypatch, full, message)
    code, _, err = run_main([*QUICK, "--out", str(full / "x.pt")], capsys)
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]  # progress lines aside
    assert "Traceback" not in err
    assert code != 0 and f"saved to {rescue / 'x.pt'}" in line and "--resume" in line
    assert read_checkpoint(rescue / "x.pt")["train"]["step"] == 3
    assert [p.name for p in full.iterdir()] == []  # no temp file, no half checkpoint


def test_an_ensemble_member_that_does_not_fit_loses_nothing(tmp_path, capsys, monkeypatch):
    from models.train.ensemble import MemberFailed
    full, rescue = tmp_path / "full", tmp_path / "rescue"
    full.mkdir()
    rescue.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(rescue))
    _full_disk(monkeypatch, full, "PytorchStreamWriter failed writing file data/0")
    run_configs = _run_configs("lstm")[:2]
    outs = [full / "m0.pt", tmp_path / "m1.pt"]
    res = train_ensemble(run_configs, outs, device="cpu", progress=False)
    assert isinstance(res[0], MemberFailed) and f"saved to {rescue / 'm0.pt'}" in res[0].error
    assert (rescue / "m0.pt").is_file() and outs[1].is_file()  # the other member is saved
    assert res[1]["train"]["step"] == 6
    assert f"saved to {rescue / 'm0.pt'}" in capsys.readouterr().err


# ---------------------------------------------------------------------------- failure 4
def test_memorization_cells_are_keyed_by_the_datas_bytes_not_its_path(tmp_path, capsys):
    from analyses.memorization import cli as mem_cli
    from tests.integration.test_memorization import conll_argv
    from tests.unit.tasks.test_memorization_data import CONLL
    data = tmp_path / "eng.train"
    data.write_text(CONLL)
    argv = conll_argv(data, tmp_path / "out")
    assert mem_cli.main(argv) == 0
    assert "1 cells trained" in capsys.readouterr().out
    assert mem_cli.main(argv) == 0  # the same bytes: served
    assert "0 cells trained" in capsys.readouterr().out
    data.write_text(CONLL.replace("B-PER", "B-LOC"))  # labels changed in place
    assert mem_cli.main(argv) == 0
    assert "1 cells trained" in capsys.readouterr().out


def test_a_runs_hash_follows_its_data_files_bytes(tmp_path):
    from models.train.runconfig import RunConfig
    from tests.unit.tasks.test_memorization_data import CONLL
    a, b = tmp_path / "a" / "eng.train", tmp_path / "b" / "eng.train"
    for p in (a, b):
        p.parent.mkdir()
        p.write_text(CONLL)

    def run(path):
        return RunConfig.build("lstm", "memorization", {"d_model": 8},
                               {"data": "conll", "data_path": str(path), "n_examples": 0}, {})

    assert run(a).hash() == run(b).hash() == run(a.parent).hash()  # a copy, a folder: same run
    b.write_text(CONLL.replace("B-PER", "B-LOC"))
    assert run(a).hash() != run(b).hash()


# ---------------------------------------------------------------------------- failure 5
def _perturbed_export(tmp_path: Path, recipe: str) -> tuple:
    import models
    from analyses import zoo
    from models.checkpoint.layout import make_checkpoint
    from models.checkpoint.write import save_checkpoint
    from seqprobe.config import config_to_dict
    run = zoo.run_config(recipe, "quick", tmp_path)
    torch.manual_seed(0)
    m = models.build_model("mamba2", config_to_dict(run.model)).eval()
    with torch.no_grad():  # off the init: the tokens it generates depend on every weight
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ck = make_checkpoint("mamba2", config_to_dict(run.model), "copy", config_to_dict(run.task),
                         {"step": 1}, m.state_dict())
    save_checkpoint(ck, tmp_path / "m.pt")
    return m, tmp_path / "m.pt"


@pytest.mark.parametrize("recipe", ["copy/mamba2", "copy/mamba2_mlp"])  # Mamba2ForCausalLM, Bamba
def test_an_exported_mamba2_generates_the_checkpoints_tokens(tmp_path, recipe):
    import models
    from models.hf import export as export_hf
    m, ck = _perturbed_export(tmp_path, recipe)
    export_hf.export(ck, tmp_path / "hf")  # its self-check generates too
    ids = torch.tensor([[26, 0, 1, 2, 3, 28]])  # <BOS> a b c d <COPY>
    ours = m.generate(ids, 6, do_sample=False, verbose=False)
    theirs = models.load(tmp_path / "hf").generate(ids, 6, do_sample=False, verbose=False)
    assert theirs.tolist() == ours.tolist()
    assert len(set(ours[0, 6:].tolist())) > 2  # a sequence that can tell two decoders apart


def test_the_export_refuses_a_model_that_generates_other_tokens(tmp_path, monkeypatch):
    from transformer_lens.model_bridge import TransformerBridge

    from models.hf import HFModel
    from models.hf import export as export_hf
    from models.hf.export_map import ExportError
    _, ck = _perturbed_export(tmp_path, "copy/mamba2")
    # TransformerLens' own generate: its stateful cache path, which decodes this model wrong
    monkeypatch.setattr(HFModel, "generate", TransformerBridge.generate)
    with pytest.raises(ExportError, match="generates .* greedily where the checkpoint"):
        export_hf.export(ck, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


# ---------------------------------------------------------------------------- failure 6
# a stand-in for a launcher (torchrun) and one of its training workers: the worker saves on
# SIGTERM, as models.train does, and has a process of its own in its group (a loader's, say)
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    from seqprobe.orphans import PARENT_ENV
    subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]], start_new_session=True,
                     env={**os.environ, PARENT_ENV: str(os.getpid())})
    time.sleep(120)
""")
WORKER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from pathlib import Path
    from seqprobe.orphans import die_with_parent_from_env
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    die_with_parent_from_env()
    helper = subprocess.Popen(["sleep", "120"])
    Path(sys.argv[1], "pids").write_text(f"{os.getpid()} {helper.pid}")
    while not stop:
        time.sleep(0.02)
    Path(sys.argv[1], "saved").write_text("the checkpoint")
    sys.exit(0)
""")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_kill_9_of_a_launcher_lets_its_training_worker_save_then_ends_its_group(tmp_path):
    root = ROOT_DIR
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path), WORKER],
                                cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        deadline = time.time() + 60
        while not (tmp_path / "pids").exists():
            assert time.time() < deadline and launcher.poll() is None
            time.sleep(0.05)
        time.sleep(0.2)  # the pids file is whole
        worker, helper = map(int, (tmp_path / "pids").read_text().split())
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        t0 = time.time()
        while (_alive(worker) or _alive(helper)) and time.time() - t0 < 10:
            time.sleep(0.02)
        assert not _alive(worker) and not _alive(helper)
        assert (tmp_path / "saved").read_text() == "the checkpoint"  # SIGTERM, not SIGKILL
    finally:
        launcher.kill()


# ---------------------------------------------------------------------------- failure 8
def test_a_mamba2_whose_states_cannot_fit_is_refused_before_work(capsys):
    code, _, err = run_main(["--arch", "mamba2", "--d-state", "65536", "--d-model", "4096",
                             "--steps", "1", "--device", "cpu"], capsys)
    assert code == 2 and "of SSM states" in one_line(err) and "more than this" in err


def test_the_ssd_state_estimate_grows_with_d_state_not_for_other_archs():
    from models.train.build import ssd_state_bytes
    from models.train.runconfig import RunConfig
    small = RunConfig.build("mamba2", "copy", {"d_state": 16}, {}, {}).model
    big = RunConfig.build("mamba2", "copy", {"d_state": 1024}, {}, {}).model
    assert ssd_state_bytes(big, 8, 100) == 64 * ssd_state_bytes(small, 8, 100) > 0
    assert ssd_state_bytes(RunConfig.build("lstm", "copy", {}, {}, {}).model, 8, 100) == 0


# ---------------------------------------------------------------------------- failure 10
def test_a_task_config_that_does_not_fit_the_model_is_refused_when_analysed(tmp_path, capsys):
    import models
    from analyses.common import load_model
    from models.checkpoint.io import read_checkpoint
    from models.checkpoint.write import save_checkpoint
    from tasks.registry import make_task
    out = tmp_path / "x.pt"
    assert run_main([*QUICK, "--out", str(out)], capsys)[0] == 0
    ck = read_checkpoint(out)
    assert ck["train"]["task_vocab"] == make_task(ck["task"]["name"], ck["task"]["config"]
                                                  ).vocab.size
    ck["task"]["config"]["D"] = 2  # a smaller alphabet: <BOS>, <COPY>, ... numbered otherwise
    save_checkpoint(ck, tmp_path / "edited.pt")
    for load in (models.load, load_model):
        with pytest.raises(InputError, match="not the one the model was trained on") as e:
            load(str(tmp_path / "edited.pt"))
        assert "\n" not in str(e.value)
    models.load(out)  # the file as trained loads


# ---------------------------------------------------------------------------- warning: ensembles
def test_a_checkpoint_records_its_ensemble(tmp_path):
    from models.checkpoint.io import read_checkpoint
    from models.train.loop import train
    run_configs = _run_configs("lstm")[:2]
    outs = [tmp_path / "m0.pt", tmp_path / "m1.pt"]
    train_ensemble(run_configs, outs, device="cpu", progress=False)
    runs = [r.resolved(torch.device("cpu")).hash() for r in run_configs]
    for i, o in enumerate(outs):
        assert read_checkpoint(o)["train"]["ensemble"] == {"member": i, "runs": runs}
    train(run_configs[0], out=tmp_path / "solo.pt", device="cpu", progress=False)
    assert "ensemble" not in read_checkpoint(tmp_path / "solo.pt")["train"]  # trained alone
