"""GPU check for sharded mixed precision: FairScale FSDP, world size 1, on CUDA.

    python bench/gpu_check.py                      # on a CUDA machine, a few minutes
    python bench/gpu_check.py --device cpu --layers 2 --width 128 --steps 3   # dry run, bf16 only

A GPT-2-small-sized model from a config (12 x 768, GPT-2's 50257-token vocabulary by default),
trained a few steps through `catwalk::fairscale` with fp16 (sharded grad scaler) and bf16, with
and without wrapped blocks and activation checkpointing. Checks that every loss is finite and
reports the peak `torch.cuda.max_memory_allocated` of each variant.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import engine_inputs, gpt2_spec, machine, write_results  # noqa: E402
from memory_throughput import BLOCKS, make_batch  # noqa: E402

MiB = 2**20


def variants(device: str) -> dict[str, dict]:
    precisions = ["fp16", "bf16"] if device == "cuda" else ["bf16"]
    out = {}
    for precision in precisions:
        out[f"{precision}"] = {"precision": precision}
        out[f"{precision} + blocks"] = {"precision": precision, "modules_to_wrap": [BLOCKS]}
        out[f"{precision} + blocks + act. ckpt"] = {
            "precision": precision,
            "modules_to_wrap": [BLOCKS],
            "activation_checkpointing": True,
        }
    return out


def worker(rank: int, name: str, engine_kwargs: dict, args, port: int, out: Path) -> None:
    from catwalk_steps.engines import CatwalkFairScaleEngine

    model = gpt2_spec(args.layers, args.width, args.length, args.vocab)
    devices = [0] if args.device == "cuda" else [-1]
    config, lazy_model, optimizer = engine_inputs(model, out, 0, 1, port, devices=devices)
    engine = CatwalkFairScaleEngine(
        config, lazy_model, optimizer, max_grad_norm=1.0, **engine_kwargs
    )
    batch = make_batch(0, args.batch, args.length)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses = []
    start = time.perf_counter()
    for _ in range(args.steps):
        loss, _ = engine.forward_train(batch, 0, 1)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / MiB if args.device == "cuda" else float("nan")
    torch.save(
        {"losses": losses, "peak_mib": peak, "s_per_step": seconds / args.steps}, out / "r.pt"
    )
    torch.distributed.destroy_process_group()


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
    from catwalk_steps.distributed import free_port

    rows = {}
    for name, kwargs in variants(args.device).items():
        out = Path(args.work_dir) / name.replace(" ", "_").replace("+", "").replace(".", "")
        out.mkdir(parents=True, exist_ok=True)
        mp.spawn(worker, args=(name, kwargs, args, free_port(), out), nprocs=1)
        rows[name] = torch.load(out / "r.pt")
        print(name, rows[name], flush=True)
    lines = [
        f"FairScale FSDP, world size 1, {args.device}, GPT-2 {args.layers} x {args.width}, vocab "
        f"{args.vocab}, batch {args.batch} x {args.length}, {args.steps} steps",
        "",
        "| variant | all losses finite | first loss | last loss | peak MiB | s/step |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        finite = all(math.isfinite(x) for x in r["losses"])
        lines.append(
            f"| {name} | {'yes' if finite else 'NO'} | {r['losses'][0]:.4f} | "
            f"{r['losses'][-1]:.4f} | {r['peak_mib']:.0f} | {r['s_per_step']:.3f} |"
        )
    payload = {"machine": machine(), "args": vars(args), "results": rows}
    write_results(f"gpu_check_{args.device}", payload, "\n".join(lines) + "\n")
    if not all(math.isfinite(x) for r in rows.values() for x in r["losses"]):
        raise SystemExit("gpu_check: a loss was not finite")


if __name__ == "__main__":
    main()
