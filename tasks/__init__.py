"""Synthetic tasks: seeded, batched tensor generators (no model code)."""

from tasks.base import IGNORE, Batch, PromptBatch, TaskError, Vocab, make_generator
from tasks.errors import SeqprobeError
from tasks.registry import TASKS, Task, make_task, packed_batch, task_class

__all__ = [
    "IGNORE", "Batch", "PromptBatch", "SeqprobeError", "TaskError", "Vocab", "make_generator",
    "TASKS", "Task", "make_task", "packed_batch", "task_class",
]
