"""A kind's view of an engine (:class:`~catwalk_steps.kinds.Scorer`): each batch one forward
through the engine's root wrapper (`forward_eval`, on every rank: sharded engines gather
parameters in it), the rank classifier inside the wrappers, and the decisions every rank takes
together by all-reduce (whether all are done generating, whether prompts share a prefix), so
that every rank runs the same number of forwards and none waits alone in a collective."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from tango.integrations.torch import TrainingEngine

from ..kinds import Scorer
from ..scoring.generation import Ranks


class AllRanks(Ranks):
    """Decisions by all-reduce over the default process group (on the engine's device)."""

    def __init__(self, device: torch.device):
        self.device = device

    def reduced(self, flag: bool, op: Any) -> bool:
        value = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(value, op=op)
        return bool(value.item())

    def any(self, flag: bool) -> bool:
        return self.reduced(flag, dist.ReduceOp.MAX)

    def all(self, flag: bool) -> bool:
        return self.reduced(flag, dist.ReduceOp.MIN)


def inner_model(model: Any) -> Any:
    """The rank classifier inside an engine's wrappers (DDP, FairScale FSDP: `.module`)."""
    while not hasattr(model, "lm") and hasattr(model, "module"):
        model = model.module
    return model


def engine_scorer(engine: TrainingEngine, distributed: bool) -> Scorer:
    """The engine as kinds use it; collective decisions when `distributed`."""
    # The device the engine set itself (`engine.device`, which Tango's TrainingEngine lacks).
    device = engine.train_config.worker_local_default_device
    ranks = AllRanks(device) if distributed else Ranks()
    decoding = getattr(engine, "generating", None)  # a catwalk engine's (Tango's have none)
    return Scorer(engine.forward_eval, inner_model(engine.model), ranks, decoding)
