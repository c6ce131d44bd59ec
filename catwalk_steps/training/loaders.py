"""The data loader of training: each rank an equal share of the data, no instance repeated, and a
resumed run back at its place in the data without collating what it skips."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator, DataLoader
from torch.utils.data import Dataset, DistributedSampler

from ..distributed.groups import distributed_position
from ..kinds import Padding


class PaddedDataset(Dataset):
    """`dataset` followed by :class:`Padding` items up to a multiple of `multiple`."""

    def __init__(self, dataset: Sequence, multiple: int):
        self.dataset = dataset
        self.length = math.ceil(len(dataset) / multiple) * multiple

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
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


def check_collating(collate_fn: Any, num_workers: int, prefetch_factor: int | None) -> None:
    """The keys a `catwalk::sharded` loader needs together (a streamed split's too)."""
    if collate_fn is None:
        raise ConfigurationError(
            "train_dataloader.collate_fn: catwalk::sharded needs one "
            "(e.g. {type: 'catwalk::collate', tokenizer: ...})"
        )
    if prefetch_factor is not None and num_workers == 0:
        raise ConfigurationError(
            "train_dataloader.prefetch_factor: batches prepared ahead by collating "
            "processes; give num_workers > 0 too"
        )


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
    :param num_workers: processes that collate batches ahead of the training step (torch's
        `DataLoader`); 0 collates in the training process.
    :param pin_memory: collate into page-locked memory, for faster copies to a GPU (torch's).
    :param drop_last: leave out each epoch's last batch when it is short.
    :param prefetch_factor: batches each collating process prepares ahead (with `num_workers`).
    :param timeout: seconds to wait for a collating process's batch before failing (0: no limit).

    Torch's other `DataLoader` arguments are refused (the sampler is this loader's own: each
    rank's share), so no key a config gives is dropped unread.
    """

    def __init__(
        self,
        dataset: Sequence,
        batch_size: int = 8,
        shuffle: bool = False,
        seed: int | None = None,
        collate_fn: DataCollator | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        drop_last: bool = False,
        prefetch_factor: int | None = None,
        timeout: float = 0,
    ) -> None:
        check_collating(collate_fn, num_workers, prefetch_factor)
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
        # What torch's loader does with the batches, the same in every epoch (`epoch_batches`).
        self.collating: dict[str, Any] = dict(
            num_workers=num_workers,
            pin_memory=pin_memory,
            prefetch_factor=prefetch_factor,
            timeout=timeout,
        )
        super().__init__(
            padded,
            batch_size=batch_size,
            collate_fn=collate_fn,
            sampler=sampler,  # type: ignore[arg-type]  # Tango's annotation: its Registrable only
            drop_last=drop_last,
            # Its own generator: starting an iteration draws a seed from the loader's generator,
            # and from torch's global one when it has none, which would shift every dropout mask
            # after a resume mid-epoch (see `epoch_batches`).
            generator=torch.Generator().manual_seed(seed or 0),
            **self.collating,
        )

    def use_default_seed(self, seed: int) -> None:
        """The training step's seed, unless the loader was given its own."""
        if self.seed is None:
            assert isinstance(self.sampler, EpochSampler)
            self.sampler.seed = seed

    def epoch_batches(self, epoch: int, skip: int = 0) -> Iterator[Any]:
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
                generator=torch.Generator().manual_seed(epoch),  # never the global one
                **self.collating,
            )
        )
