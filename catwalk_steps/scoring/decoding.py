"""One batch being decoded, the one state both generation loops keep: the lockstep loop
(:func:`~.generation.greedy_generate`, under engines and across ranks) and continuous batching
(:mod:`.continuous`, one process). Its rows' cache, attention mask and next positions, and the
prompt prefix every prompt shares, run once: each batch of prompts starts from a copy of its
cache (for any kind of cache).

`step(ids, mask, positions, cache) -> (last logits, cache)` is one forward of the model (its
own, or through an engine's root wrapper: :func:`~.generation.forward_step`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch

Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], tuple[torch.Tensor, Any]]
MIN_SHARED_TOKENS = 8  # a shorter shared prefix is not worth a forward of its own


def left_padded(
    prompts: Sequence[Sequence[int]], pad_id: int, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompts padded on the left: ids, attention mask, positions (from `start`)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
    positions = (mask.cumsum(-1) - 1 + start).masked_fill(mask == 0, 0)
    return ids, mask, positions


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """How many first tokens every prompt has in common, leaving each at least one of its own
    (0 when that is too short to be worth sharing)."""
    if len(prompts) < 2:
        return 0
    shortest = min(len(p) for p in prompts) - 1
    length = 0
    first = prompts[0]
    while length < shortest and all(p[length] == first[length] for p in prompts):
        length += 1
    return length if length >= MIN_SHARED_TOKENS else 0


class Decoding:
    """A batch's decoding state (see the module): `cache`, `mask` and `positions` (the last
    position of each row) after :meth:`start` and each :meth:`advance`. `room`: how many tokens
    the rows' cache gets room for after the prompts (:mod:`.cache_room`; 0: the model's own
    cache, concatenated at each step)."""

    def __init__(self, step: Step, pad_id: int, room: int = 0):
        self.step, self.pad_id, self.room = step, pad_id, room
        self.shared, self.prefix = 0, None
        self.cache: Any = None
        self.mask = self.positions = torch.empty(0)

    def share(self, prefix: Sequence[int]) -> None:
        """Runs `prefix`, the tokens every prompt starts with, once (nothing when empty)."""
        if not prefix:
            return
        ids = torch.tensor([list(prefix)], dtype=torch.long)
        positions = torch.arange(len(prefix)).unsqueeze(0)
        _, self.prefix = self.step(ids, torch.ones_like(ids), positions, None)
        self.shared = len(prefix)

    def start(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """The prompts' forward after the shared prefix (from a copy of its cache, one row per
        prompt): each row's last logits; the state is now these rows'."""
        count, shared = len(prompts), self.shared
        ids, mask, positions = left_padded([p[shared:] for p in prompts], self.pad_id, shared)
        cache: Any = None  # a transformers Cache
        if shared:
            cache = copy.deepcopy(self.prefix)
            cache.batch_repeat_interleave(count)
            mask = torch.cat([torch.ones((count, shared), dtype=torch.long), mask], dim=1)
        logits, self.cache = self.step(ids, mask, positions, cache)
        if self.room:
            from .cache_room import with_room  # transformers, imported when decoding

            with_room(self.cache, self.room)
        self.mask, self.positions = mask, positions[:, -1:]
        return logits

    def expand(self, logits: torch.Tensor, times: int) -> torch.Tensor:
        """Each row as `times` rows in a row (row r's copies are rows r * times ...): its cache,
        mask and position, and its `logits` (returned), so that a prompt run once is continued
        `times` ways (a group of sampled completions) without running it again."""
        if times > 1:
            self.cache.batch_repeat_interleave(times)
            self.mask = self.mask.repeat_interleave(times, dim=0)
            self.positions = self.positions.repeat_interleave(times, dim=0)
            logits = logits.repeat_interleave(times, dim=0)
        return logits

    def advance(self, tokens: Sequence[int]) -> torch.Tensor:
        """One decoding step: each row's next token in; each row's next logits."""
        ids = torch.tensor(list(tokens), dtype=torch.long).unsqueeze(1)
        self.mask = torch.cat([self.mask, torch.ones_like(ids)], dim=1)
        self.positions = self.positions + 1
        logits, self.cache = self.step(ids, self.mask, self.positions, self.cache)
        return logits

    def keep(self, rows: Sequence[int]) -> None:
        """Only `rows` (ascending indices of the current rows) go on: their cache, mask and
        positions."""
        self.cache.batch_select_indices(torch.tensor(rows, dtype=torch.long))
        self.mask, self.positions = self.mask[rows], self.positions[rows]

    def fork(self) -> Decoding:
        """A new batch with the same shared prefix (prompts about to join this one)."""
        other = Decoding(self.step, self.pad_id, self.room)
        other.shared, other.prefix = self.shared, self.prefix
        return other
