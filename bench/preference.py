"""Benchmark: DPO's forward and backward with the prompt once (a packed pair) against TRL's two
concatenated rows; and per-rank peak memory with a precomputed reference against a second model.

    .venv/bin/python bench/preference.py [--prompts 64,128,256,512] [--answers 16,32,64]
        [--pairs 4] [--repeats 2] [--layers 12] [--width 768] [--no-memory]

Model: GPT-2's architecture from a config (12 blocks of width 768, GPT-2's vocabulary of 50257:
about 124M parameters), random weights, float32, no dropout. Pairs: random token ids, every
prompt of the same length and every answer (chosen and rejected) of the same length per shape.

- Speed: one process, `--pairs` pairs per batch in both layouts (equal batch), DPO's sigmoid loss
  against fixed reference log-probabilities, forward and backward (no optimizer step); the
  layouts alternate within each repetition (the machine is shared: load moves both alike), best
  of `--repeats` after one warm-up round on the smallest shape. Tokens/s counts each pair's
  content once (prompt + chosen + rejected), so the ratio is the ratio of times. The layouts'
  answer log-probabilities are compared (max abs diff).
- Memory: 2 processes (gloo), data parallel (each rank's gradients all-reduced after backward),
  AdamW, `--memory-steps` steps after one warm-up; the peak RSS of each rank during those steps
  (the high-water mark reset after warm-up, large frees returned to the OS). "precomputed": the
  reference's log-probabilities arrive as data (the `catwalk::reference_logprobs` step's);
  "second model": the rank also holds the reference model and runs it each step (no gradients).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    machine,
    read_status_kib,
    reset_peak_rss,
    spawn_ranks,
    write_results,
)

sys.path.insert(0, str(REPO))

from catwalk_steps.objectives.dpo_loss import preference_loss  # noqa: E402
from catwalk_steps.scoring.preference import (  # noqa: E402
    PreferencePair,
    answer_logps,
    concatenated_pairs,
    pack_pairs,
)

LAYOUTS = {"packed": pack_pairs, "two rows": concatenated_pairs}
VOCAB = 50257
WORLD_SIZE = 2


def build_lm(layers: int, width: int, positions: int, seed: int = 0) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "gpt2", n_layer=layers, n_embd=width, n_head=max(1, width // 64), n_positions=positions,
        vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        activation_function="gelu_pytorch_tanh",
    )  # fmt: skip
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def make_pairs(count: int, prompt: int, answer: int, seed: int) -> list[PreferencePair]:
    draw = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(1, VOCAB, (n,), generator=draw).tolist()

    return [PreferencePair(ids(prompt), ids(answer), ids(answer)) for _ in range(count)]


def dpo_step(lm, batch: dict, reference: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Forward and backward of DPO's loss; the policy's answer log-probabilities, detached."""
    chosen, rejected, _, _ = answer_logps(lm, batch)
    losses, _ = preference_loss(chosen, rejected, *reference, beta=0.1)
    losses.mean().backward()
    return torch.stack([chosen, rejected]).detach()


def speed(lm, pairs: list[PreferencePair], repeats: int) -> dict:
    """Best seconds of each layout's step (alternating), and their answers' largest gap."""
    batches = {name: layout(pairs, 0) for name, layout in LAYOUTS.items()}
    reference = (torch.zeros(len(pairs)), torch.zeros(len(pairs)))
    best = dict.fromkeys(LAYOUTS, float("inf"))
    answers = {}
    for _ in range(repeats):
        for name, batch in batches.items():
            lm.zero_grad(set_to_none=True)
            start = time.perf_counter()
            answers[name] = dpo_step(lm, batch, reference)
            best[name] = min(best[name], time.perf_counter() - start)
    tokens = sum(len(p.prompt) + len(p.chosen) + len(p.rejected) for p in pairs)
    gap = float((answers["packed"] - answers["two rows"]).abs().max())
    return {
        "tokens": tokens,
        **{f"{name}_tokens_per_s": tokens / seconds for name, seconds in best.items()},
        "speedup": best["two rows"] / best["packed"],
        "max_abs_diff": gap,
    }


