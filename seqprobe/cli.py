"""Command-line pieces shared by ``python -m models.train``, ``python -m analyses.zoo`` and every
``python -m analyses.NAME``: one parser class, the common flags, one way to exit."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from seqprobe import flags
from seqprobe.config import check
from seqprobe.errors import ConfigError, InputError, SeqprobeError
from seqprobe.flags import flag
from seqprobe.orphans import die_with_parent_from_env
from seqprobe.paths import default_cache_dir

EXIT_FAILED = 1  # a suite error that is not the input's (a run failed): what a traceback exits
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what the shell reports for a tool its reader closed

LEVELS = ("quick", "medium", "large", "paper")  # smallest first; each paper's rows: analyses/zoo


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one stderr line (what is wrong, where to look) and exit 2,
    not the whole usage block."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # run on the parsed namespace, in order (flags whose meaning depends on one another,
        # such as the scale: add_level_flag)
        self.resolvers: list[Callable[[argparse.Namespace], None]] = []

    def error(self, message: str):
        raise ConfigError(f"{message}; see `{self.prog} --help`")

    def parse_known_args(self, args=None, namespace=None):
        namespace, rest = super().parse_known_args(args, namespace)
        for resolve in self.resolvers:
            resolve(namespace)
        return namespace, rest


def launched() -> bool:
    """This process was started by torchrun (or the like) as one of several (``WORLD_SIZE``;
    models.train.distributed joins them into one job)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


DEFAULT_RETRIES = 2  # attempts after the first of a job that fails (seqprobe.sweep)


def add_workers_flag(p: argparse.ArgumentParser, default: int | None = None,
                     help: str = "jobs run at once (default: this machine's cores)") -> None:
    """``--jobs N``: how many jobs run at once (make's ``--jobs``), stored as ``workers``; the
    one definition of the flag, so it means the same in every command."""
    p.add_argument("--jobs", type=flag("--jobs"), default=default, dest="workers",
                   metavar="N", help=help)


def add_backend_arguments(p: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]`` and ``--retries``: the flags of :mod:`seqprobe.sweep`'s backends,
    declared here so that a command's ``--help`` imports no scheduler."""
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run the jobs on Ray: alone, a Ray instance started here (--jobs "
                        "CPUs); with an address (auto, HOST:PORT, ray://HOST:PORT) an existing "
                        "cluster (needs pip install -e .[cluster])")
    p.add_argument("--retries", type=flag("--retries"),
                   default=DEFAULT_RETRIES,
                   help=f"attempts after the first for a job that fails (default "
                        f"{DEFAULT_RETRIES}); then it is reported and the rest go on")


def add_device_argument(p: argparse.ArgumentParser, default: str = "cpu") -> None:
    p.add_argument("--device", default=default, help=f"cpu | cuda | cuda:N | auto "
                   f"(default: {default})")


LEVEL_HELP = {
    "quick": "CPU-sized (the default; minutes)",
    "medium": "CPU-sized, large enough that both sides of a headline comparison learn (the "
              "commands that have it; tens of minutes each)",
    "large": "one GPU machine with 16 CPU cores, about an hour: the smallest settings that "
             "decide each headline claim (the commands that have it)",
    "paper": "the papers' settings (for a GPU)",
}


def add_level_flag(p: OneLineParser, aliases: tuple[str, ...] = (),
                   levels: tuple[str, ...] = LEVELS) -> None:
    """The one level flag, ``--level L`` (``levels``, the command's; default quick) into
    ``args.level``. Its older spellings (``--scale L``, ``--quick`` / ``--medium`` /
    ``--large`` / ``--paper`` and ``aliases``, such as ``models.train``'s ``--preset``) are
    still read as it (old command lines), hidden from ``--help`` and not written in the docs."""
    check(isinstance(p, OneLineParser), "add_level_flag needs a OneLineParser")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--level", dest="level", choices=levels, default=None, metavar="LEVEL",
                   help="; ".join(f"{k}: {v}" for k, v in LEVEL_HELP.items() if k in levels))
    g.add_argument("--scale", *aliases, dest="level", choices=levels, default=None,
                   help=argparse.SUPPRESS)
    for level in levels:
        g.add_argument(f"--{level}", dest="level", action="store_const", const=level,
                       help=argparse.SUPPRESS)
    p.set_defaults(level=None)
    p.resolvers.append(_resolve_level)


S = TypeVar("S")

FLAG = "flag"  # field metadata: the field's flag where it is not --FIELD-NAME (``--n``)
HELP = "help"  # field metadata: the flag's help (else the bound's why)


