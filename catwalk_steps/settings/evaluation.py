"""How `catwalk::evaluate` scores a model (its batch, length, precision, devices and engine),
typed once: the graph-build checks, the evaluate step and its workers read this object; its
rules: :meth:`EvaluationSettings.check`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from tango.common import Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import TrainingEngine

from ..errors import whole
from .precision import DEFAULT_PRECISION, Precision

BATCH_SIZE = 32  # sequences (one per choice) per forward when scoring outside training
DEVICE_COUNT = 1  # every `device_count` key's default: one process (`catwalk::train`'s too)
# The score shown where none is named: the reports' and plots' `metric`, a comparison's, and the
# validation metric a training run picks its best checkpoint by (multiple choice's accuracy).
METRIC = "acc"


@dataclass(frozen=True)
class EvaluationSettings:
    """How `catwalk::evaluate` scores a model: its keys beside the model and the data."""

    batch_size: int = BATCH_SIZE  # sequences (one per choice) per forward
    max_length: int | None = None  # None: the model's own positions
    precision: str = DEFAULT_PRECISION  # fp32, bf16 or fp16 (:class:`.Precision`)
    device: str | None = None  # "cuda", "cpu", or None: a GPU when there is one
    device_count: int = DEVICE_COUNT  # workers scoring shares (GPUs, else CPU processes)
    engine: Lazy[TrainingEngine] | None = None  # shards the model across the workers
    num_nodes: int = 1  # machines; the others join with `catwalk-worker` (as for training)
    master_addr: str | None = None  # node 0's address, for the rendezvous
    master_port: int | None = None
    rendezvous_timeout: float = 300.0  # seconds every node has to join

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> EvaluationSettings:
        """The settings among an evaluate step's keys (the defaults for those left out)."""
        return cls(**{f.name: kwargs[f.name] for f in fields(cls) if f.name in kwargs})

    @property
    def here(self) -> bool:
        """Scored in this process (one device, no engine, one node), as it always was."""
        return self.device_count == 1 and self.engine is None and self.num_nodes == 1

    def check(self) -> None:
        """Its numbers, nodes, device and precision (fp16 needs CUDA where it will score); the
        engine is checked with the model it shards (:mod:`catwalk_steps.checks.evaluation`)."""
        whole(self.batch_size, "evaluate.batch_size")
        whole(self.max_length, "evaluate.max_length", minimum=2, optional=True)
        Precision.parse(self.precision, "evaluate.precision").check_device(
            self.device_type(), "evaluate.precision"
        )

    def device_type(self) -> str:
        """Where the step will score: one device, or `device_count` workers (GPUs, else CPU)."""
        from ..distributed.devices import evaluation_device, plan_devices

        whole(self.device_count, "evaluate.device_count")
        self.check_nodes()
        if self.here:
            return evaluation_device(self.device, field="evaluate.device").type
        plan = plan_devices(self.device_count, requested=self.device, field="evaluate.device")
        return plan.device_type

    def check_nodes(self) -> None:
        """Several machines scoring shares, as for training: node 0's address and port."""
        from ..distributed.rendezvous import rendezvous_settings

        whole(self.num_nodes, "evaluate.num_nodes")
        check_timeout(self.rendezvous_timeout, "evaluate.rendezvous_timeout")
        if self.num_nodes > 1:
            address, port, timeout = self.master_addr, self.master_port, self.rendezvous_timeout
            rendezvous_settings(self.num_nodes, address, port, timeout, step="evaluate")


def check_timeout(timeout: Any, field: str) -> None:
    """A `rendezvous_timeout`: seconds > 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigurationError(f"{field}: seconds > 0, got {timeout!r}")


# Each evaluation setting's default, written once (above): the evaluate step's keys take theirs.
EVALUATION_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(EvaluationSettings) if f.default is not MISSING
}
