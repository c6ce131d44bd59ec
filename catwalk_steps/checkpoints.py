"""Model weights: consolidating FSDP shards into one state dict, and loading it strictly."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch


def tied_parameter_names(module: torch.nn.Module) -> set[str]:
    """State-dict names that share storage with an earlier name (e.g. GPT-2's lm_head/wte)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        pointer = tensor.data_ptr()
        if pointer in seen and tensor.numel() > 0:
            tied.add(name)
        else:
            seen.setdefault(pointer, name)
    return tied


def check_full_weights(model: torch.nn.Module, names: set[str], source: str) -> None:
    """Fails unless the state-dict `names` fit the model exactly.

    Only tied duplicates may be missing: they come back through the weight they share. (Tango
    loads final weights with `strict=False`, which would silently keep random weights.)
    """
    expected = set(model.state_dict())
    missing = expected - names - tied_parameter_names(model)
    unexpected = names - expected
    if missing or unexpected:
        raise RuntimeError(
            f"{source}: weights do not fit the model "
            f"(missing: {sorted(missing)[:5]}, unexpected: {sorted(unexpected)[:5]})"
        )


def worker_rank(path: Path) -> int:
    """The rank in a Tango worker file name: `worker3_model.pt` -> 3."""
    match = re.fullmatch(r"worker(\d+)_model\.pt", path.name)
    if match is None:
        raise ValueError(f"{path}: not a Tango worker model file")
    return int(match.group(1))


def consolidate_fairscale_shards(checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    """The full state dict from every rank's FairScale FSDP local state, in rank order.

    Tango's FairScale engine reads the shards in file-system order, which need not be rank order,
    and then concatenates them in that order: the weights come out scrambled. FairScale drops
    tied duplicates (GPT-2's lm_head) with nested FSDP; the model's own tie restores them.
    """
    from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP

    paths = sorted(Path(checkpoint_dir).resolve().glob("worker*_model.pt"), key=worker_rank)
    if not paths:
        raise FileNotFoundError(f"{checkpoint_dir}: no worker*_model.pt shards")
    shards = [torch.load(path, map_location="cpu", weights_only=False) for path in paths]
    return FSDP.consolidate_shard_weights(
        [shard["weights"] for shard in shards], [shard["metadata"] for shard in shards]
    )


def save_atomic(state: dict[str, torch.Tensor], path: Path) -> None:
    """`torch.save` through a temporary file and `os.replace`: no half-written weights."""
    temporary = path.with_name(path.name + ".tmp")
    torch.save(state, temporary)
    os.replace(temporary, path)
