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
from ..launch.nodes import join


def env_int(*names: str) -> int | None:
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="catwalk-worker",
        description="Join node 0's catwalk::train or catwalk::evaluate step from another node.",
    )
    parser.add_argument("experiment", type=Path, help="the same experiment file as node 0's")
    parser.add_argument("--step", default="trained", help="the step's name")
    parser.add_argument("--node-rank", type=int, default=env_int("NODE_RANK", "SLURM_NODEID"))
    parser.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR"))
    parser.add_argument("--master-port", type=int, default=env_int("MASTER_PORT"))
    parser.add_argument("-o", "--overrides", default=None, help="the same -o as node 0's")
    parser.add_argument("--ext-var", action="append", default=[], help="KEY=VALUE, as tango's")
    parser.add_argument("-i", "--include-package", action="append", default=[])
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds to reach node 0 (default: the step's rendezvous_timeout, 300 s)",
    )
    parser.add_argument("-w", "--workspace", default=None, help="as tango run's (or tango.yml)")
    args = parser.parse_args(argv)
    # The flags name node 0 for everything this command builds, the step's own checks too
    # (they read MASTER_ADDR / MASTER_PORT when the config names no address).
    if args.master_addr:
        os.environ["MASTER_ADDR"] = args.master_addr
    if args.master_port:
        os.environ["MASTER_PORT"] = str(args.master_port)
    if args.node_rank is None:
        parser.error("missing --node-rank (or NODE_RANK, SLURM_NODEID)")
    if args.node_rank < 1:
        parser.error("--node-rank: node 0 runs `tango run`; workers are nodes 1, 2, ...")
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
