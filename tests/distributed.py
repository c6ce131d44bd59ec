"""Run a function on N processes with gloo on CPU, as the engines do in `torch::train`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from catwalk_steps.steps import free_port


def _worker(rank, world_size, port, fn, args, init, out_dir):
    torch.set_num_threads(1)
    if init:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
        )
    try:
        result = fn(rank, world_size, port, *args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_distributed(
    fn: Callable, tmp_path: Path, *args, world_size: int = 2, init: bool = True
) -> list:
    """`fn(rank, world_size, port, *args)` on every rank; returns each rank's result.

    With `init=False` the function starts the process group itself (engines do) on `port`.
    `fn` must be importable (module level) so spawned processes can find it.
    """
    out_dir = tmp_path / "results"
    out_dir.mkdir(exist_ok=True)
    mp.spawn(
        _worker, args=(world_size, free_port(), fn, args, init, str(out_dir)), nprocs=world_size
    )
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
