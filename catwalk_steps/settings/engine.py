"""An engine block (`training_engine`, `evaluate.engine`) as a run uses it, read once from its
config without building it: which engine, whether it shards the model, which modules it wraps
or recomputes, its precision; and its rules (:meth:`EngineSettings.check`), each error one
line naming the key."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import LRScheduler, Optimizer, TrainingEngine

from ..components import check_keys, lazy_config, registered_name, resolve_config
from ..errors import is_number
from .precision import DEFAULT_PRECISION

SHARDED_OPTIMIZERS = ("catwalk::zero", "catwalk::oss")  # an inner optimizer named by `optimizer`


@dataclass(frozen=True)
class EngineSettings:
    """An engine block, read from its config (its own rules: the engine's `check_params`)."""

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

    def check(self, trains: bool = True) -> EngineSettings:
        """The engine's type, keys, precision, regexes, and (when it `trains`) its optimizer and
        LR scheduler; an engine that only evaluates takes neither. These settings, checked."""
        params, key = self.params, self.key
        if not trains:
            for unused in ("optimizer", "lr_scheduler"):
                if unused in params:
                    raise ConfigurationError(
                        f"{key}.{unused}: an evaluation trains nothing; leave it out"
                    )
        check_keys(self.engine_class, params, key)
        # A catwalk engine's own rules, which its constructor applies too (Tango's have none).
        own_rules = getattr(self.engine_class, "check_params", None)
        if own_rules is not None:
            own_rules(params, key)
        if trains:
            check_optimizer(params.get("optimizer"), f"{key}.optimizer")
        if params.get("lr_scheduler") is not None:
            scheduler, scheduler_params = resolve_config(
                params["lr_scheduler"], LRScheduler, f"{key}.lr_scheduler"
            )
            check_keys(scheduler, scheduler_params, f"{key}.lr_scheduler")
        return self


def check_optimizer(config: Any, key: str) -> None:
    """An engine's `optimizer` block: its type and keys (a sharded one's, its inner
    optimizer's), a learning rate > 0."""
    if config is None:
        raise ConfigurationError(f"{key}: missing (e.g. {{type: 'torch::AdamW', lr: 1e-4}})")
    constructor, params = resolve_config(config, Optimizer, key)
    if registered_name(Optimizer, constructor) in SHARDED_OPTIMIZERS:
        inner = optimizer_class(params.pop("optimizer", "torch::AdamW"), f"{key}.optimizer")
        check_keys(inner, params, key)
    else:
        check_keys(constructor, params, key)
    lr = params.get("lr")
    if lr is not None and not (is_number(lr) and lr >= 0):
        raise ConfigurationError(f"{key}.lr: a learning rate >= 0, got {lr!r}")
    if lr == 0:
        raise ConfigurationError(f"{key}.lr: 0 changes no weight; give a learning rate > 0")


def optimizer_class(name: str, field: str) -> type:
    """The registered optimizer class called `name` (e.g. "torch::AdamW"): what a sharded
    optimizer (:data:`SHARDED_OPTIMIZERS`) wraps."""
    available = sorted(n for n in Optimizer.list_available() if n not in SHARDED_OPTIMIZERS)
    if name not in available:
        close = difflib.get_close_matches(name, available, n=3)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigurationError(f"{field}: unknown optimizer {name!r}{hint}")
    cls = Optimizer.resolve_class_name(name)[0]
    assert isinstance(cls, type)
    return cls
