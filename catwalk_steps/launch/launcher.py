"""Worker processes: started together, watched together, stopped together.

- One worker in all (`device_count: 1` on one node) trains in this process, as Tango does.
- Otherwise it starts one process per local device with `torch.multiprocessing.start_processes`.
  On one node they meet through a file in a directory only this user can enter (nothing
  listens); with several nodes this process holds node 0's TCP store (its port bound once) and
  publishes what the other nodes need (`catwalk-worker`, :mod:`catwalk_steps.launch.nodes`).
  Torch's `ProcessContext.join` watches the workers: it reaps a worker before reading its exit
  code (so a worker that failed is never counted as finished) and, when one fails, gives the
  others a grace period, then SIGTERM, then SIGKILL.
- Workers fork from a server process (start method "forkserver") that imported torch,
  transformers (its model and tokenizer classes too), Tango and this package once
  (:data:`PRELOAD`); a spawned worker spent seconds importing them for every training step.
  The server imports no CUDA state, so forking from it is safe on GPUs.

What this module adds to torch's, and why torch's alone does not do it:

- one line naming the cause: the failing rank's own error (the worker reports it before
  exiting), or "rank 1 died: killed by SIGKILL" when a worker was killed; torch's exception
  holds a traceback, or names the first failure it happened to look at, which after a kill may
  be a peer that failed on the killed one's absence;
- SIGINT or SIGTERM to this process stops the workers before it exits (torch's join leaves
  them running), so no orphan keeps writing checkpoints and the step is marked failed only
  once they are gone;
- workers die by SIGKILL with this process, also when it is killed outright
  (:func:`.worker_process.die_with`; torch asks the kernel for SIGINT on the death of a worker's
  parent, which for a forked worker is the fork server, and which a worker blocked in a
  collective would not act on).
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import re
import secrets
import signal
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, cast

import torch.multiprocessing as torch_mp

from catwalk_startup import fork_requests
from catwalk_startup.exit_with_parent import PARENT_ENV
from catwalk_startup.patching import check_version

from ..distributed.devices import held_plan
from ..distributed.groups import destroy_process_group_if_initialized
from ..distributed.rendezvous import private_store_file, start_store
from ..errors import one_line_error, rebuilt
from ..files import write_atomic
from ..run_temp import temp_files_in_run_dir
from ..training.job import TrainingJob
from .worker_process import Work, WorkerReport, train_on_worker, worker_main

logger = logging.getLogger(__name__)
# torch's "Terminating process <pid> via signal SIGTERM" for each worker it stops after one
# failed: the failure's own line says the others were stopped.
logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
# Workers' tracebacks: to the run's log file; the terminal shows the one-line cause.
TRACEBACKS = logging.getLogger("catwalk_steps.traceback")

JOB_KEY = "catwalk/job"
RENDEZVOUS_TOKEN = "rendezvous_token"  # in the step's work directory, for the other nodes
WORKER_FAILED = (torch_mp.ProcessExitedException, torch_mp.ProcessRaisedException)
GRACE_S = 5.0
# What the worker server imports once, by module name. transformers loads its model classes,
# tokenizers and torch's FSDP/DTensor lazily, the first time a model is built: each worker paid
# ~5 s of CPU for them per training step. Names, not a module of ours that imports them: Tango
# imports every module of an included package, and `tango run` itself needs none of these.
PRELOAD = (
    "catwalk_startup.exit_with_parent",  # first: the server ends with the process that started it
    "catwalk_startup.fork_requests",  # before it serves: a malformed request is refused
    "fairscale.nn.data_parallel",
    "torch.distributed.checkpoint",
    "torch.distributed.fsdp",
    "transformers.models.auto.configuration_auto",
    "transformers.models.auto.modeling_auto",  # AutoModelForCausalLM, generation utilities
    "transformers.models.auto.tokenization_auto",
    "transformers.tokenization_utils_tokenizers",  # PreTrainedTokenizerFast
    "catwalk_steps.steps",  # every registered step, engine, model and callback
)
START_METHOD = (
    "forkserver"  # for the other workers to fail on their own once one has, then for SIGTERM
)


# What gloo says when the other end of a rank's connection is gone (checked with torch 2.13's
# gloo: "[.../pair.cc:553] Connection closed by peer [127.0.0.1]:41344. This is typically ...",
# or "[.../pair.cc:537] Read error [127.0.0.1]:11960: Connection reset by peer. This is ...").
LOST_PEER = re.compile(r"Connection (closed|reset) by peer")
PEER_ADDRESS = re.compile(r"\[[^\]]*\]:\d+")


@one_line_error
class WorkerFailed(RuntimeError):
    """A worker process failed; the message names the rank and the cause."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM, treated like Ctrl-C: stop the workers, then stop."""


