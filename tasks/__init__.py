"""Synthetic tasks: seeded, batched tensor generators (no model code)."""

from seqprobe.errors import InputError, SeqprobeError
from tasks.base import IGNORE, Batch, PromptBatch, Vocab, make_generator
from tasks.registry import TASKS, Task, make_task, packed_batch, task_class

__all__ = [
    "IGNORE", "Batch", "PromptBatch", "SeqprobeError", "InputError", "Vocab", "make_generator",
    "TASKS", "Task", "make_task", "packed_batch", "task_class",
]
