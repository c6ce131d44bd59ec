"""FairScale FullyShardedDataParallel with the model's blocks (or modules chosen by regex) as
inner units: `catwalk::fairscale`.

Also the model constructor `catwalk::with_wrapped_modules`, for configs that wrap inside the model
block (Tango's `fairscale::with_wrapped_modules` is bound to it too:
:mod:`catwalk_steps.tango_fixes.names`).
"""

import contextlib
import logging
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP
from fairscale.optim.grad_scaler import ShardedGradScaler
from tango.common import Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.fairscale import FairScaleTrainingEngine, FSDPConfig
from tango.integrations.torch import Model, Optimizer, TrainConfig, TrainingEngine

from ..distributed.groups import distributed_position
from ..settings import Precision
from .adapter_state import adapter_units, load_into, saved_part
from .base import CatwalkEngine, frozen, frozen_units
from .fairscale_cpu import use_worker_device
from .fairscale_frozen import patch_frozen_units, release_frozen_units
from .mixed_precision import fairscale_flags
from .wrapping import (
    check_uniform_units,
    checkpoint_activations,
    match_modules,
    wrap_modules,
)

# FairScale 0.4.13 calls APIs that torch deprecates (TypedStorage, the private collectives);
# every rank warned at every run, and there is nothing a user can do about it.
for _message in (
    "TypedStorage is deprecated",
    r"`torch\.distributed\._(all_gather|reduce_scatter)_base`",
):
    warnings.filterwarnings("ignore", message=_message)


ADAPTER_RECOMPUTATION = (
    "training_engine.activation_checkpointing: FairScale cannot recompute blocks whose adapter "
    "layers are FSDP units of their own (its units' state breaks in backward); use "
    "catwalk::torch_fsdp or catwalk::torch with adapters, or leave activation_checkpointing off"
)


