"""Export to HuggingFace: its output directory and its command line (issue 19, item 5; issue 29,
item 10). OUT_DIR is replaced only with --overwrite and only when it is an export; two exports at
once and a killed one's temp directory; SIGTERM while writing leaves OUT_DIR as it was; OUT_DIR
holding the checkpoint, or the working directory, is refused; a missing checkpoint is one line;
the command as a user types it."""

from __future__ import annotations

from tests import ROOT_DIR

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from models.hf import export as export_hf
from models.hf.export import export, main
from models.loading import load
from seqprobe.errors import CheckpointError
from tests.export_hf_helpers import leftovers, write_checkpoint

ROOT = ROOT_DIR


def test_overwrite(tiny_model, tmp_path, capsys):
    model = tiny_model("mamba2", random=True)
    ck = write_checkpoint(model, tmp_path / "m.pt")
    out = tmp_path / "hf"
    out.mkdir()
    assert main([str(ck), str(out)]) == 0  # an empty directory is fine
    capsys.readouterr()
    assert main([str(ck), str(out)]) == 2  # non-empty: refused, untouched
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite" in err
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    refused = write_checkpoint(tiny_model("lstm"), tmp_path / "lstm.pt", "markov", {"S": 7})
    assert main([str(refused), str(out), "--overwrite"]) == 2  # refused before any writing
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    other = write_checkpoint(tiny_model("mamba2", random=True, d_model=12), tmp_path / "o.pt")
    assert main([str(other), str(out), "--overwrite"]) == 0  # an export replaces an export
    assert export_hf.read_provenance(out)["config"]["d_model"] == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "lstm.pt", "m.pt", "o.pt"]
    (tmp_path / "file").write_text("x")
    assert main([str(ck), str(tmp_path / "file"), "--overwrite"]) == 2
    assert "not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["user_files", "export_plus_a_file", "foreign_hf_model",
                                  "link_inside"])
