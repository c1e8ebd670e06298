"""``python -m models.train --task T --arch A --out ckpt.pt``: every field of the model, task and
training configs is a flag (``--help`` lists them once ``--arch`` and ``--task`` are given).

Exit codes: 0 done, 2 bad input (one line on stderr, nothing computed) or a save that failed
(the line says where the weights went instead), 3 training diverged, 130 interrupted (Ctrl-C or
SIGTERM; the checkpoint was saved once training had started).

``--out`` never replaces a file that is not this run's own (the checkpoint it resumes) unless
``--overwrite`` is given, and two live runs never write the same ``--out``.

``torchrun --nproc_per_node N -m models.train …`` trains one DistributedDataParallel job over N
processes (:mod:`models.train.distributed`): rank 0 speaks, holds ``--out`` and writes it;
``--resume`` works as in one process. ``--precision`` and ``--compile`` are config flags, "auto"
by default (bf16 autocast and torch.compile on CUDA, fp32 eager elsewhere); ``--precision
fp32`` and ``--no-compile`` (or ``--compile false``) win.
``python -m models.train.launch`` takes torchrun's flags and ends as this command does: a
SIGTERM to it saves and exits 130 in one line (plain torchrun exits 1 with a traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
import types
import typing
from contextlib import nullcontext
from typing import Any

from models.checkpoint.io import check_overwrite, read_checkpoint
from models.checkpoint.paths import check_writable
from models.checkpoint.rebuild import meta_model
from models.checkpoint.write import exclusive_writer
from models.registry import ARCHS, model_class
from models.train.announce import announce
from models.train.build import check_names, make_run_config, run_config_of_checkpoint
from models.train.callbacks import Callback, Run
from models.train.distributed import World, env_world
from models.train.loop import TrainingDiverged, TrainingInterrupted, train
from models.train.runconfig import RunConfig
from models.train.writer import check_resumable
from models.train_config import TrainConfig, lr_at
from seqprobe.cli import (
    EXIT_DIVERGED,
    EXIT_INTERRUPTED,
    OneLineParser,
    add_device_argument,
    add_level_flag,
    exit_code,
)
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.errors import InputError, SeqprobeError
from seqprobe.flags import field_flag
from seqprobe.orphans import die_with_parent_from_env
from tasks.registry import TASKS, task_class

ALIASES = {"layers": "n_layers", "heads": "n_heads"}
RESERVED = ("task", "arch", "level", "preset", "scale", "quick", "medium", "large", "paper", "out",
            "device", "resume", "overwrite")


def parse_value(text: str, tp, flag: str):
    """A flag's text as the config field's type (bool, int, float, str, tuple[int, ...], or a
    union of them: its first member that reads the text, e.g. ``bool | str`` for
    ``--compile false`` and ``--compile auto``)."""
    if not isinstance(text, str):  # a numeric flag, parsed and bounded by its type=
        return text
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for member in typing.get_args(tp):
            if member is not type(None):
                try:
                    return parse_value(text, member, flag)
                except InputError:
                    pass
        raise InputError(f"{flag}: cannot read {text!r} as {tp}")
    try:
        if tp is bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if origin is tuple:
            inner = typing.get_args(tp)[0]
            return tuple(inner(v) for v in text.split(",") if v.strip() != "")
        if tp in (int, float, str):
            return tp(text)
    except ValueError:
        pass
    else:
        return text
    raise InputError(f"{flag}: cannot read {text!r} as {getattr(tp, '__name__', tp)}")


def is_numeric(tp) -> bool:
    """Whether a config field of annotation ``tp`` takes numbers (int, float, a tuple of them,
    or a union with one of them; bool is not a number here)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType, tuple):
        return any(is_numeric(a) for a in typing.get_args(tp) if a is not Ellipsis)
    return tp in (int, float)


