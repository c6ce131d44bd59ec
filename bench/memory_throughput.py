"""Benchmark: memory and speed of DDP, FairScale FSDP and FSDP2, 2 processes on CPU (gloo).

    .venv/bin/python bench/memory_throughput.py [--layers 12] [--steps 5] [--batch 4]

Same model (GPT-2 small's architecture: 12 blocks of width 768, byte-level vocabulary, about
86M parameters), same batches (4 sequences x 128 tokens per rank), AdamW, float32, through the
catwalk engines. Variants: DDP; FairScale FSDP and FSDP2 each with the root only, with every
block its own unit, the same plus activation checkpointing; FSDP2 with blocks wrapped in bf16.
Then another family, a Llama-architecture model of the same size (`llama-shaped: ...` rows, each
compared with its own DDP row), its blocks wrapped with `modules_to_wrap` left out, found by
their class. `--only NAME ...` measures some rows again (with their model's DDP row) and keeps
the others from the saved results. Per rank it reports:

- model-state bytes: parameters + gradients + optimizer state the rank actually holds;
- peak process memory during training (the RSS high-water mark, reset after two warm-up
  steps, so construction is left out; the lifetime peak, construction and warm-up included, is
  read before that reset);
- tokens/s of the rank;
- realized saving = (DDP peak - FSDP peak) / (DDP model-state bytes x (1 - 1/N)): how much of
  the saving that sharding promises reaches peak memory.

Large allocations are returned to the OS when freed (`MALLOC_MMAP_THRESHOLD_`), so RSS follows
the memory actually live instead of what glibc keeps cached.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    engine_inputs,
    gpt2_spec,
    llama_spec,
    machine,
    model_state_bytes,
    read_status_kib,
    spawn_ranks,
    timed_steps,
    write_results,
)

WORLD_SIZE = 2
BLOCKS = r"transformer\.h\.[0-9]+"
LLAMA = "llama-shaped: "  # the prefix of the Llama-architecture rows
VARIANTS = {
    "ddp": {"engine": "catwalk::torch"},
    "fairscale (root only)": {"engine": "catwalk::fairscale", "modules_to_wrap": []},
    "fairscale (blocks wrapped)": {"engine": "catwalk::fairscale", "modules_to_wrap": [BLOCKS]},
    "fairscale (blocks wrapped) + act. ckpt": {
        "engine": "catwalk::fairscale",
        "modules_to_wrap": [BLOCKS],
        "activation_checkpointing": True,
    },
    "fsdp2 (root only)": {"engine": "catwalk::torch_fsdp", "modules_to_wrap": []},
    "fsdp2 (blocks wrapped)": {"engine": "catwalk::torch_fsdp", "modules_to_wrap": [BLOCKS]},
    "fsdp2 (blocks wrapped) + act. ckpt": {
        "engine": "catwalk::torch_fsdp",
        "modules_to_wrap": [BLOCKS],
        "activation_checkpointing": True,
    },
    "fsdp2 (blocks wrapped), no reshard after forward": {
        "engine": "catwalk::torch_fsdp",
        "modules_to_wrap": [BLOCKS],
        "fsdp_config": {"reshard_after_forward": False},
    },
    "fsdp2 (blocks wrapped) + bf16": {
        "engine": "catwalk::torch_fsdp",
        "modules_to_wrap": [BLOCKS],
        "precision": "bf16",
    },
    # Another family, `modules_to_wrap` left out: its LlamaDecoderLayer blocks, found by class.
    LLAMA + "ddp": {"model": "llama", "engine": "catwalk::torch"},
    LLAMA + "fairscale (root only)": {
        "model": "llama",
        "engine": "catwalk::fairscale",
        "modules_to_wrap": [],
    },
    LLAMA + "fairscale (blocks wrapped automatically)": {
        "model": "llama",
        "engine": "catwalk::fairscale",
    },
    LLAMA + "fsdp2 (root only)": {
        "model": "llama",
        "engine": "catwalk::torch_fsdp",
        "modules_to_wrap": [],
    },
    LLAMA + "fsdp2 (blocks wrapped automatically)": {
        "model": "llama",
        "engine": "catwalk::torch_fsdp",
    },
}


def reference(name: str) -> str:
    """The DDP row that a variant is compared with: the same model's."""
    return LLAMA + "ddp" if name.startswith(LLAMA) else "ddp"


