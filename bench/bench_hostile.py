"""Peak memory of refusing hostile inputs: ``python -m bench.bench_hostile`` ->
``bench/results_hostile.json``.

A tiny file that claims a huge model, a deflated zip entry, a broadcast view, a task length
that one evaluation batch cannot hold, a 2 GB sparse tokenizer, a huge --text file: each must
be refused (or cut to a bounded prefix) before what
it claims is allocated. The tests check *where* each refusal comes (tests/e2e/test_reliability.py,
tests/e2e/test_hf_hostile.py: no model built but on the meta device, ``torch.load`` never reached);
this measures what refusing costs, as DESIGN.md keeps memory targets out of the default suite.

Each case runs in a fresh process (``spawn``): a good input of the same kind is loaded first,
so one-time costs (imports, allocator pools) are not counted, then the peak growth of the
resident set while the hostile one is refused is sampled (``bench.common``). ``bound_mb`` is
the target; ``held`` says whether the measurement stayed under it.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import tempfile
import zipfile
from pathlib import Path

import torch

import models
from bench.common import _peak_memory_here, in_fresh_process, write_results
from models.checkpoint.layout import tensor_digest
from models.checkpoint.write import save_checkpoint
from seqprobe.errors import CheckpointError

MB = 2**20
TINY = dict(vocab_size=30, d_model=16, n_layers=1, n_heads=2, d_mlp=32)  # copy, D = 26
STU = dict(vocab_size=7, d_model=8, n_layers=1, filter_len=32, num_filters=6, d_mlp=16)
MAMBA2 = dict(vocab_size=3, d_model=8, n_layers=1, n_heads=2, d_state=4, d_conv=3, chunk_size=4)

# case -> (what the tiny input claims, bound in MiB): the bounds the tests held before the
# measurement moved here from the tests (speed and memory goals live in bench/)
CASES = {
    "pt_d_model": ({"d_model": 10**9, "n_heads": 2}, 50),
    "pt_vocab": ({"vocab_size": 10**11}, 50),
    "pt_layers": ({"n_layers": 10**9}, 50),
    "pt_d_mlp": ({"d_mlp": 60000}, 50),
    "pt_stu_filter_len": ({"filter_len": 65536}, 50),
    "pt_deflated_entry": ({}, 50),
    "pt_broadcast_view": ({}, 50),
    "pt_task_seq_len": ({"seq_len": 2**24}, 50),  # in its per-int bound; 64 rows: terabytes
    "train_cli_d_model": ({"d_model": 10**9}, 200),
    "hf_vocab": ({"vocab_size": 20_000_000}, 100),
    "hf_layers": ({"num_hidden_layers": 1_000_000}, 100),
    "hf_tokenizer_2gb": ({}, 100),
    "text_1gb": ({}, 64),
}


def _checkpoint(arch: str, config: dict) -> dict:
    torch.manual_seed(0)
    m = models.build_model(arch, config)
    return {"format": 1, "model": {"arch": arch, "config": dict(config)},
            "task": {"name": "copy", "config": {"D": 26, "min_len": 1, "max_len": 6}},
            "train": {"config": {"steps": 10}, "seed": 0, "step": 0, "samples_seen": 0},
            "state_dict": m.state_dict(), "history": []}


def _raw_save(ck: dict, path: Path) -> Path:
    """``ck`` as torch.save writes it (with a consistent digest), bypassing save_checkpoint's
    checks, as a hostile file would be."""
    buf = io.BytesIO()
    torch.save({**ck, "digest": tensor_digest(ck["state_dict"])}, buf)
    path.write_bytes(buf.getvalue())
    return path


def _hf_dir(root: Path, config: dict | None = None) -> Path:
    """A tiny GPT-NeoX directory (random weights, a word-level tokenizer) with ``config``
    fields overwritten in config.json."""
    import transformers as tf
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models

    cfg = tf.GPTNeoXConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128,
                           max_position_embeddings=64, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    out = root / "hf"
    tf.GPTNeoXForCausalLM(cfg).save_pretrained(out)
    vocab = {"<|endoftext|>": 0, **{chr(97 + i): i + 1 for i in range(26)}}
    tok = Tokenizer(tok_models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tf.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                               eos_token="<|endoftext|>").save_pretrained(out)
    if config:
        data = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**data, **config}))
    return out


def _inputs(name: str, d: Path):
    """(warm-up, refusal): two calls, the first on a good input of the same kind."""
    from models.checkpoint.io import read_checkpoint
    from models.hf import load_hf
    from models.hf.checks import HFError
    from models.train.cli import main as train_main
    from tasks.prompts import read_text

    claim = CASES[name][0]

    def refused(fn, *args, errors=(CheckpointError, HFError)):
        def call():
            try:
                fn(*args)
            except errors:
                return
            raise AssertionError(f"{name}: not refused")
        return call

    if name == "pt_task_seq_len":  # loaded for evaluation: models.memory's check refuses it
        from models.memory import check_evaluation_fits
        from seqprobe.errors import InputError

        ck = _checkpoint("mamba2", MAMBA2)
        ck["task"] = {"name": "markov", "config": {"seq_len": 256}}
        good = save_checkpoint(ck, d / "good.pt")
        ck["task"] = {"name": "markov", "config": claim}
        bomb = save_checkpoint(ck, d / "bomb.pt")

        def evaluate(path):
            check_evaluation_fits(models.load(path), str(path))
        return (functools.partial(evaluate, good),
                refused(evaluate, bomb, errors=(InputError,)))
    if name.startswith("pt_"):
        arch, cfg = ("stu", STU) if "stu" in name else ("transformer", TINY)
        good = save_checkpoint(_checkpoint(arch, cfg), d / "good.pt")
        warm = functools.partial(models.load, good)
        if name == "pt_deflated_entry":
            bomb = d / "bomb.pt"
            with zipfile.ZipFile(good) as zi, zipfile.ZipFile(bomb, "w") as zo:
                for info in zi.infolist():
                    data = zi.read(info.filename)
                    if info.filename.endswith("/data/0"):
                        zo.writestr(info.filename, b"\0" * (300 * MB),
                                    compress_type=zipfile.ZIP_DEFLATED)
                    else:
                        zo.writestr(info, data)
            return warm, refused(models.load, bomb)
        ck = _checkpoint(arch, cfg)
        if name == "pt_broadcast_view":
            ck["history"] = [{"big": torch.zeros(1).expand(100_000, 100_000)}]
            path = d / "view.pt"
            torch.save(ck, path)
            return warm, refused(read_checkpoint, path)
        ck["model"]["config"].update(claim)
        return warm, refused(models.load, _raw_save(ck, d / "bomb.pt"))
    if name == "train_cli_d_model":
        flags = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--max-len", "5",
                 "--steps", "1", "--batch-size", "4", "--eval-batches", "1",
                 "--eval-batch-size", "4", "--no-progress", "--device", "cpu"]
        warm = functools.partial(train_main, [*flags, "--out", str(d / "good.pt")])

        def call():
            code = train_main([*flags, "--d-model", str(claim["d_model"]),
                               "--out", str(d / "c.pt")])
            assert code == 2, code
        return warm, call
    if name.startswith("hf_"):
        good = _hf_dir(d / "good")
        bad = _hf_dir(d / "bad", claim)
        if name == "hf_tokenizer_2gb":
            tok = bad / "tokenizer.json"
            tok.unlink()
            with open(tok, "wb") as f:  # sparse: nothing is written
                f.truncate(2**31)
        return functools.partial(load_hf, good), refused(load_hf, bad)
    if name == "text_1gb":
        small, big = d / "small.txt", d / "big.txt"
        small.write_text("word " * 1000)
        with open(big, "wb") as f:  # sparse 1 GB: only its first block is written
            f.write(("word " * 100_000).encode())
            f.truncate(2**30)
        return functools.partial(read_text, str(small)), functools.partial(read_text, str(big))
    raise ValueError(f"unknown case {name!r}; allowed: {', '.join(CASES)}")


def measure(name: str) -> float:
    """Peak MiB that refusing case ``name`` adds, after a warm-up on a good input (call in a
    fresh process: :func:`bench.common.in_fresh_process`)."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        warm, refuse = _inputs(name, Path(tmp))
        warm()
        return _peak_memory_here(refuse)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_hostile", description=__doc__)
    p.add_argument("--only", action="append", choices=sorted(CASES), default=[],
                   help="measure only these cases")
    args = p.parse_args(argv)
    results = {}
    for name in args.only or CASES:
        peak = float(in_fresh_process(measure, name))
        bound = CASES[name][1]
        results[name] = {"peak_mb": round(peak, 1), "bound_mb": bound, "held": peak < bound}
    write_results("hostile", {"refusals": results,
                              "all_held": all(r["held"] for r in results.values())})
    return 0 if all(r["held"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
