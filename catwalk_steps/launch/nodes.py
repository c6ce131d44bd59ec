"""The command every node but node 0 runs to join a multi-node `catwalk::train` step.

    catwalk-worker EXPERIMENT --node-rank N [--step trained] [-o OVERRIDES] [--ext-var K=V]
                   [--master-addr HOST] [--master-port PORT] [--timeout SECONDS]

Node 0 runs `tango run EXPERIMENT` as usual and owns the workspace. This command builds the same
experiment's step graph (nothing is computed), connects to node 0's rendezvous (address and
port from the flags, `MASTER_ADDR` / `MASTER_PORT`, or the step's `master_addr` / `master_port`;
node rank from the flag, `NODE_RANK` or `SLURM_NODEID`), receives the training job from node
0, checks that it is the same step (same config, so the same cache key), and starts this
node's `device_count` workers. It never writes
to the workspace; checkpoints go to the step's work directory, which must be on a filesystem
every node sees at the same path.
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import sys
from dataclasses import replace
from pathlib import Path

from tango.common.exceptions import ConfigurationError

from ..distributed.rendezvous import connect_store
from ..errors import first_line
from ..training.job import TrainingJob
from .launcher import JOB_KEY, WorkerFailed, start_workers
from .worker_process import RendezvousError

logger = logging.getLogger("catwalk-worker")


def env_int(*names: str) -> int | None:
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="catwalk-worker", description="Join node 0's catwalk::train step from another node."
    )
    parser.add_argument("experiment", type=Path, help="the same experiment file as node 0's")
    parser.add_argument("--step", default="trained", help="the catwalk::train step's name")
    parser.add_argument("--node-rank", type=int, default=env_int("NODE_RANK", "SLURM_NODEID"))
    parser.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR"))
    parser.add_argument("--master-port", type=int, default=env_int("MASTER_PORT"))
    parser.add_argument("-o", "--overrides", default=None, help="the same -o as node 0's")
    parser.add_argument("--ext-var", action="append", default=[], help="KEY=VALUE, as tango's")
    parser.add_argument("-i", "--include-package", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to reach node 0")
    args = parser.parse_args(argv)
    if args.node_rank is None:
        parser.error("missing --node-rank (or NODE_RANK, SLURM_NODEID)")
    if args.node_rank < 1:
        parser.error("--node-rank: node 0 runs `tango run`; workers are nodes 1, 2, ...")
    return args


def training_step(args: argparse.Namespace):
    """The step as this node's copy of the experiment defines it (built, nothing computed)."""
    from tango.common.params import Params
    from tango.common.util import import_extra_module
    from tango.settings import TangoGlobalSettings
    from tango.step_graph import StepGraph

    settings = TangoGlobalSettings.find_or_default()
    for package in {"catwalk_steps", *(settings.include_package or []), *args.include_package}:
        import_extra_module(package)
    ext_vars = dict(item.split("=", 1) for item in args.ext_var)
    params = Params.from_file(args.experiment, args.overrides or "", ext_vars=ext_vars)
    graph = StepGraph.from_params(params.pop("steps"))
    if args.step not in graph:
        raise ConfigurationError(
            f"--step: no step '{args.step}' in {args.experiment} (steps: {', '.join(graph)})"
        )
    return graph[args.step]


def rendezvous_address(args: argparse.Namespace, step) -> tuple[str, int]:
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


def fetch_job(args: argparse.Namespace) -> TrainingJob:
    from datetime import timedelta

    store = connect_store(args.master_addr, args.master_port, 1, args.timeout)
    store.set_timeout(timedelta(seconds=args.timeout))
    try:
        payload = store.get(JOB_KEY)
    except Exception as e:
        raise RendezvousError(
            f"{args.master_addr}:{args.master_port}: node 0 published no training job within "
            f"{args.timeout:g} s ({first_line(e)}); is `tango run` running there?"
        ) from None
    job = pickle.loads(payload)
    rendezvous = replace(job.rendezvous, host=args.master_addr, port=args.master_port)
    return replace(job, rendezvous=rendezvous, workspace=None)


def run(args: argparse.Namespace) -> None:
    step = training_step(args)
    step_id = step.unique_id
    args.master_addr, args.master_port = rendezvous_address(args, step)
    job = fetch_job(args)
    if job.step_id != step_id:
        raise ConfigurationError(
            f"{args.experiment}: step '{args.step}' here is {step_id}, but node 0 trains "
            f"{job.step_id}; run the same experiment, overrides and ext vars on every node"
        )
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
    start_workers(job, args.node_rank)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    args = parse_args(argv)
    try:
        run(args)
    except (ConfigurationError, RendezvousError, WorkerFailed) as e:
        print(f"catwalk-worker: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("catwalk-worker: interrupted; this node's workers were stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
