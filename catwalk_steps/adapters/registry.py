"""The adapter types, by the name a model block's `adapter.type` gives, and the questions asked
of whichever type a block, a model or a checkpoint's weights hold. Each type's module is
imported when first asked (none imports peft until it injects)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

from .base import FIELD, AdapterSpec, AdapterType, check_keys

# The registration: a type's name and the module whose `ADAPTER` answers for it.
TYPES = {
    "lora": "catwalk_steps.adapters.lora",
    "ia3": "catwalk_steps.adapters.ia3",
}


def adapter_type(name: str) -> AdapterType:
    """The registered type called `name` (a `ConfigurationError` naming the field if none)."""
    if name not in TYPES:
        raise ConfigurationError(f"{FIELD}.type: one of {sorted(TYPES)}, got {name!r}")
    return importlib.import_module(TYPES[name]).ADAPTER


def every_type() -> list[AdapterType]:
    return [adapter_type(name) for name in TYPES]


def parse_adapter(block: Any, field: str = FIELD) -> AdapterSpec | None:
    """The model block's `adapter` checked by its type, each bad key one line naming it; None
    for none. A block already checked is returned as it is."""
    if block is None:
        return None
    if hasattr(block, "as_config"):
        return block
    if not isinstance(block, Mapping):
        raise ConfigurationError(f"{field}: a block such as {{type: 'lora', r: 8}}, got {block!r}")
    given = dict(block)
    name = given.pop("type", None)
    if name not in TYPES:
        raise ConfigurationError(f"{field}.type: one of {sorted(TYPES)}, got {name!r}")
    kind = adapter_type(name)
    check_keys(given, kind.keys, kind.title, field)
    return kind.parse(given, field)


def type_of(spec: AdapterSpec) -> AdapterType:
    """The type of a checked block."""
    return adapter_type(spec.type)


def adapter_of(model: torch.nn.Module) -> AdapterType | None:
    """The type of the adapter injected into `model` (at any depth, under any engine's wrappers:
    peft leaves its config on the model it injected into), or None."""
    for module in model.modules():
        config = getattr(module, "peft_config", None)
        if isinstance(config, Mapping) and config:
            peft_type = getattr(next(iter(config.values())), "peft_type", None)
            for kind in every_type():
                if peft_type == kind.peft_type:  # peft's PeftType is a str enum
                    return kind
    return None


def is_adapter_weight(name: str) -> bool:
    """Whether a state-dict name is an adapter's weight, of any type (a checkpoint's state dict
    does not say which type wrote it)."""
    return any(kind.is_weight(name) for kind in every_type())


def describe(config: Mapping[str, Any]) -> str:
    """How a run card names an adapter from its `as_config()`; a type not registered here (a
    card from elsewhere) by its name."""
    name = config.get("type")
    if name not in TYPES:
        return str(name)
    return adapter_type(str(name)).describe(config)
