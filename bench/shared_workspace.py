"""Stress check of a workspace shared by a job array: N `tango run` jobs started together on one
workspace, each one cell of a small sweep (`--ext-var cell=i`), repeated R times.

    python bench/shared_workspace.py                      # N = 4 and 8, 20 rounds each
    python bench/shared_workspace.py --jobs 4 --rounds 3  # a quick look

Each round uses a fresh workspace and checks that every job exits 0, that every step the cells
share (the task's data, each seed's untrained evaluation) was computed exactly once across all
jobs, and that a final `tango run` of the whole sweep trains and evaluates nothing (it only
writes the report, which no cell's job includes) and prints the report. Results go to
bench/results/shared_workspace.{md,json}.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import REPO, machine, write_results

SWEEP = REPO / "bench" / "configs" / "sweep_jobs.jsonnet"
TANGO = str(Path(sys.executable).with_name("tango"))
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
FINISHED = re.compile(r'Finished step "([^"]+)"')


def learning_rates(jobs: int) -> str:
    """`--ext-var lrs=...` for a grid of exactly `jobs` cells (2 seeds x jobs / 2 rates)."""
    return ",".join(f"{(k + 1) * 1e-3:g}" for k in range(max(1, jobs // 2)))


def tango(workspace: Path, name: str, *extra: str) -> list[str]:
    return [
        TANGO,
        "--log-level",
        "info",
        "--file-friendly-logging",
        "run",
        str(SWEEP),
        "-w",
        str(workspace),
        "-n",
        name,
        *extra,
    ]


def one_round(jobs: int, workspace: Path) -> dict:
    """Starts `jobs` cells at once; returns what went wrong (empty lists: nothing)."""
    started = time.perf_counter()
    grid = ("--ext-var", f"lrs={learning_rates(jobs)}")
    processes = [
        subprocess.Popen(
            tango(workspace, f"cell{cell}", "--ext-var", f"cell={cell}", *grid),
            cwd=REPO,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for cell in range(jobs)
    ]
    outputs = [p.communicate(timeout=1800)[0] for p in processes]
    seconds = time.perf_counter() - started
    failed = [
        f"cell {cell}: exit {p.returncode}: {output.strip().splitlines()[-1:]}"
        for cell, (p, output) in enumerate(zip(processes, outputs, strict=True))
        if p.returncode != 0
    ]
    computed = Counter(name for output in outputs for name in FINISHED.findall(output))
    shared = {
        name: n
        for name, n in computed.items()
        if not name.startswith(("trained,", "eval_trained,"))
    }
    twice = [f"{name} computed {n} times" for name, n in shared.items() if n != 1]
    final = subprocess.run(
        tango(workspace, "whole", *grid), cwd=REPO, env=ENV, capture_output=True, text=True
    )
    final_output = final.stdout + final.stderr
    recomputed = [name for name in FINISHED.findall(final_output) if name != "report"]
    final_problems = []
    if final.returncode != 0:
        final_problems.append(f"the whole sweep exited {final.returncode}")
    if recomputed:
        final_problems.append(f"the whole sweep computed {recomputed}")
    if "Jobs sweep" not in final_output:
        final_problems.append("the whole sweep printed no report")
    return {
        "seconds": seconds,
        "failed_jobs": failed,
        "computed_twice": twice,
        "shared_steps": len(shared),
        "final": final_problems,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rows, payload = [], {"machine": machine(), "runs": {}}
    for jobs in args.jobs:
        rounds = []
        for index in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="shared-ws-") as scratch:
                result = one_round(jobs, Path(scratch) / "workspace")
            rounds.append(result)
            bad = result["failed_jobs"] + result["computed_twice"] + result["final"]
            print(
                f"{jobs} jobs, round {index + 1}: {result['seconds']:.1f} s, {bad or 'ok'}",
                flush=True,
            )
        payload["runs"][jobs] = rounds
        clean = sum(not (r["failed_jobs"] or r["computed_twice"] or r["final"]) for r in rounds)
        rows.append(
            f"| {jobs} | {len(rounds)} | {clean} | "
            f"{sum(len(r['failed_jobs']) for r in rounds)} | "
            f"{sum(len(r['computed_twice']) for r in rounds)} | "
            f"{sum(bool(r['final']) for r in rounds)} | "
            f"{statistics.median(r['seconds'] for r in rounds):.0f} |"
        )
    markdown = (
        "N `tango run` jobs started together on one workspace, one sweep cell each "
        "(`bench/configs/sweep_jobs.jsonnet`: synthetic task, tiny GPT-2, 2 training steps), "
        f"then the whole sweep once more; {machine()['cpu_threads']} CPU threads.\n\n"
        "| jobs | rounds | rounds all clean | jobs failed | shared steps computed twice "
        "| final runs that computed something | median s per round |\n"
        "|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )
    write_results("shared_workspace", payload, markdown)


if __name__ == "__main__":
    main()
