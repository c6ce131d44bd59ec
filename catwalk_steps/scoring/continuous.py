"""Continuous batching for generation in one process (one device, or a whole copy per worker).

A static batch (lm-evaluation-harness's) runs until its longest answer, most of its rows idle
after their own answers end. Here the batch has `batch_size` slots: when a row finishes, the next
waiting prompt takes its slot (its prompt run on its own, its cache joined to the batch's, padded
on the left to the same length and masked), and once nothing waits, finished rows leave the
batch. Each answer is still its own greedy decode: the same tokens as alone (tests).

The decoding state (the rows' cache, mask and positions, the prefix every prompt shares, run
once) is the lockstep loop's (:class:`~.decoding.Decoding`); here batches of it are joined and
rows leave it. Caches other than the plain per-layer key/value tensors (sliding windows) cannot
be joined: then a batch is refilled only when all its rows are done, as static batches are.
Under a sharded engine every rank must run the same forwards, which a refill would break: there
:func:`~.generation.greedy_generate` runs instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..tasks import GenerationInstance
from .decoding import Decoding, Step, shared_prefix
from .generation import GenerationEncoder, Rows, chosen_tokens
from .sampling import Choice, greedy


def joinable(cache: Any) -> bool:
    """Whether the cache is per-layer key/value tensors that rows can be put into."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = getattr(cache, "layers", None) or []
    return (
        isinstance(cache, DynamicCache)
        and bool(layers)
        and all(type(layer) is DynamicLayer for layer in layers)
    )


