"""Each rank reads only its own rows of a saved model: FSDP2 with weights from a local directory.

A model saved with `save_pretrained` (a `catwalk::train` result, an exported checkpoint, a hub
model downloaded to disk) keeps its weights in safetensors files, which can be read a slice at
a time without reading the rest. FSDP2 shards every parameter along its first dimension (as
`torch.chunk` splits it), so each rank reads the rows it owns, straight into its shard: no rank
ever holds the whole model, rank 0 included (the other path, for a random init or a hub name,
builds the whole model on rank 0 and sends each rank its rows).

Buffers outside the state dict (rotary frequencies) are not saved; each rank builds them by
constructing the model with its parameters on the meta device and its buffers real.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tango.common import Lazy
from tango.integrations.torch import Model

from catwalk_startup.patching import check_version

from ..adapters.base import base_name
from ..adapters.registry import adapter_of, is_adapter_weight
from ..components import lazy_config, lazy_params
from ..distributed.groups import distributed_position
from ..model_files import INDEX, SINGLE, saved_tensors
from ..scoring.causal_lm import causal_lm_config
from ..scoring.rank_classifier import RankClassifier


def saved_weights(model: Any) -> Path | None:
    """The local directory a rank classifier block reads its weights from, when it has
    safetensors files there; else None."""
    if not isinstance(model, Lazy):
        return None
    constructor, params = lazy_config(model, Model, "model")
    if not (isinstance(constructor, type) and issubclass(constructor, RankClassifier)):
        return None
    pretrained = params.get("pretrained")
    directory = Path(pretrained) if pretrained else None
    if directory is None or not directory.is_dir():
        return None
    return directory if any((directory / n).is_file() for n in (INDEX, SINGLE)) else None


def file_names(sharded: torch.nn.Module, saved: dict[str, Any]) -> dict[str, str | None] | None:
    """For each state-dict name of the sharded rank classifier, the saved name to read it from
    (its own without the `lm.` prefix, or that of a weight it is tied to; a base layer's under
    an adapter as the model has it without one), or None for an adapter's weight, which is not
    in the files but drawn (as its type draws it: :mod:`catwalk_steps.adapters.base`); None
    when some weight is not saved (then this path is not taken)."""
    aliases: dict[int, list[str]] = {}
    for name, parameter in sharded.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(parameter), []).append(name)
    tied = {name: names for names in aliases.values() for name in names}
    found: dict[str, str | None] = {}
    for name in sharded.state_dict():
        if is_adapter_weight(name):
            found[name] = None
            continue
        candidates = [base_name(n.removeprefix("lm.")) for n in tied.get(name, [name])]
        source = next((c for c in candidates if c in saved), None)
        if source is None:
            return None
        found[name] = source
    return found


def read_own_rows(sharded: torch.nn.Module, model: Lazy, device: torch.device) -> bool:
    """Fills this rank's shard of every weight from the saved files; False (and nothing read,
    on any rank) unless every rank can. Collective."""
    from torch.distributed.tensor import DTensor

    directory = saved_weights(model)
    saved = saved_tensors(directory) if directory is not None else {}
    names = file_names(sharded, saved) if saved else None
    if not every_rank(names is not None):
        return False
    assert names is not None
    rank, world_size = distributed_position()
    seed = lazy_params(model).get("init_seed", 0)
    adapter = adapter_of(sharded)
    with contextlib.ExitStack() as stack:
        files = {id(f): f for f in saved.values()}
        handles = {key: stack.enter_context(open(f.path, "rb")) for key, f in files.items()}
        for name, target in sharded.state_dict().items():
            local = target.to_local() if isinstance(target, DTensor) else target
            if not local.numel():
                continue
            saved_name = names[name] or ""  # "": none, an adapter's weight
            source = saved[saved_name] if saved_name else None
            length = source.rows(saved_name) if source is not None else target.shape[0]
            start, stop = own_rows(length, rank, world_size) if local is not target else (0, length)
            if source is None:  # an adapter's weight: drawn as every rank draws it
                assert adapter is not None
                lm_name = name.removeprefix("lm.")
                value = adapter.initial_weights([(lm_name, target.shape)], seed)[lm_name]
                local.copy_(value[start:stop])
                continue
            source.read_rows(handles[id(source)], saved_name, start, stop, into=local)
    saved_names = set(sharded.state_dict())
    if any(name not in saved_names for name, _ in sharded.named_buffers()):
        for name, buffer in unsaved_buffers(model, saved_names).items():
            sharded.get_buffer(name).copy_(buffer)
    return True


def own_rows(length: int, rank: int, world_size: int) -> tuple[int, int]:
    """The rows of a `length`-row tensor that FSDP2 gives `rank` (`torch.chunk`'s split)."""
    size = -(-length // world_size)
    return min(rank * size, length), min((rank + 1) * size, length)


def every_rank(condition: bool) -> bool:
    """Whether `condition` holds on every rank. Collective."""
    if not (dist.is_available() and dist.is_initialized()):
        return condition
    flag = torch.tensor([int(condition)], device=_collective_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def unsaved_buffers(model: Lazy, saved_names: set[str]) -> dict[str, torch.Tensor]:
    """The buffers outside the state dict (rotary frequencies), as a fresh model computes them:
    built with its parameters on the meta device (no memory) and its buffers real."""
    from transformers import AutoModelForCausalLM

    config = causal_lm_config(lazy_params(model)["pretrained"], None)
    with parameters_on_meta():
        lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return {
        f"lm.{name}": buffer
        for name, buffer in lm.named_buffers()
        if f"lm.{name}" not in saved_names
    }


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Modules built inside get their parameters on the meta device, their buffers where they
    are made (as accelerate's `init_empty_weights(include_buffers=False)`)."""
    check_version("torch", "parameters on the meta device (Module.register_parameter)")
    original = torch.nn.Module.register_parameter

    def register(module: torch.nn.Module, name: str, parameter: Any) -> None:
        original(module, name, parameter)
        if parameter is not None and parameter.device.type != "meta":
            meta = torch.nn.Parameter(parameter.to("meta"), requires_grad=parameter.requires_grad)
            module._parameters[name] = meta

    torch.nn.Module.register_parameter = register  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]
