"""Issue 39, fourth hostile round (part B): tracebacks and warnings turned into one line, a
served entry, or a recoverable state — ngram_heads' n longer than its strings, a symlinked lock
file in the cache, a read-only cache serving finished entries, an ``export_hf --overwrite``
killed between its two renames, and a checkpoint whose task config was edited."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import models
from analyses import ngram_heads, zoo
from models.checkpoint.layout import make_checkpoint
from models.checkpoint.write import save_checkpoint
from models.hf import export as export_hf
from models.hf.export import export
from models.loading import interrupted_swap, load
from models.train import cache
from models.train.cache import cache_path, check_cache_dir
from probes.attention import ngram_match_mask
from seqprobe.config import config_to_dict
from seqprobe.errors import CheckpointError, InputError
from tests.tiny import good_checkpoint

TINY = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"min_len": 1, "max_len": 6},
        "train": {"steps": 2, "batch_size": 4, "eval_every": 0, "eval_batches": 1,
                  "eval_batch_size": 4, "warmup_steps": 1}}


# ---------------------------------------------------------------------------- ngram_heads
@pytest.mark.parametrize("n_checkpoints", [1, 2])
def test_ngram_heads_n_longer_than_the_strings_is_one_line(n_checkpoints, tmp_path, capsys):
    cks = [str(save_checkpoint(good_checkpoint(i), tmp_path / f"c{i}.pt"))  # copy, max_len 6
           for i in range(n_checkpoints)]
    code = ngram_heads.main([*cks, "--n-max", "64", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "--n-max 64" in err and "L = 6" in err
    assert not (tmp_path / "out").exists()


def test_an_ngram_longer_than_the_sequence_matches_nothing():
    tokens = torch.zeros(2, 5, dtype=torch.long)
    assert not ngram_match_mask(tokens, 9).any()
    assert ngram_match_mask(tokens, 2).any()  # all-equal tokens match at n <= T


# ---------------------------------------------------------------------------- the cache
@pytest.fixture
def recipe(monkeypatch):
    r = zoo.Recipe("test/round4", "copy", "transformer", TINY)
    monkeypatch.setitem(zoo.RECIPES, r.name, r)
    return r.name


def test_a_symlinked_lock_file_is_refused_and_not_followed(recipe, tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    path = cache_path(zoo.run_config(recipe, "quick", cache_dir), cache_dir)
    lock = Path(str(path) + ".lock")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    lock.symlink_to(victim)  # opening it for the lock would truncate the victim
    with pytest.raises(InputError, match="is a symbolic link") as e:
        zoo.checkpoint(recipe, "quick", cache_dir, "cpu", progress=False)
    assert "\n" not in str(e.value) and victim.read_text() == "keep me"
    lock.unlink()
    lock.symlink_to(lock)  # a loop: "too many levels of symbolic links" before
    with pytest.raises(InputError, match="is a symbolic link"):
        zoo.checkpoint(recipe, "quick", cache_dir, "cpu", progress=False)
    assert not path.exists()


def test_a_read_only_cache_serves_its_finished_entries(recipe, tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    served = zoo.checkpoint(recipe, "quick", cache_dir, "cpu", progress=False)
    Path(str(served) + ".lock").unlink(missing_ok=True)

    def read_only(*args, **kwargs):  # what a read-only mount does to any write (even root's)
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(cache, "FileLock", read_only)
    monkeypatch.setattr(cache.tempfile, "NamedTemporaryFile", read_only)
    assert check_cache_dir(cache_dir, write=False) == cache_dir
    with pytest.raises(InputError, match="cannot write in it"):
        check_cache_dir(cache_dir)
    assert zoo.checkpoint(recipe, "quick", cache_dir, "cpu", progress=False) == served
    assert zoo.status(recipe, "quick", cache_dir) == "cached"
    served.unlink()  # an entry that needs training: one line, nothing written
    with pytest.raises(InputError, match="cannot write in it"):
        zoo.checkpoint(recipe, "quick", cache_dir, "cpu", progress=False)


# ---------------------------------------------------------------------------- export swap
def _export_checkpoint(tmp_path: Path, d_model: int, name: str) -> Path:
    cfg = {"vocab_size": 7, "d_model": d_model, "n_layers": 1, "d_state": 4, "d_conv": 3}
    torch.manual_seed(d_model)
    m = models.build_model("mamba", cfg)
    ck = make_checkpoint("mamba", config_to_dict(m.cfg), "copy",
                         {"D": 3, "min_len": 1, "max_len": 6}, {"step": 1}, m.state_dict())
    return save_checkpoint(ck, tmp_path / name)


class Killed(BaseException):
    """kill -9: nothing after it runs, not even the restoring handler."""


def test_an_overwrite_killed_between_its_renames_is_recovered(tmp_path, monkeypatch, capsys):
    first = _export_checkpoint(tmp_path, 8, "a.pt")
    second = _export_checkpoint(tmp_path, 12, "b.pt")
    out = tmp_path / "hf"
    export(first, out, verify=False)
    monkeypatch.setattr(export_hf, "exchange", lambda a, b: False)  # the two-rename fallback
    real_replace = os.replace

    def replace(src, dst):
        if Path(src).name.endswith(".export.tmp") or Path(src).name.endswith(".export.old"):
            raise Killed  # the second rename (and the handler's restore) never happen
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        export(second, out, overwrite=True, verify=False)
    monkeypatch.setattr(os, "replace", real_replace)
    assert not out.exists()
    aside = interrupted_swap(out)
    assert aside is not None and aside.name.endswith(".export.old")
    with pytest.raises(CheckpointError, match="stopped while replacing it") as e:
        load(out)
    assert "\n" not in str(e.value) and aside.name in str(e.value)
    # the next export restores the old one first: without --overwrite it is refused, kept
    assert export_hf.main([str(second), str(out)]) == 2
    err = capsys.readouterr().err
    assert "restored" in err and "--overwrite" in err
    assert export_hf.read_provenance(out)["config"]["d_model"] == 8
    assert export_hf.main([str(second), str(out), "--overwrite"]) == 0
    assert export_hf.read_provenance(out)["config"]["d_model"] == 12
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".hf.")]


def test_the_overwrite_swap_is_one_step_where_the_system_has_it(tmp_path, monkeypatch):
    first = _export_checkpoint(tmp_path, 8, "a.pt")
    second = _export_checkpoint(tmp_path, 12, "b.pt")
    out = tmp_path / "hf"
    export(first, out, verify=False)
    (tmp_path / "x").mkdir()
    if not export_hf.exchange(tmp_path / "x", out):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here: the fallback is tested above")
    export_hf.exchange(tmp_path / "x", out)  # swapped back
    real_replace = os.replace

    def replace(src, dst):  # the swap must not move OUT_DIR away with a rename
        assert Path(dst) != out or not out.exists(), "OUT_DIR renamed away"
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    export(second, out, overwrite=True, verify=False)
    assert export_hf.read_provenance(out)["config"]["d_model"] == 12
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".hf.")]


# ---------------------------------------------------------------------------- --ray address
def test_a_ray_address_that_is_not_a_ray_head_is_one_line_at_once():
    """Something listens there but is no gRPC server (ssh): refused before ray.init, which
    would retry it for half a minute printing Ray's C++ log lines; a gRPC server passes."""
    import socket
    import threading
    import time
    from concurrent import futures

    grpc = pytest.importorskip("grpc")
    from seqprobe.sweep import _check_reachable

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def ssh_like():
        while True:
            conn, _ = listener.accept()
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    threading.Thread(target=ssh_like, daemon=True).start()
    try:
        _check_reachable(f"127.0.0.1:{port}")  # HTTP/2 answers: left to ray.init
        t0 = time.time()
        with pytest.raises(InputError, match="not a Ray cluster") as e:
            _check_reachable(f"127.0.0.1:{listener.getsockname()[1]}")
        assert "\n" not in str(e.value) and time.time() - t0 < 10
    finally:
        server.stop(None)
        listener.close()


