"""Where a job's workers run: its device plan on each node, and how many nodes. Training jobs
and evaluation jobs count their workers the same way."""

from __future__ import annotations

from typing import ClassVar

from .devices import DevicePlan
from .rendezvous import Rendezvous


class PlacedJob:
    """A job (a dataclass) with `devices` (this node's) and a `rendezvous` (all nodes)."""

    devices: DevicePlan
    rendezvous: Rendezvous
    # What to do after a worker died (a training job resumes from its checkpoint, an evaluation
    # from its records).
    AFTER_FAILURE: ClassVar[str] = "run the step again to resume from its last checkpoint"

    @property
    def local_world_size(self) -> int:
        """Workers on this node."""
        return len(self.devices.devices)

    @property
    def world_size(self) -> int:
        """Workers on every node."""
        return self.local_world_size * self.rendezvous.num_nodes
