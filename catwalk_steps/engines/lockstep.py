"""Generation under a training engine (in the loop, or a sharded evaluation): every decoding
step is one forward through the engine's root wrapper, on every rank.

Ranks hold different prompts and finish at different steps. A rank whose rows are all done
keeps stepping (its tokens are dropped) until an all-reduce says every rank is done, and the
ranks agree on whether prompts share a prefix (one forward more, or none), so all run the same
number of forwards: nothing reaches around the wrapper, and no rank waits alone in a collective.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from tango.integrations.torch import TrainingEngine

from ..scoring.collate import GenerationBatch
from ..scoring.generation import Ranks, eos_ids_of, forward_step, greedy_generate


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


def engine_texts(engine: TrainingEngine, batch: GenerationBatch, distributed: bool) -> list[str]:
    """Each row's answer, generated through `engine.forward_eval`. Collective when
    `distributed`: every rank calls it for a batch of the same size."""
    model = inner_model(engine.model)
    ranks = AllRanks(engine.device) if distributed else Ranks()
    tokens = greedy_generate(
        forward_step(engine.forward_eval),
        batch.encoder,
        batch.prompts,
        batch.instances,
        eos_ids_of(model.lm, batch.encoder.tokenizer),
        live=batch.live,
        ranks=ranks,
    )
    return [batch.encoder.text(t, x.until) for t, x in zip(tokens, batch.instances, strict=True)]


def generation_sums(
    engine: TrainingEngine, batch: GenerationBatch, distributed: bool
) -> dict[str, float]:
    """The batch's score sums (each `<metric>,<filter>`) and `count`, over the rows that count."""
    texts = engine_texts(engine, batch, distributed)
    sums = {name: 0.0 for name in batch.instances[0].scoring.names()}
    sums["count"] = 0.0
    for instance, text, live in zip(batch.instances, texts, batch.live, strict=True):
        if live:
            for name, value in instance.score(text)["scores"].items():
                sums[name] += value
            sums["count"] += 1.0
    return sums