def memory_rank(rank: int, world_size: int, mode: str, args: argparse.Namespace, out: Path):
    """One rank's data-parallel DPO steps; writes its peak RSS during the measured steps."""
    torch.set_num_threads(1)
    length = args.memory_prompt + 2 * args.memory_answer
    lm = build_lm(args.layers, args.width, length)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-5)
    reference_lm = None
    if mode == "second model":
        reference_lm = (
            build_lm(args.layers, args.width, length, seed=1).eval().requires_grad_(False)
        )
    pairs = make_pairs(args.pairs, args.memory_prompt, args.memory_answer, seed=rank)
    batch = pack_pairs(pairs, 0)
    fixed = (torch.zeros(len(pairs)), torch.zeros(len(pairs)))  # read from the step's data

    def step() -> None:
        if reference_lm is not None:
            with torch.no_grad():
                reference = answer_logps(reference_lm, batch)[:2]
        else:
            reference = fixed
        dpo_step(lm, batch, reference)
        for parameter in lm.parameters():
            torch.distributed.all_reduce(parameter.grad)
            parameter.grad /= world_size
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: the optimizer's state exists from here on
    torch.distributed.barrier()
    reset_peak_rss()
    for _ in range(args.memory_steps):
        step()
    torch.distributed.barrier()
    (out / f"{rank}.txt").write_text(str(read_status_kib("VmHWM") * 1024))
    torch.distributed.destroy_process_group()


def memory(args: argparse.Namespace) -> dict:
    peaks = {}
    for mode in ("precomputed", "second model"):
        with tempfile.TemporaryDirectory() as work_dir:
            print(f"memory: {mode} ...", flush=True)
            spawn_ranks(memory_rank, WORLD_SIZE, mode, args, Path(work_dir))
            peaks[mode] = [int((Path(work_dir) / f"{r}.txt").read_text()) for r in range(2)]
    return peaks


def markdown(rows: dict, peaks: dict | None, args: argparse.Namespace, parameters: int) -> str:
    lines = [
        f"DPO forward + backward, GPT-2 architecture {args.layers} x {args.width} "
        f"({parameters / 1e6:.0f}M parameters, random weights), float32, {args.pairs} pairs a "
        f"batch, CPU ({machine()['cpu_threads']} threads, shared machine): tokens/s (each pair's "
        f"prompt + chosen + rejected once), best of {args.repeats}.",
        "",
        "| prompt | answers | packed pair | two rows | packed / two rows | max abs diff |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for (prompt, answer), r in rows.items():
        lines.append(
            f"| {prompt} | {answer} | {r['packed_tokens_per_s']:.0f} | "
            f"{r['two rows_tokens_per_s']:.0f} | {r['speedup']:.2f}x | {r['max_abs_diff']:.1e} |"
        )
    if peaks:
        lines += [
            "",
            f"Per-rank peak RSS, 2 processes (gloo, data parallel), AdamW, {args.pairs} pairs of "
            f"prompt {args.memory_prompt} + answers {args.memory_answer} a rank, packed:",
            "",
            "| reference | rank 0 | rank 1 |",
            "|---|---:|---:|",
        ]
        for mode, values in peaks.items():
            lines.append(f"| {mode} | " + " | ".join(f"{v / 2**30:.2f} GiB" for v in values) + " |")
    return "\n".join(lines) + "\n"


def sizes(text: str) -> list[int]:
    return [int(value) for value in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=sizes, default=sizes("64,128,256,512"))
    parser.add_argument("--answers", type=sizes, default=sizes("16,32,64"))
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--no-memory", dest="memory", action="store_false")
    parser.add_argument("--memory-prompt", type=int, default=256)
    parser.add_argument("--memory-answer", type=int, default=32)
    parser.add_argument("--memory-steps", type=int, default=2)
    args = parser.parse_args()
    # Set before the ranks start: glibc reads it at start-up (large frees go back to the OS).
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
    lm = build_lm(args.layers, args.width, max(args.prompts) + 2 * max(args.answers))
    parameters = sum(p.numel() for p in lm.parameters())
    speed(lm, make_pairs(args.pairs, min(args.prompts), min(args.answers), seed=0), 1)  # warm-up
    rows = {}
    for prompt in args.prompts:
        for answer in args.answers:
            pairs = make_pairs(args.pairs, prompt, answer, seed=prompt * 1000 + answer)
            rows[(prompt, answer)] = speed(lm, pairs, args.repeats)
            print(prompt, answer, rows[(prompt, answer)], flush=True)
    del lm
    peaks = memory(args) if args.memory else None
    payload = {
        "machine": machine(),
        "args": vars(args),
        "parameters": parameters,
        "speed": [{"prompt": p, "answer": a, **r} for (p, a), r in rows.items()],
        "peak_rss_bytes": peaks,
    }
    write_results("preference", payload, markdown(rows, peaks, args, parameters))


if __name__ == "__main__":
    main()
