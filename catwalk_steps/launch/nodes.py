"""The other nodes of a multi-node `catwalk::train` or `catwalk::evaluate` step: how one joins
(`catwalk-worker`, :mod:`catwalk_steps.commands.worker`, is its command line).

Node 0 runs `tango run EXPERIMENT` as usual and owns the workspace. This command builds the same
experiment's step graph (nothing is computed) and the training job from it, on this node: node 0
sends no code and no pickle, only data (JSON): which step it runs, a checksum of its data (an
evaluation: its records' key and the chunks to score), and a token that it wrote into the step's
work directory. This node checks all three against its own copy of the experiment and its view
of the shared workspace (the step's data is read from there, as data), refuses in one line if
any differs, connects to node 0's rendezvous (address and port
from the flags, `MASTER_ADDR` / `MASTER_PORT`, or the step's `master_addr` / `master_port`;
node rank from the flag, `NODE_RANK` or `SLURM_NODEID`) and starts its `device_count` workers.
It writes no step record; checkpoints (an evaluation's records) go to the step's work
directory, which must be on a filesystem every node sees at the same path.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tango.common.exceptions import ConfigurationError

from ..distributed.rendezvous import connect_store, wait_for_listener
from ..errors import first_line
from ..experiment import read_experiment
from ..kinds.stored import data_fingerprint
from ..settings import DEFAULTS, TrainSettings
from .launcher import JOB_KEY, RENDEZVOUS_TOKEN, start_workers
from .plan import build_job
from .worker_process import RendezvousError, Work, train_on_worker

if TYPE_CHECKING:
    from tango.step import Step

logger = logging.getLogger("catwalk-worker")


def training_step(args: argparse.Namespace) -> Step[Any]:
    """The step as this node's copy of the experiment defines it (built as `tango run` builds
    it on node 0, nothing computed)."""
    experiment = read_experiment(
        args.experiment, args.overrides, args.ext_var, args.include_package
    )
    graph = experiment.steps
    if args.step not in graph:
        raise ConfigurationError(
            f"--step: no step '{args.step}' in {args.experiment} (steps: {', '.join(graph)})"
        )
    return graph[args.step]


def rendezvous_address(args: argparse.Namespace, step: Step[Any]) -> tuple[str, int]:
    """Node 0's address and port: the flags, else MASTER_ADDR / MASTER_PORT, else the step's
    own `master_addr` / `master_port`."""
    address = args.master_addr or step.kwargs.get("master_addr")
    port = args.master_port or step.kwargs.get("master_port") or step.kwargs.get("distributed_port")
    if not address or not port:
        raise ConfigurationError(
            "--master-addr / --master-port: node 0's address and port are needed (flags, "
            "MASTER_ADDR / MASTER_PORT, or master_addr / master_port in the step's config)"
        )
    return address, int(port)


def shared_workspace(args: argparse.Namespace) -> Any:  # a Workspace with `step_dir` (local)
    """The workspace node 0 uses: `-w`, else tango.yml's."""
    from tango.settings import TangoGlobalSettings
    from tango.workspace import Workspace

    if args.workspace:
        if "://" not in args.workspace and not Path(args.workspace).is_dir():
            raise ConfigurationError(
                f"-w {args.workspace}: no workspace there; give the workspace node 0 uses (this "
                "node reads it and writes nothing there)"
            )
        return Workspace.from_url(args.workspace)
    settings = TangoGlobalSettings.find_or_default()
    if settings.workspace is None:
        raise ConfigurationError("-w: give the workspace node 0 uses (or set it in tango.yml)")
    return Workspace.from_params(dict(settings.workspace))


def fetch_message(args: argparse.Namespace) -> dict:
    """What node 0 published, as JSON (never unpickled); one line when nothing answers within
    the timeout (torch's own error is a wall of C++ frames)."""
    from datetime import timedelta

    where = f"{args.master_addr}:{args.master_port}"
    unanswered = RendezvousError(
        f"{where}: node 0 did not answer within {args.timeout:g} s (rendezvous_timeout, or "
        "--timeout); is `tango run` running there, and is the port reachable from here?"
    )
    left = wait_for_listener(args.master_addr, args.master_port, args.timeout)
    if not left:
        raise unanswered
    try:
        with native_stderr_silenced():  # c10d logs each failed attempt from C++
            store = connect_store(args.master_addr, args.master_port, 1, left)
    except Exception:
        raise unanswered from None
    store.set_timeout(timedelta(seconds=args.timeout))
    try:
        payload = store.get(JOB_KEY)
    except Exception as e:
        raise RendezvousError(
            f"{where}: node 0 published no job within {args.timeout:g} s "
            f"({first_line(e)}); is `tango run` running there?"
        ) from None
    try:
        message = json.loads(payload)
        if not isinstance(message, dict) or not {"step_id", "token"} <= message.keys():
            raise ValueError("not a job")
        return message
    except (ValueError, TypeError):
        raise RendezvousError(
            f"{args.master_addr}:{args.master_port}: what was published there is not a "
            "catwalk job; refusing it"
        ) from None


