"""Benchmark: what a local model directory's identity costs when the step graph is built.

    .venv/bin/python bench/model_digests.py [--size 300m] [--work DIR] [--repeat 3]

A `catwalk::evaluate` step of a local directory holds the directory's content in its unique id
(`model_content`: SHA-256 over its files), so weights replaced in place are scored again. The
graph is built by `tango run`, by each `--parallelism` slot and on every node: each file is
hashed once while it is unchanged, and its digest kept in the user's record
(catwalk_steps/file_digests.py). Measured on bench/model_scale.py's random-weight model of that
size (GPT-2 architecture, NeoX vocabulary, `save_pretrained`; 300m: 305M parameters, 1.2 GB),
each figure the step graph of one evaluate step built in a fresh process (as a slot or a node
does; interpreter start and imports not counted):

- cold: no record (the first graph build after the weights changed): every file hashed;
- warm: the record of that cold build: no file read;
- a config block of the same shape (no directory: nothing hashed), for comparison;
- the SHA-256 of the weight files alone, in this process.

The files are in the page cache in every case (they were just written or read): a cold disk adds
its read time to the cold figure. Results: bench/results/model_digests.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, machine, write_results
from model_scale import build_model

# (VmHWM, reset after the imports: ru_maxrss would be this benchmark's own, kept across exec)
BUILD = """
import json, sys, time
sys.path.insert(0, "bench")
import catwalk_steps
from common import read_status_kib, reset_peak_rss
from tango.step_graph import StepGraph
steps = json.loads(sys.argv[1])
reset_peak_rss()
start = time.perf_counter()
graph = StepGraph.from_params(steps)
seconds = time.perf_counter() - start
peak = read_status_kib("VmHWM") / 1024
print(json.dumps({"seconds": seconds, "peak_rss_mib": peak, "id": graph["ev"].unique_id}))
"""


def evaluate_step(model: dict) -> dict:
    task = {"type": "catwalk::synthetic", "seed": 1, "sizes": {"validation": 8}}
    return {"ev": {"type": "catwalk::evaluate", "model": model, "task": task}}


def graph_build(steps: dict, cache_home: Path) -> dict:
    """One step graph built in a fresh interpreter, with `cache_home` as XDG_CACHE_HOME."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache_home)}
    done = subprocess.run(
        [sys.executable, "-c", BUILD, json.dumps(steps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def hash_alone(directory: Path) -> float:
    from catwalk_steps.file_digests import sha256_of

    start = time.perf_counter()
    for path in sorted(directory.glob("*.safetensors")):
        sha256_of(path)
    return time.perf_counter() - start


def measure(directory: Path, work: Path, repeat: int) -> dict:
    """Cold and warm graph builds, `repeat` times each, and the baselines."""
    block = {"type": "catwalk::rank_classifier", "pretrained": str(directory)}
    config = json.loads((directory / "config.json").read_text())
    config_block = {
        "type": "catwalk::rank_classifier",
        "config": {k: config[k] for k in ("model_type", "n_layer", "n_embd", "n_head")},
        "tokenizer": "catwalk::byte_level",
    }
    cache_home = work / "xdg"
    cold, warm = [], []
    for _ in range(repeat):
        shutil.rmtree(cache_home, ignore_errors=True)
        cold.append(graph_build(evaluate_step(block), cache_home))
        warm.append(graph_build(evaluate_step(block), cache_home))
    assert len({r["id"] for r in cold + warm}) == 1, "one directory, one step id"
    record = cache_home / "catwalk_steps" / "file_digests.json"
    return {
        "cold": cold,
        "warm": warm,
        "config_block": [graph_build(evaluate_step(config_block), cache_home)],
        "hash_alone_s": [hash_alone(directory) for _ in range(repeat)],
        "record_bytes": record.stat().st_size,
    }


def markdown(size: str, weight_bytes: int, parameters: int, figures: dict) -> str:
    def seconds(rows: list[dict]) -> str:
        return ", ".join(f"{r['seconds']:.2f}" for r in rows)

    def peak(rows: list[dict]) -> str:
        return f"{max(r['peak_rss_mib'] for r in rows):.0f}"

    hashed = ", ".join(f"{s:.2f}" for s in figures["hash_alone_s"])
    return "\n".join(
        [
            f"Local model directory `{size}` ({parameters / 1e6:.0f}M parameters, "
            f"{weight_bytes / 2**30:.2f} GiB of weights), one `catwalk::evaluate` step's graph "
            "built in a fresh process (imports not counted):\n",
            "| graph build | seconds (each try) | peak RSS MiB while building |",
            "|---|---:|---:|",
            f"| cold: no record, every file hashed | {seconds(figures['cold'])} | "
            f"{peak(figures['cold'])} |",
            f"| warm: the user's record, no file read | {seconds(figures['warm'])} | "
            f"{peak(figures['warm'])} |",
            f"| a config block (no directory) | {seconds(figures['config_block'])} | "
            f"{peak(figures['config_block'])} |",
            f"| SHA-256 of the weight files alone | {hashed} | |",
            "",
            f"The record after it: {figures['record_bytes']} bytes. Files in the page cache.",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="300m")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-digests")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    directory, parameters = build_model(args.work, args.size)
    time.sleep(2.5)  # older than file_digests.RACY_NS: recorded (a file just written is not)
    weight_bytes = sum(p.stat().st_size for p in directory.glob("*.safetensors"))
    figures = measure(directory, args.work, args.repeat)
    payload = {"size": args.size, "parameters": parameters, "weight_bytes": weight_bytes}
    payload.update(machine=machine(), **figures)
    write_results("model_digests", payload, markdown(args.size, weight_bytes, parameters, figures))


if __name__ == "__main__":
    main()
