"""What every catwalk engine adds to Tango's (:class:`CatwalkEngine`): one constructor and one
set of checks, one precision setting, activation checkpointing (of the model's blocks, or of
modules chosen by regex), a clear stop on a non-finite loss, and CPU threads shared fairly
between ranks.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

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
from tango.integrations.torch.util import move_to_device

from ..distributed.devices import usable_cores
from ..distributed.groups import cuda_device_for, init_process_group
from ..errors import one_line_error
from ..module_names import compile_patterns
from ..settings import DEFAULT_PRECISION, Precision
from .full_state import FullCheckpointState
from .train_config import local_world_size
from .wrapping import NOTHING_TO_RECOMPUTE, checkpoint_activations, select_modules

KEY = "training_engine"  # the config key engines are given under


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


class CatwalkEngine(FullCheckpointState, TorchTrainingEngine):
    """What every catwalk engine shares: its constructor, its checks, one precision setting,
    activation checkpointing, a clear stop on a non-finite loss, CPU threads shared between
    ranks, and checkpoint state the same whatever the number of ranks.

    The engines are Tango engines, but built here, not by Tango's constructors: those start a
    process group of their own (and FairScale's refuses a single worker). An engine adds its own
    keys in its own constructor, which passes them on as `own_keys` (checked here with the rest)
    and its own rules in :meth:`check_params`, which the graph-build checks call too
    (:meth:`catwalk_steps.settings.EngineSettings.check`).
    """

    shards: bool = False  # each rank holds a shard of the parameters (FSDP)
    needs_process_group: bool = False  # sharded engines need one even for a single worker

    def __init__(
        self,
        train_config: TrainConfig,
        model: Lazy[Model],
        optimizer: Lazy[Optimizer],
        *,
        lr_scheduler: Lazy[LRScheduler] | None = None,
        precision: str = DEFAULT_PRECISION,
        max_grad_norm: float | None = None,
        modules_to_wrap: list[str] | None = None,
        activation_checkpointing: bool = False,
        cpu_threads: int | None = None,
        inner_modules: list[str] | None = None,
        own_keys: Mapping[str, Any] | None = None,
    ) -> None:
        given = {
            "precision": precision,
            "max_grad_norm": max_grad_norm,
            "modules_to_wrap": modules_to_wrap,
            "activation_checkpointing": activation_checkpointing,
        }
        self.check_params({**given, **(own_keys or {})}, KEY)
        self.precision = Precision.parse(precision, f"{KEY}.precision")
        self.precision.check_device(train_config.device_type, f"{KEY}.precision")
        # None (left out): the model's own blocks; []: no inner module, on purpose.
        self.modules_to_wrap = None if modules_to_wrap is None else list(modules_to_wrap)
        self.activation_checkpointing = activation_checkpointing
        # The modules to wrap or recompute as the job matched them once (on node 0): an argument
        # the job supplies, never a config key; None (an engine built alone): this model's.
        self.chosen_modules = None if inner_modules is None else list(inner_modules)
        if train_config.device_type == "cpu":
            ranks = local_world_size(train_config)
            torch.set_num_threads(cpu_threads or default_cpu_threads(ranks))
        self.device = train_config.worker_local_default_device
        self.max_grad_norm = max_grad_norm
        self.grad_scaler = None
        self.before_model(train_config)
        ensure_process_group(train_config, always=self.needs_process_group)
        # Tango's own: builds the model (`_construct_model`: `wrapped_model`), the optimizer and
        # the scheduler.
        TrainingEngine.__init__(self, train_config, model, optimizer, lr_scheduler=lr_scheduler)
        if self.precision.needs_grad_scaler:
            self.grad_scaler = self.make_grad_scaler()

    @classmethod
    def check_params(cls, params: Mapping[str, Any], key: str) -> None:
        """The engine's keys as given (a config's, or the constructor's), each rule here once:
        a precision, regexes that compile, something to recompute, a positive clipping norm."""
        Precision.parse(params.get("precision", DEFAULT_PRECISION), f"{key}.precision")
        patterns = params.get("modules_to_wrap")  # None (left out): the model's own blocks
        if patterns is not None and (
            not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns)
        ):
            raise ConfigurationError(f"{key}.modules_to_wrap: a list of regexes, got {patterns!r}")
        compile_patterns(patterns or [], f"{key}.modules_to_wrap")
        if params.get("activation_checkpointing") and patterns == []:
            raise ConfigurationError(NOTHING_TO_RECOMPUTE)
        norm = params.get("max_grad_norm")
        number = isinstance(norm, (int, float)) and not isinstance(norm, bool)
        if norm is not None and not (number and math.isfinite(norm) and norm > 0):
            raise ConfigurationError(f"{key}.max_grad_norm: a number > 0, got {norm!r}")

    @classmethod
    def check_model(
        cls, model: torch.nn.Module, inner: list[str] | None, recomputes: bool, key: str
    ) -> None:
        """What the engine cannot do with this model (its skeleton; `inner`: the modules it
        wraps or recomputes, None when it chooses none), known before any step runs."""

    def before_model(self, train_config: TrainConfig) -> None:
        """What must hold before the process group and the model exist (FairScale's CPU layer)."""

    def make_grad_scaler(self) -> Any:
        """The gradient scaler of fp16 training (FairScale has its own)."""
        return torch.amp.GradScaler("cuda")

    def _construct_model(self, model: Model | Lazy[Model]) -> Model:
        return self.wrapped_model(model)  # Tango's private hook, overridden here only

    def wrapped_model(self, model: Model | Lazy[Model]) -> Model:
        """The model built (:meth:`built_model`, or a skeleton of its own) and wrapped as this
        engine runs it (on its device; DDP, or FSDP units of :meth:`inner_modules`)."""
        raise NotImplementedError

    def built_model(self, model: Model | Lazy[Model]) -> Model:
        """Constructs the model on CPU and turns on activation checkpointing where asked."""
        if isinstance(model, Lazy):
            model = model.construct()
        self._checkpoint_activations(model)
        return model

    def inner_modules(self, model: Model) -> list[str]:
        """The modules to wrap or recompute, deepest first: those the job chose (matched once,
        on node 0), else :func:`select_modules` of this model."""
        if self.chosen_modules is not None:
            return list(self.chosen_modules)
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
        return outputs["loss"] / num_micro_batches, outputs

    def check_loss(self, loss: torch.Tensor, step: int) -> None:
        """A NaN or infinite loss stops training before it corrupts the weights, in one line
        naming the step (1-based: the loop's count, given) and the likely cause."""
        if not torch.isfinite(loss):
            clipping = self.max_grad_norm is not None
            raise NonFiniteLossError(
                non_finite_loss_message(step, loss.item(), self.precision, clipping)
            )

    @contextlib.contextmanager
    def generating(self) -> Iterator[Callable[[dict[str, Any]], dict[str, Any]]]:
        """The forward of many evaluation forwards in a row, with no backward between them (a
        rollout's decoding steps): :meth:`forward_eval`, here; a sharded engine may keep what
        it gathers from one to the next (FSDP2)."""
        yield self.forward_eval

    def forward_eval(self, batch: dict[str, Any], model: Any = None) -> dict[str, Any]:
        """A forward without gradients of the model (or of a frozen one: `frozen_model`)."""
        # no_grad, not inference_mode: sharded engines gather parameters into tensors that
        # training uses again, and inference tensors cannot be used in autograd afterwards.
        batch = move_to_device(batch, self.device)
        with torch.no_grad(), self.precision.autocast(self.train_config.device_type):
            return (self.model if model is None else model)(**batch)


def frozen(model: Model) -> Model:
    """`model` frozen (an engine's `frozen_model`: GRPO's reference): no parameter requires
    gradients; eval mode (no dropout)."""
    model.requires_grad_(False)
    return model.eval()


def frozen_units(model: Model, modules_to_wrap: list[str] | None) -> list[str]:
    """A frozen model's inner units under a sharded engine, deepest first: its own, by the
    engine's `modules_to_wrap` (the job matched the policy's, which it may not share)."""
    return select_modules(model, modules_to_wrap, "training_engine.modules_to_wrap")


def default_cpu_threads(local_ranks: int) -> int:
    """Torch threads per CPU rank: one, or the `OMP_NUM_THREADS` the user set, at most the cores
    shared between this machine's ranks. One (bench/threads.py, docs/results.md#cpu-threads):
    on 2 cores the demos' model gains 14% from a second thread when nothing else runs, and is
    1.8-2.2x slower on two when other processes take cores (OpenMP's threads spin at every op,
    waiting for the one that lost its core); a model of millions of parameters gains 1.7-1.8x
    from two quiet cores and loses 1.1-1.7x on busy ones. A machine of one's own:
    `cpu_threads` or OMP_NUM_THREADS."""
    share = max(1, usable_cores() // local_ranks)
    asked = os.environ.get("OMP_NUM_THREADS", "")
    if asked.isdigit() and int(asked) > 0:
        return min(share, int(asked))
    return 1