@TrainingEngine.register("catwalk::fairscale")
class CatwalkFairScaleEngine(CatwalkEngine, FairScaleTrainingEngine):
    """FairScale FSDP: parameters, gradients and optimizer state sharded across ranks.

    :param precision: "fp32", "bf16" (FSDP computes in bf16; CPU or CUDA) or "fp16" (CUDA, with
        FairScale's sharded grad scaler). Maps to autocast and to FSDP's mixed-precision flags.
    :param modules_to_wrap: the inner modules that become FSDP units of their own. Left out:
        the model's repeated blocks (the classes in its `_no_split_modules`, e.g. `GPT2Block`);
        regexes choose others (`["transformer\\.h\\.[0-9]+"]`); `[]` the root alone. Only one
        unit's full parameters then exist at a time; with the root alone, FSDP gathers the whole
        model for every forward and saves no memory.
    :param activation_checkpointing: also recompute the wrapped modules' activations in backward.
    :param fsdp_config: Tango's FSDP options (`reshard_after_forward`, `move_params_to_cpu`, ...);
        leave its `mixed_precision` unset and use `precision`.
    :param max_grad_norm: clip gradients to this global norm (computed across shards).
    :param cpu_threads: torch threads per rank on CPU; default: 1, or `OMP_NUM_THREADS` when
        it is set, at most the cores shared between ranks (more threads are faster only for a
        model of millions of parameters on cores nothing else uses).

    Every unit computes on the worker's device; on CPU workers (also on a GPU machine),
    :mod:`~catwalk_steps.engines.fairscale_cpu` lets FSDP run with gloo. A single worker
    (`device_count: 1`) gets a one-process group: FSDP on one GPU still gives mixed precision
    and CPU offload.
    """

    shards = True
    needs_process_group = True

    def __init__(
        self,
        train_config: TrainConfig,
        model: Lazy[Model],
        optimizer: Lazy[Optimizer],
        *,
        fsdp_config: FSDPConfig | None = None,
        **common: Any,  # CatwalkEngine's keys
    ) -> None:
        self.fsdp_config = fsdp_config or FSDPConfig()
        self.logger = logging.getLogger(type(self).__name__)
        own_keys = {"fsdp_config": fsdp_config}
        super().__init__(train_config, model, optimizer, own_keys=own_keys, **common)

    @classmethod
    def check_params(cls, params: Mapping[str, Any], key: str) -> None:
        super().check_params(params, key)
        fsdp_config = params.get("fsdp_config") or {}
        if isinstance(fsdp_config, FSDPConfig):
            mixed = fsdp_config.mixed_precision
        else:
            mixed = bool(dict(fsdp_config).get("mixed_precision"))
        if mixed:
            raise ConfigurationError(
                f"{key}.fsdp_config.mixed_precision: set 'precision' (fp16 or bf16) on the "
                "engine instead; it sets FSDP's flags and autocast together"
            )

    @classmethod
    def check_model(
        cls, model: torch.nn.Module, inner: list[str] | None, recomputes: bool, key: str
    ) -> None:
        """The units it would wrap (:func:`arranged_units`), refused before any step runs."""
        arranged_units(model, inner or [], recomputes, key)

    def before_model(self, train_config: TrainConfig) -> None:
        # Before any FSDP unit exists: where units compute, and the CPU layer on CPU workers.
        use_worker_device(train_config.worker_local_default_device)

    def make_grad_scaler(self) -> Any:
        return ShardedGradScaler()

    def fsdp_kwargs(self) -> dict:
        return {
            **self.fsdp_config.as_kwargs(),
            **fairscale_flags(self.precision),
            "compute_device": self.train_config.worker_local_default_device,
        }

    def wrapped_model(self, model: Model | Lazy[Model]) -> Model:
        # Order matters. Activation checkpointing goes inside the FSDP units (in `built_model`),
        # so recomputation runs while the unit's full parameters are gathered. Inner units are
        # wrapped children first, then the root, which keeps only what no unit claimed
        # (embeddings, final norm): that is what lets sharding lower peak memory.
        model = self.built_model(model)
        check_inner_units_precision(model, self.precision)
        # A model block that wrapped units itself (catwalk::with_wrapped_modules) has chosen
        # them: the model's blocks are then not wrapped a second time.
        wrapped_by_model_block = self.modules_to_wrap is None and has_fsdp_units(model)
        names = [] if wrapped_by_model_block else self.inner_modules(model)
        names = arranged_units(model, names, self.activation_checkpointing, "training_engine")
        return self.sharded(model, names)

    def frozen_model(self, model: Lazy[Model]) -> Model:
        """A model that never trains, wrapped as the policy is (its blocks, or the modules
        `modules_to_wrap` matches, as units, then the root), frozen before FairScale flattens
        its units' parameters: every flat parameter frozen too."""
        module = frozen(model.construct())
        return frozen(self.sharded(module, frozen_units(module, self.modules_to_wrap)))

    def sharded(self, model: Model, units: list[str]) -> Model:
        """`model` on the worker's device (unless its parameters live on CPU), each of `units`
        an FSDP unit (children first), then the root, which keeps what no unit claimed."""
        if not self.fsdp_config.move_params_to_cpu:
            model.to(self.train_config.worker_local_default_device)
        wrap_modules(model, units, lambda module: FSDP(module, **self.fsdp_kwargs()))
        return FSDP(model, **self.fsdp_kwargs())

    # Checkpoints hold the consolidated model and optimizer state (FairScale gathers them on
    # every rank, rank 0 keeps them), so a run resumes on any device_count.

    def full_model_state(self) -> dict[str, torch.Tensor] | None:
        release_frozen_units(self.model)
        state = self.model.state_dict()  # collective: every rank gathers the full parameters
        return saved_part(state) if distributed_position()[0] == 0 else None

    def full_optimizer_state(self) -> dict | None:
        patch_frozen_units()
        fsdp: Any = self.model  # FairScale's FullyShardedDataParallel (untyped)
        with gather_buffers_at_world_size_one(self.model):
            state = fsdp.gather_full_optim_state_dict(self.optimizer)  # collective
        restore_step_tensors(self.optimizer)
        return state

    def load_full_model_state(self, state: dict[str, torch.Tensor]) -> None:
        initialize_fsdp_units(self.model)
        load_into(self.model, state)

    def load_full_optimizer_state(self, state: dict) -> None:
        initialize_fsdp_units(self.model)
        fsdp: Any = self.model  # FairScale's FullyShardedDataParallel (untyped)
        self.optimizer.load_state_dict(fsdp.get_shard_from_optim_state_dict(state))


def arranged_units(
    model: torch.nn.Module, inner: list[str], recomputes: bool, key: str
) -> list[str]:
    """The inner units FairScale wraps, deepest first: `inner` and, in a model that trains an
    adapter, each adapter layer as a unit of its own inside its block's (FairScale flattens a
    unit's parameters into one, all trained or all frozen; every unit is checked). FairScale
    cannot recompute a block holding such units: with `recomputes`, refused in one line."""
    adapters = [name for name in adapter_units(model) if name not in inner]
    if adapters and recomputes:
        raise ConfigurationError(ADAPTER_RECOMPUTATION)
    units = [*adapters, *inner]
    check_uniform_units(model, units, f"{key}.modules_to_wrap")
    return units


