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


def gather_data(value: Any, dst: int, device: torch.device) -> list[Any] | None:
    """Every rank's `value` on rank `dst` (None elsewhere). Collective."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data = _to_bytes(value, device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world_size)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=device))
    longest = int(max(int(size) for size in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    if rank != dst:
        dist.gather(padded, None, dst=dst)
        return None
    received = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(world_size)]
    dist.gather(padded, received, dst=dst)
    return [_from_bytes(part[: int(size)]) for part, size in zip(received, sizes, strict=True)]


def broadcast_data(value: Any, src: int, device: torch.device) -> Any:
    """Rank `src`'s `value` on every rank. Collective."""
    data = _to_bytes(value, device) if dist.get_rank() == src else None
    size = torch.tensor([data.numel() if data is not None else 0], device=device)
    dist.broadcast(size, src=src)
    if data is None:
        data = torch.empty(int(size), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=src)
    return _from_bytes(data)
