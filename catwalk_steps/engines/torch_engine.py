"""DDP (or a single process) with the catwalk additions: `catwalk::torch`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from tango.common import Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model, TrainingEngine

from .base import CatwalkEngine, frozen


@TrainingEngine.register("catwalk::torch")
class CatwalkTorchEngine(CatwalkEngine):
    """Tango's `torch` engine (DDP when `device_count` > 1) with one `precision` setting.

    :param precision: "fp32", "bf16" (autocast; CPU or CUDA) or "fp16" (CUDA, with a grad scaler).
    :param max_grad_norm: clip gradients to this global norm.
    :param modules_to_wrap: the modules to checkpoint (only with activation_checkpointing; DDP
        has no inner wrappers): left out, the model's blocks; else regexes.
    :param activation_checkpointing: recompute the matched modules' activations in backward.
    :param cpu_threads: torch threads per rank on CPU; default: 1, or `OMP_NUM_THREADS` when
        it is set, at most the cores shared between ranks (more threads are faster only for a
        model of millions of parameters on cores nothing else uses).
    """

    @classmethod
    def check_params(cls, params: Mapping[str, Any], key: str) -> None:
        super().check_params(params, key)
        if params.get("modules_to_wrap") and not params.get("activation_checkpointing"):
            raise ConfigurationError(
                f"{key}.modules_to_wrap: DDP wraps no inner modules; set activation_checkpointing "
                "or use catwalk::fairscale / catwalk::torch_fsdp"
            )

    def wrapped_model(self, model: Model | Lazy[Model]) -> Model:
        model = self.built_model(model)
        model.to(self.train_config.worker_local_default_device)
        if self.train_config.is_distributed:
            # Gradients live in DDP's communication buckets instead of beside them: one copy
            # of the gradients instead of two.
            ddp = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
            model = cast(Model, ddp)
        return model

    def frozen_model(self, model: Lazy[Model]) -> Model:
        """A model that never trains (GRPO's reference), frozen (:func:`.base.frozen`: in no
        optimizer), on the worker's device, unwrapped: DDP refuses a module with nothing to
        train, and a frozen one has no gradients to reduce. (The sharded engines shard it as
        they shard the policy.)"""
        return frozen(model.construct().to(self.device))
