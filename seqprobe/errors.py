"""The suite's exceptions, one tree rooted in :class:`SeqprobeError`.

Every CLI (``seqprobe.cli.run_cli`` and ``python -m models.train``) turns a ``SeqprobeError``
into one stderr line; anything else is a bug and keeps its traceback. The tree::

    SeqprobeError
    ├── InputError (also a ValueError)    input refused: one line, exit 2, never retried
    │   ├── ConfigError                  a flag or config dict that does not parse
    │   ├── OutputError                  an output directory or its lock refused (seqprobe.atomic)
    │   ├── CheckpointError              a checkpoint file unusable (models.checkpoint)
    │   │   └── SaveError                writing one failed; the previous file is unchanged
    │   ├── ArchError                    models.registry
    │   ├── ActivationNotFound           models.base (also a KeyError)
    │   ├── HFError                      models.hf
    │   └── ExportError                  models.hf.export
    └── RunError (also a RuntimeError)   a run failed while working, not on its input
        ├── TrainingDiverged             models.train.loop
        └── CommandFailed                seqprobe.sweep (Ray retries it)

``InputError`` keeps its name although it is not about tasks: it is raised and caught under
that name in most modules and tests, and the name is part of what users read (a sweep reports a
failed cell as ``InputError: message``). What it means is "the input is refused, and would be
refused the same way again": sweeps do not retry it and CLIs exit 2 on it. Classes that live
beside their domain elsewhere (``HFError`` in models.hf, ...) derive from the classes here;
``tests/contract/test_errors.py`` checks that every exception class of the packages is in this tree.
"""

from __future__ import annotations


class SeqprobeError(Exception):
    """The root of every exception this suite raises on purpose (the message is one line)."""


class InputError(SeqprobeError, ValueError):
    """Input refused (a flag, config, path or file): the same call fails the same way every
    time. A ValueError too, as it always was, so ``except ValueError`` callers still catch it."""


class ConfigError(InputError):
    """A flag, or a config dict, that does not parse: unknown key, wrong type, bad flag."""


class OutputError(InputError):
    """An output directory that cannot be created or locked, or that another live process is
    writing now."""


class CheckpointError(InputError):
    """A checkpoint that cannot be used: the message says which file and why."""


class SaveError(CheckpointError):
    """Writing a checkpoint failed (disk full, permissions); ``reason`` is the OS's words and
    any previous file at the target is unchanged."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason


class RunError(SeqprobeError, RuntimeError):
    """A run failed while working (it diverged, a worker's command exited non-zero): not the
    input's fault, so a sweep may retry it."""
