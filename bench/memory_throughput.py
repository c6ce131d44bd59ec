"""Benchmark: memory and speed of DDP, FairScale FSDP and FSDP2, 2 processes on CPU (gloo).

    .venv/bin/python bench/memory_throughput.py [--layers 12] [--steps 5] [--batch 4]

Same model (GPT-2 small's architecture: 12 blocks of width 768, byte-level vocabulary, about
86M parameters), same batches (4 sequences x 128 tokens per rank), AdamW, float32, through the
catwalk engines. Variants: DDP; FairScale FSDP and FSDP2 each with the root only, with every
block its own unit, the same plus activation checkpointing; FSDP2 with blocks wrapped in bf16.
Per rank it reports:

- model-state bytes: parameters + gradients + optimizer state the rank actually holds;
- peak process memory during training (the RSS high-water mark, reset after two warm-up
  steps, so construction is left out; the lifetime peak is reported too);
- tokens/s of the rank;
- realized saving = (DDP peak - FSDP peak) / (DDP model-state bytes x (1 - 1/N)): how much of
  the saving that sharding promises reaches peak memory.

Large allocations are returned to the OS when freed (`MALLOC_MMAP_THRESHOLD_`), so RSS follows
the memory actually live instead of what glibc keeps cached.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import engine_inputs, gpt2_spec, machine, spawn_ranks, write_results  # noqa: E402

WORLD_SIZE = 2
BLOCKS = r"transformer\.h\.[0-9]+"
VARIANTS = {
    "ddp": {"engine": "catwalk::torch"},
    "fairscale (root only)": {"engine": "catwalk::fairscale"},
    "fairscale (blocks wrapped)": {"engine": "catwalk::fairscale", "modules_to_wrap": [BLOCKS]},
    "fairscale (blocks wrapped) + act. ckpt": {
        "engine": "catwalk::fairscale",
        "modules_to_wrap": [BLOCKS],
        "activation_checkpointing": True,
    },
    "fsdp2 (root only)": {"engine": "catwalk::torch_fsdp"},
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
}
MiB = 2**20


def read_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak_rss() -> None:
    """Linux: writing 5 to clear_refs resets the RSS high-water mark (VmHWM)."""
    Path("/proc/self/clear_refs").write_text("5")


def local(tensor: torch.Tensor) -> torch.Tensor:
    """What this rank holds of a tensor: an FSDP2 DTensor's local shard, else the tensor."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def model_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters, gradients and optimizer state held by this rank (each tensor once)."""
    tensors = {}
    for p in model.parameters():
        tensors[local(p).data_ptr()] = local(p)
        if p.grad is not None:
            tensors[local(p.grad).data_ptr()] = local(p.grad)
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.numel() > 1:
                tensors[local(value).data_ptr()] = local(value)
    return sum(t.numel() * t.element_size() for t in tensors.values() if t.numel() > 0)


def make_batch(rank: int, batch: int, length: int) -> dict:
    from catwalk_steps.scoring.sequences import MultipleChoiceCollator
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
    return MultipleChoiceCollator("catwalk::byte_level", max_length=length)(instances)


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

    model = gpt2_spec(args.layers, args.width, args.length)
    config, lazy_model, optimizer = engine_inputs(model, out, rank, world_size)
    engine_params = {k: v for k, v in variant.items() if k != "engine"}
    engine = TrainingEngine.by_name(variant["engine"])(
        config, lazy_model, optimizer, **engine_params
    )
    parameters = sum(p.numel() for p in lazy_model.construct().parameters())
    batch = make_batch(rank, args.batch, args.length)

    def train_step() -> None:
        loss, _ = engine.forward_train(batch, 0, 1)
        engine.backward(loss)
        engine.step()

    for _ in range(args.warmup):
        train_step()
    torch.distributed.barrier()
    reset_peak_rss()
    start = time.perf_counter()
    with profiled(args.profile and rank == 0, out / "profile.txt"):
        for _ in range(args.steps):
            train_step()
        torch.distributed.barrier()
    seconds = time.perf_counter() - start
    tokens = int(batch["attention_mask"][batch["choice_index"] == 0].sum()) * args.steps
    result = {
        "rank": rank,
        "parameters": parameters,
        "model_state_bytes": model_state_bytes(engine.model, engine.optimizer),
        "peak_training_bytes": read_status_kib("VmHWM") * 1024,
        "peak_lifetime_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
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

    ddp = results["ddp"]
    promised = mean(ddp, "model_state_bytes") * (1 - 1 / WORLD_SIZE)
    summary = {}
    for name, rows in results.items():
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


def markdown(summary: dict[str, dict], args: argparse.Namespace, parameters: int) -> str:
    lines = [
        f"DDP vs FairScale FSDP vs FSDP2, {WORLD_SIZE} processes on CPU (gloo), GPT-2 architecture "
        f"({args.layers} x {args.width}, {parameters / 1e6:.0f}M parameters), "
        f"batch {args.batch} x {args.length} tokens per rank, AdamW, fp32; means over ranks.",
        "",
        "| variant | model state MiB/rank | vs DDP | peak MiB/rank (training) | realized saving "
        "| tokens/s/rank | vs DDP | lifetime peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {s['model_state_mib']:.0f} | {s['model_state_vs_ddp']:.2f} | "
            f"{s['peak_training_mib']:.0f} | "
            f"{'—' if name == 'ddp' else format(s['realized_saving'], '.2f')} | "
            f"{s['tokens_per_s']:.0f} | {s['tokens_per_s_vs_ddp']:.2f} | "
            f"{s['peak_lifetime_mib']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, help="variants to run (ddp always)")
    parser.add_argument("--profile", action="store_true", help="rank 0's operators by time")
    parser.add_argument("--work-dir", default="/tmp/catwalk_bench_memory")
    args = parser.parse_args()
    # Set before the ranks start: glibc reads it at start-up (see the module docstring).
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"

    chosen = {
        name: v
        for name, v in VARIANTS.items()
        if not args.only or name == "ddp" or name in args.only
    }
    results = {name: run_variant(name, variant, args) for name, variant in chosen.items()}
    if args.profile:  # time per operator, not a benchmark: the profiler slows every step
        for name in chosen:
            out = Path(args.work_dir) / "".join(c if c.isalnum() else "_" for c in name)
            print(f"== {name}\n{(out / 'profile.txt').read_text()}")
        return
    summary = summarise(results)
    parameters = results["ddp"][0]["parameters"]
    payload = {
        "machine": machine(),
        "args": vars(args),
        "world_size": WORLD_SIZE,
        "per_rank": results,
        "summary": summary,
    }
    write_results("memory_throughput", payload, markdown(summary, args, parameters))


if __name__ == "__main__":
    main()