def model_spec(variant: dict, args: argparse.Namespace) -> dict:
    build = llama_spec if variant.get("model") == "llama" else gpt2_spec
    return build(args.layers, args.width, args.length)


MiB = 2**20


def make_batch(rank: int, batch: int, length: int) -> dict:
    from catwalk_steps.kinds.collate import Collator
    from catwalk_steps.tasks.base import MultipleChoiceInstance

    generator = torch.Generator().manual_seed(rank)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def text(n: int) -> str:
        return "".join(letters[i] for i in torch.randint(0, 26, (n,), generator=generator))

    answer = 28  # " " + 27 letters; byte-level: one token per character
    instances = [
        MultipleChoiceInstance(
            text(length - answer), (" " + text(answer - 1), " " + text(answer - 1)), 0
        )
        for _ in range(batch)
    ]
    return Collator("catwalk::byte_level", max_length=length)(instances)


@contextlib.contextmanager
def profiled(enabled: bool, path: Path):
    """With --profile: where rank 0's time goes in the timed steps, by operator (CPU time)."""
    if not enabled:
        yield
        return
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        yield
    table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    path.write_text(table)


def worker(rank: int, world_size: int, variant: dict, args: argparse.Namespace, out: Path) -> None:
    from tango.integrations.torch import TrainingEngine

    import catwalk_steps  # noqa: F401  (registers the engines)
    from catwalk_steps.adapters.base import parameter_counts

    model = model_spec(variant, args)
    config, lazy_model, optimizer = engine_inputs(model, out, rank, world_size)
    engine_params = {k: v for k, v in variant.items() if k not in ("engine", "model")}
    engine = TrainingEngine.by_name(variant["engine"])(
        config, lazy_model, optimizer, **engine_params
    )
    # Of the whole model, from a skeleton (no weights drawn: not in the lifetime peak).
    _, parameters = parameter_counts(lazy_model.construct(skeleton=True))
    batch = make_batch(rank, args.batch, args.length)

    profile = profiled(args.profile and rank == 0, out / "profile.txt")
    seconds, before = timed_steps(engine, batch, args.warmup, args.steps, around=profile)
    training_peak = read_status_kib("VmHWM") * 1024
    tokens = int(batch["attention_mask"][batch["choice_index"] == 0].sum()) * args.steps
    result = {
        "rank": rank,
        "parameters": parameters,
        "model_state_bytes": model_state_bytes(engine.model, engine.optimizer),
        "peak_training_bytes": training_peak,
        # Construction and warm-up, or training: the high-water mark before the reset.
        "peak_lifetime_bytes": max(before, training_peak),
        "tokens_per_s": tokens / seconds,
        "seconds_per_step": seconds / args.steps,
    }
    torch.save(result, out / f"rank{rank}.pt")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def run_variant(name: str, variant: dict, args: argparse.Namespace) -> list[dict]:
    out = Path(args.work_dir) / "".join(c if c.isalnum() else "_" for c in name)
    out.mkdir(parents=True, exist_ok=True)
    print(f"running {name} ...", flush=True)
    spawn_ranks(worker, WORLD_SIZE, variant, args, out)
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD_SIZE)]


def summarise(results: dict[str, list[dict]]) -> dict[str, dict]:
    def mean(rows: list[dict], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows)

    summary = {}
    for name, rows in results.items():
        ddp = results[reference(name)]
        promised = mean(ddp, "model_state_bytes") * (1 - 1 / WORLD_SIZE)
        summary[name] = {
            "model_state_mib": mean(rows, "model_state_bytes") / MiB,
            "model_state_vs_ddp": mean(rows, "model_state_bytes") / mean(ddp, "model_state_bytes"),
            "peak_training_mib": mean(rows, "peak_training_bytes") / MiB,
            "peak_lifetime_mib": mean(rows, "peak_lifetime_bytes") / MiB,
            "realized_saving": (
                mean(ddp, "peak_training_bytes") - mean(rows, "peak_training_bytes")
            )
            / promised,
            "tokens_per_s": mean(rows, "tokens_per_s"),
            "tokens_per_s_vs_ddp": mean(rows, "tokens_per_s") / mean(ddp, "tokens_per_s"),
        }
    return summary


