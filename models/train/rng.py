"""Every RNG a training run reads, saved with its checkpoints and restored on ``--resume``, so a
resumed run continues bit-identically on the CPU."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch


def seed_all(seed: int) -> None:
    """Seed torch, numpy and python's ``random`` (the model's init and anything a model or a
    runtime type checker draws); the data stream has its own generator."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def rng_state(data_gen: torch.Generator) -> dict[str, Any]:
    """Every RNG the run reads, as tensors / plain data (torch.load weights_only-safe)."""
    np_state = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    return {
        "data": data_gen.get_state(),
        "torch": torch.get_rng_state(),
        "numpy": {"key": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": {"version": py_version, "internal": torch.tensor(py_internal, dtype=torch.int64),
                   "gauss": py_gauss},
        # CUDA generators (dropout-like randomness on a GPU); only when this run started CUDA
        "cuda": (torch.cuda.get_rng_state_all()
                 if torch.cuda.is_available() and torch.cuda.is_initialized() else []),
    }


def set_rng_state(state: dict[str, Any], data_gen: torch.Generator) -> None:
    """Put back what :func:`rng_state` saved."""
    data_gen.set_state(state["data"])
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["internal"].tolist()), p["gauss"]))
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


@contextmanager
def global_rngs_kept() -> Iterator[None]:
    """Leave torch's, numpy's and python's global RNGs as they were on entry: evaluating must
    not change the training run, whatever the code it calls draws (a runtime type checker such
    as beartype draws from python's ``random`` to sample the items it checks)."""
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
