"""Sharding the data: equal shares per rank, padding that weighs nothing, the same global
batches whatever the number of ranks."""

from __future__ import annotations

from torch.utils.data import DataLoader

from catwalk_steps.kinds.collate import MultipleChoiceCollator, Padding
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
    loader = ShardedDataLoader(
        instances, batch_size=4, collate_fn=MultipleChoiceCollator("catwalk::byte_level")
    )
    batches = list(loader)
    assert [int(b["weights"].sum()) for b in batches] == [4, 4, 2]
    assert batches[0]["input_ids"].shape[0] == 16  # 4 instances x 4 choices
