"""ZeRO-sharded optimizers for jsonnet, and the one helper that makes their state complete.

`{type: "catwalk::zero", optimizer: "torch::AdamW", lr: 1e-4}` is torch's
`ZeroRedundancyOptimizer`; `catwalk::oss` is FairScale's `OSS`. Either shards the optimizer state
of any `torch.optim` optimizer across the ranks of a data-parallel (DDP) run. Outside a process
group of several ranks they fall back to the plain optimizer, with one warning line.

A sharded optimizer holds only its rank's part of the state, so a checkpoint needs every rank to
take part in consolidating it first. :func:`full_optimizer_state` does that for any optimizer
that has a `consolidate_state_dict` method (both of the above do), without knowing which one it
is: the engines call it and never import FairScale for it.
"""

# No `from __future__ import annotations` here: Tango reads the factories' return annotations
# to know what they build, and a string annotation breaks that (ai2-tango 1.3.2).

import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from tango.integrations.torch import Optimizer

from ..distributed.groups import distributed_position
from ..settings.engine import optimizer_class

logger = logging.getLogger(__name__)

# `wrap(params, inner optimizer class, its kwargs)`: a sharded optimizer around the inner one.
Wrap = Callable[[Iterable, type, dict], torch.optim.Optimizer]


def _sharded(
    kind: str, name: str, params: Iterable, kwargs: dict, wrap: Wrap
) -> torch.optim.Optimizer:
    """`wrap(params, inner class, kwargs)` in a process group of several ranks; alone, the
    inner optimizer itself (the same updates), with one warning line."""
    inner = optimizer_class(name, "optimizer.optimizer")
    rank, world_size = distributed_position()
    if world_size > 1:
        return wrap(params, inner, kwargs)
    if rank == 0:
        logger.warning(
            "%s: one process, so nothing to shard: using %s itself (same updates)", kind, name
        )
    return inner(params, **kwargs)


def _zero(params: Iterable, inner: type, kwargs: dict) -> torch.optim.Optimizer:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer(params, optimizer_class=inner, **kwargs)


def _oss(params: Iterable, inner: type, kwargs: dict) -> torch.optim.Optimizer:
    from fairscale.optim import OSS

    return OSS(params, optim=inner, **kwargs)


def _factory(kind: str, wrap: Wrap, description: str) -> Callable[..., torch.optim.Optimizer]:
    """The jsonnet constructor of one sharded optimizer: `optimizer` names the inner one, the
    other keys go to it."""

    def build(
        params: Iterable, optimizer: str = "torch::AdamW", **kwargs: Any
    ) -> torch.optim.Optimizer:
        return _sharded(kind, optimizer, params, kwargs, wrap)

    build.__doc__ = f"{description} around `optimizer`; the other keys go to `optimizer`."
    return build


zero_redundancy_optimizer = _factory("catwalk::zero", _zero, "torch's `ZeroRedundancyOptimizer`")
oss_optimizer = _factory("catwalk::oss", _oss, "FairScale's `OSS`")


# Tango registers a function as a constructor too; its annotation says a class.
Optimizer.register("catwalk::zero")(zero_redundancy_optimizer)  # type: ignore[arg-type]
Optimizer.register("catwalk::oss")(oss_optimizer)  # type: ignore[arg-type]


def full_optimizer_state(optimizer: torch.optim.Optimizer, to_rank: int = 0) -> dict | None:
    """The complete optimizer state on rank `to_rank` (None on the other ranks).

    Every rank must call it. An optimizer that shards its state (it has `consolidate_state_dict`:
    torch's `ZeroRedundancyOptimizer`, FairScale's `OSS`) first gathers it on `to_rank`; any
    other optimizer already holds the whole state on every rank.
    """
    consolidate = getattr(optimizer, "consolidate_state_dict", None)
    if consolidate is not None:
        consolidate(to_rank)  # positional: ZeRO calls it `to`, OSS `recipient_rank`
    return optimizer.state_dict() if distributed_position()[0] == to_rank else None
