"""``python -m analyses.patterns MODEL [TEXT]``: draw every layer × head of a model on one
sequence (:func:`probes.patterns.draw_patterns`): ``patterns.png``, the labelled grid, and
``patterns.html``, an interactive page (circuitsvis where installed, the suite's own page
otherwise). MODEL is a checkpoint (.pt) or a zoo name (``zoo:copy/hard_alibi``); TEXT is in
the model's task vocabulary (``"abcd<COPY>ab"``; ``<BOS>`` is put first as the task does).
Transformers are drawn from their attention patterns, Mamba-2 / Mamba through their effective
attention. Not an analysis of the reproduction (no FIGURE, no claim): a view of one model.
"""

from __future__ import annotations

import sys
from pathlib import Path

from analyses.common import check_output_dir, load_model
from probes.patterns import draw_patterns
from seqprobe import flags
from seqprobe.cli import OneLineParser, add_device_argument, run_cli
from seqprobe.config import check
from seqprobe.errors import InputError
from tasks.base import make_generator


def heads_list(text: str) -> list[int]:
    """``"0,5"`` -> [0, 5] (one line for anything else)."""
    try:
        return [int(h) for h in text.split(",") if h.strip()]
    except ValueError:
        raise InputError(f"--heads takes head numbers separated by commas, got {text!r}"
                         ) from None


def main(argv: list[str] | None = None) -> int:
    def body(argv):
        p = OneLineParser(prog="python -m analyses.patterns",
                          description=__doc__.strip().splitlines()[0])
        p.add_argument("model", help="checkpoint (.pt) or zoo name (zoo:copy/hard_alibi)")
        p.add_argument("text", nargs="?", default=None,
                       help="one sequence in the model's task vocabulary (default: one example "
                            "of its task, drawn with --seed)")
        p.add_argument("--seed", type=flags.flag("--seed"), default=0,
                       help="the example's seed when no TEXT is given")
        p.add_argument("--heads", type=str, default=None,
                       help="heads to draw, e.g. 0,5 (default: every head, at most 16 a layer)")
        p.add_argument("--out", default="patterns",
                       help="output directory (default: ./patterns under the current folder)")
        add_device_argument(p)
        args = p.parse_args(argv)
        heads = None if args.heads is None else heads_list(args.heads)
        check(heads is None or bool(heads), "--heads is empty: give at least one head")
        out = check_output_dir(Path(args.out))
        model = load_model(args.model, device=args.device)
        model.eval()
        # no text: one example of the model's own task, as its training drew them
        text = args.text if args.text is not None else \
            model.task.example(make_generator(args.seed))[0]
        draw_patterns(model, text, heads, out=out)
        for name in ("patterns.png", "patterns.html"):
            print(f"wrote {out / name}", file=sys.stdout)
        return 0

    return run_cli(body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
