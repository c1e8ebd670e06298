"""Reliability, second round (issue 18): SIGTERM, disk full, clobbered checkpoints, memory bombs in
tiny files, silent corruption, long paths, stale temp files, the umask.

Each test drives the real entry points (``python -m models.train`` as a process or its ``main``,
``models.load``, ``analyses.common.load_model``) and checks the one-line outcome. A memory bomb
is checked by where the refusal comes (no model built on a real device, torch.load never
reached), not by measuring memory: bench/bench_hostile.py measures the peak memory of refusing
each one (DESIGN.md: memory targets live in bench/).
"""

from __future__ import annotations

import errno
import importlib
import io
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import models
import models.train.loop as L
import models.train.writer as W
from analyses.common import load_model
from models.base import SuiteModel
from models.checkpoint import (
    CheckpointError,
    SaveError,
    check_writable,
    exclusive_writer,
    read_checkpoint,
    rebuild,
    save_checkpoint,
    tensor_digest,
    untrusted,
)
from models.train.cli import main
from models.train.loop import train
from models.train.spec import make_spec
from seqprobe import atomic, flags
from seqprobe.errors import InputError
from tests.tiny import TINY_RUN_FLAGS, good_checkpoint

ROOT = Path(__file__).resolve().parent.parent
QUICK = [*TINY_RUN_FLAGS, "--max-len", "5", "--steps", "3", "--batch-size", "4",
         "--eval-batches", "1", "--eval-batch-size", "4", "--no-progress", "--device", "cpu"]
MB = 2**20


# ---------------------------------------------------------------------------- helpers
@pytest.fixture
def builds(monkeypatch) -> list[tuple[str, int]]:
    """(default device type, n_layers) of every suite model built while the test runs: a
    sizing or a refusal builds on the meta device only, where nothing is allocated."""
    seen: list[tuple[str, int]] = []
    init = SuiteModel.__init__
    rebuild._cached_footprint.cache_clear()  # sizes cached by earlier tests: size them again

    def spy(self, cfg):
        seen.append((torch.get_default_device().type, getattr(cfg, "n_layers", 0)))
        init(self, cfg)

    monkeypatch.setattr(SuiteModel, "__init__", spy)
    return seen


