"""Benchmark: full fine-tuning vs LoRA adapters under DDP, FairScale FSDP and FSDP2, 2 processes
on CPU (gloo).

    .venv/bin/python bench/lora.py [--sizes 120m 300m] [--only ddp/lora fsdp2/full ...]
        [--batch 2] [--length 128] [--warmup 2] [--steps 3]

Local random-weight models of about 120M and 300M parameters (the sizes of
bench/model_scale.py: GPT-2 architecture, 12 x 768 and 20 x 1024, GPT-NeoX's 50,277-token
vocabulary, 1,024 positions; built from configs, fed byte-level tokens), AdamW, float32, the
same batches (`--batch` instances of 2 choices x `--length` tokens per rank), through the
catwalk engines: DDP, FairScale FSDP and FSDP2, blocks wrapped (`modules_to_wrap` left out:
found by class). Each engine trains the whole model (`full`) and a LoRA adapter (`lora`: r=8,
alpha=16 on every attention and MLP projection, `.*\\.(c_attn|c_proj|c_fc)`, passed in the
model block's `adapter`; only the adapter's weights require gradients). Per rank it reports:

- trainable parameters (of the whole model, not of a shard) and all parameters;
- model-state bytes: parameters + gradients + optimizer state the rank actually holds;
- peak process memory during training (the RSS high-water mark, reset after `--warmup` warm-up
  steps, so construction is left out; `ru_maxrss` is reset with it, so no lifetime peak);
- tokens/s of the rank (the right choice's tokens, as bench/memory_throughput.py counts them);

and, for the largest size, the ratios the project targets: LoRA FSDP2 peak / full FSDP2 peak
(<= 0.5) and LoRA FSDP2 peak / full DDP peak (<= 0.35).

`--sizes tiny` (2 x 128) is a smoke test of every row: printed, never saved. `--sizes` and
`--only ENGINE/MODE ...` measure some rows again and keep the others from the saved results.
Large allocations are returned to the OS when freed (`MALLOC_MMAP_THRESHOLD_`), so RSS follows
the memory actually live instead of what glibc keeps cached. Results: bench/results/lora.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    engine_inputs,
    gpt2_spec,
    machine,
    model_state_bytes,
    read_status_kib,
    spawn_ranks,
    timed_steps,
    write_results,
)
from memory_throughput import make_batch  # noqa: E402

WORLD_SIZE = 2
MiB = 2**20
VOCAB = 50277  # GPT-NeoX's, as bench/model_scale.py's models have it
POSITIONS = 1024
SIZES = {  # n_layer, n_embd (n_head: n_embd / 64)
    "tiny": (2, 128),
    "120m": (12, 768),
    "300m": (20, 1024),
}
SAVED_SIZES = ["120m", "300m"]  # tiny is a smoke test
ADAPTER = {"type": "lora", "r": 8, "alpha": 16, "target_modules": [".*\\.(c_attn|c_proj|c_fc)"]}
ENGINES = {  # blocks wrapped: `modules_to_wrap` left out, found by class
    "ddp": {"engine": "catwalk::torch"},
    "fairscale": {"engine": "catwalk::fairscale"},
    "fsdp2": {"engine": "catwalk::torch_fsdp"},
}
MODES = ("full", "lora")
VARIANTS = {f"{engine}/{mode}": (engine, mode) for engine in ENGINES for mode in MODES}
TARGETS = {  # (numerator, denominator, bound) for the largest size
    "lora fsdp2 / full fsdp2": ("fsdp2/lora", "fsdp2/full", 0.5),
    "lora fsdp2 / full ddp": ("fsdp2/lora", "ddp/full", 0.35),
}


def model_spec(size: str, mode: str) -> dict:
    layers, width = SIZES[size]
    spec = gpt2_spec(layers, width, POSITIONS, vocab=VOCAB)
    if mode == "lora":
        spec["adapter"] = dict(ADAPTER)
    return spec


def worker(rank: int, world_size: int, size: str, name: str, args, out: Path) -> None:
    from tango.integrations.torch import TrainingEngine

    import catwalk_steps  # noqa: F401  (registers the engines)
    from catwalk_steps.adapters.base import parameter_counts

    engine_name, mode = VARIANTS[name]
    variant = ENGINES[engine_name]
    config, lazy_model, optimizer = engine_inputs(model_spec(size, mode), out, rank, world_size)
    engine_params = {k: v for k, v in variant.items() if k != "engine"}
    engine = TrainingEngine.by_name(variant["engine"])(
        config, lazy_model, optimizer, **engine_params
    )
    # Of the whole model, from a skeleton (no weights drawn).
    trainable, parameters = parameter_counts(lazy_model.construct(skeleton=True))
    batch = make_batch(rank, args.batch, args.length)

    seconds, _ = timed_steps(engine, batch, args.warmup, args.steps)
    tokens = int(batch["attention_mask"][batch["choice_index"] == 0].sum()) * args.steps
    result = {
        "rank": rank,
        "parameters": parameters,
        "trainable_parameters": trainable,
        "model_state_bytes": model_state_bytes(engine.model, engine.optimizer),
        "peak_training_bytes": read_status_kib("VmHWM") * 1024,
        "tokens_per_s": tokens / seconds,
        "seconds_per_step": seconds / args.steps,
    }
    torch.save(result, out / f"rank{rank}.pt")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def run_variant(size: str, name: str, args: argparse.Namespace) -> list[dict] | dict:
    """Each rank's figures, or {"error": ...} when the ranks failed (the other rows go on)."""
    out = Path(args.work_dir) / size / name.replace("/", "_")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.pt"):
        old.unlink()
    print(f"running {size} {name} ...", flush=True)
    started = time.perf_counter()
    try:
        spawn_ranks(worker, WORLD_SIZE, size, name, args, out)
    except Exception as error:  # a rank's traceback is in the message (torch.multiprocessing)
        print(f"FAILED {size} {name}:\n{error}", flush=True)
        return {"error": str(error)}
    print(f"  {size} {name}: {time.perf_counter() - started:.0f} s", flush=True)
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD_SIZE)]


