"""Reliability, second round (issue 18): what is refused before it costs memory or hands a
corrupt model to an analysis — a model or a batch too large for the machine (sized on the meta
device), memory bombs in tiny files, silent corruption (the weights' digest) and non-finite
weights.

A memory bomb is checked by where the refusal comes (no model built on a real device,
torch.load never reached), not by measuring memory: bench/bench_hostile.py measures the peak
memory of refusing each one (DESIGN.md: memory targets live in bench/).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch

import models
from analyses.common import load_model
from analyses.zoo.levels import make_run_config
from models.base import SuiteModel
from models.checkpoint import rebuild, untrusted
from models.checkpoint.io import read_checkpoint
from models.checkpoint.layout import tensor_digest
from models.checkpoint.write import save_checkpoint
from models.train.loop import train
from seqprobe import flags
from seqprobe.errors import CheckpointError, InputError
from tests.reliability_helpers import QUICK, one_line, run_main
from tests.tiny import good_checkpoint

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


def test_the_run_config_check_builds_no_real_model(builds):
    run_config = make_run_config("transformer", "copy", "quick", model=dict(d_model=16, n_layers=1,
                                                                n_heads=2, d_mlp=32),
                     task_config=dict(max_len=5), train=dict(steps=1, batch_size=4,
                                                             eval_every=0))
    assert builds and {device for device, _ in builds} == {"meta"}
    builds.clear()
    train(run_config, device="cpu", progress=False)
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
    ("d_model", {"d_model": 10**9, "n_heads": 2},
     "TransformerConfig.d_model 1000000000 is out of range"),
    ("vocab", {"vocab_size": 10**11}, "TransformerConfig.vocab_size 100000000000 is out of range"),
    ("layers", {"n_layers": 10**9}, "TransformerConfig.n_layers 1000000000 is out of range"),
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
    # the field's bound, as the stored config is built: the range the flag below refuses with
    assert code == 2 and "CopyConfig.max_len 1000000000000 is out of range: must be 1..4096" \
        in one_line(err)
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
