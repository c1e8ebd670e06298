"""Command-line pieces shared by ``python -m models.train``, ``python -m models.zoo`` and every
``python -m analyses.NAME``: one parser class, the common flags, one way to exit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from models.train.presets import NAMES as PRESET_NAMES
from tasks.errors import ConfigError, SeqprobeError, TaskError

EXIT_FAILED = 1  # a suite error that is not the input's (a run failed): what a traceback exits
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_INTERRUPTED = 130


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one stderr line (what is wrong, where to look) and exit 2,
    not the whole usage block."""

    def error(self, message: str):
        raise ConfigError(f"{message}; see `{self.prog} --help`")


def add_device_argument(p: argparse.ArgumentParser, default: str = "cpu") -> None:
    p.add_argument("--device", default=default, help=f"cpu | cuda | cuda:N | auto "
                   f"(default: {default})")


def add_scale_arguments(p: argparse.ArgumentParser) -> None:
    """``--quick`` (the default) / ``--medium`` / ``--paper``: ``args.preset``."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="preset", action="store_const", const="quick",
                   help="CPU-sized preset (default)")
    g.add_argument("--medium", dest="preset", action="store_const", const="medium",
                   help="CPU-sized, large enough that both sides of a headline comparison "
                   "learn (the analyses that have it; tens of minutes each)")
    g.add_argument("--paper", dest="preset", action="store_const", const="paper",
                   help="paper-scale preset (for a GPU)")
    p.set_defaults(preset="quick")


def add_preset_arguments(p: argparse.ArgumentParser) -> None:
    """``--quick`` / ``--medium`` / ``--paper`` (the scale), ``--train`` (train what is needed,
    cached) and ``--cache-dir``."""
    add_scale_arguments(p)
    p.add_argument("--train", choices=PRESET_NAMES, default=None,
                   help="train the checkpoints this command needs (cached, reused)")
    p.add_argument("--cache-dir", default="checkpoints",
                   help="where trained checkpoints are kept (default: checkpoints/)")
    p.set_defaults(preset="quick")


def exit_code(e: SeqprobeError) -> int:
    """The exit code of a command that stopped on ``e``: 2 for refused input (a TaskError),
    else 1."""
    return EXIT_BAD_INPUT if isinstance(e, TaskError) else EXIT_FAILED


def run_cli(body: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a command's body: a suite error (any :class:`SeqprobeError`) becomes one stderr line
    and :func:`exit_code`, Ctrl-C 130."""
    try:
        code = body(argv)
    except SeqprobeError as e:
        print(f"error: {e}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0 if code is None else int(code)
