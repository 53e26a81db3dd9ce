"""Data parallel scoring over torch.distributed: ``torchrun --nproc_per_node N -m logitjudge.cli score ...``.

Every rank loads the judge (on ``cuda:LOCAL_RANK`` when the device is CUDA), scores the items ``i`` with
``i % world == rank`` with its own checkpoint, and the finished records are all-gathered so every rank holds the
whole table; rank 0 writes it. A model too large for one GPU is split by accelerate instead (``--device auto``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.size > 1

    def owns(self, index: int) -> bool:
        return index % self.size == self.rank


def current(device: str = "cpu") -> World:
    """The process group of this run, initialised from torchrun's environment if needed (gloo on CPU)."""
    import torch.distributed as dist

    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1 and not (dist.is_available() and dist.is_initialized()):
        return World()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def rank_device(device: str, world: World) -> str:
    """Each rank on its own GPU: ``cuda`` becomes ``cuda:LOCAL_RANK``."""
    return f"cuda:{world.local_rank}" if world.active and device == "cuda" else device


def gather_records(records: dict, world: World) -> dict:
    """Union of every rank's ``{item_id: record}``."""
    if not world.active:
        return records
    import torch.distributed as dist

    parts: list = [None] * world.size
    dist.all_gather_object(parts, records)
    out: dict = {}
    for p in parts:
        out.update(p)
    return out


def barrier(world: World) -> None:
    if world.active:
        import torch.distributed as dist

        dist.barrier()