def run_training(job: TrainingJob, node_rank: int = 0) -> None:
    """Trains `job` with this node's workers; returns when every worker has finished."""
    run_job(job, train_on_worker, node_rank)


def run_job(job: Any, work: Work, node_rank: int = 0) -> None:
    """`work(job, rank, local_rank)` on each of this node's workers, or here when the job has
    one worker in all (as Tango trains); returns when every worker has finished. This node's
    GPUs for the job are held until then (:func:`~catwalk_steps.distributed.devices.held_plan`):
    steps running side by side never share one."""
    job.work_dir.mkdir(parents=True, exist_ok=True)
    with held_plan(job.devices, f"step {job.step_name}") as devices:
        run_on_devices(replace(job, devices=devices), work, node_rank)


def run_on_devices(job: Any, work: Work, node_rank: int) -> None:
    if job.world_size == 1:
        try:
            work(job, 0, 0)
        finally:
            destroy_process_group_if_initialized()
        return
    if job.rendezvous.num_nodes == 1:
        with private_store_file() as path:
            start_workers(replace(job, rendezvous=replace(job.rendezvous, file=path)), 0, work)
        return
    store = None
    if node_rank == 0:
        rendezvous = job.rendezvous
        store = start_store(
            job.world_size,
            host=rendezvous.host,
            port=rendezvous.port,
            timeout_s=rendezvous.join_timeout_s,
        )
        job = with_port(job, store.port)
        publish(store, job)
        logger.info(
            "Waiting for %d more node(s) at port %d (catwalk-worker; see docs/nodes.md)",
            rendezvous.num_nodes - 1,
            store.port,
        )
    try:
        start_workers(job, node_rank, work)
    finally:
        del store


def publish(store: Any, job: Any) -> None:
    """What the other nodes need from node 0, as data: which step (they build the job from their
    own copy of the experiment), what the job says of itself (a training job its data's
    checksum: they read the data from the shared workspace; an evaluation its records' key and
    the chunks to score), and a token that node 0 has just written into the step's work
    directory, where a store impersonating node 0 cannot read it."""
    token = secrets.token_hex(16)
    path = Path(job.work_dir) / RENDEZVOUS_TOKEN

    def write_token(temporary: Path) -> None:
        temporary.write_text(token)
        temporary.chmod(0o600)

    write_atomic(path, write_token)
    message = {
        "step_id": job.step_id,
        "token": token,
        "world_size": job.world_size,
        **job.node_message(),  # a training job's data checksum, an evaluation's records
    }
    store.set(JOB_KEY, json.dumps(message))


def with_port(job: TrainingJob, port: int, **changes: Any) -> TrainingJob:
    return replace(job, rendezvous=replace(job.rendezvous, port=port), **changes)


def start_workers(job: Any, node_rank: int, work: Work = train_on_worker) -> None:
    """One process per local device, watched until all end; the first failure stops the rest."""
    errors = worker_context(job).SimpleQueue()
    with terminate_on_sigterm():
        context = launched(job, node_rank, errors, work)
        try:
            watch(context)
        except WORKER_FAILED as e:  # torch has stopped the others
            codes = [process.exitcode for process in context.processes]
            raise failure(job, node_rank, e.error_index, codes, drain(errors)) from None
        except BaseException:  # Ctrl-C, SIGTERM: the workers go first
            stop(context.processes)
            raise


