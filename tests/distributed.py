"""Run a function on N processes with gloo on CPU, as the engines do in training.

The parent holds the rendezvous store (bound once, on a port the OS picks), so concurrent test
runs never race for a port.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path

import torch
import torch.multiprocessing as mp

from catwalk_steps.distributed.groups import (
    destroy_process_group_if_initialized,
    init_process_group,
)
from catwalk_steps.distributed.rendezvous import connect_store, start_store
from catwalk_steps.launch.launcher import PRELOAD
from catwalk_steps.scoring.generation import Ranks


def _worker(rank, world_size, port, fn, args, init, out_dir):
    torch.set_num_threads(1)
    if init:
        store = connect_store("127.0.0.1", port, world_size, timeout_s=60)
        init_process_group("cpu", rank, world_size, store, timeout_s=120)
    try:
        result = fn(rank, world_size, port, *args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        destroy_process_group_if_initialized()


# One list for every forkserver of the test process: the server is started once, with the
# list set at that moment, and serves every later test. (Console commands have a server of
# their own: tests/command_server.py.)
FORKSERVER_PRELOAD = [*PRELOAD, "tests.training", "tests.workspace_jobs"]


def forkserver_context():
    """The multiprocessing context of that server, with its list set."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(FORKSERVER_PRELOAD)
    return context


def run_distributed(
    fn: Callable, tmp_path: Path, *args, world_size: int = 2, init: bool = True
) -> list:
    """`fn(rank, world_size, port, *args)` on every rank; returns each rank's result.

    With `init=True` every rank has joined a gloo process group when `fn` starts. With
    `init=False` the function starts one itself (engines do), with `store_port` as its
    rendezvous: connect with `catwalk_steps.distributed.connect_store`.
    `fn` must be importable (module level) so spawned processes can find it.
    """
    out_dir = tmp_path / "results"
    out_dir.mkdir(exist_ok=True)
    store = start_store(world_size)
    # Forked from a server that imported torch and the package once, as the launcher's workers.
    forkserver_context()
    mp.start_processes(
        _worker,
        args=(world_size, store.port, fn, args, init, str(out_dir)),
        nprocs=world_size,
        start_method="forkserver",
    )
    del store
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


class OthersStillGoing(Ranks):
    """This rank's view of the others when another needs `extra` more steps (a generation's,
    a batch of perplexity windows') after this one is done: a lockstep loop's `Ranks`."""

    def __init__(self, extra: int):
        self.extra = extra

    def any(self, flag: bool) -> bool:
        if flag:
            return True
        self.extra -= 1
        return self.extra >= 0