def build_parser(arch: str | None, task: str | None) -> tuple[argparse.ArgumentParser, dict]:
    p = OneLineParser(
        prog="python -m models.train",
        description="Train a suite model on a synthetic task and write a checkpoint. Every field "
        "of the model, task and training configs is a flag (shown below once --arch and --task "
        "are given).")
    p.add_argument("--task", default="copy", help=f"one of: {', '.join(sorted(TASKS))}")
    p.add_argument("--arch", default="transformer", help=f"one of: {', '.join(sorted(ARCHS))}")
    add_level_flag(p, aliases=("--preset",))  # --preset: its name before --level
    p.add_argument("--out", default=None, help="checkpoint path (.pt)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out even if it holds a checkpoint this run does not resume")
    add_device_argument(p, default="auto")
    p.add_argument("--resume", default=None, help="continue the run saved in this checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    owners: dict[str, tuple[str, str, Any]] = {}  # dest -> (part, field, type)
    parts: list[tuple[str, type]] = [("train", TrainConfig)]
    if arch in ARCHS:
        parts.append(("model", model_class(arch).config_cls))
    if task in TASKS:
        parts.append(("task", task_class(task).config_cls))
    seen: dict[str, int] = {}
    for _, cls in parts:
        for f in dataclasses.fields(cls):
            seen[f.name] = seen.get(f.name, 0) + 1
    for part, cls in parts:
        group = p.add_argument_group(f"{part} config ({cls.__name__})")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            tp = hints[f.name]
            row = f"--{part}.{f.name}"  # the flag's name in its messages
            flags = [row]
            if seen[f.name] == 1 and f.name not in RESERVED:
                flags = [f"--{f.name}", f"--{f.name.replace('_', '-')}", *flags]
                flags += [f"--{a}" for a, target in ALIASES.items() if target == f.name]
            dest = f"{part}__{f.name}"
            owners[dest] = (part, f.name, tp)
            # a bool flag alone means true (--compile), as well as --compile false
            boolean = tp is bool or bool in typing.get_args(tp)
            bare = {"nargs": "?", "const": "true"} if boolean else {}
            # a number is parsed and bounded by the field's own bound (seqprobe.flags.bound);
            # one without a bound is read as text here and fails tests/contract/test_flag_table.py
            parse = field_flag(cls, f.name, row) if is_numeric(tp) else None
            bound = {"type": parse} if parse is not None else {}
            group.add_argument(*dict.fromkeys(flags), dest=dest, default=None, metavar="V",
                               help=f"{getattr(tp, '__name__', tp)} (default {f.default!r})",
                               **bare, **bound)
            if boolean and seen[f.name] == 1 and f.name not in RESERVED:  # --no-compile
                group.add_argument(f"--no-{f.name.replace('_', '-')}", dest=dest,
                                   action="store_const", const="false",
                                   help=f"{f.name} false")
    return p, owners


def _names(argv: list[str]) -> tuple[str, str, dict | None, str | None]:
    """(arch, task, the resumed checkpoint or None, its path) from the flags that pick them."""
    pre = OneLineParser(prog="python -m models.train", add_help=False)
    pre.add_argument("--task", default=None)
    pre.add_argument("--arch", default=None)
    pre.add_argument("--resume", default=None)
    known, _ = pre.parse_known_args(argv)
    arch, task, ck = known.arch or "transformer", known.task or "copy", None
    if known.resume:  # the checkpoint says what is being trained
        ck = read_checkpoint(known.resume)
        arch, task = ck["model"]["arch"], ck["task"]["name"]
        for flag, given, saved in (("--arch", known.arch, arch), ("--task", known.task, task)):
            if given is not None and given != saved:
                raise InputError(f"{flag} {given} conflicts with {known.resume}, which holds "
                                f"a {arch} model trained on {task}; drop {flag} to resume")
    # names first, so an unknown one is reported as such (not as unknown per-field flags)
    check_names(arch, task)
    return arch, task, ck, known.resume


class EvalLines(Callback):
    """``--no-progress``: each evaluation's record as one line on stderr (rank 0), the numbers
    the progress bar would have shown beside it, so a log without the bar still says how the
    run went."""

    KEYS = ("loss", "eval_loss", "string_acc", "char_acc")

    def __init__(self, world: World):
        self.world = world

    def on_eval(self, run: Run, record: dict[str, Any]) -> None:
        if self.world.is_main:
            shown = ", ".join(f"{k}={record[k]:.4g}" for k in self.KEYS
                              if isinstance(record.get(k), float))
            print(f"step {run.step}/{run.run_config.train.steps}: {shown}", file=sys.stderr,
                  flush=True)


def check_same_schedule(ck: dict, run_config: RunConfig, resume: str) -> None:
    """Refuse ``--steps`` that changes a resumed run's schedule: a linear or cosine decay is a
    function of the step *and* the run's length, so the steps already taken would have had
    other learning rates in the run asked for, and the checkpoint would end as neither run.
    Allowed where every step taken keeps its learning rate (a constant schedule after its
    warm-up, or a run stopped inside its warm-up): the result is then exactly the new run."""
    saved = ck["train"].get("config") or {}
    before, done = saved.get("steps"), int(ck["train"].get("step") or 0)
    if before is None or before == run_config.train.steps:
        return
    check(done <= run_config.train.steps,
          f"--steps {run_config.train.steps}: {resume} is at step {done} already")
    old = dataclasses.replace(run_config.train, steps=before)
    for step in range(done):
        a, b = lr_at(old, step), lr_at(run_config.train, step)
        check(a == b,
              f"--steps {run_config.train.steps} would change the {run_config.train.schedule} "
              f"schedule of {resume} (trained for {before} steps: step {step} had learning "
              f"rate {a:.3g}, this run gives it {b:.3g}); resume without --steps, or train a "
              "new run (--schedule constant does not depend on the length)")


def _sigterm_as_ctrl_c(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The ``python -m models.train`` command (exit codes in the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent_from_env()  # a DDP worker (or a reproduce job) ends with its launcher
    # SIGTERM (timeout, Docker, Kubernetes, SLURM) is Ctrl-C here too: before training starts it
    # ends the command with one line and exit 130; during training the loop saves first
    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGTERM, _sigterm_as_ctrl_c)
    try:
        return _main(argv)
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _main(argv: list[str]) -> int:
    world = World()

    def say(line: str) -> None:  # under torchrun rank 0 speaks for the job
        if world.is_main:
            print(line, file=sys.stderr)

    def error(line: str) -> None:  # every rank's (one rank's own trouble must be seen)
        print(line if world.is_main else f"rank {world.rank}: {line}", file=sys.stderr)

    try:
        world = env_world()
        arch, task, ck, resume = _names(argv)
        parser, owners = build_parser(arch, task)
        args = parser.parse_args(argv)
        given: dict[str, dict[str, Any]] = {"model": {}, "task": {}, "train": {}}
        for dest, (part, name, tp) in owners.items():
            value = getattr(args, dest)
            if value is not None:
                given[part][name] = parse_value(value, tp, f"--{name}")
        resolve_device(args.device)
        if ck is not None:
            run_config = run_config_of_checkpoint(ck, given["model"], given["task"], given["train"])
            check_same_schedule(ck, run_config, resume)
            out = args.out or resume
        else:
            run_config = make_run_config(arch, task, args.level, given["model"], given["task"],
                                         given["train"])
            out = args.out
        if out is None:
            raise InputError("--out is required (where to write the checkpoint)")
        check_writable(out)
        check_overwrite(out, resume, args.overwrite)
        model = meta_model(run_config.arch, run_config.model)  # shapes only: nothing allocated
        if ck is not None:
            check_resumable(ck, model, resume)
        n_params = model.n_params()
        del model
        # a second live writer is refused before it says anything; under torchrun rank 0 is
        # the writer (the other ranks never write)
        with exclusive_writer(out) if world.is_main else nullcontext():
            ddp = f" (DDP over {world.size} processes)" if world.active else ""
            announce(run_config, out, device=args.device, detail=f"{n_params:,} parameters{ddp}",
                     resume_step=ck["train"].get("step") if ck is not None else None,
                     measure=True)
            ck = train(run_config, out=out, device=args.device, resume=resume,
                       progress=not args.no_progress,
                       callbacks=[EvalLines(world)] if args.no_progress else ())
    except TrainingDiverged as e:
        say(f"error: {e}")
        return EXIT_DIVERGED
    except TrainingInterrupted:
        return EXIT_INTERRUPTED  # train() said where the checkpoint is
    except KeyboardInterrupt:
        say("interrupted; no checkpoint was saved by this run (any earlier file is intact)")
        return EXIT_INTERRUPTED
    except SeqprobeError as e:
        error(f"error: {e}")
        return exit_code(e)
    if world.is_main:
        last = ck["history"][-1] if ck["history"] else {}
        summary = ", ".join(f"{k}={v:.4g}" for k, v in last.items() if isinstance(v, float))
        print(f"done: step {ck['train']['step']}, samples {ck['train']['samples_seen']}: "
              f"{summary}")
    return 0
