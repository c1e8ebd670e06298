"""The tiny configurations and checkpoints the tests share (one table, no test module importing
another). conftest.py turns them into fixtures (``tiny_config``, ``tiny_model``,
``tiny_checkpoint``); a test imports a name from here only where a fixture cannot reach:
parametrize lists, module constants, and scripts run in a child process.

Imported by conftest after its jaxtyping import hook, so the model modules it pulls in are
checked like everywhere else under pytest.
"""

from __future__ import annotations

import torch

import models
from models.registry import ARCHS, model_class

# The one tiny configuration of each architecture: the one its class declares
# (models.contract.ModelContract.tiny_config; the contract test fails when one has none).
TINY: dict[str, dict] = {arch: dict(model_class(arch).tiny_config) for arch in ARCHS}
# the transformer of a tiny training run and of a tiny checkpoint file: one layer, two heads;
# a run's task sets the vocabulary (the checkpoint below: copy with D = 26)
TINY["run"] = dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32)
TINY_RUN = TINY["run"]
# the same model as `python -m models.train` flags
TINY_RUN_FLAGS = [a for k, v in TINY_RUN.items() for a in (f"--{k.replace('_', '-')}", str(v))]


# A tiny copy recipe's parts (``zoo.Recipe(NAME, "copy", "transformer", TINY_RECIPE)``): a few
# CPU steps, no evaluation, so a test can train and serve it
TINY_RECIPE = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
               "task": {"min_len": 1, "max_len": 6},
               "train": {"steps": 4, "batch_size": 4, "eval_every": 0, "eval_batches": 1,
                         "eval_batch_size": 4, "warmup_steps": 1}}


def good_checkpoint(step: int = 0, **model) -> dict:
    """A valid checkpoint dict of the tiny run transformer (vocabulary 30: copy, D = 26),
    untrained, its weights drawn from seed ``step``; ``model`` overrides config fields."""
    cfg = {"vocab_size": 30, **TINY_RUN, **model}
    torch.manual_seed(step)
    m = models.build_model("transformer", cfg)
    return {
        "format": 1,
        "model": {"arch": "transformer", "config": cfg},
        "task": {"name": "copy", "config": {"D": 26, "min_len": 1, "max_len": 6}},
        "train": {"config": {"steps": 10}, "seed": 0, "step": step, "samples_seen": 4 * step},
        "state_dict": {k: v.detach().clone() for k, v in m.state_dict().items()},
        "history": [],
    }


def zoo_stand_in(name: str, cache_dir, level: str = "quick"):
    """A finished cache entry of zoo recipe ``name`` at ``level`` in ``cache_dir``, with the
    recipe's model, task and training configs and untrained weights (seed 0): what
    ``zoo.path`` / ``models.load("zoo:NAME")`` serve, without training it. For doctests whose
    shown outputs depend on the configs only. Returns its path."""
    from analyses import zoo
    from models.checkpoint.layout import make_checkpoint
    from models.checkpoint.write import save_checkpoint
    from models.train.cache import cache_path
    from seqprobe.config import config_to_dict
    from seqprobe.device import resolve_device

    # as zoo keys it
    run_config = zoo.run_config(name, level, cache_dir).resolved(resolve_device("auto"))
    torch.manual_seed(0)
    model = models.build_model(run_config.arch, run_config.model)
    train = {"config": config_to_dict(run_config.train), "seed": run_config.train.seed,
             "step": run_config.train.steps, "samples_seen": 0}
    path = cache_path(run_config, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(make_checkpoint(run_config.arch, run_config.model_dict, run_config.task_name,
                                    run_config.task_dict,
                                    train, model.state_dict()), path)
    return path


def sigint_during_step(monkeypatch, step: int = 2):
    """Send a real SIGINT to this process while the training loop computes ``step``'s learning
    rate (once): the loop saves the run as interrupted and raises TrainingInterrupted. Returns
    the real ``lr_at``, to put back before the run is resumed."""
    import os
    import signal

    from models.train import loop

    orig, fired = loop.lr_at, []

    def lr_at(cfg, s):
        if s == step and not fired:
            fired.append(s)
            os.kill(os.getpid(), signal.SIGINT)
        return orig(cfg, s)

    monkeypatch.setattr(loop, "lr_at", lr_at)
    return orig
