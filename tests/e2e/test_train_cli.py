"""``python -m models.train`` (and every analysis CLI) on bad input: one stderr line that says
what is wrong and what is allowed, exit code 2, no traceback, nothing computed (issue 8)."""

from __future__ import annotations

from tests import ROOT_DIR

import importlib
import io
import os
import pickle
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import models.train.cli as C
from models.checkpoint.layout import tensor_digest
from models.checkpoint.write import save_checkpoint
from models.train.cli import main
from tests.tiny import TINY_RUN_FLAGS

ROOT = ROOT_DIR
QUICK = [*TINY_RUN_FLAGS, "--steps", "3", "--batch-size", "4", "--eval-batches", "1",
         "--eval-batch-size", "4", "--no-progress", "--device", "cpu"]

# (name, extra argv, phrases the one stderr line must contain). The last phrase usually says
# what is allowed.
BAD = [
    ("unknown task", ["--task", "sorting"], ["unknown task 'sorting'", "allowed: copy,"]),
    ("unknown arch", ["--arch", "rnn9"], ["unknown arch 'rnn9'", "allowed:", "transformer"]),
    ("unknown pe", ["--pe", "sinusoidal"], ["pe must be one of", "'hard_alibi'", "'sinusoidal'"]),
    ("unknown schedule", ["--schedule", "exp"], ["schedule must be linear, cosine or constant"]),
    ("unknown level", ["--preset", "huge"],
     ["invalid choice: 'huge'", "'quick', 'medium', 'large', 'paper'"]),
    ("unknown flag", ["--dropout", "0.1"], ["unrecognized arguments: --dropout", "--help"]),
    ("flag of another arch", ["--d-state", "16"], ["unrecognized arguments: --d-state"]),
    ("min > max length", ["--min-len", "9", "--max-len", "3"],
     ["min_len (9) must be <= max_len (3)"]),
    ("n-gram longer than the string", ["--task", "dup_ngram_copy", "--n", "8", "--min-len", "5",
                                       "--max-len", "10"], ["n=8", "2n+1=17", "min_len=5"]),
    ("lookup key longer than the string", ["--task", "lookup", "--n", "12", "--min-len", "5",
                                           "--max-len", "10"], ["min_len (5) >= n + k (13)"]),
    ("vocabulary too small for unique keys", ["--task", "lookup", "--D", "2", "--n", "2",
                                              "--max-len", "30"],
     ["vocabulary too small for unique 2-gram keys", "D^n = 4 < 2 * max_len = 60"]),
    ("phone book larger than the name list", ["--task", "phonebook", "--n-entries", "9999"],
     ["n_entries (9999) exceeds the"]),
    ("shots >= entries", ["--task", "phonebook", "--n-entries", "3", "--n-shots", "3"],
     ["n_shots must be in [0, n_entries)"]),
    ("alphabet of one letter", ["--D", "1"], ["--task.D: 1 is out of range: must be 2..65536"]),
    ("negative steps", ["--steps", "-5"], ["--train.steps: -5 is out of range: must be 1.."]),
    ("negative batch size", ["--batch-size", "-1"], ["--train.batch_size: -1 is out of range: must be 1.."]),
    ("negative d_model", ["--d-model", "-16"], ["--model.d_model: -16 is out of range: must be 1.."]),
    ("zero layers", ["--n-layers", "0"], ["--model.n_layers", "0 is out of range: must be 1.."]),
    ("negative length", ["--min-len", "-3"], ["--task.min_len: -3 is out of range: must be 1.."]),
    ("negative warm-up", ["--warmup-steps", "-1"], ["--train.warmup_steps: -1 is out of range: must be 0.."]),
    ("negative context", ["--context", "-8"], ["--train.context: -8 is out of range: must be 0.."]),
    ("context shorter than an example", ["--context", "5"],
     ["context 5 is shorter than the longest copy example (43 tokens)", "--context 0"]),
    ("vocab smaller than the task's", ["--vocab-size", "10"],
     ["vocab_size 10 is smaller than the copy task's vocabulary (30 tokens)"]),
    ("heads do not divide d_model", ["--n-heads", "3"],
     ["d_model (16) must be divisible by n_heads (3)"]),
    ("zero lr", ["--lr", "0"], ["--train.lr: 0 is out of range", "(0, 10]"]),
    ("infinite lr", ["--lr", "inf"], ["--train.lr: inf is out of range", "finite"]),
    ("nan lr", ["--lr", "nan"], ["--train.lr: nan is out of range", "finite"]),
    ("beta out of range", ["--beta1", "1.5"], ["--train.beta1: 1.5 is out of range"]),
    ("not a number", ["--lr", "fast"], ["--train.lr: 'fast' is not a number"]),
    ("float for an int", ["--steps", "2.5"], ["--train.steps: '2.5' is not an integer"]),
    ("not a boolean", ["--causal", "maybe"], ["--causal: cannot read 'maybe' as bool"]),
    ("device cuda on a CPU machine", ["--device", "cuda"],
     ["device 'cuda' asked for, but CUDA is not available here; use --device cpu"]),
    ("device cuda:7", ["--device", "cuda:7"], ["'cuda:7'"]),
    ("device banana", ["--device", "banana"],
     ["unknown device 'banana'; allowed: cpu, cuda, cuda:N, auto"]),
    ("device meta", ["--device", "meta"], ["unsupported device 'meta'; allowed:"]),
    ("device mps", ["--device", "mps"], ["'mps'"]),
    ("out is a directory", ["--out", "{tmp}"], ["is a directory; give a file path"]),
    ("out under a file", ["--out", "{tmp}/afile/c.pt"], ["which is a file"]),
    ("no out", ["{noout}"], ["--out is required"]),
    ("resume a missing file", ["--resume", "{tmp}/none.pt"], ["none.pt: no such file"]),
    ("resume a foreign file", ["--resume", "{tmp}/tensor.pt"], ["not a probe-suite checkpoint"]),
]
if torch.cuda.is_available():  # on a GPU machine these devices exist
    BAD = [b for b in BAD if b[0] not in ("device cuda on a CPU machine",)]