# ---------------------------------------------------------------------------- record digest
def test_an_edited_task_config_is_refused_on_load(tmp_path):
    """The digest used to cover the weights only: a checkpoint whose task β was edited from
    1 to 1000 ran and recorded β 1000."""
    import io
    import zipfile

    from models.checkpoint.io import read_checkpoint

    cfg = {"vocab_size": 3, "d_model": 8, "n_layers": 1, "n_heads": 2, "d_state": 4,
           "d_conv": 3, "chunk_size": 4}
    torch.manual_seed(0)
    m = models.build_model("mamba2", cfg)
    ck = make_checkpoint("mamba2", cfg, "markov", {"beta": 1.0, "seq_len": 16}, {"step": 1},
                         m.state_dict())
    path = save_checkpoint(ck, tmp_path / "m.pt")
    assert read_checkpoint(path)["task"]["config"]["beta"] == 1.0
    payload = torch.load(path, weights_only=True)
    assert "record_digest" in payload
    payload["task"]["config"]["beta"] = 1000.0  # the weights' digest still matches
    buf = io.BytesIO()
    torch.save(payload, buf)
    edited = tmp_path / "edited.pt"
    edited.write_bytes(buf.getvalue())
    assert zipfile.is_zipfile(edited)
    with pytest.raises(CheckpointError, match="its record .* does not match") as e:
        load(edited)
    assert "\n" not in str(e.value)
    old = {k: v for k, v in payload.items() if k != "record_digest"}  # written before it
    buf = io.BytesIO()
    torch.save(old, buf)
    (tmp_path / "old.pt").write_bytes(buf.getvalue())
    assert load(tmp_path / "old.pt").task.cfg.beta == 1000.0  # old files still load
