"""Tango's `TrainConfig`, aware of nodes: global rank, local rank, and the worker's device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tango.integrations.torch import TrainConfig


@dataclass
class NodeAwareTrainConfig(TrainConfig):
    """`worker_id` is the global rank; `world_size` counts every process on every node.

    Tango derives the device from `devices[worker_id]`, which only works on one node; here each
    worker is told its device (decided by :mod:`catwalk_steps.distributed.devices`).
    """

    local_rank: int = 0
    local_world_size: int = 1
    num_nodes: int = 1
    device: str = "cpu"

    @classmethod
    def of_worker(cls, job: Any, rank: int, local_rank: int, **more: Any) -> NodeAwareTrainConfig:
        """Tango's view of one worker of `job` (a training or an evaluation job: a
        :class:`~catwalk_steps.distributed.placement.PlacedJob` with its step's names): where it
        stands among the others (the job's, over any of `more`), and `more` of Tango's keys."""
        where = dict(
            step_id=job.step_id,
            work_dir=job.work_dir,
            step_name=job.step_name,
            worker_id=rank,
            is_distributed=job.world_size > 1,
            distributed_address=job.rendezvous.host,
            distributed_port=job.rendezvous.port,
            world_size=job.world_size,
            local_rank=local_rank,
            local_world_size=job.local_world_size,
            num_nodes=job.rendezvous.num_nodes,
            device=str(job.devices.device(local_rank)),
        )
        return cls(**{**more, **where})

    @property
    def worker_local_default_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def device_type(self) -> str:
        return torch.device(self.device).type


def local_world_size(train_config: TrainConfig) -> int:
    """Processes on this machine (Tango's own config knows of one machine only)."""
    return getattr(train_config, "local_world_size", train_config.world_size)
