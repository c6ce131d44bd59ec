"""The catwalk engines built directly on 2 gloo processes: FSDP units, precision checks,
checkpoints that resume, and configuration errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tango.common import Lazy, Params
from tango.common.exceptions import ConfigurationError
from tango.integrations.fairscale import FSDPConfig
from tango.integrations.torch import Model, Optimizer, TrainConfig

from catwalk_steps.checkpoints import full_model_state
from catwalk_steps.engines.fairscale_engine import CatwalkFairScaleEngine
from catwalk_steps.engines.torch_engine import CatwalkTorchEngine
from catwalk_steps.engines.torch_fsdp_engine import CatwalkTorchFSDPEngine
from catwalk_steps.kinds.collate import Collator
from catwalk_steps.tasks.synthetic import SyntheticTask

from .conftest import TINY_MODEL
from .distributed import run_distributed

BLOCKS = r"transformer\.h\.[0-9]+"


def train_config(rank: int, world_size: int, port: int, work_dir: Path) -> TrainConfig:
    return TrainConfig(
        step_id="test",
        work_dir=work_dir,
        worker_id=rank,
        is_distributed=world_size > 1,
        world_size=world_size,
        devices=[-1] * world_size,
        distributed_port=port,
    )


def lazy_model(model: dict = TINY_MODEL) -> Lazy:
    return Lazy(Model, Params(dict(model)))


def lazy_optimizer() -> Lazy:
    return Lazy(Optimizer, Params({"type": "torch::AdamW", "lr": 1e-3}))


def fairscale_engine(rank, world_size, port, work_dir, **kwargs) -> CatwalkFairScaleEngine:
    return CatwalkFairScaleEngine(
        train_config(rank, world_size, port, Path(work_dir)),
        lazy_model(kwargs.pop("model", TINY_MODEL)),
        lazy_optimizer(),
        **kwargs,
    )


def batch(rank: int) -> dict:
    instances = SyntheticTask(sizes={"train": 8}).load(["train"])["train"]
    return Collator("catwalk::byte_level")(instances[rank * 4 : rank * 4 + 4])


def wrapped_units(rank, world_size, port, work_dir):
    """The FSDP units of both sharded engines, for the same nested patterns, after a step."""
    from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import FSDPModule

    patterns = [BLOCKS, BLOCKS + r"\.mlp"]
    units = {}
    for kind, engine_class in (
        (FSDP, CatwalkFairScaleEngine),
        (FSDPModule, CatwalkTorchFSDPEngine),
    ):
        engine = engine_class(
            train_config(rank, world_size, port, Path(work_dir)),
            lazy_model(),
            lazy_optimizer(),
            modules_to_wrap=patterns,
        )
        found = [name for name, m in engine.model.named_modules() if isinstance(m, kind)]
        loss, _ = engine.forward_train(batch(rank), 0, 1)
        engine.backward(loss)
        engine.step()
        units[engine_class.__name__] = found
    return units


@pytest.mark.distributed
def test_fsdp_units_are_the_regex_matches_nested_included(tmp_path):
    units = run_distributed(wrapped_units, tmp_path, str(tmp_path), init=True)[0]
    inner = "_fsdp_wrapped_module._fpw_module"
    assert units["CatwalkFairScaleEngine"] == [
        "",
        f"{inner}.lm.transformer.h.0",
        f"{inner}.lm.transformer.h.0.{inner}.mlp",
        f"{inner}.lm.transformer.h.1",
        f"{inner}.lm.transformer.h.1.{inner}.mlp",
    ]
    # FSDP2 keeps module names; every match and the root are units, nothing else is.
    assert units["CatwalkTorchFSDPEngine"] == [
        "",
        "lm.transformer.h.0",
        "lm.transformer.h.0.mlp",
        "lm.transformer.h.1",
        "lm.transformer.h.1.mlp",
    ]


def cpu_workers_on_a_gpu_machine(rank, world_size, port, work_dir):
    """FairScale FSDP on CPU workers where CUDA looks available (one GPU, device_count 2)."""
    from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP

    torch.cuda.is_available = lambda: True  # any CUDA call would now fail on this CPU build
    torch.cuda.device_count = lambda: 1
    engine = fairscale_engine(rank, world_size, port, work_dir, modules_to_wrap=[BLOCKS])
    units = [m for m in engine.model.modules() if isinstance(m, FSDP)]
    loss, _ = engine.forward_train(batch(rank), 0, 1)
    engine.backward(loss)
    engine.step()
    engine.model.eval()
    outputs = engine.forward_eval(batch(rank))
    return {
        "units": len(units),
        "compute_devices": {str(unit.compute_device) for unit in units},
        "parameter_devices": {str(p.device) for p in engine.model.parameters()},
        "gathered_devices": {
            str(p.device) for unit in units for p in unit.params if hasattr(p, "_full_param_padded")
        },
        "loss": float(loss),
        "scores_device": str(outputs["scores"].device),
    }


@pytest.mark.distributed
def test_fsdp_on_cpu_workers_stays_on_the_cpu_where_cuda_is_available(tmp_path):
    for result in run_distributed(cpu_workers_on_a_gpu_machine, tmp_path, str(tmp_path), init=True):
        assert result["units"] == 3  # two blocks and the root
        assert result["compute_devices"] == {"cpu"}
        assert result["parameter_devices"] == {"cpu"}
        assert result["gathered_devices"] == {"cpu"}
        assert result["scores_device"] == "cpu"
        assert result["loss"] > 0


def mismatched_units(rank, world_size, port, work_dir):
    model = {
        "type": "catwalk::with_wrapped_modules",
        "model": TINY_MODEL,
        "modules_to_wrap": [BLOCKS],
        "fsdp_config": {"mixed_precision": True},
    }
    try:
        fairscale_engine(rank, world_size, port, work_dir, model=model, precision="bf16")
    except ConfigurationError as e:
        return str(e)
    return None


@pytest.mark.distributed
def test_units_wrapped_by_the_model_block_must_match_the_engine_precision(tmp_path):
    message = run_distributed(mismatched_units, tmp_path, str(tmp_path), init=True)[0]
    assert message is not None and message.startswith(
        "model: FSDP unit 'lm.transformer.h.0' was wrapped with mixed_precision=True "
        "(torch.float16)"
    )
    assert "the engine's precision is bf16" in message


def train_save_resume(rank, world_size, port, work_dir):
    """Two steps, a checkpoint, a third step; then a new engine resumes and takes the third
    step again: same loss, same weights after it."""
    work_dir = Path(work_dir)
    engine = fairscale_engine(rank, world_size, port, work_dir, modules_to_wrap=[BLOCKS])
    for _ in range(2):
        loss, _ = engine.forward_train(batch(rank), 0, 1)
        engine.backward(loss)
        engine.step()
    checkpoint = work_dir / "ckpt"
    checkpoint.mkdir(exist_ok=True)
    engine.save_state(checkpoint)
    torch.distributed.barrier()
    third, _ = engine.forward_train(batch(rank), 0, 1)
    engine.backward(third)
    engine.step()
    after = {k: v.clone() for k, v in engine.model.state_dict().items()}

    # A new engine in the same process group, as a restarted worker builds one.
    resumed = fairscale_engine(rank, world_size, port, work_dir, modules_to_wrap=[BLOCKS])
    resumed.load_state(checkpoint)
    again, _ = resumed.forward_train(batch(rank), 0, 1)
    resumed.backward(again)
    resumed.step()
    # Same weights after the third step: model *and* optimizer state came back.
    for name, value in resumed.model.state_dict().items():
        torch.testing.assert_close(value, after[name], rtol=1e-6, atol=1e-7)
    return {"third": float(third), "again": float(again)}


@pytest.mark.distributed
def test_a_nested_fsdp_checkpoint_resumes_where_it_stopped(tmp_path):
    results = run_distributed(train_save_resume, tmp_path, str(tmp_path), init=True)
    for result in results:
        assert result["again"] == pytest.approx(result["third"], rel=1e-6)
    weights = full_model_state(tmp_path / "ckpt")
    assert "lm.transformer.h.1.mlp.c_fc.weight" in weights
    assert weights["lm.transformer.wte.weight"].shape == (257, 32)


def test_activation_checkpointing_without_a_list_recomputes_the_models_blocks(tmp_path):
    config = train_config(0, 1, 0, tmp_path)
    engine = CatwalkTorchEngine(
        config, lazy_model(), lazy_optimizer(), activation_checkpointing=True
    )
    checkpointed = [
        name
        for name, module in engine.model.named_modules()
        if getattr(module, "_catwalk_checkpointed", False)
    ]
    assert checkpointed == ["lm.transformer.h.0", "lm.transformer.h.1"]


def test_engine_configuration_errors_name_the_field(tmp_path):
    config = train_config(0, 1, 0, tmp_path)
    with pytest.raises(ConfigurationError, match="training_engine.modules_to_wrap: DDP wraps no"):
        CatwalkTorchEngine(config, lazy_model(), lazy_optimizer(), modules_to_wrap=[BLOCKS])
    with pytest.raises(
        ConfigurationError,
        match=r"training_engine.activation_checkpointing: modules_to_wrap is \[\]",
    ):
        CatwalkTorchEngine(
            config,
            lazy_model(),
            lazy_optimizer(),
            modules_to_wrap=[],
            activation_checkpointing=True,
        )
    with pytest.raises(ConfigurationError, match="training_engine.precision: fp16 needs CUDA"):
        CatwalkTorchEngine(config, lazy_model(), lazy_optimizer(), precision="fp16")
    with pytest.raises(ConfigurationError, match="training_engine.fsdp_config.mixed_precision"):
        CatwalkFairScaleEngine(
            config, lazy_model(), lazy_optimizer(), fsdp_config=FSDPConfig(mixed_precision=True)
        )
    with pytest.raises(
        ConfigurationError, match="training_engine.fsdp_config.mixed_precision: FSDP2 has no"
    ):
        CatwalkTorchFSDPEngine(
            config, lazy_model(), lazy_optimizer(), fsdp_config={"mixed_precision": True}
        )
    with pytest.raises(ConfigurationError, match="move_grads_to_cpu: FSDP2 offloads parameters"):
        CatwalkTorchFSDPEngine(
            config, lazy_model(), lazy_optimizer(), fsdp_config={"move_grads_to_cpu": True}
        )
    with pytest.raises(ConfigurationError, match="fsdp_config.bucket_cap_mb: not an FSDP2 option"):
        CatwalkTorchFSDPEngine(
            config, lazy_model(), lazy_optimizer(), fsdp_config={"bucket_cap_mb": 25}
        )
    with pytest.raises(ConfigurationError, match="pattern 'blocks' matches no module"):
        CatwalkTorchEngine(
            config,
            lazy_model(),
            lazy_optimizer(),
            modules_to_wrap=["blocks"],
            activation_checkpointing=True,
        )


def test_engines_wrap_through_our_hook_and_only_the_base_names_tangos_private_one():
    """Each engine answers `wrapped_model` (docs/guides/engine.md); Tango's private
    `_construct_model` is overridden once, in the base, which calls it."""
    from catwalk_steps.engines.base import CatwalkEngine

    engines = (CatwalkTorchEngine, CatwalkFairScaleEngine, CatwalkTorchFSDPEngine)
    for engine in engines:
        assert "wrapped_model" in vars(engine), engine.__name__
        assert "_construct_model" not in vars(engine), engine.__name__
    assert "_construct_model" in vars(CatwalkEngine)
    built = CatwalkTorchEngine(train_config(0, 1, 0, Path(".")), lazy_model(), lazy_optimizer())
    assert type(built.model).__name__ == "RankClassifier"  # built by its wrapped_model


GRPO_MODEL = {**TINY_MODEL, "objective": "grpo", "grpo": {"beta": 0.04, "temperature": 0.7}}


def frozen_references(rank, world_size, port, work_dir):
    """GRPO's reference placed frozen by each engine (DDP: unwrapped; FairScale, FSDP2:
    sharded as the policy is): its log-probabilities of a `grpo` batch, in no optimizer, no
    parameter requiring gradients; and the same model built alone."""
    from catwalk_steps.scoring.grpo_objective import completion_logps, grpo_batch

    prompts, completions = [[5, 6, 7], [8, 9]], [[1, 2], [4], [2, 2, 3], [7]]
    grpo = grpo_batch(prompts, completions, [True] * 4, torch.zeros(4), 6.0, 0)
    reference = lazy_model({**GRPO_MODEL, "init_seed": 7})
    alone = reference.construct().eval()
    out = {"alone": completion_logps(alone.lm, grpo, 0.7)["grpo_logps"]}
    for engine_class in (CatwalkTorchEngine, CatwalkFairScaleEngine, CatwalkTorchFSDPEngine):
        config = train_config(rank, world_size, port, Path(work_dir))
        engine = engine_class(config, lazy_model(GRPO_MODEL), lazy_optimizer())
        frozen = engine.frozen_model(reference)
        trained = {id(p) for group in engine.optimizer.param_groups for p in group["params"]}
        assert not any(p.requires_grad or id(p) in trained for p in frozen.parameters())
        assert not frozen.training
        local = sum(getattr(p, "_local_tensor", p).numel() for p in frozen.parameters())
        out[engine_class.__name__] = (
            engine.forward_eval({"grpo_reference": grpo}, frozen)["grpo_logps"],
            local,
        )
    return out


@pytest.mark.distributed
def test_each_engine_s_frozen_reference_gives_the_log_probs_of_the_model_alone(tmp_path):
    """DDP, FairScale and FSDP2 each give the reference's log-probabilities of the model
    built alone; the sharded engines hold a shard of its parameters on each rank (about
    half), DDP the whole."""
    results = run_distributed(frozen_references, tmp_path, str(tmp_path), init=True)
    whole = sum(p.numel() for p in lazy_model(TINY_MODEL).construct().parameters())
    for result in results:
        assert result["alone"].abs().sum() > 0
        for name in ("CatwalkTorchEngine", "CatwalkFairScaleEngine", "CatwalkTorchFSDPEngine"):
            logps, local = result[name]
            torch.testing.assert_close(logps, result["alone"], rtol=1e-5, atol=1e-6)
            assert local == whole if name == "CatwalkTorchEngine" else local < 0.6 * whole


def decoding_all_gathers(rank, world_size, port, work_dir):
    """Three evaluation forwards under FSDP2 one by one, then inside `generating()`: the
    all-gathers each way, the logits (equal), and whether every unit is sharded again after."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as groups

    from catwalk_steps.engines.scorer import engine_scorer

    config = train_config(rank, world_size, port, Path(work_dir))
    engine = CatwalkTorchFSDPEngine(config, lazy_model(), lazy_optimizer())
    batch = {"input_ids": torch.tensor([[5, 6, 7, 8]]), "attention_mask": torch.ones(1, 4)}
    batch["decoding"] = {"position_ids": torch.arange(4)[None], "past_key_values": None}
    calls = []
    gather = groups.foreach_all_gather  # a unit's all-gather of its parameters

    def counted(*args, **kwargs):
        calls.append(1)
        return gather(*args, **kwargs)

    groups.foreach_all_gather = counted
    try:
        alone = [engine.forward_eval(batch)["logits"] for _ in range(3)]
        each = len(calls)
        # as in-loop generation decodes (the kinds' scorer), through the engine's `generating`
        with engine_scorer(engine, distributed=True).decoding_forward() as forward:
            held = [forward(batch)["logits"] for _ in range(3)]
        once = len(calls) - each
    finally:
        groups.foreach_all_gather = gather
    units = [m for m in engine.model.modules() if isinstance(m, FSDPModule)]
    sharded = all(
        type(p).__name__ == "DTensor" for unit in units for p in unit.parameters(recurse=False)
    )
    return {"each": each, "once": once, "same": all(map(torch.equal, alone, held))} | {
        "units": len(units),
        "sharded": sharded,
    }


@pytest.mark.distributed
def test_fsdp2_gathers_once_for_a_rollout_s_forwards_and_reshards_after(tmp_path):
    """A decoding loop's steps (`generating`: GRPO's rollouts, in-loop generation through the
    kinds' scorer): each unit all-gathers at the first forward only, the logits as one by one,
    and every parameter is a shard again after."""
    for result in run_distributed(decoding_all_gathers, tmp_path, str(tmp_path), init=True):
        assert result["units"] > 1 and result["sharded"] and result["same"]
        assert result["each"] == 3 * result["once"] > 0, result