if torch.backends.mps.is_available():
    BAD = [b for b in BAD if b[0] != "device mps"]


def run_main(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse would exit; the trainer's parser must not
        code = f"SystemExit({e.code})"
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if training starts: validation must happen before any compute."""

    def forbidden(*a, **k):
        raise AssertionError("train() was called although the input is invalid")

    monkeypatch.setattr(C, "train", forbidden)


@pytest.mark.parametrize("name,extra,phrases", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gives_one_line_and_exit_2(name, extra, phrases, tmp_path, capsys, no_compute):
    (tmp_path / "afile").write_text("x")
    torch.save(torch.ones(2), tmp_path / "tensor.pt")
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    argv = [*QUICK, "--out", str(tmp_path / "c.pt"), *extra]
    if extra == ["{noout}"]:
        argv = QUICK
    code, out, err = run_main(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for phrase in phrases:
        assert phrase in lines[0], (phrase, lines[0])
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "c.pt").exists()


def test_help_lists_the_fields_of_the_chosen_arch_and_task(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--arch", "transformer", "--task", "lookup", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--pe" in out and "--key" in out and "--steps" in out


def test_good_input_trains_and_exits_0(tmp_path, capsys):
    code, out, err = run_main([*QUICK, "--max-len", "5", "--out", str(tmp_path / "c.pt")], capsys)
    assert code == 0 and out.startswith("done: step 3"), (out, err)
    assert (tmp_path / "c.pt").exists()


def test_resume_flags_that_contradict_the_checkpoint(tmp_path, capsys, no_compute,
                                                     tiny_checkpoint):
    path = save_checkpoint(tiny_checkpoint(), tmp_path / "c.pt")
    code, _, err = run_main(["--resume", str(path), "--task", "lookup", "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--task lookup conflicts with" in err and "trained on copy" in err


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trained") / "c.pt"
    assert main([*QUICK, "--max-len", "5", "--out", str(path)]) == 0
    return path


def _spoil(ck: dict, how: str) -> dict:
    ck = dict(ck)
    if how == "weights of another shape":
        ck["state_dict"] = {k: v[..., :1] for k, v in ck["state_dict"].items()}
    elif how == "a weight missing":
        ck["state_dict"] = dict(list(ck["state_dict"].items())[1:])
    elif how == "unknown model key":
        ck["model"] = {**ck["model"], "config": {**ck["model"]["config"], "n_experts": 2}}
    elif how == "no rng state":
        ck["train"] = {k: v for k, v in ck["train"].items() if k != "rng"}
    elif how == "version 2":
        ck["format"] = 2
    # a hand-edited file with a consistent digest: the check under test is the one that fires
    ck["digest"] = tensor_digest(ck["state_dict"])
    return ck


@pytest.mark.parametrize("how,phrase", [
    ("weights of another shape", "weights do not match the model config"),
    ("a weight missing", "weights do not match the model config: missing"),
    ("unknown model key", "unknown key(s) ['n_experts']"),
    ("no rng state", "cannot resume: the train entry lacks ['rng']"),
    ("version 2", "format 2 is not supported"),
    ("truncated", "truncated or corrupt"),
])
def test_resume_from_a_spoiled_checkpoint(trained, how, phrase, tmp_path, capsys, no_compute):
    path = tmp_path / "spoiled.pt"
    if how == "truncated":
        raw = trained.read_bytes()
        path.write_bytes(raw[: len(raw) * 2 // 3])
    else:
        torch.save(_spoil(torch.load(trained, weights_only=True), how), path)
    capsys.readouterr()
    code, out, err = run_main(["--resume", str(path), "--no-progress"], capsys)
    assert code == 2 and err.strip().splitlines() == [err.strip()], err
    assert err.startswith(f"error: {path}: ") and phrase in err, err


def _cli(*argv, timeout=120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


class MakesMarker:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_real_process_pickled_code_and_missing_device(tmp_path):
    """In a real ``python -m models.train`` process: exit 2, one stderr line, no traceback
    (no warning either), and the code in the file never runs."""
    marker = tmp_path / "MARKER"
    evil = tmp_path / "evil.pt"
    buf = io.BytesIO()
    torch.save({"format": 1, "payload": MakesMarker(marker)}, buf)
    evil.write_bytes(buf.getvalue())
    raw = tmp_path / "evil.pkl"
    raw.write_bytes(pickle.dumps(MakesMarker(marker)))
    for path in (evil, raw):
        r = _cli("-m", "models.train", "--resume", str(path), "--no-progress")
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "refused" in lines[0] and "code" in lines[0], r.stderr
        assert "Traceback" not in r.stderr and not marker.exists()
    if not torch.cuda.is_available():
        r = _cli("-m", "models.train", *QUICK, "--device", "cuda", "--out", str(tmp_path / "c.pt"))
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            "error: device 'cuda' asked for, but CUDA is not available here; use --device cpu"]


# ---------------------------------------------------------------------------- analyses CLIs
def analysis_modules() -> list[str]:
    """Analysis modules (or packages) that take checkpoint files; those that take none, and
    the shared modules, are skipped."""
    names = []
    for info in pkgutil.iter_modules([str(ROOT / "analyses")]):
        if info.name in ("common", "claims", "copy_models", "zoo", "reproduce"):
            continue
        path = ROOT / "analyses" / info.name
        files = sorted(path.glob("*.py")) if info.ispkg else [path.with_suffix(".py")]
        src = "\n".join(f.read_text() for f in files)
        takes = ("load_model(" in src or "models.load(" in src
                 or ("base_parser(" in src and "checkpoints=False" not in src))
        if takes:
            names.append(info.name)
    return names


ANALYSES = analysis_modules()


@pytest.fixture(scope="module")
def bad_analysis_inputs(tmp_path_factory, tiny_checkpoint):
    d = tmp_path_factory.mktemp("analysis_inputs")
    buf = io.BytesIO()
    torch.save(torch.ones(3), buf)
    (d / "foreign.pt").write_bytes(buf.getvalue())
    (d / "garbage.pt").write_bytes(b"\x00\x01 not a checkpoint at all" * 10)
    buf = io.BytesIO()
    torch.save({"format": 1, "x": MakesMarker(d / "MARKER")}, buf)
    (d / "evil.pt").write_bytes(buf.getvalue())
    save_checkpoint(tiny_checkpoint(), d / "good.pt")  # fed with a device that does not exist
    return d


@pytest.mark.skipif(not ANALYSES, reason="no analysis module takes checkpoints yet")
@pytest.mark.parametrize("module", ANALYSES or ["none"])
@pytest.mark.parametrize("kind", ["foreign", "garbage", "evil", "device"])
def test_analysis_cli_rejects_bad_checkpoint(module, kind, bad_analysis_inputs, tmp_path, capsys):
    mod = importlib.import_module(f"analyses.{module}")
    path = bad_analysis_inputs / ("good.pt" if kind == "device" else f"{kind}.pt")
    device = "banana" if kind == "device" else "cpu"
    try:
        code = mod.main([str(path), "--out", str(tmp_path / "out"), "--device", device])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2, (module, kind, code, err)
    assert len(lines) == 1, (module, kind, err)
    # the line names the bad file (or the bad device, or why this good file does not fit)
    assert str(path) in lines[0] or "'banana'" in lines[0], (module, kind, err)
    assert "Traceback" not in err and not (bad_analysis_inputs / "MARKER").exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
