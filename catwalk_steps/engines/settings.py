"""Settings as typed objects, each default written once: an engine block as a run uses it
(read from its config without building it: which engine, whether it shards the model, which
modules it wraps or recomputes, its precision), and how `catwalk::evaluate` scores (its batch,
length, precision, devices and engine). The graph-build checks, the start lines, the planned
job, the evaluate step and its workers all read them through these objects. (`catwalk::train`'s
keys: :class:`catwalk_steps.training.settings.TrainSettings`.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from tango.common import Lazy
from tango.integrations.torch import TrainingEngine

from ..components import lazy_config, registered_name


@dataclass(frozen=True)
class EngineSettings:
    """:ivar key: where the block is in the config (`training_engine`, `evaluate.engine`).
    :ivar patterns: `modules_to_wrap`; None (left out): the model's own blocks."""

    key: str
    engine_class: Any
    name: str | None
    patterns: list[str] | None
    activation_checkpointing: bool
    precision: str

    @classmethod
    def of(cls, lazy: Any, key: str = "training_engine") -> EngineSettings:
        engine, params = lazy_config(lazy, TrainingEngine, key)
        return cls(
            key=key,
            engine_class=engine,
            name=registered_name(TrainingEngine, engine),
            patterns=params.get("modules_to_wrap"),
            activation_checkpointing=bool(params.get("activation_checkpointing")),
            precision=params.get("precision", "fp32"),
        )

    @property
    def shards(self) -> bool:
        """Whether each rank holds a shard of the parameters (FairScale FSDP, FSDP2)."""
        return bool(getattr(self.engine_class, "shards", False))

    @property
    def selects_modules(self) -> bool:
        """Whether the engine wraps or recomputes inner modules: they must exist in the model."""
        return self.shards or self.activation_checkpointing


@dataclass(frozen=True)
class EvaluationSettings:
    """How `catwalk::evaluate` scores a model: its keys beside the model and the data."""

    batch_size: int = 32  # sequences (one per choice) per forward
    max_length: int | None = None  # None: the model's own positions
    precision: str = "fp32"
    device: str | None = None
    device_count: int = 1
    engine: Lazy[TrainingEngine] | None = None  # shards the model across the workers

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> EvaluationSettings:
        """The settings among an evaluate step's keys (the defaults for those left out)."""
        return cls(**{f.name: kwargs[f.name] for f in fields(cls) if f.name in kwargs})

    @property
    def here(self) -> bool:
        """Scored in this process (one device, no engine), as it always was."""
        return self.device_count == 1 and self.engine is None


# Each evaluation setting's default, written once (above): the evaluate step's keys take theirs.
EVALUATION_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(EvaluationSettings) if f.default is not MISSING
}