def test_overwrite_refuses_a_directory_that_is_not_an_export(kind, tiny_model, tmp_path,
                                                             capsys):
    """Issue 29, item 10b: --overwrite deleted any directory, subfolders and all. It replaces
    only one of our exports (our files, our provenance); anything else stays, in one line."""
    ck = write_checkpoint(tiny_model("mamba", random=True), tmp_path / "m.pt")
    out = tmp_path / "target"
    if kind == "user_files":  # a results folder given by mistake
        (out / "runs" / "seed0").mkdir(parents=True)
        (out / "runs" / "seed0" / "metrics.json").write_text("{}")
        (out / "notes.txt").write_text("mine")
        word = "subdirectory"
    elif kind == "export_plus_a_file":
        export(ck, out, verify=False)
        (out / "notes.txt").write_text("mine")
        word = "'notes.txt', which an export does not write"
    elif kind == "foreign_hf_model":  # someone else's model: only its files, no provenance
        out.mkdir()
        (out / "config.json").write_text('{"model_type": "gpt2"}')
        (out / "model.safetensors").write_bytes(b"")
        word = "no seqprobe provenance"
    else:
        export(ck, out, verify=False)
        (out / "tokenizer.json").unlink()
        (out / "tokenizer.json").symlink_to(tmp_path / "m.pt")
        word = "a link"
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert main([str(ck), str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "replaces only a model directory" in err and word in err
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert not leftovers(tmp_path)


def test_two_exports_into_one_directory_at_once(tiny_model, tmp_path, monkeypatch, capsys):
    """Issue 29, item 10a: two exports into one new directory both reported "wrote" and the
    second silently replaced the first. The second, started (in another thread) while the first
    writes, is refused in one line; the first finishes and its model is the one in OUT_DIR."""
    first = write_checkpoint(tiny_model("mamba", random=True), tmp_path / "a.pt")
    second = write_checkpoint(tiny_model("mamba", random=True, d_model=12), tmp_path / "b.pt")
    out = tmp_path / "hf"
    real_save, results = export_hf._save, []

    def save_while_another_starts(exp, directory):
        real_save(exp, directory)
        if not results:  # the second export runs now, while the first holds the directory
            other = threading.Thread(target=lambda: results.append(
                main([str(second), str(out)])))
            other.start()
            other.join()
            results.append(capsys.readouterr())

    monkeypatch.setattr(export_hf, "_save", save_while_another_starts)
    assert main([str(first), str(out)]) == 0
    rc, captured = results
    assert rc == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and "is exporting into this directory" in captured.err
    assert capsys.readouterr().out.startswith(f"wrote {out}")
    assert export_hf.read_provenance(out)["config"]["d_model"] == 8  # the first one's
    assert not leftovers(tmp_path)


def test_a_killed_exports_temp_directory_is_refused_and_cleaned(tiny_model, tmp_path, capsys):
    """Issue 29, item 10c: kill -9 between the check and the rename left a complete hidden
    temp directory, which models.load opened and the next export never removed. Fixture: that
    directory (today's name and the older ``.tmp`` / ``.old`` names)."""
    ck = write_checkpoint(tiny_model("mamba", random=True), tmp_path / "m.pt")
    done = tmp_path / "done"
    export(ck, done, verify=False)
    stale = [tmp_path / ".hf.k9x2ab_q.export.tmp", tmp_path / ".hf.abcd1234.tmp",
             tmp_path / ".hf.zz99yy88.old"]
    for d in stale:
        shutil.copytree(done, d)
    other = tmp_path / ".other.abcd1234.export.tmp"  # another target's: not this export's
    shutil.copytree(done, other)
    for d in stale:
        with pytest.raises(CheckpointError, match="temp directory of an export that did not "
                                                  "finish") as e:
            load(d)
        assert "\n" not in str(e.value)
    assert main([str(ck), str(tmp_path / "hf")]) == 0
    assert all(not d.exists() for d in stale) and other.exists()


def test_missing_checkpoint_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nope.pt"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err
    assert not (tmp_path / "hf").exists()


def test_cli_as_a_user_types_it(tiny_model, tmp_path):
    model = tiny_model("transformer", random=True, pe="rope")
    ck = write_checkpoint(model, tmp_path / "m.pt")
    run = subprocess.run([sys.executable, "-m", "models.hf.export", str(ck),
                          str(tmp_path / "hf")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"wrote {tmp_path / 'hf'} (GPTNeoXForCausalLM")
    assert "unembedding bias was moved" in lines[1] and "ln_final_shift" in lines[1]
    assert lines[2].startswith("checked: logits") and lines[3].startswith(
        f"checked: activations at {2 * 11 + 2} hooks (models.hf.export.HOOK_MAP)")
    for line in lines[2:]:
        assert float(line.split("max |diff| = ")[1].split()[0]) < 1e-5
    assert run.stderr == ""
    again = subprocess.run([sys.executable, "-m", "models.hf.export", str(ck),
                            str(tmp_path / "hf")], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and "--overwrite" in again.stderr


def test_out_dir_holding_the_checkpoint_or_the_working_directory_is_refused(
        tiny_model, tmp_path, capsys, monkeypatch):
    """--overwrite must never delete its own input, nor the directory the user stands in."""
    out = tmp_path / "out"
    out.mkdir()
    ck = write_checkpoint(tiny_model("mamba", random=True), out / "m.pt")
    assert main([str(ck), str(out), "--overwrite"]) == 2
    assert "holds the checkpoint" in capsys.readouterr().err
    assert ck.exists()
    monkeypatch.chdir(out)
    for target in (".", ".."):
        assert main([str(ck), target, "--overwrite"]) == 2
        assert "working directory" in capsys.readouterr().err
    assert ck.exists()


def test_sigterm_while_writing_leaves_out_dir_as_it_was(tiny_model, tmp_path, monkeypatch,
                                                         capsys):
    """SIGTERM mid-write (a job scheduler's timeout) is Ctrl-C: exit 130, one line, the temp
    directory removed, the old OUT_DIR still there even with --overwrite."""
    ck = write_checkpoint(tiny_model("mamba", random=True), tmp_path / "m.pt")
    out = tmp_path / "hf"
    export(ck, out, verify=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real_save = export_hf._save

    def save_then_term(exp, directory):
        real_save(exp, directory)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(export_hf, "_save", save_then_term)
    assert main([str(ck), str(out), "--overwrite"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert not leftovers(tmp_path)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