def tensors_of(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_of(tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    from transformers.cache_utils import DynamicCache

    return DynamicCache(ddp_cache_data=tensors)


def padded_to(
    tensors: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor, width: int
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Keys, values and mask padded on the left (masked) to `width` positions."""
    extra = width - mask.size(1)
    if extra <= 0:
        return tensors, mask
    padded = []
    for keys, values in tensors:
        key_zeros = keys.new_zeros((*keys.shape[:2], extra, keys.shape[3]))
        value_zeros = values.new_zeros((*values.shape[:2], extra, values.shape[3]))
        padded.append((torch.cat([key_zeros, keys], 2), torch.cat([value_zeros, values], 2)))
    return padded, torch.cat([mask.new_zeros((mask.size(0), extra)), mask], 1)


def trimmed(cache: Any, mask: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """The cache and mask without their first positions where no row has anything (what
    left padding leaves once the rows it padded for have left): the batch's width stays its
    longest row's, not the number of forwards so far."""
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else mask.size(1)
    if start == 0:
        return cache, mask
    kept = [(keys[:, :, start:], values[:, :, start:]) for keys, values in tensors_of(cache)]
    return cache_of(kept), mask[:, start:]


@dataclass
class Slots:
    """The batch: its decoding state, its rows, which prompt each slot holds, and each slot's
    next token."""

    decoding: Decoding
    rows: Rows
    requests: list[int]
    tokens: list[int]


class Prompts:
    """The prompts to answer, and how a batch of them starts."""

    def __init__(
        self,
        encoder: GenerationEncoder,
        prompts: Sequence[Sequence[int]],
        instances: Sequence[GenerationInstance],
        eos_ids: set[int],
        choose: Choice = greedy,
    ):
        self.encoder, self.prompts, self.instances = encoder, prompts, instances
        self.eos_ids, self.choose = eos_ids, choose

    def started(self, decoding: Decoding, requests: list[int]) -> Slots:
        chosen = [self.instances[i] for i in requests]
        rows = Rows([x.until for x in chosen], [x.max_gen_toks for x in chosen])
        logits = decoding.start([self.prompts[i] for i in requests])
        return Slots(decoding, rows, list(requests), self.next_tokens(rows, logits))

    def next_tokens(self, rows: Rows, logits: torch.Tensor) -> list[int]:
        return chosen_tokens(rows, logits, self.eos_ids, self.encoder, self.choose)


def continuous_generate(
    step: Step,
    encoder: GenerationEncoder,
    prompts: Sequence[Sequence[int]],
    instances: Sequence[GenerationInstance],
    eos_ids: set[int],
    batch_size: int,
    share_prefix: bool = True,
    choose: Choice = greedy,
) -> list[list[int]]:
    """Each prompt's generated tokens (without the end-of-text token), in input order; prompts
    enter the batch in order (put the longest first). `choose`: greedy, or a
    :class:`~.sampling.Sampler` (its draws then depend on which prompts share the batch)."""
    decoding = Decoding(step, encoder.pad_id)
    if share_prefix:
        decoding.share(prompts[0][: shared_prefix(prompts)])
    asked = Prompts(encoder, prompts, instances, eos_ids, choose)
    results: list[list[int] | None] = [None] * len(prompts)
    waiting = deque(range(len(prompts)))
    batch = asked.started(
        decoding, [waiting.popleft() for _ in range(min(batch_size, len(waiting)))]
    )
    while True:
        rows = batch.rows
        done = [slot for slot, finished in enumerate(rows.done) if finished]
        for slot in done:
            results[batch.requests[slot]] = rows.tokens[slot]
        joins = joinable(batch.decoding.cache)
        if waiting and done and (joins or len(done) == len(batch.requests)):
            batch = refilled(batch, asked, done, waiting)
            continue  # rows may be done at their first token
        if all(rows.done) and not waiting:
            return [r if r is not None else [] for r in results]
        if done and not waiting and joins:  # finished rows leave the batch
            leave(batch, [slot for slot in range(len(batch.requests)) if not rows.done[slot]])
        batch.tokens = asked.next_tokens(batch.rows, batch.decoding.advance(batch.tokens))


def refilled(batch: Slots, asked: Prompts, done: list[int], waiting: deque) -> Slots:
    """Waiting prompts into the finished slots `done`; when every slot is done and the cache
    cannot take rows, as a new batch."""
    slots = done[: len(waiting)]
    fresh = asked.started(batch.decoding.fork(), [waiting.popleft() for _ in slots])
    if not joinable(batch.decoding.cache):  # every slot was done: the new prompts are the batch
        return fresh
    join(batch.decoding, fresh.decoding, slots)
    rows, new = batch.rows, fresh.rows
    for j, slot in enumerate(slots):
        batch.requests[slot], batch.tokens[slot] = fresh.requests[j], fresh.tokens[j]
        rows.until[slot], rows.budgets[slot] = new.until[j], new.budgets[j]
        rows.tokens[slot], rows.done[slot] = new.tokens[j], new.done[j]
    return batch


def join(decoding: Decoding, fresh: Decoding, slots: list[int]) -> None:
    """`fresh`'s rows (new prompts, started) into `decoding`'s finished `slots`: their caches
    padded on the left (masked) to one width."""
    if not joinable(fresh.cache):
        raise RuntimeError(f"generation: the model's caches differ ({type(fresh.cache).__name__})")
    width = max(decoding.mask.size(1), fresh.mask.size(1))
    old, mask = padded_to(tensors_of(decoding.cache), decoding.mask, width)
    added, new_mask = padded_to(tensors_of(fresh.cache), fresh.mask, width)
    index = torch.tensor(slots)
    merged = []
    for (keys, values), (new_keys, new_values) in zip(old, added, strict=True):
        keys, values = keys.clone(), values.clone()
        keys[index], values[index] = new_keys, new_values
        merged.append((keys, values))
    mask, positions = mask.clone(), decoding.positions.clone()
    mask[index], positions[index] = new_mask, fresh.positions
    decoding.cache, decoding.mask = trimmed(cache_of(merged), mask)
    decoding.positions = positions


def leave(batch: Slots, keep: list[int]) -> None:
    """Only the rows `keep` stay in the batch."""
    decoding, rows = batch.decoding, batch.rows
    decoding.keep(keep)
    decoding.cache, decoding.mask = trimmed(decoding.cache, decoding.mask)
    kept = Rows([rows.until[s] for s in keep], [rows.budgets[s] for s in keep])
    kept.tokens, kept.done = [rows.tokens[s] for s in keep], [False] * len(keep)
    batch.rows, batch.requests = kept, [batch.requests[s] for s in keep]
    batch.tokens = [batch.tokens[s] for s in keep]
