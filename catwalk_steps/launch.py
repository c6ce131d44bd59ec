"""Worker processes: started together, watched together, stopped together.

- One worker in all (`device_count: 1` on one node) trains in this process, as Tango does.
- Otherwise this process holds the rendezvous store (its port bound once) and starts one process
  per local device. If a worker dies, the others are stopped within a bounded time and the step
  fails with one line naming the rank and its exit signal or code. SIGINT or SIGTERM to this
  process stops its workers before it exits, so no orphan keeps writing checkpoints; workers
  also die with this process if it is killed outright (Linux `PR_SET_PDEATHSIG`).
- Other nodes (`catwalk-worker`, :mod:`.worker`) fetch the job from the store and start their
  own workers the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist
from tango.common.exceptions import ConfigurationError

from .checkpoints import read_manifest
from .distributed import (
    connect_store,
    destroy_process_group_if_initialized,
    init_process_group,
    start_store,
)
from .errors import first_line, one_line_error
from .loop import Trainer, TrainingJob, resumable_checkpoints, train_config_for

logger = logging.getLogger(__name__)
# Workers' tracebacks: to the run's log file; the terminal shows the one-line cause.
TRACEBACKS = logging.getLogger("catwalk_steps.traceback")

JOB_KEY = "catwalk/job"
STOP_GRACE_S = 10.0


@one_line_error
class WorkerFailed(RuntimeError):
    """A worker process failed; the message names the rank and the cause."""


@one_line_error
class RendezvousError(RuntimeError):
    """Not every node joined the process group in time; the message names the missing ones."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM, treated like Ctrl-C: stop the workers, then stop."""


@dataclass(frozen=True)
class WorkerReport:
    """What a failing worker tells the launcher before it exits."""

    rank: int
    error_type: str
    message: str
    traceback: str
    exception: bytes | None  # the pickled exception, re-raised by the launcher when it can be


def run_training(job: TrainingJob, node_rank: int = 0) -> None:
    """Trains `job` with this node's workers; returns when every worker has finished."""
    job.work_dir.mkdir(parents=True, exist_ok=True)
    if job.world_size == 1:
        try:
            Trainer(job, train_config_for(job, 0, 0)).run()
        finally:
            destroy_process_group_if_initialized()
        return
    store = None
    if node_rank == 0:
        rendezvous = job.rendezvous
        store = start_store(
            job.world_size, port=rendezvous.port, timeout_s=rendezvous.join_timeout_s
        )
        store.set(JOB_KEY, pickle.dumps(_with_port(job, 0, workspace=None)))
        job = _with_port(job, store.port)
        if rendezvous.num_nodes > 1:
            logger.info(
                "Waiting for %d more node(s) at port %d (catwalk-worker; see the README)",
                rendezvous.num_nodes - 1,
                store.port,
            )
    try:
        start_workers(job, node_rank)
    finally:
        del store


def _with_port(job: TrainingJob, port: int, **changes: Any) -> TrainingJob:
    from dataclasses import replace

    return replace(job, rendezvous=replace(job.rendezvous, port=port), **changes)


def start_workers(job: TrainingJob, node_rank: int) -> None:
    """One process per local device, watched until all end; the first failure stops the rest."""
    context = multiprocessing.get_context("spawn")
    errors = context.SimpleQueue()
    processes = [
        context.Process(
            target=worker_main,
            args=(job, node_rank, local_rank, errors),
            name=f"catwalk-rank{node_rank * job.local_world_size + local_rank}",
        )
        for local_rank in range(job.local_world_size)
    ]
    with terminate_on_sigterm():
        try:
            for process in processes:
                process.start()
            failed = wait_for(processes)
        except BaseException:
            stop(processes)
            raise
        if failed:
            # Exit codes as they were before the others are stopped: those are the causes.
            codes = [p.exitcode for p in processes]
            stop(processes)
            raise failure(job, node_rank, codes, drain(errors))


def wait_for(processes: list[multiprocessing.Process]) -> bool:
    """Until all exit (False) or one fails (True).

    The exit codes are read once per pass: a worker's sentinel closes before the worker can be
    reaped, so a second read could see it exit after the first saw it running, and a failed
    worker would count as finished (the step cached as succeeded, half-trained).
    """
    while True:
        codes = [p.exitcode for p in processes]
        if any(code not in (None, 0) for code in codes):
            return True
        running = [p for p, code in zip(processes, codes, strict=True) if code is None]
        if not running:
            return False
        multiprocessing.connection.wait([p.sentinel for p in running], timeout=1.0)


