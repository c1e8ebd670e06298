"""What tests/e2e/test_reliability.py and tests/e2e/test_reliability_loading.py share: the flags of a
quick training run (:data:`QUICK`), ``python -m models.train``'s ``main`` run in this process
with what it printed (:func:`run_main`), and the check that an error is one line
(:func:`one_line`).
"""

from __future__ import annotations

from models.train.cli import main
from tests.tiny import TINY_RUN_FLAGS

QUICK = [*TINY_RUN_FLAGS, "--max-len", "5", "--steps", "3", "--batch-size", "4",
         "--eval-batches", "1", "--eval-batch-size", "4", "--no-progress", "--device", "cpu"]


def run_main(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
