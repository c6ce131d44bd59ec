"""GPU check: every engine on one GPU (world size 1), sharded mixed precision, memory and speed.

    python bench/gpu_check.py                      # on a CUDA machine, about 2 minutes
    python bench/gpu_check.py --device cpu --layers 2 --width 128 --length 64 --steps 2
                                                   # dry run of the same code on the CPU

A GPT-2-small-sized model from a config (12 x 768, GPT-2's 50257-token vocabulary by default)
trained a few steps through each catwalk engine at world size 1: DDP's engine (a plain model at
world size 1), FairScale FSDP and FSDP2 with every block its own unit, FSDP2 with CPU offload,
in bf16, and the sharded engines in fp16 (grad scalers). Each variant runs in a fresh process;
it reports the peak `torch.cuda.max_memory_allocated`, tokens/s after two warm-up steps, and
whether every loss is finite.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import engine_inputs, gpt2_spec, machine, spawn_ranks, write_results  # noqa: E402
from memory_throughput import BLOCKS, make_batch  # noqa: E402

MiB = 2**20


def variants(device: str) -> dict[str, dict]:
    blocks = {"modules_to_wrap": [BLOCKS]}
    out = {
        "ddp engine, bf16": {"engine": "catwalk::torch", "precision": "bf16"},
        "fairscale, blocks, bf16": {"engine": "catwalk::fairscale", "precision": "bf16", **blocks},
        "fsdp2, blocks, bf16": {"engine": "catwalk::torch_fsdp", "precision": "bf16", **blocks},
        "fsdp2, blocks, bf16, cpu offload": {
            "engine": "catwalk::torch_fsdp",
            "precision": "bf16",
            "fsdp_config": {"move_params_to_cpu": True},
            **blocks,
        },
    }
    if device == "cuda":
        out["fairscale, blocks, fp16"] = {
            "engine": "catwalk::fairscale",
            "precision": "fp16",
            **blocks,
        }
        out["fsdp2, blocks, fp16"] = {
            "engine": "catwalk::torch_fsdp",
            "precision": "fp16",
            **blocks,
        }
    return out


def worker(rank: int, world_size: int, variant: dict, args, out: Path) -> None:
    from tango.integrations.torch import TrainingEngine

    import catwalk_steps  # noqa: F401  (registers the engines)

    device = "cuda:0" if args.device == "cuda" else "cpu"
    model = gpt2_spec(args.layers, args.width, args.length, args.vocab)
    config, lazy_model, optimizer = engine_inputs(model, out, 0, 1, device=device)
    kwargs = {k: v for k, v in variant.items() if k != "engine"}
    engine = TrainingEngine.by_name(variant["engine"])(
        config, lazy_model, optimizer, max_grad_norm=1.0, **kwargs
    )
    batch = make_batch(0, args.batch, args.length)
    losses = []

    def train_step() -> None:
        loss, _ = engine.forward_train(batch, 0, 1)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))

    for _ in range(2):
        train_step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        train_step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens = int(batch["attention_mask"][batch["choice_index"] == 0].sum()) * args.steps
    peak = torch.cuda.max_memory_allocated() / MiB if args.device == "cuda" else float("nan")
    result = {"losses": losses, "peak_mib": peak, "tokens_per_s": tokens / seconds}
    torch.save(result, out / "result.pt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--work-dir", default="/tmp/catwalk_gpu_check")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: CUDA is not available (use --device cpu for a dry run)")
    rows = {}
    for name, variant in variants(args.device).items():
        out = Path(args.work_dir) / "".join(c if c.isalnum() else "_" for c in name)
        out.mkdir(parents=True, exist_ok=True)
        try:
            spawn_ranks(worker, 1, variant, args, out)
            rows[name] = torch.load(out / "result.pt")
        except Exception as e:  # report every variant, also after one fails
            rows[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[-1][:200]}"}
        print(name, rows[name], flush=True)
    lines = [
        f"Every engine at world size 1 on {args.device}, GPT-2 {args.layers} x {args.width}, "
        f"vocab {args.vocab}, batch {args.batch} x {args.length}, {args.steps} timed steps after 2",
        "",
        "| variant | losses finite | first loss | last loss | peak MiB | tokens/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| {name} | FAILED: {r['error']} | | | | |")
            continue
        finite = all(math.isfinite(x) for x in r["losses"])
        lines.append(
            f"| {name} | {'yes' if finite else 'NO'} | {r['losses'][0]:.4f} | "
            f"{r['losses'][-1]:.4f} | {r['peak_mib']:.0f} | {r['tokens_per_s']:.0f} |"
        )
    payload = {"machine": machine(), "args": vars(args), "results": rows}
    write_results(f"gpu_check_{args.device}", payload, "\n".join(lines) + "\n")
    failed = [
        n for n, r in rows.items() if "error" in r or not all(map(math.isfinite, r["losses"]))
    ]
    if failed:
        raise SystemExit(f"gpu_check: failed or non-finite: {', '.join(failed)}")


if __name__ == "__main__":
    main()
