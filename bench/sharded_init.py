"""Benchmark: peak memory of building a pretrained model for FSDP2 on 2 CPU processes (gloo).

    .venv/bin/python bench/sharded_init.py [--layers 12] [--width 768]

A GPT-2-architecture model (GPT-2 small's size by default, 50257-token vocabulary) is saved as a
Hugging Face directory, then built as `catwalk::torch_fsdp` builds it, and the way it would be
built without a meta device:

- every rank loads: `from_pretrained` on each rank, then `fully_shard` (the whole model exists
  on every rank before sharding frees most of it);
- meta + scatter (catwalk::torch_fsdp): the structure on the meta device, `fully_shard`, each
  rank allocates its shard, rank 0 reads the weights once and scatters them.

It reports each rank's peak resident memory (the RSS high-water mark) while building, and the
same process's memory before building (imports, process group), so the difference is what
building costs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    engine_inputs,
    gpt2_spec,
    machine,
    read_status_kib,
    reset_peak_rss,
    spawn_ranks,
    write_results,
)
from memory_throughput import BLOCKS  # noqa: E402

MiB = 2**20
WORLD_SIZE = 2


def every_rank_loads(spec: dict) -> None:
    from torch.distributed.fsdp import fully_shard

    from catwalk_steps.engines.wrapping import match_modules
    from catwalk_steps.scoring.rank_classifier import RankClassifier

    model = RankClassifier(**{k: v for k, v in spec.items() if k != "type"})
    for name in match_modules(model, [BLOCKS]):
        fully_shard(model.get_submodule(name))
    fully_shard(model)


def meta_and_scatter(spec: dict, work_dir: Path, rank: int) -> None:
    from tango.integrations.torch import TrainingEngine

    config, lazy_model, optimizer = engine_inputs(spec, work_dir, rank, WORLD_SIZE)
    TrainingEngine.by_name("catwalk::torch_fsdp")(
        config, lazy_model, optimizer, modules_to_wrap=[BLOCKS]
    )


def worker(rank: int, world_size: int, variant: str, spec: dict, out: Path) -> None:
    import catwalk_steps  # noqa: F401  (registers the engines)

    torch.distributed.barrier()
    before = read_status_kib("VmRSS") * 1024
    reset_peak_rss()
    if variant == "every rank loads":
        every_rank_loads(spec)
    else:
        meta_and_scatter(spec, out, rank)
    torch.distributed.barrier()
    peak = read_status_kib("VmHWM") * 1024
    torch.save({"before": before, "peak": peak}, out / f"rank{rank}.pt")
    torch.distributed.barrier()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--work-dir", default="/tmp/catwalk_bench_init")
    args = parser.parse_args()
    os.environ["MALLOC_MMAP_THRESHOLD_"] = (
        "65536"  # freed tensors leave RSS (see memory_throughput)
    )

    from catwalk_steps.scoring.rank_classifier import RankClassifier

    spec = gpt2_spec(args.layers, args.width, 128, args.vocab)
    with tempfile.TemporaryDirectory() as saved:
        model = RankClassifier(**{k: v for k, v in spec.items() if k != "type"})
        parameters = sum(p.numel() for p in model.parameters())
        model.save_pretrained(saved)
        del model
        pretrained = {"type": "catwalk::rank_classifier", "pretrained": saved}
        rows = {}
        for variant in ("every rank loads", "meta + scatter (catwalk::torch_fsdp)"):
            out = Path(args.work_dir) / "".join(c if c.isalnum() else "_" for c in variant)
            out.mkdir(parents=True, exist_ok=True)
            spawn_ranks(worker, WORLD_SIZE, variant, pretrained, out)
            rows[variant] = [torch.load(out / f"rank{r}.pt") for r in range(WORLD_SIZE)]
            print(variant, rows[variant], flush=True)
    weights_mib = parameters * 4 / MiB
    lines = [
        f"Building a pretrained GPT-2 ({args.layers} x {args.width}, {parameters / 1e6:.0f}M "
        f"parameters, {weights_mib:.0f} MiB of float32 weights) for FSDP2 with blocks wrapped, "
        f"{WORLD_SIZE} CPU processes: peak RSS while building, and its increase over the "
        "process before building.",
        "",
        "| build | rank 0 peak MiB | rank 0 increase | rank 1 peak MiB | rank 1 increase |",
        "|---|---:|---:|---:|---:|",
    ]
    for variant, ranks in rows.items():
        cells = []
        for r in ranks:
            cells += [f"{r['peak'] / MiB:.0f}", f"{(r['peak'] - r['before']) / MiB:.0f}"]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    payload = {"machine": machine(), "args": vars(args), "parameters": parameters, "rows": rows}
    write_results("sharded_init", payload, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
