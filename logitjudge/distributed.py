"""Data-parallel runs through accelerate's process state: ``torchrun --nproc_per_node N -m logitjudge score ...``.

Every rank loads the judge on its own device (:func:`rank_device`: ``cuda`` becomes ``cuda:LOCAL_RANK`` before
the model loads; gloo on CPU), runs its contiguous share of the items with its own checkpoint, and the finished
records are gathered so every rank holds the whole table; rank 0 writes it. A model too large for one GPU is
split by accelerate instead (``--device auto``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import LogitJudgeError


class DistributedError(LogitJudgeError, RuntimeError):
    """A torchrun layout this machine cannot serve."""


@dataclass(frozen=True)
class World:
    """This process's place in the run: accelerate's ``PartialState`` (or one process without it)."""

    state: object = None

    @property
    def rank(self) -> int:
        return 0 if self.state is None else self.state.process_index

    @property
    def size(self) -> int:
        return 1 if self.state is None else self.state.num_processes

    @property
    def local_rank(self) -> int:
        return 0 if self.state is None else self.state.local_process_index

    @property
    def active(self) -> bool:
        return self.size > 1

    def shard(self, n: int) -> list[int]:
        """The indices 0..n-1 this rank scores (a contiguous share)."""
        if not self.active:
            return list(range(n))
        with self.state.split_between_processes(list(range(n))) as mine:
            return list(mine)

    def gather(self, records: dict) -> dict:
        """Union of every rank's ``{item_id: record}``."""
        if not self.active:
            return records
        from accelerate.utils import gather_object

        out: dict = {}
        for part in gather_object([records]):
            out.update(part)
        return out

    def barrier(self) -> None:
        if self.active:
            self.state.wait_for_everyone()


def current(device: str = "cpu") -> World:
    """The process group of this run, from torchrun's environment (gloo on CPU, NCCL on CUDA)."""
    import os

    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not (dist.is_available() and dist.is_initialized()):
        return World()
    from accelerate import PartialState

    return World(PartialState(cpu=not str(device).startswith("cuda")))


def rank_device(device: str, env=None, device_count: int | None = None) -> str:
    """The device this process loads the judge on: under torchrun (``WORLD_SIZE`` > 1) ``cuda`` becomes
    ``cuda:LOCAL_RANK``, so every rank of a node has a GPU of its own; any other device (``cpu``, ``cuda:N``,
    ``auto``) is kept. Read from torchrun's environment (``env``, default ``os.environ``) before any process
    group exists. Refused when a node runs more ranks than it has GPUs (``device_count``: default the CUDA
    device count)."""
    env = os.environ if env is None else env
    if device != "cuda" or int(env.get("WORLD_SIZE", "1")) <= 1:
        return device
    local = int(env.get("LOCAL_RANK", "0"))
    if device_count is None:
        import torch

        device_count = torch.cuda.device_count()
    if local >= device_count:
        raise DistributedError(f"torchrun rank {local} of this node has no GPU of its own: the node has "
                               f"{device_count}; start at most {device_count} ranks per node (--nproc_per_node "
                               f"{max(device_count, 1)}), or use --device cpu")
    return f"cuda:{local}"
