"""Reliability, second round (issue 18): SIGTERM, disk full, clobbered checkpoints, special
files, long paths, stale temp files, the umask, analysis outputs (sizes, memory bombs, silent
corruption and non-finite weights: tests/e2e/test_reliability_loading.py).

Each test drives the real entry points (``python -m models.train`` as a process or its ``main``,
``models.load``, ``analyses.common.load_model``) and checks the one-line outcome.
"""

from __future__ import annotations

from tests import ROOT_DIR

import errno
import importlib
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import models
import models.train.loop as L
import models.train.writer as W
from analyses.common import load_model
from analyses.zoo.levels import make_run_config
from models.checkpoint.io import read_checkpoint
from models.checkpoint.paths import check_writable
from models.checkpoint.write import exclusive_writer, save_checkpoint
from models.train.cli import main
from models.train.loop import train
from seqprobe import atomic
from seqprobe.errors import CheckpointError, InputError, SaveError
from tests.reliability_helpers import QUICK, one_line, run_main
from tests.tiny import good_checkpoint

ROOT = ROOT_DIR


def _popen_train(out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "models.train", "--steps", "100000", "--d-model", "16",
           "--n-layers", "1", "--n-heads", "2", "--batch-size", "4", "--max-len", "5",
           "--eval-every", "0", "--save-every", "10", "--out", str(out), "--no-progress",
           "--device", "cpu", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(p: subprocess.Popen, path: Path, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not path.exists():  # the first periodic save: the loop is running
        assert p.poll() is None and time.time() < deadline, p.stderr.read()
        time.sleep(0.05)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trained") / "c.pt"
    assert main([*QUICK, "--out", str(path)]) == 0
    return path


# ---------------------------------------------------------------------------- 1. SIGTERM
def test_sigterm_in_a_real_process_saves_and_exits_130(tmp_path):
    out = tmp_path / "s.pt"
    p = _popen_train(out)
    try:
        _wait_for(p, out)
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, (p.returncode, stderr)  # not 143 (killed), not 0
    assert "Traceback" not in stderr and stdout == ""
    step = read_checkpoint(out)["train"]["step"]
    assert stderr.strip().splitlines()[-1] == (
        f"SIGTERM: interrupted at step {step}/100000; checkpoint saved to {out} "
        f"(continue with --resume {out})")
    assert main(["--resume", str(out), "--steps", str(step + 2), "--no-progress"]) == 0
    assert read_checkpoint(out)["train"]["step"] == step + 2


def test_sigterm_before_training_is_one_line_and_130(tmp_path, monkeypatch, capsys):
    def sigterm_during_setup(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the setup")

    monkeypatch.setattr(L, "make_generator", sigterm_during_setup)
    before = signal.getsignal(signal.SIGTERM)
    code, _, err = run_main([*QUICK, "--out", str(tmp_path / "c.pt")], capsys)
    assert code == 130
    assert err.strip().splitlines()[-1] == ("interrupted; no checkpoint was saved by this run "
                                            "(any earlier file is intact)")
    assert signal.getsignal(signal.SIGTERM) is before  # restored, not left raising
    assert not (tmp_path / "c.pt").exists()


# ---------------------------------------------------------------------------- 2. disk full
def _disk_full_in(directory: Path, monkeypatch) -> list[str]:
    """Every save into ``directory`` fails as on a full disk (after the bytes were written)."""
    failed = []

    def enospc(tmp):
        if Path(tmp).parent == directory:
            failed.append(tmp)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic, "_before_rename_hook", enospc)
    return failed


def test_disk_full_at_the_final_save_keeps_the_weights(tmp_path, monkeypatch, capsys):
    full, rescue = tmp_path / "full", tmp_path / "rescue"
    full.mkdir()
    failed = _disk_full_in(full, monkeypatch)
    monkeypatch.setattr(W, "rescue_dirs", lambda: [rescue])
    code, out, err = run_main([*QUICK, "--out", str(full / "c.pt")], capsys)
    line = one_line(err[err.index("error:"):])
    assert code == 2 and out == "" and failed
    assert "No space left on device" in line
    assert f"saved to {rescue / 'c.pt'} instead (continue with --resume {rescue / 'c.pt'})" in line
    m = models.load(rescue / "c.pt")  # the trained weights, whole
    assert m.checkpoint["train"]["step"] == 3
    assert not list(full.iterdir())  # no half file, no temp file


def test_disk_full_everywhere_names_the_last_good_checkpoint(tmp_path, monkeypatch):
    run_config = make_run_config("transformer", "copy", "quick",
                     model=dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32),
                     task_config=dict(max_len=5),
                     train=dict(steps=5, save_every=2, batch_size=4, eval_every=0,
                                eval_batches=1, eval_batch_size=4))
    out = tmp_path / "c.pt"
    saves = []

    def full_after_first_save(tmp):
        saves.append(tmp)
        if len(saves) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic, "_before_rename_hook", full_after_first_save)
    monkeypatch.setattr(W, "rescue_dirs", lambda: [tmp_path / "r1", tmp_path / "r2"])
    with pytest.raises(SaveError) as e:
        train(run_config, out=out, device="cpu", progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "No space left on device" in msg
    assert f"no other place took it either ({tmp_path / 'r1'}, {tmp_path / 'r2'})" in msg
    assert f"last good checkpoint: {out} (step 2)" in msg
    assert read_checkpoint(out)["train"]["step"] == 2


# ---------------------------------------------------------------------------- 3. clobbering
def test_out_holding_another_runs_checkpoint_needs_overwrite(trained, tmp_path, capsys):
    out = tmp_path / "c.pt"
    out.write_bytes(trained.read_bytes())
    out.chmod(0o640)
    before = out.read_bytes()
    code, _, err = run_main([*QUICK, "--seed", "7", "--out", str(out)], capsys)
    line = one_line(err)
    assert code == 2 and out.read_bytes() == before
    assert line.startswith(f"error: {out}: already holds a checkpoint (transformer on copy, "
                           "step 3) that this run did not resume") and "--overwrite" in line
    assert f"--resume {out}" in line
    # not a checkpoint at all: refused too
    notes = tmp_path / "notes.pt"
    notes.write_text("my notes")
    code, _, err = run_main([*QUICK, "--out", str(notes)], capsys)
    assert code == 2 and "already exists" in one_line(err) and notes.read_text() == "my notes"
    # --overwrite replaces it, and keeps the file's mode
    code, _, err = run_main([*QUICK, "--seed", "7", "--out", str(out), "--overwrite"], capsys)
    assert code == 0, err
    assert out.read_bytes() != before and stat.S_IMODE(out.stat().st_mode) == 0o640
    assert read_checkpoint(out)["train"]["config"]["seed"] == 7
    # resuming writes its own file without the flag
    assert main(["--resume", str(out), "--steps", "4", "--no-progress"]) == 0


def test_a_second_live_writer_of_the_same_out_is_refused(tmp_path, capsys):
    out = tmp_path / "c.pt"
    p = _popen_train(out)
    try:
        _wait_for(p, out)
        code, _, err = run_main([*QUICK, "--out", str(out), "--overwrite"], capsys)
        assert code == 2
        assert f"another process (pid {p.pid}) is writing this checkpoint now" in one_line(err)
        assert p.poll() is None  # the first writer goes on
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
        p.kill()
    assert p.returncode == 130
    # once the first writer is gone, the lock is free
    assert main([*QUICK, "--out", str(out), "--overwrite"]) == 0


def test_the_writer_lock_in_process(tmp_path):
    out = tmp_path / "c.pt"
    run_config = make_run_config("transformer", "copy", "quick", model=dict(d_model=16, n_layers=1,
                                                                n_heads=2, d_mlp=32),
                     task_config=dict(max_len=5), train=dict(steps=1, batch_size=4))
    with exclusive_writer(out), ThreadPoolExecutor(1) as pool:  # held by this thread
        with pytest.raises(CheckpointError, match="another run in this process is writing"):
            pool.submit(train, run_config, out=out, device="cpu", progress=False).result()
    assert not out.exists()
    train(run_config, out=out, device="cpu", progress=False)
    assert out.exists() and not list(tmp_path.glob(".c.pt.lock"))


# ---------------------------------------------------------------------------- 4. special files
def _special(tmp_path: Path, kind: str) -> tuple[Path, str]:
    p = tmp_path / f"{kind}.pt"
    if kind == "fifo":
        os.mkfifo(p)
        return p, "is a FIFO (named pipe), not a regular file"
    if kind == "symlink":
        (tmp_path / "target.pt").write_text("precious")
        p.symlink_to(tmp_path / "target.pt")
        return p, "is a symbolic link, not a regular file"
    if kind == "dangling_symlink":
        p.symlink_to(tmp_path / "nowhere.pt")
        return p, "is a symbolic link"
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(str(p))
        except OSError:  # AF_UNIX paths are short (108 bytes)
            pytest.skip("tmp path too long for a socket")
        finally:
            s.close()
        return p, "is a socket, not a regular file"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "dangling_symlink", "socket"])