def stop(processes: list[multiprocessing.Process], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to every live worker, SIGKILL to those still alive after `grace_s`; waits."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def drain(errors: Any) -> list[WorkerReport]:
    reports = []
    while not errors.empty():
        reports.append(errors.get())
    return reports


def failure(
    job: TrainingJob,
    node_rank: int,
    exit_codes: list[int | None],
    reports: list[WorkerReport],
) -> BaseException:
    """The exception that tells what went wrong first.

    A worker killed by a signal is the cause (the others then fail on its absence); else the
    first worker that reported an error. Our own error types are re-raised as they are, so they
    print as one line; the full traceback goes to the log.
    """
    for report in reports:
        TRACEBACKS.error("rank %d failed:\n%s", report.rank, report.traceback)
    reported = {report.rank for report in reports}
    for local_rank, code in enumerate(exit_codes):
        rank = node_rank * job.local_world_size + local_rank
        if code is not None and code < 0 and rank not in reported:
            name = signal.Signals(-code).name
            return WorkerFailed(
                f"rank {rank} died: killed by {name}; the other workers were stopped "
                "(run the step again to resume from its last checkpoint)"
            )
    if reports:
        first = reports[0]
        if first.exception is not None:
            with contextlib.suppress(Exception):
                error = pickle.loads(first.exception)
                if isinstance(error, BaseException):
                    return error
        return WorkerFailed(f"rank {first.rank}: {first.error_type}: {first.message}")
    return WorkerFailed(f"a worker exited without a report (exit codes by rank: {exit_codes})")


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`Interrupted` in this (main) thread, so workers are stopped."""

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies, even by SIGKILL."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def worker_main(job: TrainingJob, node_rank: int, local_rank: int, errors: Any) -> None:
    """A worker process: joins the process group, trains, reports a failure in one line."""
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
    rank = node_rank * job.local_world_size + local_rank
    try:
        _prepare_worker(job, rank)
        rendezvous = job.rendezvous
        store = connect_store(
            rendezvous.host, rendezvous.port, job.world_size, rendezvous.join_timeout_s
        )
        wait_for_everyone(store, job, rank)
        device = job.devices.device(local_rank)
        init_process_group(
            device.type,
            rank,
            job.world_size,
            dist.PrefixStore("pg", store),
            rendezvous.collective_timeout_s,
            device=device,
        )
        Trainer(job, train_config_for(job, rank, local_rank)).run()
        dist.barrier()  # every rank is done before any tears the group down (gloo aborts else)
    except BaseException as e:
        errors.put(report_of(rank, e))
        os._exit(1)  # no teardown, no interpreter shutdown: a peer may be gone mid-collective
    destroy_process_group_if_initialized()
    leave_finished_worker()


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


def _prepare_worker(job: TrainingJob, rank: int) -> None:
    from tango.common.logging import initialize_worker_logging
    from tango.common.util import import_extra_module

    for package in job.include_package:
        import_extra_module(package)
    try:
        initialize_worker_logging(rank)  # records go to `tango run`'s log server
    except ValueError:  # started outside `tango run` (tests, notebooks): log here
        logging.basicConfig(level=logging.WARNING, format=f"rank {rank}: %(message)s")


def report_of(rank: int, error: BaseException) -> WorkerReport:
    try:
        pickled: bytes | None = pickle.dumps(error)
        pickle.loads(pickled)
    except Exception:
        pickled = None
    return WorkerReport(
        rank=rank,
        error_type=type(error).__name__,
        message=first_line(error),
        traceback="".join(traceback.format_exception(error)),
        exception=pickled,
    )


def wait_for_everyone(store: dist.Store, job: TrainingJob, rank: int) -> None:
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


def check_resumable(job: TrainingJob, engine_type: str) -> None:
    """Before any worker starts: a checkpoint this job would resume from must be one it can
    load (same engine; any device_count). One line otherwise."""
    candidates = resumable_checkpoints(job)
    if not candidates and job.resume_from is not None:
        raise ConfigurationError(f"train.resume_from: no complete checkpoint in {job.resume_from}")
    if not candidates:
        return
    manifest = read_manifest(candidates[0])
    written_by = manifest.get("engine")
    if written_by is not None and written_by != engine_type:
        raise ConfigurationError(
            f"{candidates[0]}: written by {written_by}, but this run trains with {engine_type}; "
            "checkpoints resume with the engine that wrote them (export it with "
            "catwalk::export_checkpoint and start from the weights instead)"
        )
    if manifest.get("world_size") != job.world_size:
        logger.info(
            "Resuming a %s-process checkpoint on %d processes",
            manifest.get("world_size"),
            job.world_size,
        )
