"""Process groups: ranks, set-up and teardown. The one module that starts them (the store they
meet through comes from :mod:`.rendezvous`); a one-process group needs no port at all.
"""

from __future__ import annotations

import atexit
import datetime
import sys

import torch
import torch.distributed as dist

_teardown_registered = False


def distributed_position() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def backend_for(device_type: str) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device_type == "cuda" else "gloo"


def init_process_group(
    device_type: str,
    rank: int,
    world_size: int,
    store: dist.Store | None = None,
    timeout_s: float = 1800.0,
    device: torch.device | None = None,
) -> None:
    """Joins the default process group; a one-process group needs no store (`HashStore`)."""
    if device is not None:
        cuda_device_for(device)
    if store is None:
        if world_size != 1:
            raise ValueError("a process group of several ranks needs a rendezvous store")
        store = dist.HashStore()
    dist.init_process_group(
        backend_for(device_type),
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    register_teardown()


def destroy_process_group_if_initialized() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _forget_fairscale_groups()


def _forget_fairscale_groups() -> None:
    """FairScale caches the groups it creates for the life of the process; after a teardown
    they are dead, and a later run in the same process (a test, a notebook) would use them.

    Private: the cache is the attribute `_global_group_cache` of
    `fairscale.internal.parallel.get_process_group_cached` (fairscale 0.4.13).
    """
    parallel = sys.modules.get("fairscale.internal.parallel")
    cached = getattr(parallel, "get_process_group_cached", None)
    if cached is not None and hasattr(cached, "_global_group_cache"):
        del cached._global_group_cache


def register_teardown() -> None:
    """Tear the process group down at exit, before the interpreter stops its threads.

    Idempotent: one `atexit` handler per process, however many engines are built.
    """
    global _teardown_registered
    if not _teardown_registered:
        atexit.register(destroy_process_group_if_initialized)
        _teardown_registered = True


def barrier() -> None:
    """Waits for every rank; nothing to wait for outside a process group."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def cuda_device_for(device: torch.device) -> None:
    """Make `device` the current CUDA device (NCCL needs it); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