def test_out_that_is_not_a_regular_file_is_refused(kind, tmp_path, capsys):
    path, phrase = _special(tmp_path, kind)
    mode = os.lstat(path).st_mode
    with pytest.raises(CheckpointError, match=re.escape(phrase)):
        check_writable(path)
    with pytest.raises(CheckpointError, match=re.escape(phrase)):
        save_checkpoint(good_checkpoint(), path)
    code, _, err = run_main([*QUICK, "--out", str(path)], capsys)
    assert code == 2 and phrase in one_line(err)
    assert os.lstat(path).st_mode == mode  # still the same node
    if kind == "symlink":
        assert (tmp_path / "target.pt").read_text() == "precious"


def test_device_nodes_are_never_replaced():
    for dev in ("/dev/null", "/dev/zero"):
        if os.path.exists(dev):
            with pytest.raises(CheckpointError, match="is a character device, not a regular"):
                check_writable(dev)


def test_resume_from_a_fifo_does_not_block(tmp_path, capsys):
    fifo = tmp_path / "f.pt"
    os.mkfifo(fifo)
    code, _, err = run_main(["--resume", str(fifo), "--no-progress"], capsys)
    assert code == 2 and "is a FIFO (named pipe), not a checkpoint file" in one_line(err)


# ---------------------------------------------------------------------------- 9. long paths
def test_a_name_over_255_bytes_is_one_line_everywhere(tmp_path, capsys, trained):
    long = tmp_path / ("n" * 300 + ".pt")
    for argv in ([*QUICK, "--out", str(long)],
                 ["--resume", str(long), "--no-progress"],
                 [*QUICK, "--init-from", str(long), "--out", str(tmp_path / "c.pt")]):
        code, _, err = run_main(argv, capsys)
        line = one_line(err)
        assert code == 2 and "a name in this path is 303 bytes long" in line, (argv, line)
        assert len(line) < 300
    for loader in (models.load, load_model, read_checkpoint):
        with pytest.raises(InputError, match="is 303 bytes long; the file system allows at most"):
            loader(long)