def run_main(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


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
    spec = make_spec("transformer", "copy", "quick",
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
        train(spec, out=out, device="cpu", progress=False)
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
    spec = make_spec("transformer", "copy", "quick", model=dict(d_model=16, n_layers=1,
                                                                n_heads=2, d_mlp=32),
                     task_config=dict(max_len=5), train=dict(steps=1, batch_size=4))
    with exclusive_writer(out), ThreadPoolExecutor(1) as pool:  # held by this thread
        with pytest.raises(CheckpointError, match="another run in this process is writing"):
            pool.submit(train, spec, out=out, device="cpu", progress=False).result()
    assert not out.exists()
    train(spec, out=out, device="cpu", progress=False)
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


# ---------------------------------------------------------------------------- 5. model size
@pytest.mark.parametrize("extra,phrase", [
    # every width within its flag bound, their product terabytes of parameters
    (["--d-model", str(flags.MAX_DIM), "--d-mlp", str(4 * flags.MAX_DIM)], "needs at least"),
    # a width beyond its bound never reaches the sizing
    (["--d-model", "1000000000"], "is out of range: must be 1..65536"),
])
def test_a_model_too_large_for_the_machine_is_one_line_before_allocating(extra, phrase, tmp_path,
                                                                         capsys, builds):
    argv = [a for a in QUICK if a not in ("--d-mlp", "32")]
    code, _, err = run_main([*argv, *extra, "--out", str(tmp_path / "c.pt")], capsys)
    line = one_line(err)
    assert code == 2 and phrase in line, line
    if phrase == "needs at least":
        assert "parameters" in line and "this machine's memory" in line
    assert {device for device, _ in builds} <= {"meta"}  # sized, never built
    assert not (tmp_path / "c.pt").exists()


def test_a_deep_model_is_sized_without_building_every_layer(tmp_path, capsys, builds):
    code, _, err = run_main([*QUICK, "--n-layers", str(flags.MAX_LAYERS), "--d-model",
                             str(flags.MAX_DIM), "--out", str(tmp_path / "c.pt")], capsys)
    assert code == 2 and "needs at least" in one_line(err)
    # extrapolated from meta builds of one and two layers, not one module per layer
    assert builds and all(device == "meta" and n <= 2 for device, n in builds), builds


def test_a_batch_too_large_for_the_machine_is_refused(tmp_path, capsys):
    # each flag within its bound; their product (activations of 4096 rows of 8k tokens at a
    # width of 4096) is far beyond any machine
    code, _, err = run_main([*QUICK, "--batch-size", str(flags.MAX_BATCH), "--max-len",
                             str(flags.MAX_LENGTH), "--d-model", "4096", "--out",
                             str(tmp_path / "c.pt")], capsys)
    line = one_line(err)
    assert code == 2 and f"on batches of {flags.MAX_BATCH} x" in line and "needs at least" in line


def test_the_spec_check_builds_no_real_model(builds):
    spec = make_spec("transformer", "copy", "quick", model=dict(d_model=16, n_layers=1,
                                                                n_heads=2, d_mlp=32),
                     task_config=dict(max_len=5), train=dict(steps=1, batch_size=4,
                                                             eval_every=0))
    assert builds and {device for device, _ in builds} == {"meta"}
    builds.clear()
    train(spec, device="cpu", progress=False)
    assert [device for device, _ in builds].count("cpu") == 1  # the loop's own model only


# ---------------------------------------------------------------------------- 6. memory bombs
def _crafted(tmp_path: Path, name: str, model: dict | None = None, task: dict | None = None,
             arch: str = "transformer") -> Path:
    ck = good_checkpoint()
    if arch != "transformer":
        m = models.build_model(arch, {})
        ck["model"] = {"arch": arch, "config": {}}
        ck["state_dict"] = m.state_dict()
    ck["model"]["config"].update(model or {})
    ck["task"]["config"].update(task or {})
    path = tmp_path / f"{name}.pt"
    buf = io.BytesIO()
    torch.save({**ck, "digest": tensor_digest(ck["state_dict"])}, buf)
    path.write_bytes(buf.getvalue())
    return path


@pytest.mark.parametrize("name,model,phrase", [
    ("d_model", {"d_model": 10**9, "n_heads": 2}, "d_model = 1000000000 does not fit the stored"),
    ("vocab", {"vocab_size": 10**11}, "vocab_size = 100000000000 does not fit the stored"),
    ("layers", {"n_layers": 10**9}, "n_layers = 1000000000, but the file stores only"),
    ("layers_small", {"n_layers": 40}, "n_layers = 40, but the file stores only"),
    ("d_model_stored", {"d_model": 4096, "n_heads": 2}, "weights do not match the config"),
    ("d_mlp", {"d_mlp": 60000}, "d_mlp = 60000 does not fit the stored"),
    ("d_mlp_small", {"d_mlp": 4000}, "weights do not match the config"),
])
def test_a_tiny_file_cannot_make_the_loader_allocate(name, model, phrase, tmp_path, builds):
    path = _crafted(tmp_path, name, model=model)
    assert path.stat().st_size < 100_000
    builds.clear()  # (the good checkpoint _crafted started from)
    with pytest.raises(CheckpointError) as e:
        models.load(path)
    assert phrase in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert {device for device, _ in builds} <= {"meta"}, builds  # refused before building


def test_sizes_that_are_not_stored_are_bounded(tmp_path, monkeypatch, builds):
    # STU's filter_len sizes no stored tensor, but building the filters of 65536 would take
    # minutes and a gigabyte
    path = _crafted(tmp_path, "stu", model={"filter_len": 65536}, arch="stu")
    builds.clear()
    with pytest.raises(CheckpointError, match="filter_len = 65536 does not fit the stored"):
        models.load(path)
    assert {device for device, _ in builds} <= {"meta"}, builds
    # and the buffers rebuilt from the config are bounded by the stored weights
    path = _crafted(tmp_path, "stu2", model={"filter_len": 4096}, arch="stu")
    monkeypatch.setattr(untrusted, "MAX_REBUILT_BYTES", 100_000)  # its filters: 4096 x 24 floats
    with pytest.raises(CheckpointError, match="buffers that are not stored"):
        models.load(path)


def test_a_huge_task_on_resume_is_refused_before_any_batch(tmp_path, capsys, builds):
    path = _crafted(tmp_path, "task", task={"max_len": 10**12})
    builds.clear()
    code, _, err = run_main(["--resume", str(path), "--no-progress"], capsys)
    assert code == 2 and "max_len = 1000000000000 is beyond this suite's bound" in one_line(err)
    assert {device for device, _ in builds} <= {"meta"}, builds
    code, _, err = run_main([*QUICK, "--max-len", str(10**12), "--out", str(tmp_path / "c.pt")],
                            capsys)
    assert code == 2 and "1000000000000 is out of range: must be 1..4096" in one_line(err)


def test_a_broadcast_view_cannot_claim_more_than_its_storage(tmp_path):
    ck = good_checkpoint()
    ck["history"] = [{"big": torch.zeros(1).expand(100_000, 100_000)}]
    buf = io.BytesIO()
    torch.save(ck, buf)
    (tmp_path / "v.pt").write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="a broadcast view"):
        read_checkpoint(tmp_path / "v.pt")


def test_a_compressed_zip_entry_is_refused_before_it_is_inflated(tmp_path, monkeypatch):
    src = tmp_path / "c.pt"
    save_checkpoint(good_checkpoint(), src)
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(bomb, "w") as zo:
        for info in zi.infolist():
            data = zi.read(info.filename)
            if info.filename.endswith("/data/0"):
                zo.writestr(info.filename, b"\0" * (300 * MB), compress_type=zipfile.ZIP_DEFLATED)
            else:
                zo.writestr(info, data)
    assert bomb.stat().st_size < 2 * MB

    def inflate(*a, **k):
        raise AssertionError("torch.load reached: the zip directory was not checked first")

    monkeypatch.setattr(torch, "load", inflate)
    with pytest.raises(CheckpointError, match="compressed entries"):
        models.load(bomb)


# ---------------------------------------------------------------------------- 7. digest
def _tensor_offset(path: Path) -> int:
    """Offset in the file of the first byte of the largest tensor record."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = path.read_bytes()
    h = info.header_offset
    name_len = int.from_bytes(raw[h + 26:h + 28], "little")
    extra_len = int.from_bytes(raw[h + 28:h + 30], "little")
    return h + 30 + name_len + extra_len


def test_flipped_bytes_inside_the_weights_are_refused(tmp_path):
    path = save_checkpoint(good_checkpoint(), tmp_path / "c.pt")
    raw = bytearray(path.read_bytes())
    at = _tensor_offset(path) + 101
    raw[at] ^= 0x10  # one bit of one float: a different, finite weight
    bad = tmp_path / "flipped.pt"
    bad.write_bytes(bytes(raw))
    ck = torch.load(bad, weights_only=True)  # torch itself loads it (no CRC check)
    assert all(torch.isfinite(v).all() for v in ck["state_dict"].values())
    with pytest.raises(CheckpointError) as e:
        models.load(bad)
    assert str(e.value) == (f"{bad}: corrupt: its weights do not match the digest stored with "
                            "them (bytes changed inside the file, or an edit that did not update "
                            "'digest')")
    models.load(path)  # the unflipped file is fine


def test_a_file_without_digest_loads_with_one_notice(tmp_path, capsys):
    ck = good_checkpoint()
    old = tmp_path / "old.pt"
    torch.save(ck, old)  # as written before checkpoints carried a digest
    capsys.readouterr()
    m = models.load(old)
    models.load(old)
    read_checkpoint(old)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"notice: {old}: no digest of its weights")
    for k, v in m.state_dict().items():
        assert torch.equal(v, ck["state_dict"][k])
    save_checkpoint(read_checkpoint(old), tmp_path / "new.pt")  # re-saving adds one
    assert torch.load(tmp_path / "new.pt", weights_only=True)["digest"].startswith("sha256:")
    models.load(tmp_path / "new.pt")
    assert capsys.readouterr().err == ""


def test_digest_covers_names_shapes_dtypes_and_bytes():
    sd = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2, dtype=torch.int64)}
    d = tensor_digest(sd)
    assert d == tensor_digest({k: v.clone() for k, v in sd.items()})
    assert d == tensor_digest({"a": sd["a"].t().contiguous().t(), "b": sd["b"]})  # layout-free
    for other in ({"a": sd["a"].reshape(3, 2), "b": sd["b"]},
                  {"a": sd["a"].double(), "b": sd["b"]},
                  {"c": sd["a"], "b": sd["b"]},
                  {"a": sd["a"] + torch.tensor([[0, 0, 0], [0, 0, 1e-6]]), "b": sd["b"]}):
        assert tensor_digest(other) != d


# ---------------------------------------------------------------------------- 8. NaN / inf
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_before_an_analysis(value, tmp_path):
    ck = good_checkpoint()
    name = next(k for k, v in ck["state_dict"].items() if v.is_floating_point())
    ck["state_dict"][name].view(-1)[3] = value
    path = save_checkpoint(ck, tmp_path / "c.pt")  # a consistent digest: the values are the issue
    for loader in (models.load, load_model):
        with pytest.raises(InputError) as e:
            loader(path)
        assert str(e.value) == (f"{path}: refused: its weights hold NaN or infinite values "
                                f"(1 of {ck['state_dict'][name].numel()} in {name}); an analysis "
                                "of them would be meaningless")


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
    from models import checkpoint as ck
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
    mod = importlib.import_module(f"analyses.{module}")
    assert mod.main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--out" in err[0], err
    assert ("is a file" if how == "file" else "not writable") in err[0]