def summarise(rows: list[dict] | dict) -> dict:
    """Means over ranks (a failed row: its error)."""
    if isinstance(rows, dict):
        return rows

    def mean(key: str) -> float:
        return sum(r[key] for r in rows) / len(rows)

    return {
        "parameters": rows[0]["parameters"],
        "trainable_parameters": rows[0]["trainable_parameters"],
        "model_state_mib": mean("model_state_bytes") / MiB,
        "peak_training_mib": mean("peak_training_bytes") / MiB,
        "peak_training_mib_per_rank": [r["peak_training_bytes"] / MiB for r in rows],
        "tokens_per_s": mean("tokens_per_s"),
    }


def ratios(summary: dict[str, dict]) -> dict[str, dict]:
    found = {}
    for label, (numerator, denominator, bound) in TARGETS.items():
        pair = (numerator, denominator)
        if any("error" in summary.get(name, {"error": "not run"}) for name in pair):
            continue
        value = summary[numerator]["peak_training_mib"] / summary[denominator]["peak_training_mib"]
        found[label] = {"value": value, "target": bound, "met": value <= bound}
    return found


def size_table(size: str, summary: dict[str, dict]) -> list[str]:
    lines = [
        "| engine | mode | trainable params | all params | model state MiB/rank "
        "| peak MiB/rank (training) | per rank | tokens/s/rank |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (engine, mode) in VARIANTS.items():
        if name not in summary:
            continue
        s = summary[name]
        if "error" in s:
            lines.append(f"| {engine} | {mode} | failed: {s['error'].splitlines()[-1]} |")
            continue
        per_rank = " / ".join(f"{p:.0f}" for p in s["peak_training_mib_per_rank"])
        lines.append(
            f"| {engine} | {mode} | {s['trainable_parameters'] / 1e6:.2f}M | "
            f"{s['parameters'] / 1e6:.1f}M | {s['model_state_mib']:.0f} | "
            f"{s['peak_training_mib']:.0f} | {per_rank} | {s['tokens_per_s']:.1f} |"
        )
    return lines


def markdown(summaries: dict[str, dict], args: argparse.Namespace) -> str:
    lora = ADAPTER["target_modules"][0]
    lines = [
        f"Full fine-tuning vs LoRA (r={ADAPTER['r']}, alpha={ADAPTER['alpha']}, on `{lora}`), "
        f"{WORLD_SIZE} processes on CPU (gloo), GPT-2 architecture, GPT-NeoX vocabulary, random "
        f"weights; batch {args.batch} instances x 2 choices x {args.length} tokens per rank, "
        f"AdamW, fp32, {args.steps} timed steps after {args.warmup} warm-up steps; blocks "
        "wrapped (found by class); means over ranks.",
    ]
    for size, summary in summaries.items():
        layers, width = SIZES[size]
        lines += ["", f"{size} ({layers} x {width}):", "", *size_table(size, summary)]
    largest = [size for size in summaries if ratios(summaries[size])]
    if largest:
        size = largest[-1]
        lines += [
            "",
            f"Targets ({size}, training peak RSS per rank):",
            "",
            "| ratio | value | target | met |",
            "|---|---:|---:|---|",
        ]
        for label, r in ratios(summaries[size]).items():
            met = "yes" if r["met"] else "no"
            lines.append(f"| {label} | {r['value']:.3f} | <= {r['target']} | {met} |")
    return "\n".join(lines) + "\n"


def chosen_variants(only: list[str] | None) -> list[str]:
    if not only:
        return list(VARIANTS)
    unknown = set(only) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"--only: unknown variants {sorted(unknown)} (known: {list(VARIANTS)})")
    return [name for name in VARIANTS if name in only]


