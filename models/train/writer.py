"""A training run's checkpoints: writing them (with a rescue place when the disk refuses), and
reading one back to resume from.

The file format and the atomic write are :mod:`models.checkpoint`'s; this module decides what
of a run goes in (weights, optimizer, every RNG, the history) and what to do when a write fails.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from models.checkpoint.io import read_checkpoint
from models.checkpoint.layout import make_checkpoint, resume_digest
from models.checkpoint.rebuild import state_dict_mismatch
from models.checkpoint.write import save_checkpoint
from models.train import distributed
from models.train.callbacks import Run
from models.train.distributed import World
from models.train.rng import rng_state, set_rng_state
from models.train.runconfig import RunConfig
from seqprobe.config import config_to_dict
from seqprobe.errors import CheckpointError, SaveError
from seqprobe.paths import user_cache_dir


def rescue_dirs() -> list[Path]:
    """Where a checkpoint goes when its own directory cannot take it (disk full, a directory
    that went away): the system's temp directory, then ``rescued/`` in the user's cache
    directory (beside the default checkpoint cache, never in it: a rescued file under an
    entry's name is not a finished entry to serve)."""
    dirs = [Path(tempfile.gettempdir())]
    try:
        dirs.append(user_cache_dir() / "rescued")
    except RuntimeError:  # no home directory
        pass
    return dirs


def _rescue(ck: dict[str, Any], out: Path) -> Path | None:
    """Save ``ck`` under ``out``'s name in the first :func:`rescue_dirs` entry that takes it
    (never over an existing file); None when none does."""
    for d in rescue_dirs():
        try:
            if d.resolve() == out.parent.resolve():
                continue
            target = d / out.name
            if target.exists():
                target = d / f"{out.stem}.{os.getpid()}{out.suffix}"
            if target.exists():
                continue
            return save_checkpoint(ck, target)
        except (CheckpointError, OSError):
            continue
    return None


class CheckpointWriter:
    """Builds the checkpoint of ``run`` (with ``opt``'s state and every RNG) and writes it to
    ``out`` (None: builds it only, for ``train``'s return value and for DDP ranks other than
    0). Remembers the newest sound file, which error messages name."""

    def __init__(self, run: Run, opt: torch.optim.Optimizer, data_gen: torch.Generator,
                 out: Path | None, world: World = distributed.SINGLE,
                 last_good: tuple[Path, int] | None = None):
        self.run, self.opt, self.data_gen, self.out, self.world = run, opt, data_gen, out, world
        self.last_good = last_good  # (file, step) of the newest sound checkpoint
        # set by models.train.ensemble for a member: {"member": i, "runs": [each member's
        # RunConfig hash]} in its checkpoints' train entry; a solo run's has no "ensemble"
        self.ensemble: dict[str, Any] | None = None

    def checkpoint(self) -> dict[str, Any]:
        """The run's state now, in the checkpoint format."""
        run, cfg = self.run, self.run.run_config.train
        train_meta = {"config": config_to_dict(cfg), "seed": cfg.seed, "step": run.step,
                      "samples_seen": run.samples_seen, "rng": rng_state(self.data_gen),
                      "time_s": run.time_s(), "world_size": self.world.size,
                      **({"stop": run.stop_reason} if run.stop_reason else {}),
                      **({"ensemble": self.ensemble} if self.ensemble else {}),
                      # what the model's vocabulary was sized for: an analysis refuses a task
                      # config that numbers its tokens otherwise (models.loading)
                      **({"task_vocab": int(run.task.vocab.size)}
                         if getattr(getattr(run.task, "vocab", None), "size", None) else {}),
                      **({"eval_pending": run.eval_pending} if run.eval_pending else {})}
        run_config = run.run_config
        return make_checkpoint(run_config.arch, run_config.model_dict, run_config.task_name,
                               run_config.task_dict,
                               train_meta,
                               run.model.state_dict(), run.history, self.opt.state_dict())

    def kept(self) -> str:
        """Which file holds the run's newest sound state, for an error message."""
        if self.last_good:
            return f"last good checkpoint: {self.last_good[0]} (step {self.last_good[1]})"
        return "no checkpoint was written by this run (--save-every N keeps intermediate ones)"

    def save(self, final: bool = False) -> dict[str, Any] | None:
        """Write the checkpoint (rank 0; the other ranks build the dict only when ``final``,
        for the value ``train`` returns) and return it. Under DDP every rank waits for the
        write and learns whether it worked, so none leaves while rank 0 writes (a launcher
        tears down the rest when one process exits)."""
        if not self.world.active:
            return self._write()
        ck, failed = None, None
        try:
            ck = self._write() if self.world.is_main or final else None
        except SaveError as e:
            failed = e
        word = distributed.broadcast(str(failed) if failed else "", self.world)
        if failed is not None:
            raise failed
        if word:
            raise SaveError(f"rank 0: {word}")
        return ck

    def _write(self) -> dict[str, Any]:
        ck = self.checkpoint()
        if self.out is None:
            return ck
        try:
            save_checkpoint(ck, self.out)
        except CheckpointError as e:  # disk full, a directory gone: the weights are not lost
            rescued = _rescue(ck, self.out)
            where = (f"this run's state at step {self.run.step} was saved to {rescued} instead "
                     f"(continue with --resume {rescued})" if rescued else
                     f"no other place took it either ({', '.join(map(str, rescue_dirs()))}); "
                     + self.kept())
            raise SaveError(f"{e}; {where}", getattr(e, "reason", "")) from None
        self.last_good = (self.out, self.run.step)
        return ck


# ---------------------------------------------------------------------------- resuming
def check_resumable(ck: dict, model, path) -> None:
    """Raise :class:`CheckpointError` unless ``ck`` holds a run state that ``model`` can take."""
    missing = [k for k in ("config", "step", "samples_seen", "rng") if k not in ck["train"]]
    if missing:
        raise CheckpointError(f"{path}: cannot resume: the train entry lacks {missing} "
                              "(not saved by models.train)")
    stored = ck.get("resume_digest")  # absent in checkpoints written before it existed
    if stored is not None and stored != resume_digest(ck):
        raise CheckpointError(f"{path}: corrupt: its RNG or optimizer state does not match the "
                              "digest stored with it; cannot resume from it")
    mismatch = state_dict_mismatch(model, ck["state_dict"])
    if mismatch:
        raise CheckpointError(f"{path}: weights do not match the model config: {mismatch}")


def restore(run_config: RunConfig, resume, model, opt, data_gen) -> tuple[int, int, list, float]:
    """Load a run's state from ``resume`` into the model, optimizer and every RNG; returns
    ``(step, samples_seen, history, seconds trained)``."""
    ck = read_checkpoint(resume)
    if (ck["model"]["arch"], ck["task"]["name"]) != (run_config.arch, run_config.task_name):
        raise CheckpointError(
            f"{resume}: holds a {ck['model']['arch']} model trained on {ck['task']['name']}, "
            f"not {run_config.arch} on {run_config.task_name}")
    tr = ck["train"]
    check_resumable(ck, model, resume)
    try:
        model.load_state_dict(ck["state_dict"])
        if "optimizer" in ck:
            opt.load_state_dict(ck["optimizer"])  # torch moves the state to the params' device
        set_rng_state(tr["rng"], data_gen)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as e:
        detail = str(e).splitlines()[0][:160] if str(e) else ""
        raise CheckpointError(f"{resume}: cannot resume from this file "
                              f"({type(e).__name__}: {detail})") from None
    time_s = tr.get("time_s", ck["history"][-1].get("time_s", 0.0) if ck["history"] else 0.0)
    return tr["step"], tr["samples_seen"], list(ck["history"]), float(time_s or 0.0)
