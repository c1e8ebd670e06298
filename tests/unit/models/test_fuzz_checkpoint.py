"""Fuzz of the checkpoint loader (issue 18): real tiny checkpoints, mutated (truncated, bytes
flipped anywhere or inside the pickle, config fields set to huge / negative / wrong-typed
values, tensors removed, reshaped, re-typed, broadcast or added, top-level entries dropped or
replaced, the digest kept stale or recomputed). Every case must either load a model whose
weights are bit-identical to the original file's, or be refused with one
:class:`~models.checkpoint.CheckpointError` line; no other exception. (What refusing a memory
bomb costs is measured by bench/bench_hostile.py, not asserted here: DESIGN.md keeps memory
targets out of the default suite; test_reliability.py checks where the refusals come.)
"""

from __future__ import annotations

import functools
import io
import math
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import models
from analyses.zoo.levels import make_run_config
from models.checkpoint.layout import tensor_digest
from models.checkpoint.write import save_checkpoint
from models.train.loop import train
from seqprobe.errors import CheckpointError

FAST_EXAMPLES = 1000  # the default suite's share (a few seconds); the slow test runs many more
SLOW_EXAMPLES = 3000

VALUES = [0, -1, -(10**9), 1, 2, 3, 7, 4097, 10**6, 2**31, 10**12, 2**63 - 1, 1.5, math.nan,
          math.inf, "wide", None, True, [], {}, [1, 2], 10**100]
TENSOR_OPS = ["remove", "flatten", "transpose", "slice", "double", "long", "broadcast", "grow",
              "extra"]
ENTRY_OPS = ["drop", "int", "list", "none"]
ENTRIES = ["format", "model", "task", "train", "state_dict", "history", "optimizer", "digest"]


@functools.lru_cache(maxsize=1)
def bases() -> dict[str, tuple[bytes, dict]]:
    """name -> (file bytes, the checkpoint dict as loaded): a trained transformer (optimizer,
    RNG state and history included), an STU (rebuilt filter buffers) and a Mamba-2."""
    d = Path(tempfile.mkdtemp(prefix="fuzz-bases-"))
    run_config = make_run_config("transformer", "copy", "quick",
                     model=dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32),
                     task_config=dict(max_len=5),
                     train=dict(steps=2, batch_size=4, eval_every=0, eval_batches=1,
                                eval_batch_size=4))
    train(run_config, out=d / "transformer.pt", device="cpu", progress=False)
    for arch, cfg, task in (("stu", dict(vocab_size=7, d_model=8, n_layers=1, filter_len=32,
                                         num_filters=6, d_mlp=16), ("induction", {})),
                            ("mamba2", dict(vocab_size=7, d_model=8, n_layers=1, n_heads=2,
                                            d_state=4, d_conv=3, chunk_size=4),
                             ("markov", {}))):
        m = models.build_model(arch, cfg)
        save_checkpoint({"format": 1, "model": {"arch": arch, "config": cfg},
                         "task": {"name": task[0], "config": task[1]},
                         "train": {"step": 0, "samples_seen": 0},
                         "state_dict": m.state_dict(), "history": []}, d / f"{arch}.pt")
    out = {}
    for name in ("transformer", "stu", "mamba2"):
        raw = (d / f"{name}.pt").read_bytes()
        out[name] = (raw, torch.load(io.BytesIO(raw), weights_only=True))
    return out


