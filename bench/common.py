"""Helpers shared by the benchmarks: the demo's model spec and writing results."""

from __future__ import annotations

import contextlib
import json
import platform
import time
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


def llama_spec(layers: int, width: int, length: int) -> dict:
    """A rank classifier over a Llama-architecture model of GPT-2's size (RMSNorm, rotary
    positions, SwiGLU of width 8/3 x `width`, grouped-query attention: a third as many key/value
    heads), built from a config; its blocks are found by class (`LlamaDecoderLayer`)."""
    heads = max(1, width // 64)
    config = {
        "model_type": "llama",
        "num_hidden_layers": layers,
        "hidden_size": width,
        "intermediate_size": 8 * width // 3,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 3),
        "max_position_embeddings": length,
    }
    return {
        "type": "catwalk::rank_classifier",
        "tokenizer": "catwalk::byte_level",
        "config": config,
    }


def engine_inputs(model: dict, work_dir: Path, rank: int, world_size: int, device: str = "cpu"):
    """(train config, lazy model, lazy AdamW) as `catwalk::train` hands them to an engine.

    With several ranks the caller has joined the process group (:func:`spawn_ranks`); a sharded
    engine starts a one-process group itself.
    """
    from tango.common import Lazy, Params
    from tango.integrations.torch import Model, Optimizer

    from catwalk_steps.engines.train_config import NodeAwareTrainConfig

    train_config = NodeAwareTrainConfig(
        step_id="bench",
        work_dir=work_dir,
        worker_id=rank,
        is_distributed=world_size > 1,
        world_size=world_size,
        local_rank=rank,
        local_world_size=world_size,
        device=device,
    )
    optimizer = Lazy(Optimizer, Params({"type": "torch::AdamW", "lr": 1e-4}))
    return train_config, Lazy(Model, Params(model)), optimizer


def _rank_main(rank, world_size, port, fn, args):
    from catwalk_steps.distributed.groups import init_process_group
    from catwalk_steps.distributed.rendezvous import connect_store

    if world_size > 1:
        store = connect_store("127.0.0.1", port, world_size, timeout_s=120)
        init_process_group("cpu", rank, world_size, store)
    fn(rank, world_size, *args)


def spawn_ranks(fn, world_size: int, *args) -> None:
    """`fn(rank, world_size, *args)` in `world_size` fresh processes (a process group when
    there are several; the rendezvous store is held here, its port bound once)."""
    import torch.multiprocessing as mp

    from catwalk_steps.distributed.rendezvous import start_store

    store = start_store(world_size)
    mp.spawn(_rank_main, args=(world_size, store.port, fn, args), nprocs=world_size)
    del store


# --- Memory of a process and of what it holds ---------------------------------------------


def read_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak_rss() -> None:
    """Linux: writing 5 to clear_refs resets the RSS high-water mark (VmHWM)."""
    Path("/proc/self/clear_refs").write_text("5")


def timed_steps(engine, batch: dict, warmup: int, steps: int, around=None) -> tuple[float, int]:
    """(seconds of `steps` training steps on `batch`, every rank together, after `warmup`
    untimed ones; the peak RSS in bytes before them: construction and warm-up). The peak RSS is
    reset between, so construction and warm-up stay out of the training peak (VmHWM after).
    `around`: a context the timed steps run in (a profiler)."""

    def train_step() -> None:
        loss, _ = engine.forward_train(batch, 0, 1)
        engine.backward(loss)
        engine.step()

    for _ in range(warmup):
        train_step()
    torch.distributed.barrier()
    before = read_status_kib("VmHWM") * 1024
    reset_peak_rss()
    start = time.perf_counter()
    with around if around is not None else contextlib.nullcontext():
        for _ in range(steps):
            train_step()
        torch.distributed.barrier()
    return time.perf_counter() - start, before


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


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def write_results(name: str, payload: dict, markdown: str) -> None:
    """bench/results/<name>.json and .md; docs/results.md quotes the markdown."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)
