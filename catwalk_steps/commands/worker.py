"""`catwalk-worker`: run on every node but node 0 to join a multi-node `catwalk::train` (or
`catwalk::evaluate`) step (:mod:`catwalk_steps.launch.nodes` says how).

    catwalk-worker EXPERIMENT --node-rank N [--step trained] [-o OVERRIDES] [--ext-var K=V]
                   [-w WORKSPACE] [--master-addr HOST] [--master-port PORT] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from tango.common.exceptions import ConfigurationError

from ..errors import command_line
from ..experiment import add_reading_arguments
from ..launch.nodes import join


def env_int(*names: str) -> int | None:
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    return None


def parser() -> argparse.ArgumentParser:
    """The command's arguments (docs/reference/cli.md is generated from them). Defaults read
    from the environment are read once parsed (:func:`parse_args`), not into the parser."""
    parser = argparse.ArgumentParser(
        prog="catwalk-worker",
        description="Join node 0's catwalk::train or catwalk::evaluate step from another node: "
        "run it on every node but node 0, which runs `tango run` with the same experiment, "
        "overrides and ext vars (docs: Several nodes).",
    )
    parser.add_argument(
        "experiment", metavar="FILE", type=Path, help="the same experiment file as node 0's"
    )
    parser.add_argument(
        "--step", default="trained", metavar="NAME", help="the step to join (default: trained)"
    )
    parser.add_argument(
        "-o", "--overrides", metavar="JSON", help="the same -o as node 0's (default: none)"
    )
    add_reading_arguments(parser, "the same --ext-var as node 0's")
    parser.add_argument(
        "-w",
        "--workspace",
        metavar="DIR",
        help="the workspace node 0 uses, read here and never written (default: tango.yml's)",
    )
    add_node_arguments(parser.add_argument_group("this node and node 0"))
    return parser


def add_node_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--node-rank",
        type=int,
        metavar="N",
        help="this node's rank, 1 to num_nodes - 1 (default: $NODE_RANK, else $SLURM_NODEID)",
    )
    group.add_argument(
        "--master-addr",
        metavar="HOST",
        help="node 0's address (default: $MASTER_ADDR, else the step's master_addr)",
    )
    group.add_argument(
        "--master-port",
        type=int,
        metavar="PORT",
        help="node 0's rendezvous port (default: $MASTER_PORT, else the step's master_port)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="seconds to reach node 0 (default: the step's rendezvous_timeout, 300 s)",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    command = parser()
    args = command.parse_args(argv)
    if args.node_rank is None:
        args.node_rank = env_int("NODE_RANK", "SLURM_NODEID")
    args.master_addr = args.master_addr or os.environ.get("MASTER_ADDR")
    if args.master_port is None:
        args.master_port = env_int("MASTER_PORT")
    # The flags name node 0 for everything this command builds, the step's own checks too
    # (they read MASTER_ADDR / MASTER_PORT when the config names no address).
    if args.master_addr:
        os.environ["MASTER_ADDR"] = args.master_addr
    if args.master_port:
        os.environ["MASTER_PORT"] = str(args.master_port)
    if args.node_rank is None:
        command.error("missing --node-rank (or NODE_RANK, SLURM_NODEID)")
    if args.node_rank < 1:
        command.error("--node-rank: node 0 runs `tango run`; workers are nodes 1, 2, ...")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    args = parse_args(argv)
    try:
        if not args.experiment.is_file():
            raise ConfigurationError(f"{args.experiment}: no such experiment file")
        return command_line("catwalk-worker", lambda: join(args), quiet=True)
    except KeyboardInterrupt:
        print("catwalk-worker: interrupted; this node's workers were stopped", file=sys.stderr)
        return 130
    except ConfigurationError as e:
        print(f"catwalk-worker: ConfigurationError: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