def _save(ck: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(ck, buf)
    return Blob(buf.getvalue())


def _pickle_span(raw: bytes) -> tuple[int, int]:
    """(start, end) of the data.pkl bytes inside the archive."""
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
    h = info.header_offset
    start = h + 30 + int.from_bytes(raw[h + 26:h + 28], "little") + \
        int.from_bytes(raw[h + 28:h + 30], "little")
    return start, start + info.file_size


def _tensor_op(v: torch.Tensor, op: str):
    if op == "flatten":
        return v.reshape(-1)
    if op == "transpose":
        return v.t() if v.dim() == 2 else v.unsqueeze(0)
    if op == "slice":
        return v[..., :1]
    if op == "double":
        return v.double()
    if op == "long":
        return v.long()
    if op == "broadcast":
        return v.reshape(-1)[:1].expand(10**5, 10**5)
    if op == "grow":
        return torch.zeros(v.shape[0] + 1, *v.shape[1:]) if v.dim() else torch.zeros(2)
    raise AssertionError(op)


class Blob(bytes):
    """File bytes that print as their length (a failing example stays readable)."""

    def __repr__(self) -> str:
        return f"<{len(self)} bytes>"


class Weights(dict):
    """The state dict a loaded model must equal (prints as its size)."""

    def __repr__(self) -> str:
        return f"<{len(self)} tensors>"


@st.composite
def cases(draw) -> tuple[str, bytes, dict]:
    """(what was done, the mutated file's bytes, the weights a model loaded from it must have:
    the original ones for damaged bytes, the edited ones for an edited checkpoint dict)."""
    name = draw(st.sampled_from(sorted(bases())))
    raw, ck = bases()[name]
    original = Weights(ck["state_dict"])
    kind = draw(st.sampled_from(["truncate", "flip", "flip_pickle", "config", "tensor",
                                 "entry"]))
    if kind == "truncate":
        n = draw(st.integers(1, len(raw) - 1))
        return f"{name}: truncate to {n}", Blob(raw[:n]), original
    if kind in ("flip", "flip_pickle"):
        lo, hi = _pickle_span(raw) if kind == "flip_pickle" else (0, len(raw))
        flips = draw(st.lists(st.tuples(st.integers(lo, hi - 1), st.integers(1, 255)),
                              min_size=1, max_size=8))
        data = bytearray(raw)
        for at, x in flips:
            data[at] ^= x
        return f"{name}: {kind} {flips}", Blob(data), original
    ck = {k: (dict(v) if isinstance(v, dict) else v) for k, v in ck.items()}
    if kind == "config":
        section = draw(st.sampled_from(["model", "task", "train"]))
        holder = ck[section] = dict(ck[section])
        cfg = holder["config"] = dict(holder.get("config", {}))
        key = draw(st.sampled_from(sorted(cfg) + ["n_layers", "d_model", "max_len", "steps",
                                                  "n_experts"]))
        value = draw(st.sampled_from(VALUES))
        cfg[key] = value
        return f"{name}: {section}.config[{key!r}] = {value!r}", _save(ck), original
    if kind == "tensor":
        sd = ck["state_dict"] = dict(ck["state_dict"])
        key = draw(st.sampled_from(sorted(sd)))
        op = draw(st.sampled_from(TENSOR_OPS))
        if op == "remove":
            del sd[key]
        elif op == "extra":
            sd["evil.weight"] = torch.zeros(3)
        else:
            sd[key] = _tensor_op(sd[key], op)
        fix = draw(st.booleans())
        if fix:
            ck["digest"] = tensor_digest(sd) if op != "broadcast" else ck["digest"]
        return (f"{name}: state_dict[{key!r}] {op} (digest {'fixed' if fix else 'stale'})",
                _save(ck), Weights(sd))
    entry = draw(st.sampled_from(ENTRIES))
    op = draw(st.sampled_from(ENTRY_OPS))
    if op == "drop":
        ck.pop(entry, None)
    else:
        ck[entry] = {"int": 7, "list": [1, 2], "none": None}[op]
    sd = ck.get("state_dict")
    return f"{name}: {entry} {op}", _save(ck), Weights(sd if isinstance(sd, dict) else {})


def check_case(what: str, data: bytes, expected: dict, path: Path, stats: Counter) -> None:
    path.write_bytes(data)
    try:
        model = models.load(path)
    except CheckpointError as e:
        msg = str(e)
        assert "\n" not in msg and len(msg) < 2000, (what, msg)
        stats["refused"] += 1
    else:  # loaded: then it holds the file's weights, bit for bit
        own = model.state_dict()
        assert own.keys() == expected.keys(), what
        for k, v in own.items():
            assert torch.equal(v, expected[k].to(v.dtype)), (what, k)
        stats["loaded"] += 1
    stats["cases"] += 1


def run_fuzz(max_examples: int, derandomize: bool) -> Counter:
    stats: Counter = Counter()
    d = Path(tempfile.mkdtemp(prefix="fuzz-"))
    for name, (raw, ck) in bases().items():  # the unmutated files load (and warm up)
        check_case(f"{name}: original", raw, ck["state_dict"], d / "case.pt", stats)
    assert stats["loaded"] == len(bases())

    @settings(max_examples=max_examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(cases())
    def fuzz(case):
        check_case(*case, d / "case.pt", stats)

    fuzz()
    return stats


def test_fuzz_checkpoint_loader():
    stats = run_fuzz(FAST_EXAMPLES, derandomize=True)
    print(f"checkpoint fuzz: {dict(stats)}")
    assert stats["cases"] >= FAST_EXAMPLES and stats["refused"] > 0


@pytest.mark.slow
def test_fuzz_checkpoint_loader_long():
    stats = run_fuzz(SLOW_EXAMPLES, derandomize=False)
    print(f"checkpoint fuzz (long): {dict(stats)}")
    assert stats["cases"] >= SLOW_EXAMPLES
