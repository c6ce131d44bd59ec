"""Packed SFT against padded batches (`collate_fn.packing`): tokens/s of real tokens.

Training examples whose lengths (prompt and answer, tokens) are drawn log-uniform between 32 and
512 (chat SFT sets are long-tailed), half of each the answer; batches of 16, max_length 512; a
GPT-2 of ~124M parameters (12 x 768, vocabulary 50257) with random weights, float32, AdamW; the
same batches both ways, built by the generative kind's own batch function
(:func:`catwalk_steps.kinds.generative.training_batch`), each step through the rank classifier's
forward, backward and an optimizer step, on `--threads` CPU threads; the two models alternate
batch by batch, so that other work on the machine weighs on both alike.

Run: `python bench/packing_throughput.py --steps 3` (bench/results/packing_throughput.md).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import gpt2_spec, machine, write_results  # noqa: E402

MAX_LENGTH, BATCH = 512, 16


def lengths(rng: random.Random, count: int, low: int = 32, high: int = 512) -> list[int]:
    return [round(math.exp(rng.uniform(math.log(low), math.log(high)))) for _ in range(count)]


def batches(steps: int, vocab: int, seed: int = 0) -> list[list]:
    from catwalk_steps.scoring.sequences import ChoiceSequence

    rng = random.Random(seed)
    drawn = []
    for _ in range(steps):
        sequences = []
        for index, length in enumerate(lengths(rng, BATCH)):
            ids = tuple(rng.randrange(vocab) for _ in range(length))
            sequences.append(ChoiceSequence(ids, length // 2, index, 0, 1))
        drawn.append(sequences)
    return drawn


def step(model, optimizer, sequences: list, packing: bool) -> tuple[float, int]:
    """One training step on a batch laid out padded or packed: (seconds, positions run)."""
    from catwalk_steps.kinds.generative import training_batch

    batch = training_batch(sequences, [1.0] * BATCH, 0, MAX_LENGTH, packing)
    started = time.perf_counter()
    loss = model(**batch)["loss"]
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    rows = batch["documents"]["packed_input_ids"] if packing else batch["input_ids"]
    return time.perf_counter() - started, rows.numel()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3, help="timed steps (after one warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from tango.common import Params
    from tango.integrations.torch import Model

    spec = gpt2_spec(12, 768, MAX_LENGTH, vocab=50257)
    drawn = batches(args.steps + 1, 50257)
    runs = {}
    for name in ("padded", "packed"):
        torch.manual_seed(0)
        model = Model.from_params(Params(dict(spec))).train()
        runs[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-5), [], [0, 0])
    # The two alternate, batch by batch: other work on the machine weighs on both alike.
    for index, sequences in enumerate(drawn):
        for name, (model, optimizer, times, counts) in runs.items():
            seconds, positions = step(model, optimizer, sequences, name == "packed")
            print(name, index, f"{seconds:.1f} s", flush=True)
            if index > 0:  # the first is a warm-up
                times.append(seconds)
                counts[0] += sum(len(s.token_ids) for s in sequences)
                counts[1] += positions
    results: dict = {"machine": machine(), "steps": args.steps}
    for name, (_, _, times, (tokens, positions)) in runs.items():
        results[name] = {
            "tokens_per_s": tokens / sum(times),
            "s_per_step": sum(times) / len(times),
            "real_share": tokens / positions,
        }
    results["speedup"] = results["packed"]["tokens_per_s"] / results["padded"]["tokens_per_s"]
    results["parameters"] = sum(p.numel() for p in runs["padded"][0].parameters())
    write_results("packing_throughput", results, markdown(results))


def markdown(r: dict) -> str:
    rows = [
        f"GPT-2 {r['parameters'] / 1e6:.0f}M parameters, float32, batch {BATCH}, max_length "
        f"{MAX_LENGTH}, lengths log-uniform 32-512 (half answer), {r['steps']} timed steps after "
        f"one warm-up, each batch padded then packed, {r['machine']['cpu_threads']} threads.",
        "",
        "| batches | tokens/s (real) | s/step | real tokens / positions run |",
        "|---|---|---|---|",
    ]
    for name in ("padded", "packed"):
        x = r[name]
        rows.append(
            f"| {name} | {x['tokens_per_s']:.0f} | {x['s_per_step']:.1f} | {x['real_share']:.0%} |"
        )
    rows += ["", f"Packed / padded: {r['speedup']:.2f}x tokens/s."]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