@contextlib.contextmanager
def native_stderr_silenced():
    """File descriptor 2 to /dev/null for the block: what torch's C++ side writes there (its
    rendezvous retries) stays off the terminal; Python's own errors are said after the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def check_message(message: dict, step: Step[Any], work_dir: Path, args: argparse.Namespace) -> None:
    """The same step, and node 0 itself: it wrote the token into the shared work directory."""
    if message["step_id"] != step.unique_id:
        raise ConfigurationError(
            f"{args.experiment}: step '{args.step}' here is {step.unique_id}, but node 0 runs "
            f"{message['step_id']}; run the same experiment, overrides and ext vars on every node"
        )
    path = work_dir / RENDEZVOUS_TOKEN
    token = path.read_text().strip() if path.is_file() else ""
    if not hmac.compare_digest(token, str(message["token"])):
        raise RendezvousError(
            f"{args.master_addr}:{args.master_port}: the job's token does not match {path}; "
            "refusing a job that node 0 of this workspace did not publish"
        )


def shared_dataset(step: Step[Any], workspace: Any, message: dict) -> Any:
    """The step's data as node 0 computed it: read (as data) from the shared workspace."""
    data_step = step.kwargs["dataset_dict"]
    if data_step not in workspace.step_cache:
        raise ConfigurationError(
            f"{workspace.step_dir(data_step)}: the training data is not in the workspace; "
            "catwalk-worker reads it from the workspace node 0 uses (-w)"
        )
    dataset = workspace.step_cache[data_step]
    if data_fingerprint(dataset.splits) != message["dataset_sha256"]:
        raise ConfigurationError(
            f"{workspace.step_dir(data_step)}: this node's copy of the data differs from node 0's"
        )
    return dataset


def shared_model_directory(model: Any, workspace: Any, key: str = "init_from") -> Any:
    """`init_from` (or `reference`: `key`) as node 0 reads it: a step's model from the shared
    workspace."""
    from tango import Step

    if not isinstance(model, Step):
        return model  # a directory (or a model block) already
    if model not in workspace.step_cache:
        raise ConfigurationError(
            f"{workspace.step_dir(model)}: train.{key}'s model is not in the workspace; "
            "catwalk-worker reads it from the workspace node 0 uses (-w)"
        )
    return str(workspace.step_cache.step_dir(model))


def local_job(args: argparse.Namespace) -> tuple[Any, Work]:
    """This node's job (training or evaluation) and what each of its workers does."""
    step = training_step(args)
    args.master_addr, args.master_port = rendezvous_address(args, step)
    if args.timeout is None:
        args.timeout = float(step.kwargs.get("rendezvous_timeout", DEFAULTS["rendezvous_timeout"]))
    message = fetch_message(args)  # node 0 is up, so its workspace exists
    workspace = shared_workspace(args)
    work_dir = workspace.step_dir(step) / "work"
    check_message(message, step, work_dir, args)
    work: Work = train_on_worker
    job: Any
    node_job = getattr(step, "node_job", None)  # a step of its own workers (an evaluation)
    if callable(node_job):
        job, work = node_job(workspace, work_dir, message, logger)
    else:
        kwargs = {**step.kwargs, "dataset_dict": shared_dataset(step, workspace, message)}
        for key in ("init_from", "reference"):  # a step's model: its shared directory
            if step.kwargs.get(key) is not None:
                kwargs[key] = shared_model_directory(step.kwargs[key], workspace, key)
        settings = TrainSettings(**kwargs).started()
        job = build_job(settings, step.unique_id, step.name, work_dir, None, logger)
    rendezvous = replace(job.rendezvous, host=args.master_addr, port=args.master_port)
    return replace(job, rendezvous=rendezvous), work


def join(args: argparse.Namespace) -> None:
    """This node's workers, once node 0's job is checked; returns when they have finished."""
    job, work = local_job(args)
    if args.node_rank >= job.rendezvous.num_nodes:
        raise ConfigurationError(
            f"--node-rank {args.node_rank}: the step has num_nodes {job.rendezvous.num_nodes} "
            f"(node ranks 1..{job.rendezvous.num_nodes - 1} run catwalk-worker)"
        )
    logger.warning(
        "node %d: %s, ranks %d-%d of %d",
        args.node_rank,
        job.devices.describe(),
        args.node_rank * job.local_world_size,
        (args.node_rank + 1) * job.local_world_size - 1,
        job.world_size,
    )
    start_workers(job, args.node_rank, work)
