"""Data-parallel training with ``torch.distributed`` (DDP) for the one loop.

``torchrun --nproc_per_node N -m models.train …`` starts N copies of the command; each reads its
rank from the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``…), and :func:`process_group` joins them into one process group (gloo on the CPU,
nccl on CUDA, one GPU per process). Without those variables nothing here does anything and the
loop is the single-process one.

How the work is split, and why: every rank draws the whole global batch from the same seeded
generator (one stream, exactly the single-process one) and trains on its own contiguous slice of
the rows (:func:`shard_bounds`). The loss of a slice is its summed NLL over the target count of the
*global* batch, times the world size, so that DDP's gradient average is the gradient of the
single-process loss (a mean over the global batch's targets, whose count differs from slice to
slice on variable-length tasks). A run therefore sees the same examples in the same order whatever
the number of processes, its weights equal the single-process run's up to float summation order,
and every rank holds the same RNG state, so rank 0's checkpoint (the only one written) resumes
every rank, under any world size. Drawing the whole batch on every rank costs little: the suite's
tasks generate data far faster than a model trains on it.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from seqprobe.cli import launched  # noqa: F401 - asked here too, and by every command
from seqprobe.errors import InputError


@dataclass(frozen=True)
class World:
    """This process's place in the job: ``rank`` of ``size`` processes (1 and 0 alone)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        """More than one process: DDP, sharded batches, collectives."""
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the only one that writes checkpoints and prints."""
        return self.rank == 0


SINGLE = World()


def env_world() -> World:
    """The world torchrun's environment describes (before or without a process group)."""
    if not launched():
        return World()
    try:
        return World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                     int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
    except (KeyError, ValueError):
        raise InputError("WORLD_SIZE is set but RANK is missing or not a number; start "
                        "multi-process training with torchrun") from None


def current() -> World:
    """The world of the process group in use (a single process when there is none)."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size(),
                     int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return World()


def world() -> World:
    """The process group's world if one is started, else the one torchrun's environment
    describes (before :func:`process_group` starts it)."""
    if dist.is_available() and dist.is_initialized():
        return current()
    return env_world()


def rank_device(dev: torch.device) -> torch.device:
    """The device of this rank: under torchrun, a CUDA run puts rank ``LOCAL_RANK`` on GPU
    ``LOCAL_RANK`` (one GPU per process, as DDP wants)."""
    if not launched() or dev.type != "cuda":
        return dev
    local = env_world().local_rank
    if dev.index is not None and dev.index != local:
        raise InputError(f"device {dev} under torchrun: each process takes the GPU of its "
                        f"LOCAL_RANK; use --device cuda or auto")
    if local >= torch.cuda.device_count():
        raise InputError(f"LOCAL_RANK {local} has no GPU: this machine has "
                        f"{torch.cuda.device_count()}; give torchrun --nproc_per_node <= that")
    return torch.device("cuda", local)


def process_group(dev: torch.device) -> World:
    """Join torchrun's process group (once per process) when this process is one of several;
    a group already started (by an earlier run in this process, or by the caller) is used as
    it is. The group lives until the process exits: leaving it and joining again through the
    same rendezvous store can meet the old group's keys there and hang."""
    if dist.is_available() and dist.is_initialized():
        return current()
    if not launched():
        return World()
    if not dist.is_available():
        raise InputError("torch.distributed is not available in this torch build")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    atexit.register(_leave)
    return current()


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- data and loss
def shard_bounds(n: int, world: World) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of an ``n``-row global batch that ``world.rank`` trains on: contiguous
    slices, the first ``n % size`` one row longer (``torch.tensor_split``'s split)."""
    base, extra = divmod(n, world.size)
    lo = world.rank * base + min(world.rank, extra)
    return lo, lo + base + (world.rank < extra)


def all_sum(values: Sequence[float], device: torch.device) -> list[float]:
    """Element-wise sums over the ranks (float64, so sums of losses stay exact enough)."""
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def all_max(values: Sequence[int], device: torch.device) -> list[int]:
    """Element-wise maxima over the ranks: flags every rank must agree on (stop, signal)."""
    t = torch.tensor(list(values), dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [int(v) for v in t.tolist()]


def broadcast(obj: Any, world: World) -> Any:
    """Rank 0's ``obj`` on every rank (picklable data: an evaluation record, a flag)."""
    box = [obj if world.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
