"""Helpers shared by the benchmarks: the demo's model spec and writing results."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch
from tango.common.params import Params

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


def demo_model_spec() -> dict:
    """The model block of experiments/demo.jsonnet, so the benchmark runs what users run."""
    steps = Params.from_file(REPO / "experiments" / "demo.jsonnet").as_dict()["steps"]
    spec = dict(steps["trained"]["model"])
    spec.pop("type")
    return spec


def gpt2_spec(layers: int, width: int, length: int, vocab: int | None = None) -> dict:
    """A rank classifier over a GPT-2-architecture model built from a config (no dropout)."""
    config = {
        "model_type": "gpt2",
        "n_layer": layers,
        "n_embd": width,
        "n_head": max(1, width // 64),
        "n_positions": length,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "activation_function": "gelu_pytorch_tanh",
    }
    if vocab is not None:
        config["vocab_size"] = vocab
    return {
        "type": "catwalk::rank_classifier",
        "tokenizer": "catwalk::byte_level",
        "config": config,
    }


def engine_inputs(model: dict, work_dir: Path, rank: int, world_size: int, port: int, **config):
    """(TrainConfig, lazy model, lazy AdamW) as `torch::train` hands them to an engine."""
    from tango.common import Lazy, Params
    from tango.integrations.torch import Model, Optimizer, TrainConfig

    train_config = TrainConfig(
        step_id="bench",
        work_dir=work_dir,
        worker_id=rank,
        is_distributed=True,  # FairScale's engine insists, even at world size 1
        world_size=world_size,
        distributed_port=port,
        **{"devices": [-1] * world_size, **config},
    )
    optimizer = Lazy(Optimizer, Params({"type": "torch::AdamW", "lr": 1e-4}))
    return train_config, Lazy(Model, Params(model)), optimizer


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def write_results(name: str, payload: dict, markdown: str) -> None:
    """bench/results/<name>.json and .md; the README quotes the markdown."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)
