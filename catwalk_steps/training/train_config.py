"""Tango's `TrainConfig`, aware of nodes: global rank, local rank, and the worker's device."""

from __future__ import annotations

from dataclasses import dataclass

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
    inner_modules: tuple[str, ...] | None = None  # chosen once for the job (TrainingJob)

    @property
    def worker_local_default_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def device_type(self) -> str:
        return torch.device(self.device).type


def local_world_size(train_config: TrainConfig) -> int:
    """Processes on this machine (Tango's own config knows of one machine only)."""
    return getattr(train_config, "local_world_size", train_config.world_size)
