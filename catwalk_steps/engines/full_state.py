"""Checkpoint state the same whatever the number of ranks (:class:`FullCheckpointState`, what
every engine's checkpoints hold unless it says otherwise): the whole model (or its adapter:
:mod:`.adapter_state`) and the whole optimizer state, consolidated where they are sharded, so
that a run can resume on another device_count. Every rank calls `save_state` and `load_state`;
only rank 0 writes. FSDP2 overrides both with sharded DCP checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch

from ..checkpoints.layout import (
    GRAD_SCALER_FILE,
    LR_SCHEDULER_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
)
from ..checkpoints.state import load_file
from ..distributed.groups import distributed_position
from ..files import torch_save_atomic
from .adapter_state import load_into, saved_part
from .optim import full_optimizer_state

# The state a checkpoint holds when the engine has it: (the engine's attribute, its file).
OPTIONAL_STATE = (("lr_scheduler", LR_SCHEDULER_FILE), ("grad_scaler", GRAD_SCALER_FILE))


class FullCheckpointState:
    """An engine's checkpoint state as whole tensors (see the module); a mixin of
    :class:`~.base.CatwalkEngine`, over Tango's engine (its model, optimizer, scheduler)."""

    model: Any
    optimizer: Any
    train_config: Any
    lr_scheduler: Any
    grad_scaler: Any
    get_model_state: Any

    checkpoint_format = "full"

    def full_model_state(self) -> dict[str, torch.Tensor] | None:
        """The whole model's state dict on rank 0 (None elsewhere); of a model that trains an
        adapter, the adapter's weights. Collective."""
        if distributed_position()[0] != 0:
            return None
        return saved_part(self.get_model_state())

    def full_optimizer_state(self) -> dict | None:
        """The whole optimizer state on rank 0 (None elsewhere). Collective."""
        return full_optimizer_state(self.optimizer)

    def load_full_model_state(self, state: dict[str, torch.Tensor]) -> None:
        wrapped = self.model.module if self.train_config.is_distributed else self.model
        load_into(cast(torch.nn.Module, wrapped), state)  # DDP's module, or the model itself

    def load_full_optimizer_state(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)

    def save_state(self, directory: Path) -> None:
        """Model, optimizer, LR scheduler and grad scaler into `directory`. Collective."""
        model_state = self.full_model_state()
        optimizer_state = self.full_optimizer_state()
        if distributed_position()[0] != 0:
            return
        torch_save_atomic(model_state, directory / MODEL_FILE)
        torch_save_atomic(optimizer_state, directory / OPTIMIZER_FILE)
        for key, name in OPTIONAL_STATE:
            if getattr(self, key) is not None:
                torch_save_atomic(getattr(self, key).state_dict(), directory / name)

    def read_state(self, directory: Path) -> dict[str, Any]:
        """Reads what :meth:`save_state` wrote, without applying it (no collectives), so that a
        damaged file fails on its own rank before any rank starts loading."""
        return read_full_state(directory)

    def apply_state(self, payload: dict[str, Any]) -> None:
        """Loads what :meth:`read_state` read onto this rank (its shard, where it is sharded)."""
        self.load_full_model_state(payload["model"])
        self.load_full_optimizer_state(payload["optimizer"])
        for key, _ in OPTIONAL_STATE:
            if getattr(self, key) is not None and key in payload:
                getattr(self, key).load_state_dict(payload[key])

    def load_state(self, directory: Path) -> None:
        self.apply_state(self.read_state(directory))


def read_full_state(directory: Path) -> dict[str, Any]:
    """The files :meth:`FullCheckpointState.save_state` wrote, read as data."""
    payload = {
        "model": load_file(directory / MODEL_FILE),
        "optimizer": load_file(directory / OPTIMIZER_FILE),
    }
    for key, name in OPTIONAL_STATE:
        if (directory / name).is_file():
            payload[key] = load_file(directory / name)
    return payload