@contextlib.contextmanager
def gather_buffers_at_world_size_one(model: torch.nn.Module) -> Iterator[None]:
    """Let `gather_full_optim_state_dict` run in a one-process group.

    FairScale 0.4.13 sizes its gather buffer like each flat parameter's `_full_param_padded`,
    which it only creates for sharded parameters (world size > 1): at world size 1 the gather
    fails with "'FlatParameter' object has no attribute '_full_param_padded'". An unsharded
    parameter's full size is its own; a meta tensor of that size stands in (only its size is
    read) for the duration of the gather.
    """
    added = []
    for unit in model.modules():
        if isinstance(unit, FSDP):
            for param in unit.params:
                if not hasattr(param, "_full_param_padded"):
                    param._full_param_padded = torch.empty(param.numel(), device="meta")
                    added.append(param)
    try:
        yield
    finally:
        for param in added:
            del param._full_param_padded


def restore_step_tensors(optimizer: torch.optim.Optimizer) -> None:
    """Undo FairScale's in-place change of the live optimizer state while gathering it.

    `gather_full_optim_state_dict` (fairscale 0.4.13) turns each parameter's `step` into a
    Python float in the dicts it shares with `optimizer.state`; torch's Adam-family optimizers
    (torch >= 1.12) then fail at the next step ("`state_steps` argument must contain a list of
    singleton tensors"). The saved copy may keep floats: `load_state_dict` converts them.
    """
    for state in optimizer.state.values():
        step = state.get("step")
        if step is not None and not torch.is_tensor(step):
            state["step"] = torch.tensor(float(step), dtype=torch.float32)


def initialize_fsdp_units(model: torch.nn.Module) -> None:
    """Sets up every FSDP unit's parameter buffers, as its first forward would.

    FairScale 0.4.13 does this lazily, so resuming nested FSDP from a checkpoint (before any
    forward) fails in `load_local_state_dict` with "'FlatParameter' object has no attribute
    '_full_param_padded'". `_lazy_init` is private; checked against fairscale 0.4.13. The root
    comes first in `modules()`: it marks the others as non-root and shares its streams.
    """
    for module in model.modules():
        if isinstance(module, FSDP):
            module._lazy_init()


def has_fsdp_units(model: torch.nn.Module) -> bool:
    return any(isinstance(module, FSDP) for module in model.modules())


def check_inner_units_precision(model: torch.nn.Module, precision: Precision) -> None:
    """FSDP units created by a model constructor must use the engine's precision."""
    expected = fairscale_flags(precision)
    for name, module in model.named_modules():
        if not isinstance(module, FSDP):
            continue
        compute = module.compute_dtype if module.mixed_precision else None
        if module.mixed_precision != expected["mixed_precision"] or (
            module.mixed_precision and compute != expected["compute_dtype"]
        ):
            raise ConfigurationError(
                f"model: FSDP unit '{name}' was wrapped with mixed_precision="
                f"{module.mixed_precision} ({compute}); the engine's precision is "
                f"{precision.name}. Wrap with the engine's modules_to_wrap instead, or remove "
                "fsdp_config.mixed_precision from the model block"
            )


def with_wrapped_modules(
    model: Model,
    modules_to_wrap: list[str],
    fsdp_config: FSDPConfig | None = None,
    activation_checkpointing: bool = False,
) -> Model:
    """Wraps inner modules of `model`, chosen by regex, at construction.

    Same parameters as Tango's `fairscale::with_wrapped_modules`, with catwalk's matching: a
    deterministic children-first order, an error listing the closest names for a pattern that
    matches nothing, and non-reentrant activation checkpointing that works under autocast.
    FSDP wrapping happens only inside a process group (as in Tango).
    """
    names = match_modules(model, modules_to_wrap)
    if activation_checkpointing:
        for name in names:
            checkpoint_activations(model.get_submodule(name))
    if fsdp_config is not None and torch.distributed.is_initialized():
        # The units compute on the worker's device, which the engine has set (fairscale_cpu).
        wrap_modules(model, names, fsdp_config.wrap)
    return model


# Tango registers a function as a constructor too; its annotation says a class.
Model.register("catwalk::with_wrapped_modules")(with_wrapped_modules)  # type: ignore[arg-type]
