"""Untrusted, broken and foreign checkpoint files; atomic saves (issue 8).

Every bad file must give one :class:`CheckpointError` whose message is a single line naming the
file, and a file carrying pickled code must never run it (a marker file proves it).
"""

from __future__ import annotations

from tests import ROOT_DIR

import io
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import torch

import models
from analyses.common import load_model
from models.checkpoint.io import read_checkpoint
from models.checkpoint.write import save_checkpoint
from seqprobe import atomic
from seqprobe.errors import CheckpointError, InputError, SaveError
from tests.tiny import good_checkpoint

ROOT = ROOT_DIR
def torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class MakesMarker:
    """Unpickling this object would create the marker file (the way a malicious pickle runs
    code): ``__reduce__`` tells the unpickler to call ``open(marker, "w")``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


class RunsShell:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def assert_one_line(err: Exception, path) -> str:
    msg = str(err)
    # one line; long enough for the path and TrainConfig's list of allowed keys
    assert "\n" not in msg and str(path) in msg and len(msg) < 500, msg
    return msg


# ---------------------------------------------------------------------------- pickled code
def evil_files(tmp_path: Path, marker: Path) -> dict[str, Path]:
    ck = good_checkpoint()
    nested = {**ck, "history": [{"loss": MakesMarker(marker)}]}  # a valid-looking checkpoint
    files = {
        "torch_zip_open": torch_bytes(MakesMarker(marker)),
        "torch_zip_system": torch_bytes(RunsShell(marker)),
        "nested_in_checkpoint": torch_bytes(nested),
        "raw_pickle_p0": pickle.dumps(RunsShell(marker), protocol=0),
        "raw_pickle_p4": pickle.dumps(MakesMarker(marker), protocol=4),
    }
    out = {}
    for name, data in files.items():
        (tmp_path / f"{name}.pt").write_bytes(data)
        out[name] = tmp_path / f"{name}.pt"
    return out


def test_marker_objects_really_run_code_when_unpickled(tmp_path):
    """The test files are genuinely dangerous: a plain unpickle creates the marker."""
    marker = tmp_path / "MARKER"
    pickle.loads(pickle.dumps(MakesMarker(marker)))
    assert marker.exists()


def test_pickled_code_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "MARKER"
    for name, path in evil_files(tmp_path, marker).items():
        with pytest.raises(CheckpointError) as e:
            models.load(path)
        msg = assert_one_line(e.value, path)
        assert "refused" in msg and "code" in msg, (name, msg)
        assert "system" in msg or "open" in msg, (name, msg)  # says what it would have called
        assert not marker.exists(), name


# ---------------------------------------------------------------------------- broken / foreign
def broken_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, a phrase the one-line message must contain)."""
    ck = good_checkpoint()
    cfg = ck["model"]["config"]
    raw = torch_bytes(ck)
    files: dict[str, tuple[bytes, str]] = {
        "empty": (b"", "empty file"),
        "truncated_10_bytes": (raw[:10], "truncated or corrupt"),
        "truncated_half": (raw[: len(raw) // 2], "truncated or corrupt"),
        "truncated_last_byte": (raw[:-1], "truncated or corrupt"),
        "random_bytes": (torch.randint(0, 256, (2000,), dtype=torch.uint8,
                                       generator=torch.Generator().manual_seed(0)).numpy()
                         .tobytes(), "not a probe-suite checkpoint"),
        "text": (b'{"format": 1, "model": {}}\n', "not a probe-suite checkpoint"),
        "plain_pickle_dict": (pickle.dumps({"format": 1}), "not a probe-suite checkpoint"),
        "foreign_tensor": (torch_bytes(torch.ones(3)), "no 'format' field"),
        "foreign_state_dict": (torch_bytes(ck["state_dict"]), "no 'format' field"),
        "foreign_dict": (torch_bytes({"epoch": 3, "weights": torch.zeros(2)}), "no 'format'"),
        "version_2": (torch_bytes({**ck, "format": 2}), "format 2 is not supported"),
        "version_string": (torch_bytes({**ck, "format": "1"}), "format '1' is not supported"),
        "version_bool": (torch_bytes({**ck, "format": True}), "format True is not supported"),
        "missing_state_dict": (torch_bytes({k: v for k, v in ck.items() if k != "state_dict"}),
                               "lacks ['state_dict']"),
        "model_entry_list": (torch_bytes({**ck, "model": ["transformer"]}), "'model' entry"),
        "task_entry_int": (torch_bytes({**ck, "task": 3}), "'task' entry"),
        "state_dict_int": (torch_bytes({**ck, "state_dict": 5}), "'state_dict' must map"),
        "negative_step": (torch_bytes({**ck, "train": {**ck["train"], "step": -1}}),
                          "train.step"),
        "unknown_arch": (torch_bytes({**ck, "model": {"arch": "rnn9", "config": {}}}),
                         "unknown arch 'rnn9'; allowed:"),
        "unknown_task": (torch_bytes({**ck, "task": {"name": "sorting", "config": {}}}),
                         "unknown task 'sorting'; allowed:"),
        "unknown_model_key": (torch_bytes({**ck, "model": {"arch": "transformer", "config": {
            **cfg, "n_experts": 4}}}), "unknown key(s) ['n_experts']"),
        "unknown_task_key": (torch_bytes({**ck, "task": {"name": "copy", "config": {
            "D": 26, "shuffle": True}}}), "unknown key(s) ['shuffle']"),
        "unknown_train_key": (torch_bytes({**ck, "train": {**ck["train"], "config": {
            "steps": 3, "momentum": 0.9}}}), "unknown key(s) ['momentum']"),
        "wrong_type_in_config": (torch_bytes({**ck, "model": {"arch": "transformer", "config": {
            **cfg, "d_model": "wide"}}}), "d_model must be int"),
        "invalid_config_value": (torch_bytes({**ck, "model": {"arch": "transformer", "config": {
            **cfg, "n_heads": 3}}}), "divisible by n_heads"),
        "weights_of_another_shape": (torch_bytes({**ck, "model": {"arch": "transformer",
                                                              "config": {**cfg, "d_model": 32}}}),
                                     "weights do not match the config"),
        "weights_missing": (torch_bytes({**ck, "state_dict": dict(
            list(ck["state_dict"].items())[1:])}),
                            "missing"),
    }
    zpath = tmp_path / "other.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("readme.txt", "hello")
    out = {"zip_not_torch": (zpath, "a zip archive, but not one written by torch.save")}
    for name, (data, phrase) in files.items():
        (tmp_path / f"{name}.pt").write_bytes(data)
        out[name] = (tmp_path / f"{name}.pt", phrase)
    return out


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    return broken_files(tmp_path_factory.mktemp("broken"))


def _names():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return sorted(broken_files(Path(d)))


@pytest.mark.parametrize("name", _names())
def test_broken_file_gives_one_clear_line(broken, name):
    path, phrase = broken[name]
    with pytest.raises(CheckpointError) as e:
        models.load(path)
    msg = assert_one_line(e.value, path)
    assert phrase in msg, msg
    assert isinstance(e.value, InputError)  # so every CLI turns it into exit code 2


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        models.load(tmp_path / "nope.pt")
    with pytest.raises(CheckpointError, match="is a directory"):
        models.load(tmp_path)


def test_wrong_architecture_for_the_analysis(tmp_path):
    path = save_checkpoint(good_checkpoint(), tmp_path / "c.pt")
    with pytest.raises(InputError) as e:
        load_model(str(path), archs=("mamba", "mamba2"))
    msg = assert_one_line(e.value, path)
    assert "needs a mamba or mamba2 checkpoint" in msg and "'transformer'" in msg
    assert load_model(str(path), archs=("transformer",)).arch == "transformer"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_load_model_on_a_missing_device_is_one_line(tmp_path):
    path = save_checkpoint(good_checkpoint(), tmp_path / "c.pt")
    for device, phrase in [("cuda", "CUDA is not available"), ("banana", "unknown device")]:
        with pytest.raises(InputError, match=phrase):
            load_model(str(path), device=device)


def test_task_config_with_wrong_types_is_rejected(tmp_path):
    ck = good_checkpoint()
    ck["task"]["config"]["max_len"] = 6.5
    path = save_checkpoint(ck, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match=r"max_len must be int"):
        read_checkpoint(path)


# ---------------------------------------------------------------------------- atomic saves
def test_failure_between_write_and_rename_keeps_previous_file(tmp_path, monkeypatch):
    path = save_checkpoint(good_checkpoint(step=1), tmp_path / "c.pt")
    before = path.read_bytes()

    def crash(tmp):
        assert Path(tmp).parent == path.parent and Path(tmp).stat().st_size > 0  # fully written
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "_before_rename_hook", crash)
    with pytest.raises(CheckpointError, match="could not save.*unchanged"):
        save_checkpoint(good_checkpoint(step=2), path)
    assert path.read_bytes() == before and read_checkpoint(path)["train"]["step"] == 1
    assert not list(tmp_path.glob(".*.tmp"))  # the half-done temp file was removed

    monkeypatch.setattr(atomic, "_before_rename_hook", lambda tmp: (_ for _ in ()).throw(
        KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C mid-save: same guarantee
        save_checkpoint(good_checkpoint(step=3), path)
    assert path.read_bytes() == before and not list(tmp_path.glob(".*.tmp"))


def test_failure_while_writing_keeps_previous_file(tmp_path, monkeypatch):
    path = save_checkpoint(good_checkpoint(step=1), tmp_path / "c.pt")
    before = path.read_bytes()

    def half_write(obj, f):
        f.write(b"PK\x03\x04 half of an archive")
        raise RuntimeError("killed while writing")

    monkeypatch.setattr(torch, "save", half_write)
    with pytest.raises(SaveError, match="killed while writing"):  # torch's writer's errors
        save_checkpoint(good_checkpoint(step=2), path)
    assert path.read_bytes() == before


def test_save_to_unusable_paths_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    for bad, phrase in [(tmp_path, "is a directory"),
                        (tmp_path / "file" / "c.pt", "which is a file")]:
        with pytest.raises(CheckpointError, match=phrase):
            save_checkpoint(good_checkpoint(), bad)


CHILD_SEAM = textwrap.dedent("""
    import os, signal, sys, torch
    sys.path.insert(0, {root!r})
    from models.checkpoint import write as ck
    from seqprobe import atomic

    def ckpt(step):
        return {{"format": 1, "model": {{"arch": "transformer", "config": {{}}}},
                "task": {{"name": "copy", "config": {{}}}},
                "train": {{"step": step, "samples_seen": 0}},
                "state_dict": {{"w": torch.full((1000,), float(step))}}, "history": []}}

    path = {path!r}
    ck.save_checkpoint(ckpt(1), path)
    # the second save dies (SIGKILL: no cleanup, no finally) after writing, before the rename
    atomic._before_rename_hook = lambda tmp: os.kill(os.getpid(), signal.SIGKILL)
    ck.save_checkpoint(ckpt(2), path)
    print("survived")
""")

CHILD_LOOP = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {root!r})
    from models.checkpoint import write as ck

    big = torch.zeros(1_000_000)  # ~4 MB: a save takes a while
    for step in range(1, 100_000):
        ck.save_checkpoint({{"format": 1, "model": {{"arch": "transformer", "config": {{}}}},
                            "task": {{"name": "copy", "config": {{}}}},
                            "train": {{"step": step, "samples_seen": 0}},
                            "state_dict": {{"big": big}}, "history": []}}, {path!r})
        print(step, flush=True)
""")


def _child(code: str, path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code.format(root=str(ROOT), path=str(path))],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_process_killed_between_write_and_rename_leaves_previous_checkpoint(tmp_path):
    path = tmp_path / "c.pt"
    p = _child(CHILD_SEAM, path)
    out, err = p.communicate(timeout=120)
    assert p.returncode == -signal.SIGKILL and "survived" not in out, err
    ck = read_checkpoint(path)  # the old checkpoint, whole
    assert ck["train"]["step"] == 1 and torch.equal(ck["state_dict"]["w"], torch.ones(1000))
    assert len(list(tmp_path.glob(".c.pt.*.tmp"))) == 1  # the dead save's temp file, ignored


def test_process_killed_at_random_moments_while_saving(tmp_path):
    """SIGKILL a process that rewrites its checkpoint in a loop: whenever it dies, the file on
    disk is a complete checkpoint from a recent save."""
    path = tmp_path / "c.pt"
    p = _child(CHILD_LOOP, path)
    steps = []
    try:
        for delay in (0.0, 0.013, 0.029, 0.041):  # kill points spread over a save
            steps.append(int(p.stdout.readline()))
            time.sleep(delay)
            read_checkpoint(path)  # readable while the writer keeps writing
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        p.kill()
    ck = read_checkpoint(path)
    assert ck["train"]["step"] >= steps[-1] and ck["state_dict"]["big"].numel() == 1_000_000
