"""Sharding the data: equal shares per rank, padding that weighs nothing, the same global
batches whatever the number of ranks."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from catwalk_steps.kinds.collate import Collator, Padding
from catwalk_steps.tasks.synthetic import SyntheticTask
from catwalk_steps.training.loaders import EpochSampler, PaddedDataset, ShardedDataLoader


def rank_batches(dataset, world_size, batch_size, epochs=2, shuffle=True):
    """Per rank, the index batches of `epochs` epochs, as ShardedDataLoader would draw them."""
    padded = PaddedDataset(dataset, world_size)
    out = []
    for rank in range(world_size):
        sampler = EpochSampler(padded, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=5)
        loader = DataLoader(range(len(padded)), batch_size=batch_size, sampler=sampler)
        out.append([b.tolist() for _ in range(epochs) for b in loader])
    return out


def test_two_ranks_see_the_global_batches_of_one_process():
    dataset = list(range(64))
    [single] = rank_batches(dataset, 1, 8)
    first, second = rank_batches(dataset, 2, 4)
    assert len(first) == len(second) == len(single)
    for whole, a, b in zip(single, first, second, strict=True):
        assert sorted(a + b) == sorted(whole)
    assert single[0] != single[len(single) // 2]  # a new order each epoch


def test_uneven_data_is_padded_not_repeated():
    dataset = list(range(7))
    padded = PaddedDataset(dataset, 2)
    assert len(padded) == 8
    assert [padded[i] for i in range(7)] == dataset
    assert padded[7] == Padding(0)
    first, second = rank_batches(dataset, 2, 3, epochs=1, shuffle=False)
    assert len(first) == len(second)
    seen = [i for batch in first + second for i in batch if i < 7]
    assert sorted(seen) == dataset


def test_sharded_loader_outside_a_process_group_is_one_shard():
    instances = SyntheticTask(sizes={"train": 10}).load(["train"])["train"]
    loader = ShardedDataLoader(instances, batch_size=4, collate_fn=Collator("catwalk::byte_level"))
    batches = list(loader)
    assert [int(b["weights"].sum()) for b in batches] == [4, 4, 2]
    assert batches[0]["input_ids"].shape[0] == 16  # 4 instances x 4 choices


def test_collating_processes_give_the_same_batches_from_every_place_in_an_epoch():
    """`num_workers` (and torch's other collating keys the loader names) reach torch's loader,
    in a whole epoch and in one a resumed run jumps into."""
    instances = SyntheticTask(sizes={"train": 10}).load(["train"])["train"]
    collate = Collator("catwalk::byte_level")

    def loader(**keys):
        return ShardedDataLoader(instances, batch_size=4, collate_fn=collate, **keys)

    here, ahead = loader(), loader(num_workers=1, prefetch_factor=1, timeout=60)
    assert ahead.num_workers == 1 and ahead.prefetch_factor == 1 and ahead.timeout == 60
    assert type(ahead.epoch_batches(0)).__name__ == "_MultiProcessingDataLoaderIter"
    for skip in (0, 1):
        plain, collated = list(here.epoch_batches(0, skip)), list(ahead.epoch_batches(0, skip))
        assert len(plain) == len(collated) == 3 - skip
        for a, b in zip(plain, collated, strict=True):
            assert torch.equal(a["input_ids"], b["input_ids"])
    assert len(list(loader(drop_last=True).epoch_batches(0))) == 2  # the short batch left out
