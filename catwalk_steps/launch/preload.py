"""What the worker server imports once, so that no worker imports it again.

Importing `catwalk_steps` alone leaves most of the cost to each worker: transformers loads its
model classes (`AutoModelForCausalLM`, the generation utilities), its tokenizers and torch's
FSDP and DTensor modules lazily, the first time a model is built, which took each worker about
5 s of CPU per training step started. Nothing here touches CUDA, so forking after it is safe.
"""

from __future__ import annotations

import fairscale.nn.data_parallel  # noqa: F401
import torch.distributed.checkpoint  # noqa: F401
import torch.distributed.fsdp  # noqa: F401
from transformers import (  # noqa: F401
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
)

import catwalk_steps.steps  # noqa: F401  (every registered step, engine, model and callback)
