"""Process groups: ranks, rendezvous, set-up and teardown. The one module that starts them.

Ports are bound once: the launcher holds the rendezvous store (a `TCPStore` server on port 0,
or on the port a multi-node launch names), so no port is picked first and bound later by
someone else. A one-process group needs no port at all.
"""

from __future__ import annotations

import atexit
import datetime
import os
import socket
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from tango.common.exceptions import ConfigurationError

_teardown_registered = False


@dataclass(frozen=True)
class Rendezvous:
    """How the workers of all nodes find each other: node 0's store, and the time limits."""

    host: str = "127.0.0.1"
    port: int = 0
    num_nodes: int = 1
    join_timeout_s: float = 300.0
    collective_timeout_s: float = 1800.0


def rendezvous_settings(
    num_nodes: int, address: str | None, port: int | None, timeout_s: float
) -> Rendezvous:
    """Where the nodes meet. One node listens on 127.0.0.1 on a port the OS picks; several take
    the address and port from the config or the standard `MASTER_ADDR` / `MASTER_PORT`."""
    if num_nodes == 1:
        return Rendezvous(host=address or "127.0.0.1", port=port or 0, join_timeout_s=timeout_s)
    address = address or os.environ.get("MASTER_ADDR")
    port = port or (int(os.environ["MASTER_PORT"]) if os.environ.get("MASTER_PORT") else None)
    if not address or not port:
        raise ConfigurationError(
            "train.master_addr / train.master_port: num_nodes > 1 needs node 0's address and a "
            "port (set them, or MASTER_ADDR and MASTER_PORT as SLURM and torchrun do)"
        )
    return Rendezvous(host=address, port=port, num_nodes=num_nodes, join_timeout_s=timeout_s)


def distributed_position() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def free_port() -> int:
    """A TCP port nobody listens on now. Racy by nature (someone may take it before it is
    bound): prefer :func:`start_store`, which binds its port itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(device_type: str) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device_type == "cuda" else "gloo"


def start_store(
    world_size: int, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 300.0
) -> dist.TCPStore:
    """The rendezvous store's server, held by the launcher; port 0 lets the OS choose one.

    Workers connect with :func:`connect_store` to `store.port`.
    """
    return _tcp_store(host, port, world_size, timeout_s, is_master=True, wait_for_workers=False)


def connect_store(host: str, port: int, world_size: int, timeout_s: float) -> dist.TCPStore:
    """A client of the launcher's store (retries until `timeout_s` if it is not up yet)."""
    return _tcp_store(host, port, world_size, timeout_s, is_master=False)


def _tcp_store(
    host: str, port: int, world_size: int, timeout_s: float, **kwargs: bool
) -> dist.TCPStore:
    timeout = datetime.timedelta(seconds=timeout_s)
    return dist.TCPStore(host, port, world_size, timeout=timeout, use_libuv=True, **kwargs)


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
