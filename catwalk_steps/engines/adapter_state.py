"""What an engine's checkpoint holds of a model that trains an adapter: the adapter's weights,
not the frozen base (rebuilt from its source on resume and checked against the checkpoint's
record of it: :mod:`catwalk_steps.checkpoints.base_identity`). A model without an adapter keeps
every weight, as before."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import torch

from ..adapters.registry import adapter_of, is_adapter_weight
from ..checkpoints.layout import CheckpointError
from .wrapping import trainable_units

V = TypeVar("V")  # a state dict's values (tensors, or what DCP returns)


def trains_adapter(model: torch.nn.Module) -> bool:
    return any(is_adapter_weight(name) for name, _ in model.named_parameters())


def saved_part(state: Mapping[str, V]) -> dict[str, V]:
    """The state dict a checkpoint keeps: the adapter's weights when there are any."""
    if any(is_adapter_weight(name) for name in state):
        return {name: value for name, value in state.items() if is_adapter_weight(name)}
    return dict(state)


def check_loaded(result: Any, state: Mapping[str, torch.Tensor]) -> None:
    """After `load_state_dict(state, strict=False)` of an adapter checkpoint: every adapter
    weight came from it, nothing else was in it (strict over the adapter's names)."""
    if result is None:
        return
    missing = [name for name in result.missing_keys if is_adapter_weight(name)]
    unexpected = list(result.unexpected_keys) + [n for n in state if not is_adapter_weight(n)]
    if missing or unexpected:
        raise CheckpointError(
            f"adapter weights do not fit the model (missing: {sorted(missing)[:5]}, "
            f"unexpected: {sorted(unexpected)[:5]}); was it saved with another adapter?"
        )


def load_into(module: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Loads a checkpoint's model state into `module`: strictly, or, for an adapter's
    weights, strictly over the adapter (the base stays as it was built)."""
    if any(is_adapter_weight(name) for name in state):
        check_loaded(module.load_state_dict(state, strict=False), state)
    else:
        module.load_state_dict(state)


def adapter_units(model: torch.nn.Module) -> list[str]:
    """The modules an engine that flattens each unit's parameters into one (FairScale) wraps
    as units of their own so that each is all trained or all frozen, deepest first: as the
    adapter's type says, by default the smallest modules that train (none when all train)."""
    adapter = adapter_of(model)
    own = adapter.flattened_units(model) if adapter is not None else None
    return trainable_units(model) if own is None else own
