"""FairScale's optimizer consolidation with frozen units (an adapter run: every base unit
frozen, each adapter layer a unit of its own).

`gather_full_optim_state_dict` (fairscale 0.4.13) numbers the consolidated state by unit and
copies the first unit's step count to every entry: it fails with `KeyError: 0` when the first
unit (the root: embeddings, final norm) has no optimizer state because nothing in it trains,
and it maps stateless units to None, which its own loader then miscounts (`groupby` of the
ids, `check_param_counts_before_sharding`). The patch consolidates with a unit that trains
put first, puts each unit's entries back under its own numbers, and maps every parameter to its
unit, with state only for those that train: the loader shards it as a model with unused
parameters. A run without frozen units saves what it saved before.
"""

from __future__ import annotations

import functools
from typing import Any

from catwalk_startup.patching import patch

PATCH = "FairScale optimizer consolidation with frozen units"


def units_params(instance: Any) -> int:
    """How many original parameters a unit's flat state stands for (as FairScale counts)."""
    if instance.flatten_parameters:
        return int(instance.num_params_managed)
    return len(instance.non_shared_params())


def first_ids(counts: list[int]) -> list[int]:
    """The first global id of each unit's parameters (they are numbered unit after unit)."""
    return [sum(counts[:unit]) for unit in range(len(counts))]


def full_mapping(counts: list[int]) -> dict[int, int]:
    """Every original parameter's unit, stateless units included (FairScale's loader counts
    units from this mapping)."""
    return {
        start + k: unit for unit, start in enumerate(first_ids(counts)) for k in range(counts[unit])
    }


def patch_frozen_units() -> None:
    from fairscale.nn.data_parallel import fsdp_optim_utils

    patch(fsdp_optim_utils, "_unflatten_optim_state", PATCH, frozen_aware, package="fairscale")


def frozen_aware(original: Any) -> Any:
    """FairScale's `_unflatten_optim_state`, for units of which some have no state."""

    @functools.wraps(original)
    def unflatten(combined: dict, instances: list, pad_info: list, singleton: dict) -> Any:
        counts = [units_params(instance) for instance in instances]
        if not combined or 0 in combined:
            state, _ = original(combined, instances, pad_info, singleton)
            return state, full_mapping(counts)
        # The same call with a unit that trains put first (FairScale reads the step count from
        # the first), then each unit's entries put back under its own numbers.
        order = [min(combined)] + [i for i in range(len(instances)) if i != min(combined)]
        position = {unit: j for j, unit in enumerate(order)}
        permuted, _ = original(
            {position[unit]: value for unit, value in combined.items()},
            [instances[unit] for unit in order],
            [[per_rank[unit] for unit in order] for per_rank in pad_info],
            {position[unit]: value for unit, value in singleton.items()},
        )
        starts = first_ids(counts)
        permuted_starts = first_ids([counts[unit] for unit in order])
        state = {}
        for unit, count in enumerate(counts):
            for k in range(count):
                entry = permuted.get(permuted_starts[position[unit]] + k)
                if entry is not None:
                    state[starts[unit] + k] = entry
        return state, full_mapping(counts)

    return unflatten


def release_frozen_units(model: Any) -> None:
    """Puts every frozen FSDP unit back on its shard, as FairScale's post-backward hook puts a
    trained unit back: that hook never fires for parameters that do not train, so after a
    training step a frozen unit (an adapter run's base) still holds its parameters whole, and
    `state_dict()` then takes them for gathered and fails in `summon_full_params` ("0 vs. 1",
    fairscale 0.4.13) unless a validation (a forward without gradients) came between. The shard
    is what the whole parameters were built from: nothing that does not train changed."""
    from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP

    for unit in model.modules():
        if not (isinstance(unit, FSDP) and unit.params):
            continue
        if any(p.requires_grad for p in unit.params) or not unit.has_full_params:
            continue
        unit._free_full_params()  # private: checked against fairscale 0.4.13
        unit._use_fp32_param_shard()
