"""The state of a run that callbacks see, the callback interface, and the early stop of
``TrainConfig.stop_at``."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from models.train.runconfig import RunConfig
from seqprobe.config import check


@dataclass
class Run:
    """The state of a run that callbacks see (and may read the model of). Mutable: the loop
    advances it step by step."""

    run_config: RunConfig
    model: torch.nn.Module
    task: Any
    device: torch.device
    step: int = 0
    samples_seen: int = 0
    loss: float = math.nan
    history: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = ""  # set by a callback that ends the run early
    # an evaluation at this step has begun and its record is not in the history yet: a run
    # saved now (a stop during the evaluation) is unfinished even at its last step, and keeps
    # what the record needs from the step ({"loss": the step's training loss}) for --resume
    eval_pending: dict[str, float] | None = None
    time_before: float = 0.0  # seconds trained before this process (a resumed run's)
    started: float = field(default_factory=time.time)  # when this process's first step began

    def time_s(self) -> float:
        """Seconds of training so far, over every process that trained this run."""
        return round(self.time_before + time.time() - self.started, 2)


class Callback:
    """Hooks of the loop; each returns True to end the run (after this step), else None.

    ``on_step`` runs after every optimiser step, ``on_eval`` after each evaluation with the
    record just appended to ``run.history``.
    """

    def on_step(self, run: Run) -> bool | None:
        return None

    def on_eval(self, run: Run, record: dict[str, Any]) -> bool | None:
        return None


class StopAt(Callback):
    """``TrainConfig.stop_at``: end the run at the first evaluation whose string accuracy
    reaches ``level`` — for a task scored at every length (``string_acc_at``), at every one of
    them: the analyses read the score at exactly L beside the mean over lengths (copy paper
    Fig. 1a), and a run stopped on the mean alone could end before the longest strings got
    there. The reason (and so the step it stopped at) goes in the checkpoint."""

    def __init__(self, level: float):
        self.level = level

    def on_eval(self, run: Run, record: dict[str, Any]) -> bool | None:
        check("string_acc" in record,
              f"stop_at: the {run.run_config.task_name} task's evaluation has no "
              "string accuracy to stop on")
        at = record.get("string_acc_at") or {}
        worst = min(at.items(), key=lambda kv: kv[1]) if at else None
        if record["string_acc"] >= self.level and (worst is None or worst[1] >= self.level):
            every = ("" if worst is None
                     else f" (every length; lowest {worst[1]:.4g} at L={worst[0]})")
            run.stop_reason = (f"stop_at: string_acc {record['string_acc']:.4g} >= "
                               f"{self.level:g}{every} at step {run.step}")
            return True
        return None
