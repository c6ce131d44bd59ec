"""From multiple-choice instances to padded CPU tensors: (context, choice) pairs tokenized as
lm-evaluation-harness does, and batches of whole instances for the rank classifier.

The collator never asks the model for its device: the training engine moves batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator

from ..tasks import MultipleChoiceInstance, TaskDataError
from .packing import pack_rows, packed_rows
from .tokenization import load_tokenizer

CHARS_PER_TOKEN = 64


@dataclass(frozen=True)
class ChoiceSequence:
    """Tokens of one (context, choice) pair; the last `continuation_length` are the choice's."""

    token_ids: tuple[int, ...]
    continuation_length: int
    instance: int
    choice: int
    choice_chars: int


def answer_chars(choice: str) -> int:
    """The choice's length in characters, without the space that joins it to the context.

    lm-evaluation-harness divides by this length for `acc_norm`.
    """
    return len(choice[1:] if choice.startswith(" ") else choice)


class SequenceEncoder:
    """Tokenizes (context, choice) pairs as lm-evaluation-harness does.

    Context and choice are tokenized separately and joined; if the pair is longer than
    `max_length`, context tokens are dropped from the left, so the choice is always scored whole.
    Encodings are memoised: contexts and choices repeat across choices and epochs.
    """

    def __init__(self, tokenizer, max_length: int = 256, field: str = "max_length"):
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
            raise ConfigurationError(
                f"{field}: must be a whole number >= 2 (context + answer tokens), "
                f"got {max_length!r}"
            )
        self.tokenizer = tokenizer
        self.max_length = max_length
        self._cache: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> tuple[int, ...]:
        ids = self._cache.get(text)
        if ids is None:
            self.encode_all([text])
            ids = self._cache[text]
        return ids

    def encode_all(self, texts: Sequence[str]) -> None:
        """Tokenizes the texts not seen yet in one batched call (much faster than one by one)."""
        new = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if new:
            encoded = self.tokenizer(new, add_special_tokens=False)["input_ids"]
            self._cache.update(zip(new, map(tuple, encoded), strict=True))

    def clip(self, context: str, choice: str) -> tuple[str, str]:
        """Only the end of a context and the start of a choice can be used: a text far longer
        than `max_length` tokens (a 20 MB goal, say) is cut before it is tokenized. No token
        covers more than :data:`CHARS_PER_TOKEN` characters, so the kept tokens are the same."""
        limit = self.max_length * CHARS_PER_TOKEN
        return context[-limit:], choice[:limit]

    def pair(self, context: str, choice: str) -> tuple[tuple[int, ...], int]:
        context, choice = self.clip(context, choice)
        context_ids = self.encode(context) or (self.tokenizer.eos_token_id,)
        choice_ids = self.encode(choice)
        if not choice_ids:
            raise TaskDataError(f"choice {choice!r} has no tokens")
        choice_ids = choice_ids[: self.max_length - 1]
        context_ids = context_ids[-(self.max_length - len(choice_ids)) :]
        return context_ids + choice_ids, len(choice_ids)

    def sequences(self, instances: Sequence[MultipleChoiceInstance]) -> list[ChoiceSequence]:
        """One sequence per choice of every instance, in instance order."""
        self.encode_all(
            [text for i in instances for c in i.choices for text in self.clip(i.context, c)]
        )
        out = []
        for i, instance in enumerate(instances):
            for c, choice in enumerate(instance.choices):
                ids, continuation_length = self.pair(instance.context, choice)
                out.append(ChoiceSequence(ids, continuation_length, i, c, answer_chars(choice)))
        return out


def pad_sequences(sequences: Sequence[ChoiceSequence], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded token ids with attention and continuation masks (CPU tensors)."""
    length = max(len(s.token_ids) for s in sequences)
    input_ids = torch.tensor(
        [s.token_ids + (pad_id,) * (length - len(s.token_ids)) for s in sequences]
    )
    positions = torch.arange(length)
    ends = torch.tensor([len(s.token_ids) for s in sequences])[:, None]
    starts = ends - torch.tensor([s.continuation_length for s in sequences])[:, None]
    attention_mask = (positions < ends).long()
    continuation_mask = (positions >= starts) & (positions < ends)
    logits_from = int(starts.min())
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "continuation_mask": continuation_mask,
        "logits_from": logits_from,
    }


@dataclass(frozen=True)
class Padding:
    """A stand-in that evens out ranks' shares; it is run like an instance but weighs 0."""

    instance: MultipleChoiceInstance


@DataCollator.register("catwalk::multiple_choice")
class MultipleChoiceCollator(DataCollator):
    """Batches instances with all their choices for the rank classifier
    (:class:`~catwalk_steps.scoring.rank_classifier.RankClassifier`).

    :param tokenizer: the model's tokenizer: hub name, path, or "catwalk::byte_level".
    :param max_length: longest (context + choice) sequence in tokens; contexts are cut on the left.
    """

    def __init__(self, tokenizer: str, max_length: int = 256):
        self.encoder = SequenceEncoder(
            load_tokenizer(tokenizer, "collate_fn.tokenizer"), max_length, "collate_fn.max_length"
        )

    def __call__(self, items: list) -> dict:
        instances = [item.instance if isinstance(item, Padding) else item for item in items]
        weights = [0.0 if isinstance(item, Padding) else 1.0 for item in items]
        sequences = self.encoder.sequences(instances)
        batch = pad_sequences(sequences, self.encoder.tokenizer.pad_token_id)
        batch.update(
            instance_index=torch.tensor([s.instance for s in sequences]),
            choice_index=torch.tensor([s.choice for s in sequences]),
            choice_chars=torch.tensor([s.choice_chars for s in sequences]),
            labels=torch.tensor([instance.label for instance in instances]),
            weights=torch.tensor(weights),
            num_choices=max(len(instance.choices) for instance in instances),
            # The same sequences as rows that run each context once, for scoring all choices.
            packed=pack_rows(packed_rows(sequences), self.encoder.tokenizer.pad_token_id),
        )
        return batch