def merged_with_earlier(results: dict[str, dict], args: argparse.Namespace) -> dict:
    """A partial rerun (`--sizes`, `--only`): the rows measured now replace theirs in the saved
    results (same settings only); the other rows stay as they were measured."""
    saved = RESULTS / "lora.json"
    partial = args.only or set(args.sizes) != set(SAVED_SIZES)
    if not partial or not saved.is_file():
        return results
    earlier = json.loads(saved.read_text())
    settings = ("batch", "length", "warmup", "steps")
    if any(earlier["args"].get(key) != getattr(args, key) for key in settings):
        raise SystemExit(f"{saved} was measured with other settings; rerun every row")
    merged = {size: dict(rows) for size, rows in earlier["per_rank"].items()}
    for size, rows in results.items():
        merged.setdefault(size, {}).update(rows)
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", default=SAVED_SIZES, choices=list(SIZES))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help=f"rows to run ({', '.join(VARIANTS)}); the other saved rows are kept",
    )
    parser.add_argument("--work-dir", default="/tmp/catwalk_bench_lora")
    args = parser.parse_args()
    # Set before the ranks start: glibc reads it at start-up (see the module docstring).
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"

    names = chosen_variants(args.only)
    started = time.perf_counter()
    results = {
        size: {name: run_variant(size, name, args) for name in names}
        for size in sorted(args.sizes, key=list(SIZES).index)
    }
    wall = time.perf_counter() - started
    print(f"measured in {wall:.0f} s", flush=True)
    if "tiny" in results:  # a smoke test: printed, never saved
        tiny = {name: summarise(rows) for name, rows in results["tiny"].items()}
        print(markdown({"tiny": tiny}, args))
        results.pop("tiny")
        if not results:
            return
    results = merged_with_earlier(results, args)
    ordered = {
        size: {name: results[size][name] for name in VARIANTS if name in results[size]}
        for size in SAVED_SIZES
        if size in results
    }
    summaries = {
        size: {name: summarise(rows) for name, rows in by_name.items()}
        for size, by_name in ordered.items()
    }
    payload = {
        "machine": machine(),
        "args": vars(args),
        "world_size": WORLD_SIZE,
        "adapter": ADAPTER,
        "wall_s": wall,
        "per_rank": ordered,
        "summary": summaries,
        "targets": {size: ratios(summary) for size, summary in summaries.items()},
    }
    write_results("lora", payload, markdown(summaries, args))


if __name__ == "__main__":
    main()