def launched(job: Any, node_rank: int, errors: Any, work: Work) -> torch_mp.ProcessContext:
    """Torch's `start_processes`, one worker after the other. A worker lost before it has read
    its job from the fork server (killed, out of memory) breaks the start of that worker, and
    torch neither stops those already started nor returns them: they would wait for the lost
    one to join until the rendezvous timeout, and keep this process from exiting. They are
    stopped here; the cause is one line.

    Torch names a file per worker for its traceback in `tempfile`'s directory and unpickles it
    when the worker fails: in a shared $TMPDIR another user could put a pickle at that name
    (and a file written there outlived a killed run); they are made in the run's own directory
    (0700, removed with the run)."""
    before = set(multiprocessing.active_children())
    try:
        with temp_files_in_run_dir():
            return torch_mp.start_processes(
                worker_main,
                args=(job, node_rank, errors, os.getpid(), work),
                nprocs=job.local_world_size,
                join=False,
                start_method=START_METHOD,
            )
    except BaseException as e:
        stop([p for p in multiprocessing.active_children() if p not in before])
        if isinstance(e, (OSError, EOFError)):
            raise WorkerFailed(
                f"a worker died while the workers were starting ({type(e).__name__}: {e}); "
                f"the other workers were stopped ({job.AFTER_FAILURE})"
            ) from None
        raise


def worker_context(job: Any) -> Any:
    """The multiprocessing context workers start from, its server running."""
    return server_context(job.include_package)


def server_context(include_package: Iterable[str] = ()) -> Any:
    """The multiprocessing context whose processes fork from the worker server (training
    workers, `--parallelism`'s slots), the server running."""
    start_worker_server(include_package)
    return multiprocessing.get_context(START_METHOD)


def start_worker_server(include_package: Iterable[str] = ()) -> None:
    """Starts the server that workers fork from, unless it runs, and returns at once: it imports
    what they need (:data:`PRELOAD`, the `--include-package` modules) while this process goes
    on, e.g. Tango building the step graph. A server already running keeps what it has; workers
    import the rest themselves. It refuses bad requests: :mod:`catwalk_startup.fork_requests`."""
    check_version("python", fork_requests.PATCH)
    multiprocessing.get_context(START_METHOD).set_forkserver_preload([*PRELOAD, *include_package])
    os.environ[PARENT_ENV] = str(os.getpid())  # the server's alone (it removes it at start)
    try:
        with temp_files_in_run_dir():  # multiprocessing's pymp-* (the server's socket) in it
            multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.pop(PARENT_ENV, None)


def watch(context: torch_mp.ProcessContext) -> None:
    """Until every worker has finished; raises one of :data:`WORKER_FAILED` for the first
    failure, once the others are stopped (a grace period, SIGTERM, then SIGKILL)."""
    while not context.join(timeout=1.0, grace_period=GRACE_S):
        pass


def stop(processes: Sequence[BaseProcess], grace_s: float = GRACE_S) -> None:
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
    job: Any,
    node_rank: int,
    first: int,
    exit_codes: list[int | None],
    reports: list[WorkerReport],
) -> BaseException:
    """The exception that tells what went wrong first.

    A worker killed by a signal (other than the SIGTERM that stops the rest) is the cause: the
    others then fail on its absence. Else the error of the first worker that reported one; our
    own error types are re-raised as they are, so they print as one line, and every traceback
    goes to the log.
    """
    for report in reports:
        TRACEBACKS.error("rank %d failed:\n%s", report.rank, report.traceback)
    reported = {report.rank for report in reports}
    base = node_rank * job.local_world_size
    killed = [
        local
        for local, code in enumerate(exit_codes)
        if code is not None and code < 0 and base + local not in reported
    ]
    killed.sort(key=lambda local: (local != first, exit_codes[local] == -signal.SIGTERM))
    if killed:
        name = signal.Signals(-cast(int, exit_codes[killed[0]])).name  # not None: see `killed`
        return WorkerFailed(
            f"rank {base + killed[0]} died: killed by {name}; the other workers were stopped "
            f"({job.AFTER_FAILURE})"
        )
    if reports:
        first_report = reports[0]
        error = rebuilt(first_report.error_type, first_report.message)
        if error is not None:
            return error
        kind = first_report.error_type.rpartition(".")[2]
        lost = LOST_PEER.search(first_report.message)
        if lost and job.rendezvous.num_nodes > 1:
            peer = PEER_ADDRESS.search(first_report.message)
            said = f"connection {lost.group(1)} by peer" + (f" {peer.group(0)}" if peer else "")
            return WorkerFailed(
                f"rank {first_report.rank}: a worker on another node is gone (that node was "
                f"lost, or its worker died: see its output; gloo: {said}); {job.AFTER_FAILURE}"
            )
        return WorkerFailed(f"rank {first_report.rank}: {kind}: {first_report.message}")
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
