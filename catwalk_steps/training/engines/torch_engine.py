"""DDP (or a single process) with the catwalk additions: `catwalk::torch`."""

from __future__ import annotations

from typing import cast

import torch
from tango.common import Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import (
    LRScheduler,
    Model,
    Optimizer,
    TorchTrainingEngine,
    TrainConfig,
    TrainingEngine,
)

from .base import CatwalkEngineMixin


@TrainingEngine.register("catwalk::torch")
class CatwalkTorchEngine(CatwalkEngineMixin, TorchTrainingEngine):
    """Tango's `torch` engine (DDP when `device_count` > 1) with one `precision` setting.

    :param precision: "fp32", "bf16" (autocast; CPU or CUDA) or "fp16" (CUDA, with a grad scaler).
    :param max_grad_norm: clip gradients to this global norm.
    :param modules_to_wrap: the modules to checkpoint (only with activation_checkpointing; DDP
        has no inner wrappers): left out, the model's blocks; else regexes.
    :param activation_checkpointing: recompute the matched modules' activations in backward.
    :param cpu_threads: torch threads per rank on CPU; default: the cores shared between ranks,
        at most `OMP_NUM_THREADS` when it is set.
    """

    def __init__(
        self,
        train_config: TrainConfig,
        model: Lazy[Model],
        optimizer: Lazy[Optimizer],
        *,
        lr_scheduler: Lazy[LRScheduler] | None = None,
        precision: str = "fp32",
        max_grad_norm: float | None = None,
        modules_to_wrap: list[str] | None = None,
        activation_checkpointing: bool = False,
        cpu_threads: int | None = None,
    ) -> None:
        if modules_to_wrap and not activation_checkpointing:
            raise ConfigurationError(
                "training_engine.modules_to_wrap: DDP wraps no inner modules; "
                "set activation_checkpointing or use catwalk::fairscale"
            )
        self._configure(
            train_config, precision, modules_to_wrap, activation_checkpointing, cpu_threads
        )
        self._start(train_config, model, optimizer, lr_scheduler, max_grad_norm)
        if self.precision.needs_grad_scaler:
            self.grad_scaler = torch.amp.GradScaler("cuda")

    def _construct_model(self, model: Model | Lazy[Model]) -> Model:
        model = self._build_model(model)
        model.to(self.train_config.worker_local_default_device)
        if self.train_config.is_distributed:
            # Gradients live in DDP's communication buckets instead of beside them: one copy
            # of the gradients instead of two.
            ddp = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
            model = cast(Model, ddp)
        return model
