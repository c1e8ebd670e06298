"""What tests/integration/test_export_hf.py and tests/e2e/test_export_hf_out_dir.py share: a tiny model written as
a suite checkpoint of a copy task over its vocabulary (:func:`write_checkpoint`,
:func:`copy_task_config`), and what an export left in a directory (:func:`leftovers`)."""

from __future__ import annotations

from pathlib import Path

from models.checkpoint.layout import make_checkpoint
from models.checkpoint.write import save_checkpoint
from seqprobe.config import config_to_dict


def copy_task_config(vocab_size: int) -> dict:
    """The copy task whose vocabulary (D letters + 4 specials) has ``vocab_size`` ids."""
    return {"D": vocab_size - 4, "max_len": 5}


def write_checkpoint(model, path: Path, task: str = "copy", task_config: dict | None = None
                     ) -> Path:
    task_config = copy_task_config(model.cfg.vocab_size) if task_config is None else task_config
    ck = make_checkpoint(model.arch, config_to_dict(model.cfg), task, task_config,
                         {"step": 7}, model.state_dict())
    return save_checkpoint(ck, path)


def leftovers(directory: Path) -> list[str]:
    """Hidden entries (temp directories, lock files) an export left in ``directory``."""
    return sorted(p.name for p in directory.glob(".*"))
