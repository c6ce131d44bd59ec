"""Continuous batching for generation in one process (one device, or a whole copy per worker).

A static batch (lm-evaluation-harness's) runs until its longest answer, most of its rows idle
after their own answers end. Here the batch has `batch_size` slots: when a row finishes, the next
waiting prompt takes its slot (its prompt run on its own, its cache joined to the batch's, padded
on the left to the same length and masked), and once nothing waits, finished rows leave the
batch. Each answer is still its own greedy decode: the same tokens as alone (tests).

Prompts that all start alike (a description, fixed examples) run that prefix once; every
prompt's own forward starts from a copy of its cache. Caches other than the plain per-layer key/
value tensors (sliding windows) cannot be joined: then a batch is refilled only when all its
rows are done, as static batches are. Under a sharded engine every rank must run the same
forwards, which a refill would break: there :func:`~.generation.greedy_generate` runs instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import torch

from ..tasks import GenerationInstance
from .generation import GenerationEncoder, Rows, Step, chosen_tokens, left_padded, shared_prefix


def joinable(cache: Any) -> bool:
    """Whether the cache is per-layer key/value tensors that rows can be put into."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = getattr(cache, "layers", None)
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


def padded_to(tensors, mask: torch.Tensor, width: int):
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


class ContinuousBatch:
    """The slots' caches, masks and positions; their rows (:class:`~.generation.Rows`)."""

    def __init__(self, step: Step, encoder: GenerationEncoder, prompts, instances, eos_ids):
        self.step, self.encoder, self.eos_ids = step, encoder, eos_ids
        self.prompts, self.instances = prompts, instances
        self.shared, self.prefix = 0, None

    def share(self, requests: Sequence[int]) -> None:
        """Runs the prefix every prompt has in common once, for every prompt's forward."""
        self.shared = shared_prefix([self.prompts[i] for i in requests])
        if self.shared:
            ids = torch.tensor([list(self.prompts[requests[0]][: self.shared])])
            positions = torch.arange(self.shared).unsqueeze(0)
            _, cache = self.step(ids, torch.ones_like(ids), positions, None)
            self.prefix = tensors_of(cache) if joinable(cache) else None
            self.shared = self.shared if self.prefix is not None else 0

    def prefill(self, requests: list[int]):
        """The prompts' forward: (last logits, cache tensors or cache, mask, last positions)."""
        count, shared = len(requests), self.shared
        ids, mask, positions = left_padded(
            [self.prompts[i][shared:] for i in requests], self.encoder.pad_id, start=shared
        )
        cache = None
        if shared:
            assert self.prefix is not None
            copies = [(k.expand(count, -1, -1, -1), v.expand(count, -1, -1, -1)) for k, v in
                      self.prefix]  # fmt: skip
            cache = cache_of([(k.contiguous(), v.contiguous()) for k, v in copies])
            mask = torch.cat([torch.ones((count, shared), dtype=torch.long), mask], dim=1)
        logits, cache = self.step(ids, mask, positions, cache)
        return logits, cache, mask, positions[:, -1:]

    def rows_of(self, requests: list[int]) -> Rows:
        chosen = [self.instances[i] for i in requests]
        return Rows([x.until for x in chosen], [x.max_gen_toks for x in chosen])

    def next_tokens(self, rows: Rows, logits: torch.Tensor) -> list[int]:
        return chosen_tokens(rows, logits, self.eos_ids, self.encoder)


def continuous_generate(
    step: Step,
    encoder: GenerationEncoder,
    prompts: Sequence[Sequence[int]],
    instances: Sequence[GenerationInstance],
    eos_ids: set[int],
    batch_size: int,
    share_prefix: bool = True,
) -> list[list[int]]:
    """Each prompt's generated tokens (without the end-of-text token), in input order; prompts
    enter the batch in order (put the longest first)."""
    state = ContinuousBatch(step, encoder, prompts, instances, eos_ids)
    if share_prefix:
        state.share(list(range(len(prompts))))
    results: list[list[int] | None] = [None] * len(prompts)
    waiting = deque(range(len(prompts)))
    requests = [waiting.popleft() for _ in range(min(batch_size, len(waiting)))]
    logits, cache, mask, positions = state.prefill(requests)
    rows = state.rows_of(requests)
    tokens = state.next_tokens(rows, logits)
    while True:
        done = [slot for slot, finished in enumerate(rows.done) if finished]
        for slot in done:
            results[requests[slot]] = rows.tokens[slot]
        if waiting and done and (joinable(cache) or len(done) == len(requests)):
            batch = (cache, mask, positions, rows, requests, tokens)
            cache, mask, positions, rows, requests, tokens = refill(state, batch, done, waiting)
            continue  # rows may be done at their first token
        if all(rows.done) and not waiting:
            return [r if r is not None else [] for r in results]
        if done and not waiting and joinable(cache):  # finished rows leave the batch
            keep = [slot for slot in range(len(requests)) if not rows.done[slot]]
            cache.batch_select_indices(torch.tensor(keep))
            cache, mask = trimmed(cache, mask[keep])
            positions = positions[keep]
            kept = Rows([rows.until[s] for s in keep], [rows.budgets[s] for s in keep])
            kept.tokens, kept.done = [rows.tokens[s] for s in keep], [False] * len(keep)
            rows, requests = kept, [requests[s] for s in keep]
            tokens = [tokens[s] for s in keep]
        ids = torch.tensor(tokens, dtype=torch.long).unsqueeze(1)
        mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
        positions = positions + 1
        logits, cache = step(ids, mask, positions, cache)
        tokens = state.next_tokens(rows, logits)


def refill(state: ContinuousBatch, batch: tuple, done: list[int], waiting: deque):
    """Waiting prompts into the finished slots `done`, or, when every slot is done and the cache
    cannot take rows, as a new batch: the batch (cache, mask, positions, rows, requests, next
    tokens) after it."""
    cache, mask, positions, rows, requests, tokens = batch
    slots = done[: len(waiting)]
    new = [waiting.popleft() for _ in slots]
    logits, new_cache, new_mask, new_positions = state.prefill(new)
    fresh = state.rows_of(new)
    first = state.next_tokens(fresh, logits)
    if not joinable(cache):  # every slot was done: the new prompts are the batch
        return new_cache, new_mask, new_positions, fresh, new, first
    if not joinable(new_cache):
        raise RuntimeError(f"generation: the model's caches differ ({type(new_cache).__name__})")
    width = max(mask.size(1), new_mask.size(1))
    old, mask = padded_to(tensors_of(cache), mask, width)
    added, new_mask = padded_to(tensors_of(new_cache), new_mask, width)
    index = torch.tensor(slots)
    merged = []
    for (keys, values), (new_keys, new_values) in zip(old, added, strict=True):
        keys, values = keys.clone(), values.clone()
        keys[index], values[index] = new_keys, new_values
        merged.append((keys, values))
    mask, positions, requests, tokens = (
        mask.clone(),
        positions.clone(),
        list(requests),
        list(tokens),
    )
    mask[index], positions[index] = new_mask, new_positions
    for j, slot in enumerate(slots):
        requests[slot], tokens[slot] = new[j], first[j]
        rows.until[slot], rows.budgets[slot] = fresh.until[j], fresh.budgets[j]
        rows.tokens[slot], rows.done[slot] = fresh.tokens[j], fresh.done[j]
    cache, mask = trimmed(cache_of(merged), mask)
    return cache, mask, positions, rows, requests, tokens
