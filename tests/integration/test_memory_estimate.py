"""Memory estimated before work (issue 39 item 5): in-range flags whose product exceeds the
machine are refused in one line, with the estimate and the free memory, before anything is
allocated; ordinary settings pass."""

from __future__ import annotations

from tests import ROOT_DIR

import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import models
from models.checkpoint.write import save_checkpoint
from models.memory import (
    EVAL_ROWS,
    check_evaluation_fits,
    evaluation_bytes,
    forward_bytes,
)
from seqprobe import memory
from seqprobe.errors import InputError
from seqprobe.flags import MAX_HORIZON
from tasks.registry import make_task
from tests.tiny import TINY, good_checkpoint

ROOT = ROOT_DIR
LIMIT = 4 << 30  # the address space the hostile commands run under


def _markov_checkpoint(path: Path, seq_len: int) -> Path:
    cfg = dict(TINY["mamba2"], vocab_size=3)
    torch.manual_seed(0)
    m = models.build_model("mamba2", cfg)
    return save_checkpoint({
        "format": 1, "model": {"arch": "mamba2", "config": cfg},
        "task": {"name": "markov", "config": {"seq_len": seq_len}},
        "train": {"config": {"steps": 10}, "seed": 0, "step": 0, "samples_seen": 0},
        "state_dict": m.state_dict(), "history": []}, path)


def _limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


# one child process under the limit runs every command's main (one import of torch for all):
# each prints its return code, the lines it wrote to stderr and its seconds as one JSON row
CHILD = textwrap.dedent("""
    import contextlib, io, json, sys, time
    from seqprobe import memory
    print(json.dumps({"available": memory.available_bytes()}), flush=True)
    for module, argv in json.loads(sys.argv[1]):
        main = __import__(module, fromlist=["main"]).main
        err = io.StringIO()
        t0 = time.time()
        with contextlib.redirect_stderr(err):
            code = main(argv)
        print(json.dumps({"module": module, "code": code, "stderr": err.getvalue(),
                          "seconds": time.time() - t0}), flush=True)
""")


def test_hostile_products_are_refused_in_one_line_under_an_address_space_limit(tmp_path):
    copy = save_checkpoint(good_checkpoint(), tmp_path / "copy.pt")
    huge = _markov_checkpoint(tmp_path / "markov.pt", MAX_HORIZON)  # seq_len at its bound
    out = str(tmp_path / "out")
    commands = [
        ("analyses.duplicated_ngrams", [str(copy), "--reference-n", "64", "--out", out]),
        ("analyses.copy_bounds", ["--n", "64", "--out", out]),
        ("analyses.spectral_lds", ["--T", "1048576", "--k", "4096", "--out", out]),
        ("analyses.markov_laplace", [str(huge), "--out", out]),
    ]
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(commands)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          preexec_fn=_limit_address_space)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert rows[0]["available"] <= LIMIT  # the limit is part of what is free
    by_module = {r["module"]: r for r in rows[1:]}
    assert set(by_module) == {m for m, _ in commands}
    for module, r in by_module.items():
        lines = r["stderr"].strip().splitlines()
        assert r["code"] != 0, (module, r)
        assert len(lines) == 1 and "Traceback" not in r["stderr"], (module, r["stderr"])
        assert "needs about" in lines[0] and "free for this process" in lines[0], lines[0]
        assert r["seconds"] < 120, (module, r["seconds"])  # refused, not worked on
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_check_fits_says_the_estimate_and_the_free_memory(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * 10**9)
    memory.check_fits(10**9, "a small thing")
    with pytest.raises(InputError) as e:
        memory.check_fits(3 * 10**9, "a big thing", "lower --n")
    text = str(e.value)
    assert "\n" not in text
    assert "a big thing needs about 3 GB" in text and "the 2 GB free" in text
    assert text.endswith("lower --n")


def test_available_bytes_takes_the_least_bound(monkeypatch):
    monkeypatch.setattr(memory, "system_available", lambda: 8 << 30)
    monkeypatch.setattr(memory, "address_space_headroom", lambda: 3 << 30)
    monkeypatch.setattr(memory, "cgroup_headroom", lambda: memory.UNLIMITED)
    assert memory.available_bytes() == 3 << 30
    monkeypatch.setattr(memory, "cgroup_headroom", lambda: 1 << 30)
    assert memory.available_bytes() == 1 << 30


def test_the_forward_estimate_covers_what_a_cached_run_holds():
    """Every activation run_with_cache keeps (and the logits) is within forward_bytes, for
    every architecture, at a length beyond the fitted ones."""
    for arch, cfg in TINY.items():
        if arch == "run":
            continue
        torch.manual_seed(0)
        model = models.build_model(arch, cfg).eval()
        rows, T = 3, 48
        tokens = torch.zeros(rows, T, dtype=torch.long)
        with torch.no_grad():
            logits, cache = model.run_with_cache(tokens)
        held = sum(t.numel() * t.element_size() for t in cache.values())
        held += logits.numel() * logits.element_size()
        assert held <= forward_bytes(arch, cfg, rows, T), arch


def test_ordinary_settings_pass_the_check(tmp_path):
    from analyses import copy_bounds, duplicated_ngrams, spectral_lds
    from analyses.zoo import copy as zoo_copy
    from analyses.zoo import spectral as zoo_spectral

    free = memory.available_bytes()
    for level in ("quick", "paper"):
        s = zoo_spectral.SPECTRAL_LDS_LEVELS[level]
        assert spectral_lds.memory_estimate(s, 5) < min(free, 4 << 30), level
    quick = zoo_copy.COPY_BOUNDS_LEVELS["quick"]
    assert copy_bounds.memory_estimate(quick, 26, {}) < min(free, 2 << 30)
    model = models.load(save_checkpoint(good_checkpoint(), tmp_path / "c.pt"))
    est = duplicated_ngrams.memory_estimate({"m": model}, 26, [3, 5], list(range(1, 11)),
                                            None, 6, 128)
    assert est < min(free, 2 << 30)
    check_evaluation_fits(model, "c.pt")  # a copy model at max_len 6: passes
    ok = models.load(_markov_checkpoint(tmp_path / "ok.pt", 256))
    check_evaluation_fits(ok, "ok.pt")
    # the paper's copy setting (strings up to 300) in a 12-layer, 12-head transformer: one row
    # with its patterns cached, not a whole batch of them, is what loading it must fit
    wide = {"vocab_size": 30, "d_model": 768, "n_layers": 12, "n_heads": 12, "d_mlp": 3072}
    longest = make_task("copy", {"max_len": 300}).max_example_len()
    assert evaluation_bytes("transformer", wide, longest) < 4 << 30


def test_a_hostile_task_length_is_refused_when_loaded_for_evaluation(tmp_path, monkeypatch):
    """A length beyond the field's bound is refused as the checkpoint loads (the config checks
    its bounds when built); the bound admits seq_len = 2^20 (MAX_HORIZON), and evaluating 64
    rows of it does not fit a few GB."""
    with pytest.raises(InputError, match="MarkovConfig.seq_len 16777216 is out of range"):
        models.load(_markov_checkpoint(tmp_path / "beyond.pt", 2**24))
    huge = models.load(_markov_checkpoint(tmp_path / "huge.pt", MAX_HORIZON))
    assert huge.task.max_example_len() == MAX_HORIZON  # the task's own longest sequence
    monkeypatch.setattr(memory, "available_bytes", lambda: LIMIT)
    with pytest.raises(InputError, match=f"the data of {EVAL_ROWS} rows"):
        check_evaluation_fits(huge, "huge.pt")
