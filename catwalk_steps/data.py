"""From multiple-choice instances to padded CPU tensors, and an even split across ranks.

The collator never asks the model for its device: the training engine moves batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator, DataLoader
from torch.utils.data import Dataset, DistributedSampler

from .distributed import distributed_position
from .tasks import MultipleChoiceInstance, TaskDataError
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
    """Batches instances with all their choices for :class:`~catwalk_steps.models.RankClassifier`.

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
        )
        return batch


class PaddedDataset(Dataset):
    """`dataset` followed by :class:`Padding` items up to a multiple of `multiple`."""

    def __init__(self, dataset: Sequence, multiple: int):
        self.dataset = dataset
        self.length = math.ceil(len(dataset) / multiple) * multiple

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if index < len(self.dataset):
            return self.dataset[index]
        return Padding(self.dataset[index % len(self.dataset)])


class EpochSampler(DistributedSampler):
    """A distributed sampler that also reshuffles every epoch in a single process.

    Tango calls `set_epoch` only in distributed runs; counting iterations as well makes a
    1-process run see the same global batches, in the same order, as an N-process run.
    """

    def __iter__(self):
        indices = list(super().__iter__())
        self.epoch += 1
        return iter(indices)


@DataLoader.register("catwalk::sharded")
class ShardedDataLoader(DataLoader):
    """A data loader giving each rank an equal share of the data, without repeating instances.

    Every rank must run the same number of forwards (sharded engines gather parameters in each),
    so the data is padded to a multiple of the world size with zero-weight :class:`Padding` items:
    metrics and losses ignore them, so validation counts every instance exactly once.

    :param batch_size: instances per batch on each rank (each instance brings all its choices).
    :param shuffle: reshuffle every epoch with `seed`.
    :param seed: the shuffling seed; left out, `catwalk::train` uses its own `seed`, so that one
        seed (also one overridden with `-o`) drives data order, dropout and the rest.
    """

    def __init__(
        self,
        dataset: Sequence,
        batch_size: int = 8,
        shuffle: bool = False,
        seed: int | None = None,
        collate_fn: DataCollator | None = None,
        **kwargs,
    ):
        if collate_fn is None:
            raise ConfigurationError(
                "train_dataloader.collate_fn: catwalk::sharded needs one "
                "(e.g. {type: 'catwalk::multiple_choice', tokenizer: ...})"
            )
        rank, world_size = distributed_position()
        padded = PaddedDataset(dataset, world_size)
        self.seed = seed
        sampler = EpochSampler(
            padded,
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seed or 0,
            drop_last=False,
        )
        # Its own generator: starting an iteration draws a seed from the loader's generator,
        # and from torch's global one when it has none, which would shift every dropout mask
        # after a resume mid-epoch (see `epoch_batches`).
        kwargs.setdefault("generator", torch.Generator().manual_seed(seed or 0))
        super().__init__(
            padded, batch_size=batch_size, collate_fn=collate_fn, sampler=sampler, **kwargs
        )

    def use_default_seed(self, seed: int) -> None:
        """The training step's seed, unless the loader was given its own."""
        if self.seed is None:
            assert isinstance(self.sampler, EpochSampler)
            self.sampler.seed = seed

    def epoch_batches(self, epoch: int, skip: int = 0):
        """The batches of `epoch` from the `skip`-th on, without collating the skipped ones: how
        a resumed run gets back to its place in the data."""
        sampler = self.sampler
        assert isinstance(sampler, EpochSampler)
        sampler.set_epoch(epoch)
        indices = list(DistributedSampler.__iter__(sampler))  # this epoch, this rank
        size = self.batch_size
        assert size is not None
        chunks = [indices[i : i + size] for i in range(skip * size, len(indices), size)]
        if self.drop_last and chunks and len(chunks[-1]) < size:
            chunks.pop()
        return iter(
            torch.utils.data.DataLoader(
                self.dataset,
                batch_sampler=chunks,
                collate_fn=self.collate_fn,
                num_workers=self.num_workers,
                pin_memory=self.pin_memory,
                generator=torch.Generator().manual_seed(epoch),  # never the global one
            )
        )