def field_flag_name(f: dataclasses.Field) -> str:
    """The flag of settings field ``f``: its metadata's ``flag``, else ``--`` and its name
    with dashes (``n_examples`` -> ``--n-examples``)."""
    return f.metadata.get(FLAG) or "--" + f.name.replace("_", "-")


def add_fields(p: argparse.ArgumentParser, cls: type, *, levels: bool = False,
               skip: tuple[str, ...] = ()) -> None:
    """One flag for each bounded field of the settings dataclass ``cls`` (the one place an
    option is declared: field, default, :func:`seqprobe.flags.bound` and its ``help``), its
    ``type=`` that bound's parser, its ``dest`` the field's name, its default the field's
    (``args.n_seqs``). With ``levels`` (``cls`` has a row per level in its paper's zoo table)
    every flag defaults to None: :func:`settings_from_args` keeps the level's value unless
    the flag was given."""
    for f in dataclasses.fields(cls):
        if not f.init or f.name in skip or flags.field_bound(cls, f.name) is None:
            continue
        name = field_flag_name(f)
        b = flags.field_bound(cls, f.name)
        given = None if levels or f.default is dataclasses.MISSING else f.default
        if f.default is dataclasses.MISSING:
            shown = " (default: the level's)"
        elif f.default is None:
            shown = ""  # the help says what leaving it out means
        elif isinstance(f.default, tuple):
            shown = f" (default: {','.join(map(str, f.default)) or 'none'})"
        else:
            shown = f" (default: {f.default})"
        p.add_argument(name, dest=f.name, type=flags.field_flag(cls, f.name, name),
                       default=given, metavar=name.lstrip("-").replace("-", "_").upper(),
                       help=(f"{f.metadata.get(HELP) or b.why}{shown}").replace("%", "%%"))


def settings_from_args(settings: S, args: argparse.Namespace) -> S:
    """``settings`` (a settings dataclass instance: a level's row, or the class's defaults)
    with each field whose flag :func:`add_fields` made and the command line gave in place of
    its value; built anew, so the fields' bounds and checks hold (seqprobe.flags.Config)."""
    cls = type(settings)
    given: dict[str, Any] = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                             if f.init and flags.field_bound(cls, f.name) is not None
                             and getattr(args, f.name, None) is not None}
    return dataclasses.replace(settings, **given)


def add_level_arguments(p: OneLineParser) -> None:
    """The level (:func:`add_level_flag`), ``--train`` (train the checkpoints the command
    needs, at that level; cached) and ``--cache-dir``. ``--train LEVEL`` is kept as
    ``--level LEVEL --train``: ``args.train`` is the level to train at, or None."""
    add_level_flag(p)
    p.add_argument("--train", nargs="?", const=True, default=None, metavar="LEVEL",
                   help="train the checkpoints this command needs at the level (cached, "
                   "reused); --train LEVEL (older) is --level LEVEL --train")
    p.add_argument("--cache-dir", default=str(default_cache_dir()),
                   help="where trained checkpoints are kept (default: $SEQPROBE_CACHE, else "
                   "$XDG_CACHE_HOME/seqprobe, else ~/.cache/seqprobe; now %(default)s)")


def _resolve_level(args: argparse.Namespace) -> None:
    """``args.level``: the level given (by any spelling, ``--train LEVEL`` included) or
    quick; ``args.train``: that level when training was asked for, else None. Two different
    levels are refused, not silently ranked."""
    level, train = args.level, getattr(args, "train", None)
    if isinstance(train, str):
        if train not in LEVELS:
            raise ConfigError(f"--train takes a level ({', '.join(LEVELS)}), got "
                              f"{train!r}; a checkpoint goes before --train, or write "
                              "--level LEVEL --train")
        if level is not None and level != train:
            raise ConfigError(f"--train {train} and --level {level} (or --{level}) name two "
                              f"levels; give one: --level LEVEL --train")
        level = train
    args.level = level or "quick"
    if hasattr(args, "train"):
        args.train = args.level if train else None


def exit_code(e: SeqprobeError) -> int:
    """The exit code of a command that stopped on ``e``: 2 for refused input (a InputError),
    else 1."""
    return EXIT_BAD_INPUT if isinstance(e, InputError) else EXIT_FAILED


def run_cli(body: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a command's body: a suite error (any :class:`SeqprobeError`) becomes one stderr line
    and :func:`exit_code`, Ctrl-C 130."""
    die_with_parent_from_env()  # a job of a reproduce run ends when that run is killed
    try:
        code = body(argv)
    except SeqprobeError as e:
        print(f"error: {e}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`... --list | head`): stop quietly, as a Unix tool killed by
        # SIGPIPE does; stdout goes to /dev/null so that the interpreter's final flush is silent
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return 0 if code is None else int(code)
