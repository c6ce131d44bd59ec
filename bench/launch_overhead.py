"""What starting a job's worker processes costs: the same tiny 2-process training run several
times in one process, with workers spawned (each imports torch, transformers, Tango and the
package) or forked from a server that imported them once (the launcher's default).

    python bench/launch_overhead.py --start-method forkserver --runs 3
    python bench/launch_overhead.py --start-method spawn --runs 3

Prints seconds per run; compare the two as whole processes (pairs of runs of each command).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import REPO

sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start-method", choices=("forkserver", "spawn"), default="forkserver")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from catwalk_steps.launch import launcher
    from tests.training import job

    launcher.START_METHOD = args.start_method
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.runs):
            started = time.perf_counter()
            launcher.run_training(job(Path(scratch) / f"run{index}", train_steps=2))
            print(f"{args.start_method} run {index}: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
