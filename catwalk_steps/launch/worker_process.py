"""What runs inside each worker process: join the process group, do the job's work (train, or
score a share of an evaluation), and on failure tell the launcher in one line, then leave
without the interpreter's shutdown.

A job is a `TrainingJob` or an `EvaluationJob`: each has the work directory, devices,
rendezvous and packages that a worker needs before it starts its work."""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from ..distributed.groups import destroy_process_group_if_initialized, init_process_group
from ..distributed.rendezvous import connect_store, gloo_interface, open_file_store
from ..errors import first_line, one_line_error
from ..training.job import TrainingJob, train_config_for
from ..training.loop import Trainer

# Set in a warm slot of `--parallelism` (:mod:`catwalk_steps.parallel.slot`): its workers fork
# from a server that outlives one step, so they name their job's step in their log prefix.
SLOT_ENV = "CATWALK_SLOT"

# What a worker does once it has joined the process group: `work(job, rank, local_rank)`, a
# module-level function (the fork server receives it by name).
Work = Callable[[Any, int, int], None]


@one_line_error
class RendezvousError(RuntimeError):
    """Not every node joined the process group in time; the message names the missing ones."""


@dataclass(frozen=True)
class WorkerReport:
    """What a failing worker tells the launcher before it exits: text only (the launcher
    rebuilds our one-line error types from their names)."""

    rank: int
    error_type: str  # qualified: "catwalk_steps.engines.base.NonFiniteLossError"
    message: str  # the first line
    traceback: str


def worker_main(
    local_rank: int, job: Any, node_rank: int, errors: Any, launcher: int, work: Work
) -> None:
    """A worker process (started by `torch.multiprocessing.start_processes`): joins the process
    group, does its `work` (trains, by default), reports a failure in one line; dies with
    `launcher` (its pid)."""
    die_with(launcher)
    rank = node_rank * job.local_world_size + local_rank
    try:
        prepare_worker(job, rank)
        join_process_group(job, rank, local_rank)
        work(job, rank, local_rank)
        dist.barrier()  # every rank is done before any tears the group down (gloo aborts else)
    except BaseException as e:  # Ctrl-C too: the launcher decides what happens next
        try:
            errors.put(report_of(rank, e))  # fails where the launcher is gone (a broken pipe)
        finally:
            os._exit(1)  # no teardown, no interpreter shutdown: a peer may be gone mid-collective
    destroy_process_group_if_initialized()
    leave_finished_worker()


def train_on_worker(job: TrainingJob, rank: int, local_rank: int) -> None:
    """A training job's work on one worker."""
    Trainer(job, train_config_for(job, rank, local_rank)).run()


def die_with(launcher: int, signum: int = signal.SIGKILL) -> None:
    """`signum` to this process (SIGKILL: a worker) as soon as the `launcher` process is gone,
    even killed outright.

    A forked process's parent is the fork server, not the launcher, and the server lives as
    long as its children do, so Linux's parent-death signal would never fire; a thread waits on
    a pidfd of the launcher instead (Linux >= 5.3; elsewhere it checks once a second).
    """

    def wait_then_signal() -> None:
        try:
            descriptor = os.pidfd_open(launcher)
        except ProcessLookupError:
            pass
        except (AttributeError, OSError):  # no pidfd here: poll
            while alive(launcher):
                time.sleep(1.0)
        else:
            select.select([descriptor], [], [])  # readable once the launcher has exited
        os.kill(os.getpid(), signum)

    threading.Thread(target=wait_then_signal, name="die-with-launcher", daemon=True).start()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare_worker(job: Any, rank: int) -> None:
    from tango.common.logging import initialize_prefix_logging, initialize_worker_logging
    from tango.common.util import import_extra_module
    from tqdm import tqdm

    # tqdm guards its bars with a multiprocessing lock (a named semaphore) unless it has one;
    # a worker leaves without interpreter shutdown, so that semaphore would be reported leaked.
    tqdm.set_lock(threading.RLock())

    for package in job.include_package:
        import_extra_module(package)
    try:
        if os.environ.get(SLOT_ENV):  # a warm slot's fork server: it has no step's prefix
            initialize_prefix_logging(prefix=f"step {job.step_name} rank {rank}")
        else:
            initialize_worker_logging(rank)  # records go to `tango run`'s log server
    except ValueError:  # started outside `tango run` (tests, notebooks): log here
        logging.basicConfig(level=logging.WARNING, format=f"rank {rank}: %(message)s")


def join_process_group(job: Any, rank: int, local_rank: int) -> None:
    rendezvous = job.rendezvous
    if rendezvous.file:  # one node: a file only this user can open
        store: dist.Store = open_file_store(rendezvous.file, rendezvous.join_timeout_s)
    else:
        store = connect_store(
            rendezvous.host, rendezvous.port, job.world_size, rendezvous.join_timeout_s
        )
    wait_for_everyone(store, job, rank)
    device = job.devices.device(local_rank)
    interface = gloo_interface(rendezvous)
    if interface is not None:  # before the group: gloo reads it when it connects the ranks
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    init_process_group(
        device.type,
        rank,
        job.world_size,
        dist.PrefixStore("pg", store),
        rendezvous.collective_timeout_s,
        device=device,
    )


def wait_for_everyone(store: dist.Store, job: Any, rank: int) -> None:
    """Every rank checks in; after `join_timeout_s` the missing ranks and nodes are named."""
    rendezvous = job.rendezvous
    store.set(f"arrived/{rank}", "1")
    store.add("arrived", 1)
    deadline = time.monotonic() + rendezvous.join_timeout_s
    while store.add("arrived", 0) < job.world_size:
        if time.monotonic() > deadline:
            missing = [r for r in range(job.world_size) if not store.check([f"arrived/{r}"])]
            nodes = sorted({r // job.local_world_size for r in missing})
            raise RendezvousError(
                f"rendezvous at {rendezvous.host}:{rendezvous.port}: node "
                f"{', '.join(map(str, nodes))} (rank {', '.join(map(str, missing))}) did not "
                f"join within {rendezvous.join_timeout_s:g} s (rendezvous_timeout); start "
                "`catwalk-worker` there with the same experiment, or lower num_nodes"
            )
        time.sleep(0.05)


def leave_finished_worker() -> None:
    """Exit 0 without interpreter finalization once the group is torn down.

    Finalization destroys what still refers to the process group's C++ side (FSDP states, device
    meshes, the store) in no set order; a gloo thread met that way aborts the process ("terminate
    called without an active exception", SIGABRT), which failed a run that had finished and
    written its last checkpoint. The worker has nothing left to do: flush its output and go.
    """
    logging.shutdown()  # the records still buffered for `tango run`'s log server
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def report_of(rank: int, error: BaseException) -> WorkerReport:
    return WorkerReport(
        rank=rank,
        error_type=f"{type(error).__module__}.{type(error).__qualname__}",
        message=first_line(error),
        traceback="".join(traceback.format_exception(error)),
    )
