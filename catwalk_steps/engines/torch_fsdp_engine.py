"""PyTorch's native FSDP2 (`fully_shard`) behind FairScale's config: `catwalk::torch_fsdp`.

Migrating from `catwalk::fairscale` means changing the engine's `type`: `precision`,
`modules_to_wrap`, `activation_checkpointing`, `max_grad_norm`, `cpu_threads` and the
`fsdp_config` keys that mean the same thing (`reshard_after_forward`, `move_params_to_cpu`) keep
their names; a FairScale option with no FSDP2 counterpart fails with a line saying what to use.

The model is built in the order torchtitan uses, for the reasons it gives:
1. the structure on the meta device, no weights (`RankClassifier(skeleton=True)`), so the full
   model never materialises on every rank;
2. activation checkpointing on the selected modules (the model's blocks, or regex matches),
   inside what becomes their FSDP unit, so recomputation runs while its parameters are gathered;
3. `fully_shard` on each selected module, children first, then on the root, which keeps only
   what no unit claimed (embeddings, final norm);
4. each rank allocates its shard, and rank 0, which alone builds the whole model (random init
   or pretrained weights, read once), scatters the weights shard by shard.
Checkpoints are sharded torch.distributed.checkpoint (DCP) directories: each rank writes its own
shard, nothing is gathered at save time, and DCP reshards when resuming on another device_count.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from tango.common import Lazy
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model, Optimizer, TrainConfig, TrainingEngine

from ..checkpoints.dcp_loading import check_entries, load_as_data
from ..checkpoints.dcp_metadata import single_process_quietly
from ..checkpoints.layout import (
    DCP_MODEL_DIR,
    DCP_OPTIMIZER_DIR,
    GRAD_SCALER_FILE,
    LR_SCHEDULER_FILE,
)
from ..checkpoints.state import load_file
from ..components import lazy_config
from ..distributed.groups import distributed_position
from ..files import torch_save_atomic
from ..scoring.rank_classifier import RankClassifier
from .adapter_state import saved_part, trains_adapter
from .base import CatwalkEngine, frozen, frozen_units
from .mixed_precision import fsdp2_policy
from .sharded_weights import read_own_rows

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule

# FairScale `fsdp_config` keys: what each means under FSDP2.
FSDP_CONFIG_KEYS = {"reshard_after_forward", "move_params_to_cpu", "move_grads_to_cpu"}
NO_COUNTERPART = {
    "mixed_precision": "set the engine's 'precision' (bf16 or fp16) instead",
    "flatten_parameters": "FSDP2 shards each parameter on its own; leave it out",
}


def offload_setting(fsdp_config: dict[str, Any]) -> bool:
    """FSDP2 offloads parameters, gradients and optimizer state together, or nothing."""
    unknown = set(fsdp_config) - FSDP_CONFIG_KEYS - set(NO_COUNTERPART)
    if unknown:
        raise ConfigurationError(
            f"training_engine.fsdp_config.{sorted(unknown)[0]}: not an FSDP2 option "
            f"(FSDP2 takes {', '.join(sorted(FSDP_CONFIG_KEYS))})"
        )
    for key, instead in NO_COUNTERPART.items():
        if fsdp_config.get(key):
            raise ConfigurationError(
                f"training_engine.fsdp_config.{key}: FSDP2 has no such option; {instead}"
            )
    params = bool(fsdp_config.get("move_params_to_cpu", False))
    grads = fsdp_config.get("move_grads_to_cpu")
    if grads is not None and bool(grads) != params:
        raise ConfigurationError(
            "training_engine.fsdp_config.move_grads_to_cpu: FSDP2 offloads parameters, "
            "gradients and optimizer state together; set move_params_to_cpu alone"
        )
    return params


@TrainingEngine.register("catwalk::torch_fsdp")
class CatwalkTorchFSDPEngine(CatwalkEngine):
    """PyTorch FSDP2: parameters, gradients and optimizer state sharded across ranks.

    :param precision: "fp32", "bf16" or "fp16" (CUDA): FSDP2's `MixedPrecisionPolicy` (gathered
        parameters in that dtype, gradients reduced in float32) and autocast.
    :param modules_to_wrap: the inner modules that become FSDP units of their own (children
        first); the root is always one. Left out: the model's repeated blocks (its
        `_no_split_modules`); regexes choose others; `[]` the root alone.
    :param activation_checkpointing: recompute the wrapped modules' activations in backward.
    :param fsdp_config: `reshard_after_forward` (default true: free each unit's gathered
        parameters after its forward, gather again for backward) and `move_params_to_cpu`
        (offload parameters, gradients and optimizer state to CPU memory: FSDP2's
        `CPUOffloadPolicy`; the optimizer step then runs on the CPU).
    :param max_grad_norm: clip gradients to this global norm (computed across shards).
    :param cpu_threads: torch threads per rank on CPU; default: 1, or `OMP_NUM_THREADS` when
        it is set, at most the cores shared between ranks (more threads are faster only for a
        model of millions of parameters on cores nothing else uses).

    Runs with NCCL on GPUs and gloo on CPU processes; one worker gets a one-process group.
    """

    shards = True
    needs_process_group = True
    checkpoint_format = "dcp"

    def __init__(
        self,
        train_config: TrainConfig,
        model: Lazy[Model],
        optimizer: Lazy[Optimizer],
        *,
        fsdp_config: dict[str, Any] | None = None,
        **common: Any,  # CatwalkEngine's keys
    ) -> None:
        fsdp_config = dict(fsdp_config or {})
        self.offload = offload_setting(fsdp_config)
        self.reshard_after_forward = bool(fsdp_config.get("reshard_after_forward", True))
        own_keys = {"fsdp_config": fsdp_config}
        super().__init__(train_config, model, optimizer, own_keys=own_keys, **common)

    @classmethod
    def check_params(cls, params: Mapping[str, Any], key: str) -> None:
        super().check_params(params, key)
        offload_setting(dict(params.get("fsdp_config") or {}))

    def fully_shard_kwargs(self) -> dict[str, Any]:
        from torch.distributed.fsdp import CPUOffloadPolicy

        kwargs: dict[str, Any] = {
            "reshard_after_forward": self.reshard_after_forward,
            "mp_policy": fsdp2_policy(self.precision),
        }
        if self.offload:
            # Pinned host memory needs an accelerator; on CPU workers offloading is a no-op.
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=self.device.type == "cuda")
        return kwargs

    def wrapped_model(self, model: Model | Lazy[Model]) -> Model:
        skeleton = build_skeleton(model)
        self._checkpoint_activations(skeleton)
        # The root is never resharded after its forward: the backward starts by gathering it
        # again, a second all-gather of the largest unit (embeddings, a tied LM head) whose
        # buffers were the training peak (FSDP2's own default for a root left unset).
        return self.sharded(skeleton, model, self.inner_modules(skeleton), reshard_root=False)

    def frozen_model(self, model: Lazy[Model]) -> Model:
        """A model that never trains, sharded as the policy is (its skeleton, `fully_shard` of
        its own blocks or the modules `modules_to_wrap` matches, then the root; filled as
        :func:`materialise` fills the policy), frozen: no recomputation (it has no backward)."""
        skeleton = build_skeleton(model)
        units = frozen_units(skeleton, self.modules_to_wrap)
        return frozen(self.sharded(skeleton, model, units, self.reshard_after_forward))

    def sharded(
        self, skeleton: Model, model: Model | Lazy[Model], units: list[str], reshard_root: bool
    ) -> Model:
        """`skeleton` (`model`'s structure on the meta device) sharded: `fully_shard` of each of
        `units` (deepest first), then of the root; each rank's shard allocated and filled with
        `model`'s weights (:func:`materialise`)."""
        from torch.distributed.fsdp import fully_shard

        kwargs = self.fully_shard_kwargs()
        for name in units:
            fully_shard(skeleton.get_submodule(name), **kwargs)
        fully_shard(skeleton, **{**kwargs, "reshard_after_forward": reshard_root})
        # Offloaded shards live in CPU memory; FSDP2 moves them to the device for compute.
        skeleton.to_empty(device="cpu" if self.offload else self.device)
        materialise(skeleton, model, self.device)
        return skeleton

    def forward_eval(self, batch: dict[str, Any], model: Any = None) -> dict[str, Any]:
        """An evaluation forward has no backward to reshard the root (see `wrapped_model`):
        it is resharded here, so the model holds its sharded parameters again (what the
        optimizer and the checkpoints refer to)."""
        try:
            return super().forward_eval(batch, model)
        finally:
            cast("FSDPModule", self.model if model is None else model).reshard()

    @contextlib.contextmanager
    def generating(self) -> Iterator[Callable[[dict[str, Any]], dict[str, Any]]]:
        """Many evaluation forwards in a row (a rollout's decoding steps): each unit keeps the
        parameters it gathers at its first forward until the last, instead of all-gathering
        them again for every token (TRL and veRL gather a sharded policy to generate too): the
        whole model's memory for that time, on each rank. Resharded after, each unit's
        `reshard_after_forward` as it was."""
        from torch.distributed.fsdp import FSDPModule

        units = [m for m in self.model.modules() if isinstance(m, FSDPModule)]
        for unit in units:
            unit.set_reshard_after_forward(False, recurse=False)
        try:
            yield functools.partial(CatwalkEngine.forward_eval, self)
        finally:
            for unit in units:
                unit.reshard()
                inner = unit is not self.model  # the root is never resharded after its forward
                unit.set_reshard_after_forward(inner and self.reshard_after_forward, recurse=False)

    # --- Checkpoints: sharded DCP directories -----------------------------------------------

    def state_options(self) -> Any:
        """The model state a checkpoint holds: of a model that trains an adapter, the adapter's
        weights alone (the frozen base is rebuilt from its source)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        adapter = trains_adapter(self.model)
        return StateDictOptions(ignore_frozen_params=adapter, strict=not adapter)

    def save_state(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        optimizer_state = get_optimizer_state_dict(self.model, self.optimizer)
        model_state = saved_part(get_model_state_dict(self.model, options=self.state_options()))
        with single_process_quietly():
            dcp.save(model_state, checkpoint_id=directory / DCP_MODEL_DIR)
            dcp.save(optimizer_state, checkpoint_id=directory / DCP_OPTIMIZER_DIR)
        if distributed_position()[0] != 0:
            return
        if self.lr_scheduler is not None:
            torch_save_atomic(self.lr_scheduler.state_dict(), directory / LR_SCHEDULER_FILE)
        if self.grad_scaler is not None:
            torch_save_atomic(self.grad_scaler.state_dict(), directory / GRAD_SCALER_FILE)

    def read_state(self, directory: Path) -> dict[str, Any]:
        # DCP reads the tensors inside the collective load; its metadata (a pickle) and every
        # entry it stores as bytes (torch.save blobs) are read here, as data, so that a planted
        # or damaged one is refused on its own rank before any rank loads.
        check_entries(directory / DCP_MODEL_DIR, tensors_only=True)
        check_entries(directory / DCP_OPTIMIZER_DIR)
        payload: dict[str, Any] = {"directory": directory}
        for key, name in (("lr_scheduler", LR_SCHEDULER_FILE), ("grad_scaler", GRAD_SCALER_FILE)):
            if (directory / name).is_file():
                payload[key] = load_file(directory / name)
        return payload

    def apply_state(self, payload: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        directory = payload["directory"]
        options = self.state_options()
        model_state = saved_part(get_model_state_dict(self.model, options=options))
        load_as_data(model_state, directory / DCP_MODEL_DIR)
        set_model_state_dict(self.model, model_state, options=options)
        # Asking for the optimizer state also creates it (empty AdamW state) to load into.
        optimizer_state = get_optimizer_state_dict(self.model, self.optimizer)
        load_as_data(optimizer_state, directory / DCP_OPTIMIZER_DIR)
        set_optimizer_state_dict(self.model, self.optimizer, optimizer_state)
        if self.lr_scheduler is not None and "lr_scheduler" in payload:
            self.lr_scheduler.load_state_dict(payload["lr_scheduler"])
        if self.grad_scaler is not None and "grad_scaler" in payload:
            self.grad_scaler.load_state_dict(payload["grad_scaler"])


def build_skeleton(model: Model | Lazy[Model]) -> Model:
    """The model's structure on the meta device: no memory for weights on any rank."""
    if not isinstance(model, Lazy):
        raise ConfigurationError("catwalk::torch_fsdp: the model must come from its config")
    constructor, _ = lazy_config(model, Model, "model")
    if isinstance(constructor, type) and issubclass(constructor, RankClassifier):
        return model.construct(skeleton=True)
    with torch.device("meta"):
        return model.construct()


def materialise(sharded: Model, model: Model | Lazy[Model], device: torch.device) -> None:
    """Fills every rank's shard with the model's weights.

    Weights saved in a local directory (safetensors) are read by each rank, its own rows only
    (:mod:`.sharded_weights`). Otherwise rank 0 constructs the whole model (random init from its
    seed, or pretrained weights from the hub, read once) and sends each rank its shard of each
    parameter, freeing the parameter once it is sent: the other ranks never hold more than
    their shards. Buffers, which FSDP2 does not shard, are broadcast whole, as tensors; those
    outside the state dict (rotary frequencies, say) too.
    """
    from torch.distributed.tensor import DTensor

    if isinstance(model, Lazy) and read_own_rows(sharded, model, device):
        return
    rank, world_size = distributed_position()
    whole = (model.construct() if isinstance(model, Lazy) else model) if rank == 0 else None
    full = whole.state_dict() if whole is not None else {}
    persistent_names = set(sharded.state_dict())
    extra = {n: b for n, b in whole.named_buffers() if n not in persistent_names} if whole else {}
    for name, target in sharded.state_dict().items():
        if rank == 0 and name not in full:
            raise RuntimeError(f"materialise: the whole model has no '{name}'")
        if isinstance(target, DTensor):
            scatter_rows(full.get(name), target.to_local(), rank, world_size)
        else:
            whole_tensor = full[name].to(target) if rank == 0 else torch.empty_like(target)
            dist.broadcast(whole_tensor, src=0)
            target.copy_(whole_tensor)
        if rank == 0:
            _release(cast(Model, whole), name)  # rank 0 built it; the module's reference too
            del full[name]
    del whole
    # Tensors, not objects: a collective carries data only (never a pickle).
    for name, target in sharded.named_buffers():
        if name not in persistent_names:
            value = extra[name].to(target) if rank == 0 else torch.empty_like(target)
            dist.broadcast(value, src=0)
            target.copy_(value)


def scatter_rows(whole: torch.Tensor | None, local: torch.Tensor, rank: int, world: int) -> None:
    """Rank 0's `whole` tensor split along dim 0 as FSDP2 shards it (`torch.chunk`: the last
    ranks may get fewer rows, or none); each rank receives its rows into `local`."""
    if rank == 0:
        assert whole is not None
        chunks = list(torch.chunk(whole.detach(), world, dim=0))
        for destination in range(1, world):
            if destination < len(chunks) and chunks[destination].numel():
                chunk = chunks[destination].to(device=local.device, dtype=local.dtype)
                dist.send(chunk.contiguous(), dst=destination)
        if local.numel():
            local.copy_(chunks[0])
    elif local.numel():
        dist.recv(local, src=0)


def _release(model: torch.nn.Module, name: str) -> None:
    owner_name, _, attribute = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    for store in (owner._parameters, owner._buffers):
        if attribute in store:
            store[attribute] = None
