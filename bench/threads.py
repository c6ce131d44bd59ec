"""Benchmark: torch threads per CPU process against the cores and what else runs on them.

    python bench/threads.py [--sizes tiny,small,base] [--busy 0,1,2] [--rounds 2]

One training process (a GPT-2 built from a config: forward, backward and AdamW on a batch of
8 x 128 byte-level tokens, fp32), its seconds per step with 1 thread, with one per core, and
with one per core whose OpenMP threads sleep when they wait (`OMP_WAIT_POLICY=passive`: by
default they spin, and a spinning thread whose partner lost its core waits a whole time slice),
while 0, 1 or 2 other processes keep a core busy each (another user's job on a shared machine;
they spin in Python, the way a busy neighbour does). The median of a size's steps after two
warm-up steps, each (size, setting, busy) measured in its own process, the rounds interleaved.
Rows go to bench/results/threads.json and the table to bench/results/threads.md.

What it decides: `engines.base.default_cpu_threads`, the threads a CPU rank takes when
`cpu_threads` is left out.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

from common import machine, write_results

SIZES = {  # layers, width, steps measured: GPT-2 shapes with the byte-level vocabulary
    "tiny": (2, 32, 12),  # the demos' model
    "small": (4, 256, 8),  # ~3M parameters
    "base": (12, 768, 2),  # ~85M parameters (GPT-2 small's body): 3-15 s a step here
}
SETTINGS = ("1", "cores", "cores passive")  # threads, and OpenMP's wait policy


def spin() -> None:
    while True:
        pass


def one_run(size: str, threads: int, steps: int) -> float:
    """Median seconds per training step, in this process."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    layers, width, _ = SIZES[size]
    config = GPT2Config(
        n_layer=layers, n_embd=width, n_head=max(1, width // 64), vocab_size=257, n_positions=128
    )
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randint(0, 257, (8, 128))
    times = []
    for step in range(steps + 2):
        start = time.perf_counter()
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measured(size: str, setting: str, busy: int, cores: int) -> float:
    """`one_run` in a fresh process, with `busy` spinning processes beside it."""
    threads = 1 if setting == "1" else cores
    steps = SIZES[size][2]
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(busy)]
    for process in spinners:
        process.start()
    try:
        code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); " + (
            f"from threads import one_run; print(one_run({size!r}, {threads}, {steps}))"
        )
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        env.pop("OMP_WAIT_POLICY", None)
        if setting.endswith("passive"):
            env["OMP_WAIT_POLICY"] = "passive"  # read when OpenMP starts: a fresh process
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        return float(out.stdout.strip().splitlines()[-1])
    finally:
        for process in spinners:
            process.terminate()
            process.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,small,base")
    parser.add_argument("--busy", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    sizes, busy_counts = args.sizes.split(","), [int(b) for b in args.busy.split(",")]
    grid = [(s, setting, b) for s in sizes for b in busy_counts for setting in SETTINGS]
    results: dict[tuple, list[float]] = {cell: [] for cell in grid}
    for _ in range(args.rounds):
        for cell in grid:
            results[cell].append(measured(*cell, cores))
            print(cell, f"{results[cell][-1]:.4f} s/step", flush=True)
    rows = [
        {"size": s, "setting": t, "busy_cores": b, "s_per_step": min(results[(s, t, b)])}
        for s, t, b in grid
    ]
    by = {(r["size"], r["setting"], r["busy_cores"]): r["s_per_step"] for r in rows}
    lines = [
        f"One CPU training process, {cores} cores; best of {args.rounds} rounds of the median "
        f"of a size's steps (batch 8 x 128, fp32); torch {machine()['torch']}.",
        "",
        f"| model | busy cores | 1 thread s/step | {cores} threads s/step "
        f"| {cores} threads, passive s/step | {cores} threads / 1 | passive / 1 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        for busy in busy_counts:
            one, spin, passive = (by[(size, setting, busy)] for setting in SETTINGS)
            lines.append(
                f"| {size} | {busy} | {one:.4f} | {spin:.4f} | {passive:.4f} "
                f"| {spin / one:.2f} | {passive / one:.2f} |"
            )
    write_results("threads", {"cores": cores, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
