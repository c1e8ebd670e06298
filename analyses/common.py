"""The parts every analysis shares: argument parsing, checkpoint loading, writing outputs.

Each analysis module has ``compute(...) -> dict`` (JSON-serialisable numbers),
``plot(result) -> Figure`` and ``main(argv)``; ``main`` ends with :func:`write_outputs`, which
writes ``DIR/NAME.png`` and ``DIR/NAME.json`` and prints a short table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from figures.style import DEFAULT_OUT, save_figure
from tasks.base import TaskError

EXIT_BAD_INPUT = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag gives one stderr line (what is wrong, where to look) and exit 2,
    not the whole usage block."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"error: {message}; see `{self.prog} --help`\n")


def base_parser(name: str, description: str, checkpoints: bool = True,
                training: bool = False) -> argparse.ArgumentParser:
    """The flags every analysis takes: ``--out``, ``--device``, ``--seed`` (+ presets)."""
    p = OneLineParser(prog=f"python -m analyses.{name}", description=description)
    if checkpoints:
        p.add_argument("checkpoints", nargs="*", help="suite checkpoint file(s) (.pt)")
    p.add_argument("--out", default=str(DEFAULT_OUT),
                   help="output directory (default: figures/out)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto (default: cpu)")
    p.add_argument("--seed", type=int, default=0, help="seed of the evaluation data")
    if training:
        g = p.add_mutually_exclusive_group()
        g.add_argument("--quick", dest="preset", action="store_const", const="quick",
                       help="CPU-sized preset (default)")
        g.add_argument("--paper", dest="preset", action="store_const", const="paper",
                       help="paper-scale preset (for a GPU)")
        p.add_argument("--train", choices=["quick", "paper"], default=None,
                       help="train the checkpoints this analysis needs (cached, reused)")
        p.add_argument("--cache-dir", default="checkpoints",
                       help="where --train keeps its checkpoints (default: checkpoints/)")
        p.set_defaults(preset="quick")
    return p


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda if available; a device that does not exist is a clear error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise TaskError(f"unknown device {name!r}; allowed: cpu, cuda, cuda:N, auto") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise TaskError(f"unsupported device {name!r}; allowed: cpu, cuda, cuda:N, auto")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TaskError(f"device {name!r} asked for, but CUDA is not available here; "
                        "use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise TaskError(f"device {name!r} does not exist: this machine has "
                        f"{torch.cuda.device_count()} CUDA device(s) (cuda:0..)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise TaskError(f"device {name!r} asked for, but MPS is not available here; "
                        "use --device cpu")
    return dev


def load_model(path: str, archs: Iterable[str] | None = None, device: str | torch.device = "cpu"):
    """``models.load`` plus a check that the checkpoint's arch suits this analysis."""
    from models import load

    if isinstance(device, str):  # "cuda" on a CPU machine: one clear line, not a torch assert
        device = resolve_device(device)
    model = load(path, device=device, archs=archs)  # the arch is checked before building
    if archs is not None and model.arch not in set(archs):
        raise TaskError(
            f"{path}: this analysis needs a {' or '.join(sorted(set(archs)))} checkpoint, "
            f"but the file holds a {model.arch!r} model"
        )
    return model


def to_jsonable(obj: Any) -> Any:
    """Tensors, numpy values and tuples -> plain JSON types; non-finite floats -> None."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return to_jsonable(obj.tolist())
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return to_jsonable(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    return obj


def write_outputs(name: str, result: dict, fig, out_dir: str | Path,
                  table: Sequence[Sequence[Any]] | None = None) -> tuple[Path, Path]:
    """Write ``out_dir/name.png`` and ``out_dir/name.json``; print ``table`` (rows) if given."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = save_figure(fig, out / f"{name}.png")
    js = out / f"{name}.json"
    tmp = js.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(to_jsonable(result), indent=1))
    tmp.replace(js)
    if table:
        print_table(table)
    print(f"wrote {png} and {js}")
    return png, js


def print_table(rows: Sequence[Sequence[Any]]) -> None:
    cells = [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells if i < len(r)) for i in range(max(map(len, cells)))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def run_main(body: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run an analysis ``main`` body: suite errors become one stderr line and exit code 2."""
    try:
        code = body(argv)
    except TaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0 if code is None else int(code)
