"""A whole set of generation requests answered on one device: the prompts, longest first (as
lm-evaluation-harness orders them), through continuous batching (:mod:`.continuous`). (Their
answers scored: :mod:`catwalk_steps.kinds.generative`.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tango.integrations.torch.util import move_to_device

from ..settings import BATCH_SIZE, FP32, Precision
from ..tasks import GenerationInstance
from .choices import evaluating, model_max_length
from .continuous import continuous_generate
from .generation import GenerationEncoder, eos_ids_of, forward_step


def generate_texts(
    model: Any,
    instances: Sequence[GenerationInstance],
    batch_size: int = BATCH_SIZE,
    max_length: int | None = None,
    device: torch.device | str = "cpu",
    precision: Precision = FP32,
    progress: bool = True,
    share_prefix: bool = True,
) -> list[str]:
    """Each instance's answer (the generated text cut at its stop sequences), in input order.
    The model (a rank classifier) must already be on `device`."""
    encoder = GenerationEncoder(model.tokenizer, max_length or model_max_length(model))
    prompts = encoder.prompts(instances)
    eos = eos_ids_of(model.lm, model.tokenizer)
    step = forward_step(lambda batch: model(**move_to_device(batch, torch.device(device))))
    order = sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), i))  # longest first
    with evaluating(model), precision.autocast(torch.device(device).type):
        tokens = continuous_generate(
            step,
            encoder,
            [prompts[i] for i in order],
            [instances[i] for i in order],
            eos,
            batch_size,
            share_prefix=share_prefix,
        )
    texts = [""] * len(instances)
    for i, row in zip(order, tokens, strict=True):
        texts[i] = encoder.text(row, instances[i].until)
    return texts
