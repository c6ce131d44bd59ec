"""What every catwalk engine adds to Tango's: one precision setting, activation checkpointing
by regex, a clear stop on a non-finite loss, and CPU threads shared fairly between ranks.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

import torch
from tango.common import Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model, TrainConfig
from tango.integrations.torch.util import move_to_device

from ..precision import Precision
from ..wrapping import checkpoint_activations, match_modules


def destroy_process_group_if_initialized() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; continuing would only corrupt the weights."""


def non_finite_loss_message(step: int, loss: float, precision: Precision, clipping: bool) -> str:
    if precision.name == "fp16":
        cause = "fp16 overflow is the usual cause: use precision bf16, or lower the learning rate"
    elif clipping:
        cause = "the usual cause is a learning rate too high for this model"
    else:
        cause = "usual causes: a learning rate too high for this model, or no max_grad_norm"
    return f"training step {step}: loss is {loss} ({cause})"


class CatwalkEngineMixin:
    """Behaviour shared by the catwalk engines; mixed in before a Tango `TrainingEngine`."""

    train_config: TrainConfig

    def _configure(
        self,
        train_config: TrainConfig,
        precision: str,
        modules_to_wrap: list[str] | None,
        activation_checkpointing: bool,
        cpu_threads: int | None,
    ) -> None:
        self.precision = Precision.parse(precision, "training_engine.precision")
        self.precision.check_device(train_config.device_type, "training_engine.precision")
        self.modules_to_wrap = list(modules_to_wrap or [])
        self.activation_checkpointing = activation_checkpointing
        if activation_checkpointing and not self.modules_to_wrap:
            raise ConfigurationError(
                "training_engine.activation_checkpointing: name the modules in 'modules_to_wrap'"
            )
        self.steps_taken = 0
        if train_config.is_distributed:
            # Tango's workers exit with the process group alive; tearing it down first lets its
            # communication threads end before the interpreter does.
            atexit.register(destroy_process_group_if_initialized)
        if train_config.device_type == "cpu":
            # N ranks on one machine each spinning all cores' worth of threads slow each other down.
            share = max(1, (os.cpu_count() or 1) // train_config.world_size)
            torch.set_num_threads(cpu_threads or share)

    def _build_model(self, model: Model | Lazy[Model]) -> Model:
        """Constructs the model on CPU and turns on activation checkpointing where asked."""
        if isinstance(model, Lazy):
            model = model.construct()
        if self.activation_checkpointing:
            for name in match_modules(model, self.modules_to_wrap):
                checkpoint_activations(model.get_submodule(name))
        return model

    def forward_train(
        self, micro_batch: dict[str, Any], micro_batch_idx: int, num_micro_batches: int
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        if micro_batch_idx == 0:
            self.optimizer.zero_grad(set_to_none=True)
        micro_batch = move_to_device(micro_batch, self.device)
        with self.precision.autocast(self.train_config.device_type):
            outputs = self.model(**micro_batch)
        loss = outputs["loss"]
        if not torch.isfinite(loss):
            clipping = getattr(self, "max_grad_norm", None) is not None
            step = self.steps_taken + 1
            raise NonFiniteLossError(
                non_finite_loss_message(step, loss.item(), self.precision, clipping)
            )
        return loss / num_micro_batches, outputs

    def forward_eval(self, batch: dict[str, Any]) -> dict[str, Any]:
        # no_grad, not inference_mode: sharded engines gather parameters into tensors that
        # training uses again, and inference tensors cannot be used in autograd afterwards.
        batch = move_to_device(batch, self.device)
        with torch.no_grad(), self.precision.autocast(self.train_config.device_type):
            return self.model(**batch)

    def step(self) -> None:
        super().step()  # type: ignore[misc]
        self.steps_taken += 1

    def load_checkpoint(self, checkpoint_dir) -> dict[str, Any]:
        state = super().load_checkpoint(checkpoint_dir)  # type: ignore[misc]
        self.steps_taken = state["training_steps"]
        return state