def table(summary: dict[str, dict], names: list[str], prefix: str = "") -> list[str]:
    lines = [
        "| variant | model state MiB/rank | vs DDP | peak MiB/rank (training) | realized saving "
        "| tokens/s/rank | vs DDP | lifetime peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        s = summary[name]
        saving = "—" if name == reference(name) else format(s["realized_saving"], ".2f")
        lines.append(
            f"| {name.removeprefix(prefix)} | {s['model_state_mib']:.0f} | "
            f"{s['model_state_vs_ddp']:.2f} | {s['peak_training_mib']:.0f} | {saving} | "
            f"{s['tokens_per_s']:.0f} | {s['tokens_per_s_vs_ddp']:.2f} | "
            f"{s['peak_lifetime_mib']:.0f} |"
        )
    return lines


def markdown(summary: dict[str, dict], args: argparse.Namespace, parameters: dict) -> str:
    setting = f"batch {args.batch} x {args.length} tokens per rank, AdamW, fp32; means over ranks."
    gpt2 = [name for name in summary if not name.startswith(LLAMA)]
    llama = [name for name in summary if name.startswith(LLAMA)]
    lines = []
    if gpt2:
        lines += [
            f"DDP vs FairScale FSDP vs FSDP2, {WORLD_SIZE} processes on CPU (gloo), GPT-2 "
            f"architecture ({args.layers} x {args.width}, {parameters['ddp'] / 1e6:.0f}M "
            f"parameters), {setting}",
            "",
            *table(summary, gpt2),
        ]
    if llama:
        lines += [
            *([""] if lines else []),
            f"The same for another family, Llama architecture of the same size ({args.layers} x "
            f"{args.width}, SwiGLU, grouped-query attention, "
            f"{parameters[LLAMA + 'ddp'] / 1e6:.0f}M parameters), `modules_to_wrap` left out "
            f"(its `LlamaDecoderLayer` blocks, found by class), {setting}",
            "",
            *table(summary, llama, LLAMA),
        ]
    return "\n".join(lines) + "\n"


def chosen_variants(only: list[str] | None) -> dict[str, dict]:
    """The variants asked for, each with the DDP row of its model (the reference)."""
    if not only:
        return dict(VARIANTS)
    unknown = set(only) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"--only: unknown variants {sorted(unknown)} (known: {list(VARIANTS)})")
    names = {reference(name) for name in only} | set(only)
    return {name: v for name, v in VARIANTS.items() if name in names}


def merged_with_earlier(results: dict[str, list[dict]], args: argparse.Namespace) -> dict:
    """With --only, the rows measured now replace theirs in the saved results (same sizes
    only); the other rows stay as they were measured."""
    saved = RESULTS / "memory_throughput.json"
    if not args.only or not saved.is_file():
        return results
    earlier = json.loads(saved.read_text())
    sizes = ("layers", "width", "batch", "length", "warmup", "steps")
    if any(earlier["args"].get(key) != getattr(args, key) for key in sizes):
        raise SystemExit(f"--only: {saved} was measured with other sizes; rerun every variant")
    return {**earlier["per_rank"], **results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="variants to run (with their model's ddp row); the other saved rows are kept",
    )
    parser.add_argument("--profile", action="store_true", help="rank 0's operators by time")
    parser.add_argument("--work-dir", default="/tmp/catwalk_bench_memory")
    args = parser.parse_args()
    # Set before the ranks start: glibc reads it at start-up (see the module docstring).
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"

    chosen = chosen_variants(args.only)
    results = {name: run_variant(name, variant, args) for name, variant in chosen.items()}
    if args.profile:  # time per operator, not a benchmark: the profiler slows every step
        for name in chosen:
            out = Path(args.work_dir) / "".join(c if c.isalnum() else "_" for c in name)
            print(f"== {name}\n{(out / 'profile.txt').read_text()}")
        return
    results = merged_with_earlier(results, args)
    ordered = {name: results[name] for name in VARIANTS if name in results}
    summary = summarise(ordered)
    parameters = {name: rows[0]["parameters"] for name, rows in ordered.items()}
    payload = {
        "machine": machine(),
        "args": vars(args),
        "world_size": WORLD_SIZE,
        "per_rank": ordered,
        "summary": summary,
    }
    write_results("memory_throughput", payload, markdown(summary, args, parameters))


if __name__ == "__main__":
    main()
