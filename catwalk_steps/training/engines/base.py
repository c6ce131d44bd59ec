"""What every catwalk engine adds to Tango's: one precision setting, activation checkpointing
(of the model's blocks, or of modules chosen by regex), a clear stop on a non-finite loss, and
CPU threads shared fairly between ranks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from tango.common import Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import LRScheduler, Model, Optimizer, TrainConfig, TrainingEngine
from tango.integrations.torch.util import move_to_device

from ...distributed.groups import cuda_device_for, distributed_position, init_process_group
from ...errors import one_line_error
from ...files import torch_save_atomic
from ...scoring.precision import Precision
from ..checkpoints.layout import (
    GRAD_SCALER_FILE,
    LR_SCHEDULER_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
)
from ..checkpoints.state import load_file
from ..optim import full_optimizer_state
from ..train_config import local_world_size
from ..wrapping import NOTHING_TO_RECOMPUTE, checkpoint_activations, select_modules


@one_line_error
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


def ensure_process_group(train_config: TrainConfig, always: bool) -> None:
    """Checks the process group the launcher started (:mod:`catwalk_steps.launch`); with
    `always`, a single worker gets a one-process group of its own: sharded engines need one."""
    cuda_device_for(train_config.worker_local_default_device)
    if torch.distributed.is_initialized():
        if torch.distributed.get_world_size() != train_config.world_size:
            raise RuntimeError(
                f"process group of {torch.distributed.get_world_size()} ranks, but the training "
                f"config says {train_config.world_size}"
            )
        return
    if train_config.is_distributed:
        raise RuntimeError(
            f"{train_config.world_size} ranks but no process group: catwalk engines train "
            "under catwalk::train, whose launcher starts the group"
        )
    if always:
        init_process_group(train_config.device_type, rank=0, world_size=1)


class CatwalkEngineMixin:
    """Behaviour shared by the catwalk engines; mixed in before a Tango `TrainingEngine`.

    The engines are Tango engines (`TorchTrainingEngine` and its subclasses), but they are built
    by :meth:`_start`, not by Tango's constructors: those start a process group of their own
    (and FairScale's refuses a single worker). What the mixin needs of the Tango engine:
    """

    train_config: TrainConfig
    model: Model
    optimizer: Optimizer
    lr_scheduler: LRScheduler | None
    grad_scaler: Any  # torch's or FairScale's grad scaler; None unless precision is fp16
    device: torch.device  # the worker's device, where the model lives and batches go
    max_grad_norm: float | None
    needs_process_group: bool = False  # sharded engines need one even for a single worker

    def _start(
        self,
        train_config: TrainConfig,
        model: Lazy[Model],
        optimizer: Lazy[Optimizer],
        lr_scheduler: Lazy[LRScheduler] | None,
        max_grad_norm: float | None,
    ) -> None:
        """What Tango's `TorchTrainingEngine.__init__` does, with our process-group rule; then
        Tango's `TrainingEngine.__init__` builds the model, optimizer and scheduler."""
        self.device = train_config.worker_local_default_device
        self.max_grad_norm = max_grad_norm
        self.grad_scaler = None
        ensure_process_group(train_config, always=self.needs_process_group)
        TrainingEngine.__init__(self, train_config, model, optimizer, lr_scheduler=lr_scheduler)  # type: ignore[arg-type]

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
        # None (left out): the model's own blocks; []: no inner module, on purpose.
        self.modules_to_wrap = None if modules_to_wrap is None else list(modules_to_wrap)
        self.activation_checkpointing = activation_checkpointing
        if activation_checkpointing and self.modules_to_wrap == []:
            raise ConfigurationError(NOTHING_TO_RECOMPUTE)
        self.steps_taken = 0
        if train_config.device_type == "cpu":
            ranks = local_world_size(train_config)
            torch.set_num_threads(cpu_threads or default_cpu_threads(ranks))

    def _build_model(self, model: Model | Lazy[Model]) -> Model:
        """Constructs the model on CPU and turns on activation checkpointing where asked."""
        if isinstance(model, Lazy):
            model = model.construct()
        self._checkpoint_activations(model)
        return model

    def inner_modules(self, model: Model) -> list[str]:
        """The modules to wrap or recompute, deepest first (:func:`select_modules`)."""
        return select_modules(model, self.modules_to_wrap, "training_engine.modules_to_wrap")

    def _checkpoint_activations(self, model: Model) -> None:
        """Recompute the selected modules' activations in backward, where asked."""
        if self.activation_checkpointing:
            for name in self.inner_modules(model):
                checkpoint_activations(model.get_submodule(name))

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
            clipping = self.max_grad_norm is not None
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

    # --- Checkpoint state, the same whatever the number of ranks --------------------------------
    # A checkpoint holds the whole model and the whole optimizer state (consolidated where they
    # are sharded), so a run can resume on another device_count. Every rank calls save_state and
    # load_state; only rank 0 writes. FSDP2 overrides both with sharded DCP checkpoints.

    checkpoint_format = "full"

    def full_model_state(self) -> dict[str, torch.Tensor] | None:
        """The whole model's state dict on rank 0 (None elsewhere). Collective."""
        return self.get_model_state() if distributed_position()[0] == 0 else None  # type: ignore[attr-defined]

    def full_optimizer_state(self) -> dict | None:
        """The whole optimizer state on rank 0 (None elsewhere). Collective."""
        return full_optimizer_state(self.optimizer)

    def load_full_model_state(self, state: dict[str, torch.Tensor]) -> None:
        self.load_model_state(state)  # type: ignore[attr-defined]

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
        if self.lr_scheduler is not None:
            torch_save_atomic(self.lr_scheduler.state_dict(), directory / LR_SCHEDULER_FILE)
        if self.grad_scaler is not None:
            torch_save_atomic(self.grad_scaler.state_dict(), directory / GRAD_SCALER_FILE)

    def read_state(self, directory: Path) -> dict[str, Any]:
        """Reads what :meth:`save_state` wrote, without applying it (no collectives), so that a
        damaged file fails on its own rank before any rank starts loading."""
        payload = {
            "model": load_file(directory / MODEL_FILE),
            "optimizer": load_file(directory / OPTIMIZER_FILE),
        }
        for key, name in (("lr_scheduler", LR_SCHEDULER_FILE), ("grad_scaler", GRAD_SCALER_FILE)):
            if (directory / name).is_file():
                payload[key] = load_file(directory / name)
        return payload

    def apply_state(self, payload: dict[str, Any]) -> None:
        """Loads what :meth:`read_state` read onto this rank (its shard, where it is sharded)."""
        self.load_full_model_state(payload["model"])
        self.load_full_optimizer_state(payload["optimizer"])
        if self.lr_scheduler is not None and "lr_scheduler" in payload:
            self.lr_scheduler.load_state_dict(payload["lr_scheduler"])
        if self.grad_scaler is not None and "grad_scaler" in payload:
            self.grad_scaler.load_state_dict(payload["grad_scaler"])

    def load_state(self, directory: Path) -> None:
        self.apply_state(self.read_state(directory))


def default_cpu_threads(local_ranks: int) -> int:
    """Torch threads per CPU rank: the cores shared between this machine's ranks (N ranks each
    spinning all cores' worth of threads slow each other down), at most OMP_NUM_THREADS when it
    is set (a scheduler's allocation, a shared machine)."""
    share = max(1, (os.cpu_count() or 1) // local_ranks)
    allowed = os.environ.get("OMP_NUM_THREADS", "")
    if allowed.isdigit() and int(allowed) > 0:
        share = min(share, int(allowed))
    return share