def test_a_path_over_path_max_is_one_line(tmp_path, capsys):
    deep = tmp_path.joinpath(*(["d" * 200] * 25), "c.pt")
    code, _, err = run_main([*QUICK, "--out", str(deep)], capsys)
    line = one_line(err)
    assert code == 2 and "the path is" in line and "bytes long; the file system allows" in line
    with pytest.raises(CheckpointError, match="bytes long"):
        models.load(deep)


# ---------------------------------------------------------------------------- 11. stale temps
CHILD_KILLED_MID_SAVE = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from models.checkpoint import write as ck
    from seqprobe import atomic
    from tests.tiny import TINY_RUN_FLAGS, good_checkpoint

    atomic._before_rename_hook = lambda tmp: os.kill(os.getpid(), signal.SIGKILL)
    ck.save_checkpoint(good_checkpoint(), {path!r})
""")

CHILD_HOLDS_A_TEMP = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open({tmp!r}, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"half a checkpoint")
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(120)
""")


def test_the_next_save_removes_temp_files_a_killed_writer_left(tmp_path):
    path = tmp_path / "c.pt"
    for _ in range(2):  # two saves killed between write and rename: they do not pile up,
        # each save removes the temp file the previous killed one left
        p = subprocess.run([sys.executable, "-c", CHILD_KILLED_MID_SAVE.format(
            root=str(ROOT), path=str(path))], cwd=ROOT, capture_output=True, timeout=120)
        assert p.returncode == -signal.SIGKILL, p.stderr
    stale = sorted(tmp_path.glob(".c.pt.*.tmp"))
    assert len(stale) == 1 and not path.exists()
    other = tmp_path / ".d.pt.x.tmp"  # another target's temp file
    other.write_bytes(b"x")
    live = tmp_path / ".c.pt.live.tmp"  # a live writer's, locked by another process
    holder = subprocess.Popen([sys.executable, "-c", CHILD_HOLDS_A_TEMP.format(tmp=str(live))],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        save_checkpoint(good_checkpoint(), path)
        assert not any(p.exists() for p in stale)
        assert live.exists() and other.exists()
    finally:
        holder.kill()
        holder.wait(timeout=60)
    save_checkpoint(good_checkpoint(), path)  # its writer is gone: now it is stale
    assert not live.exists() and other.exists()
    assert read_checkpoint(path)["train"]["step"] == 0


# ---------------------------------------------------------------------------- 12. umask
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_checkpoints_respect_the_umask(umask, mode, tmp_path):
    old = os.umask(umask)
    try:
        path = save_checkpoint(good_checkpoint(), tmp_path / "c.pt")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    path.chmod(0o640)  # an existing file keeps its own mode when it is replaced
    save_checkpoint(good_checkpoint(step=1), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


# ---------------------------------------------------------------- 10: analysis outputs, first
@pytest.mark.parametrize("module", ["ngram_heads", "state_probe", "spectral_lds", "memorization"])
@pytest.mark.parametrize("how", ["file", "unwritable"])
def test_an_analysis_out_that_cannot_take_outputs_is_one_line_before_any_work(
        module, how, tmp_path, capsys):
    if how == "unwritable" and os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    if how == "file":
        out = tmp_path / "out"
        out.write_text("x")
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        out = ro / "out"
    # the checkpoint is garbage: had the analysis loaded it first, its error would name it
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    takes_checkpoints = module not in ("spectral_lds", "memorization")
    argv = ["--out", str(out)] + ([str(garbage)] if takes_checkpoints else [])
    # a package keeps its command line in its cli module (memorization), not in its __init__
    mod = importlib.import_module(f"analyses.{module}" + (".cli" if module == "memorization"
                                                          else ""))
    assert mod.main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--out" in err[0], err
    assert ("is a file" if how == "file" else "not writable") in err[0]
