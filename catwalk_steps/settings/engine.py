"""An engine block (`training_engine`, `evaluate.engine`) as a run uses it, read once from its
config without building it: which engine, whether it shards the model, which modules it wraps
or recomputes, its precision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tango.integrations.torch import TrainingEngine

from ..components import lazy_config, registered_name
from .precision import DEFAULT_PRECISION


@dataclass(frozen=True)
class EngineSettings:
    """An engine block, read from its config (its rules: the engine's `check_params`)."""

    key: str  # where the block is in the config: `training_engine`, `evaluate.engine`
    engine_class: Any  # the class (or factory) its `type` names
    name: str | None  # the name it is registered under (`catwalk::fairscale`)
    # `modules_to_wrap`: regexes over module names; None (left out): the model's own blocks.
    patterns: list[str] | None
    activation_checkpointing: bool  # recompute the chosen modules' activations in backward
    precision: str = DEFAULT_PRECISION  # `precision`: fp32, bf16 or fp16 (:class:`.Precision`)
    # Every key as given, `type` left out (the optimizer and scheduler blocks among them).
    params: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, lazy: Any, key: str = "training_engine") -> EngineSettings:
        engine, params = lazy_config(lazy, TrainingEngine, key)
        return cls(
            key=key,
            engine_class=engine,
            name=registered_name(TrainingEngine, engine),
            patterns=params.get("modules_to_wrap"),
            activation_checkpointing=bool(params.get("activation_checkpointing")),
            precision=params.get("precision", DEFAULT_PRECISION),
            params=params,
        )

    @property
    def shards(self) -> bool:
        """Whether each rank holds a shard of the parameters (FairScale FSDP, FSDP2)."""
        return bool(getattr(self.engine_class, "shards", False))

    @property
    def selects_modules(self) -> bool:
        """Whether the engine wraps or recomputes inner modules: they must exist in the model."""
        return self.shards or self.activation_checkpointing
