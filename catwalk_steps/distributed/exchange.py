"""Values sent between ranks as data, never as pickles.

torch's object collectives (`gather_object`, `broadcast_object_list`) unpickle what arrives:
whoever could put bytes on a rank's connection could run code there. Here a value (tensors,
numbers, strings and containers of them, as a checkpoint holds) travels as the bytes of
`torch.save` in a uint8 tensor and is read back with `torch.load(weights_only=True)`, the
unpickler that builds data only.
"""

from __future__ import annotations

import io
from typing import Any

import torch
import torch.distributed as dist


def _to_bytes(value: Any, device: torch.device) -> torch.Tensor:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).to(device)


def _from_bytes(data: torch.Tensor) -> Any:
    return torch.load(io.BytesIO(data.cpu().numpy().tobytes()), weights_only=True)


def all_sizes(count: int, device: torch.device) -> list[int]:
    """Every rank's `count`, rank by rank. Collective."""
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([count], dtype=torch.int64, device=device))
    return [int(size) for size in sizes]


def all_gathered_rows(table: torch.Tensor, world_size: int) -> tuple[torch.Tensor, int]:
    """Every rank's rows of `table` ([rows, columns], rows of any number; a float table),
    rank by rank, and where this rank's begin. Collective."""
    if world_size == 1:
        return table, 0
    sizes = all_sizes(table.size(0), table.device)
    padded = table.new_full((max(sizes), table.size(1)), float("nan"))
    padded[: table.size(0)] = table
    parts = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded)
    rows = torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)])
    return rows, sum(sizes[: dist.get_rank()])


def gather_data(value: Any, dst: int, device: torch.device) -> list[Any] | None:
    """Every rank's `value` on rank `dst` (None elsewhere). Collective."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data = _to_bytes(value, device)
    sizes = all_sizes(data.numel(), device)
    longest = max(sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    if rank != dst:
        dist.gather(padded, None, dst=dst)
        return None
    received = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(world_size)]
    dist.gather(padded, received, dst=dst)
    return [_from_bytes(part[:size]) for part, size in zip(received, sizes, strict=True)]


def broadcast_data(value: Any, src: int, device: torch.device) -> Any:
    """Rank `src`'s `value` on every rank. Collective."""
    data = _to_bytes(value, device) if dist.get_rank() == src else None
    size = torch.tensor([data.numel() if data is not None else 0], device=device)
    dist.broadcast(size, src=src)
    if data is None:
        data = torch.empty(int(size), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=src)
    return _from_bytes(data)
