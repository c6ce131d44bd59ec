"""A decoding cache with room for the tokens still to come (issue 59's rollouts).

Transformers' `DynamicLayer` concatenates a layer's keys and values with each step's: the whole
cache copied (into newly allocated memory) at every token, for every layer, which was a third of
a rollout's time on CPU. :class:`RoomyLayer` keeps them in buffers with room for more
positions: a step writes its position in place and the layer's `keys` and `values` are views of
the buffers' filled part, the same numbers as the concatenation's. Rows leaving (finished
completions) are moved down in place, so the live rows stay the first ones of the buffers.

Only the plain `DynamicLayer` layers of a `DynamicCache` are given room (:func:`with_room`);
others (sliding windows, a model's own cache) are left as they are.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

FIRST_ROOM = 256  # the most positions given at first (greedy budgets can be long, rows stop)
GROWTH = 64  # positions added when a buffer is full


def with_room(cache: Any, tokens: int) -> None:
    """Gives each plain layer of `cache` (a transformers `DynamicCache`) room for `tokens` more
    positions (at most FIRST_ROOM at first: more as they come); does nothing for another kind
    of cache."""
    if not isinstance(cache, DynamicCache):
        return
    for index, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized:
            cache.layers[index] = RoomyLayer(layer.keys, layer.values, min(tokens, FIRST_ROOM))


def roomy(states: torch.Tensor, room: int) -> torch.Tensor:
    """A buffer holding `states` ([rows, heads, positions, dim]) and `room` positions more."""
    rows, heads, length, dim = states.shape
    buffer = states.new_empty((rows, heads, length + room, dim))
    buffer[:, :, :length].copy_(states)
    return buffer


class RoomyLayer(DynamicLayer):
    """A layer's keys and values in buffers with room (see the module): `rows` first rows and
    `length` first positions filled."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.buffers = [roomy(keys, room), roomy(values, room)]
        self.rows, self.length = keys.size(0), keys.size(-2)
        self.viewed()

    def viewed(self) -> None:
        keys, values = self.buffers
        self.keys = keys[: self.rows, :, : self.length]
        self.values = values[: self.rows, :, : self.length]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's positions written after the filled ones (the buffers grown when full)."""
        end = self.length + key_states.size(-2)
        if end > self.buffers[0].size(-2):
            filled = [b[: self.rows, :, : self.length] for b in self.buffers]
            self.buffers = [roomy(b, end - self.length + GROWTH) for b in filled]
        self.buffers[0][: self.rows, :, self.length : end].copy_(key_states)
        self.buffers[1][: self.rows, :, self.length : end].copy_(value_states)
        self.length = end
        self.viewed()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Only the rows `indices` (ascending) kept: each moved down to its new place."""
        kept = indices.tolist()
        if kept != sorted(set(kept)):
            raise ValueError(f"cache: rows to keep must ascend, got {kept}")
        for place, row in enumerate(kept):
            if place != row:
                for buffer in self.buffers:
                    buffer[place, :, : self.length].copy_(buffer[row, :, : self.length])
        self.rows = len(kept)
        self.viewed()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.buffers = [b[: self.rows].repeat_interleave(repeats, dim=0) for b in self.buffers]
        self.rows *= repeats
        self.viewed()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("cache: a roomy layer is not cropped (decoding never crops)")
