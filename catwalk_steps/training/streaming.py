"""The loader of a streamed training split (`streaming: true`,
:mod:`catwalk_steps.tasks.streamed`): each rank reads its share of the stream and renders,
tokenizes and collates its rows a batch at a time, as the split loaded whole would give them.

- **The stream never ends.** At its end the next pass starts, shuffled with a new seed (the
  run's seed, `datasets`' `set_epoch`), so `train_steps` says how long training is. Batches run
  on across a pass's end: every batch is whole, whatever the stream's length.
- **Shuffling** is `datasets`' buffer (`shuffle_buffer` rows, the task's) with the loader's
  `seed` (by default the run's), when the loader's `shuffle` is true; the order is the same on
  every rank, each rank reading its own shards or every `world_size`-th row
  (`split_dataset_by_node`).
- **Exact resume.** The loop's position, batches taken since the start (`batches_into_epoch`
  of every checkpoint, the same on every rank), is where the stream is taken up again: the
  same passes are read again, their first batches skipped without being rendered or collated.
  The resumed run sees the batches an uninterrupted one sees.
- **Collating workers** (`num_workers`) take the rank's batches in turn, each reading the rank's
  rows and rendering only its own batches; torch's loader hands them back in turn, so the
  batches and their order are the same with any number of workers.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import torch
from more_itertools import chunked
from tango.common import Lazy, Params
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator

from ..distributed.groups import distributed_position
from ..kinds import kind_named
from ..scoring.tokenization import chat_tokenizer
from ..settings import LoaderSettings
from ..tasks import TaskDataError
from ..tasks.streamed import StreamedSplit, is_streamed
from ..tasks.streams import Row
from .loaders import ShardedDataLoader, check_collating


def train_loader(lazy: Lazy, train: Any) -> Any:
    """The training split's loader: the block built on the split, or a stream's."""
    if is_streamed(train):
        return StreamLoader(train, LoaderSettings.of(lazy, "train_dataloader"))
    return lazy.construct(dataset=train)


# The keys of `catwalk::sharded` a stream's loader applies (`drop_last`: none to drop).
APPLIED = {"batch_size", "shuffle", "seed", "collate_fn", "drop_last"}
APPLIED |= {"num_workers", "pin_memory", "prefetch_factor", "timeout"}


@dataclass(frozen=True)
class StreamPlan:
    """Which rows a rank reads, and how many make a batch."""

    seed: int
    shuffle: bool
    rank: int
    world_size: int
    batch_size: int


class StreamLoader:
    """A streamed split's batches for this rank, with `catwalk::sharded`'s keys and defaults
    (`drop_last` has no effect: a stream that starts over has no last batch)."""

    def __init__(self, split: StreamedSplit, settings: LoaderSettings):
        if settings.loader_class is not ShardedDataLoader:
            raise ConfigurationError(
                f"{settings.key}: {split.describe()} is read with catwalk::sharded's keys; "
                "give type catwalk::sharded"
            )
        unapplied = sorted(set(settings.params) - APPLIED)
        if unapplied:  # (a key catwalk::sharded takes later, not yet a stream's)
            raise ConfigurationError(
                f"{settings.key}.{unapplied[0]}: not applied to {split.describe()}"
            )
        keys = inspect.signature(ShardedDataLoader).bind(None, **settings.params)
        keys.apply_defaults()
        given = keys.arguments
        check_collating(given["collate_fn"], given["num_workers"], given["prefetch_factor"])
        self.split, self.batch_size = split, given["batch_size"]
        self.shuffle, self.seed = given["shuffle"], given["seed"]
        self.collate_fn: Any = DataCollator.from_params(Params(dict(given["collate_fn"])))
        self.collating = {
            key: given[key] for key in ("num_workers", "pin_memory", "prefetch_factor", "timeout")
        }
        self.task = split.built_task()
        name = split.tokenizer
        self.tokenizer = chat_tokenizer(self.task, name, "load_task.tokenizer") if name else None

    def use_default_seed(self, seed: int) -> None:
        """The training step's seed, unless the loader was given its own."""
        if self.seed is None:
            self.seed = seed

    def __len__(self) -> int:
        raise ConfigurationError(
            f"train.train_steps: {self.split.describe()} has no length; give train_steps"
        )

    def epoch_batches(self, epoch: int, skip: int = 0) -> Iterator[Any]:
        """This rank's batches from the `skip`-th on (the stream is one epoch that never ends)."""
        assert epoch == 0, "a stream's epoch never ends"
        rank, world_size = distributed_position()
        plan = StreamPlan(self.seed or 0, self.shuffle, rank, world_size, self.batch_size)
        batches = RankBatches(self.split, plan, skip, self.collate_fn, self.task, self.tokenizer)
        loader = torch.utils.data.DataLoader(
            batches,
            batch_size=None,  # each item a batch
            collate_fn=as_is,
            generator=torch.Generator().manual_seed(0),  # never the global one
            **self.collating,
        )
        return iter(loader)


def as_is(batch: Any) -> Any:
    return batch


class RankBatches(torch.utils.data.IterableDataset):
    """A rank's collated batches from the `skip`-th on; a collating worker's every
    `num_workers`-th of them (see the module)."""

    def __init__(
        self,
        split: StreamedSplit,
        plan: StreamPlan,
        skip: int,
        collate_fn: Any,
        task: Any,
        tokenizer: Any,
    ):
        self.split, self.plan, self.skip = split, plan, skip
        self.collate_fn, self.task, self.tokenizer = collate_fn, task, tokenizer

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        kind = kind_named(self.split.kind)
        where = f"train: {self.split.describe()}"
        for index, rows in enumerate(
            chunked(rank_rows(self.split, self.plan), self.plan.batch_size)
        ):
            if index < self.skip or (index - self.skip) % workers != worker:
                continue  # read, never rendered
            instances = list(self.task.stream_instances(rows, self.tokenizer))
            yield self.collate_fn(kind.training_instances(instances, where))


def rank_rows(split: StreamedSplit, plan: StreamPlan) -> Iterator[Row]:
    """This rank's rows, pass after pass."""
    for epoch in count():
        empty = True
        for row in split.rows(plan.seed, plan.shuffle, epoch, plan.rank, plan.world_size):
            empty = False
            yield row
        if empty:
            raise TaskDataError(
                f"{split.describe()}: a pass over it gave rank {plan.rank} of "
                f"{plan.world_size} no row to train on"
            )
