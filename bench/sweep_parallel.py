"""Benchmark: `tango run --parallelism 2` against the same sweep run one step at a time, on this
machine's cores, each run in a fresh workspace (nothing cached).

    .venv/bin/python bench/sweep_parallel.py [--rounds 2] [--minute-steps 4500] [--skip-stock]

Two sweeps, 4 cells each (2 seeds x 2 learning rates, one process per cell: the cores are
shared either way):
- `experiments/sweep_demo.jsonnet` as users run it (cells of a few seconds): `--parallelism 2`
  should take at most 1.1x the sequential run;
- `bench/configs/sweep_minute.jsonnet`: the same cells training about a minute each, the sweep
  `--parallelism` is for: at most 0.6x.
For sweep_demo it also times Tango's own multicore executor (`--parallelism 2` with a settings
file that names no executor: a fresh `tango` process per step), what `--parallelism` did before.
Runs alternate (sequential, parallel, [stock], sequential, ...) so the machine's drift falls on
each alike; the ratio is taken pair by pair, in one round. Results: bench/results/
sweep_parallel.{md,json}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, machine, write_results

TANGO = str(Path(sys.executable).with_name("tango"))
SWEEPS = {
    "sweep_demo": REPO / "experiments" / "sweep_demo.jsonnet",
    "sweep_minute": REPO / "bench" / "configs" / "sweep_minute.jsonnet",
}
TARGETS = {"sweep_demo": 1.1, "sweep_minute": 0.6}
# Tango's stock executor: the same settings as tango.yml, without `executor`.
STOCK_SETTINGS = """workspace: {type: catwalk::local, dir: workspace}
include_package: [catwalk_steps]
environment: {seeds: "", lrs: "", ranks: "", alphas: "", engines: "", cell: "", steps: "",
  suite_source: "", training: ""}
"""


def timed_run(sweep: str, variant: str, extra: list[str], settings: Path) -> float:
    """Wall seconds of one `tango run` of the sweep in a fresh workspace; fails loudly."""
    with tempfile.TemporaryDirectory(prefix="catwalk-bench-") as workspace:
        command = [TANGO]
        if variant == "stock":
            command += ["--settings", str(settings)]
        command += ["run", str(SWEEPS[sweep]), "-w", workspace, *extra]
        if variant != "sequential":
            command += ["--parallelism", "2"]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{sweep} {variant} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    print(f"  {sweep} {variant}: {seconds:.1f} s", flush=True)
    return seconds


def measure(sweep: str, variants: list[str], rounds: int, extra: list[str], settings: Path):
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(rounds):
        for variant in variants:
            times[variant].append(timed_run(sweep, variant, extra, settings))
    ratios = {
        v: [p / s for p, s in zip(times[v], times["sequential"], strict=True)]
        for v in variants
        if v != "sequential"
    }
    return {"seconds": times, "ratios": ratios}


def markdown(results: dict, args: argparse.Namespace) -> str:
    lines = [
        f"`tango run --parallelism 2` against one step at a time, {os.cpu_count()} cores, fresh "
        f"workspace per run, runs alternating ({args.rounds} round(s) of sweep_demo, "
        f"{args.minute_rounds} of sweep_minute); wall seconds (median) and the ratio to the "
        "sequential run of the same round (median).",
        "",
        "| sweep | sequential s | variant | s | ratio | target |",
        "|---|---:|---|---:|---:|---|",
    ]
    for sweep, result in results.items():
        sequential = statistics.median(result["seconds"]["sequential"])
        for variant, ratios in result["ratios"].items():
            seconds = statistics.median(result["seconds"][variant])
            ratio = statistics.median(ratios)
            target = f"<= {TARGETS[sweep]}" if variant == "slots" else "(before)"
            lines.append(
                f"| {sweep} | {sequential:.1f} | {variant} | {seconds:.1f} | {ratio:.2f} "
                f"| {target} |"
            )
    lines += [
        "",
        "slots: `--parallelism 2` as it runs now (2 warm slot processes, 1 thread each); "
        "stock: Tango's multicore executor (a `tango` process per step). sweep_minute: "
        f"{args.minute_steps} training steps per cell.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--minute-rounds", type=int, default=1)
    parser.add_argument("--minute-steps", type=int, default=4500)
    parser.add_argument("--skip-stock", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        settings = Path(scratch) / "stock.yml"
        settings.write_text(STOCK_SETTINGS)
        demo_variants = ["sequential", "slots"] + ([] if args.skip_stock else ["stock"])
        print("sweep_demo:", flush=True)
        results = {"sweep_demo": measure("sweep_demo", demo_variants, args.rounds, [], settings)}
        print("sweep_minute:", flush=True)
        extra = ["--ext-var", f"steps={args.minute_steps}"]
        results["sweep_minute"] = measure(
            "sweep_minute", ["sequential", "slots"], args.minute_rounds, extra, settings
        )
    payload = {"machine": machine(), "args": vars(args), "results": results}
    write_results("sweep_parallel", payload, markdown(results, args))


if __name__ == "__main__":
    main()
