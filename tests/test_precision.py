"""One precision setting, mapped in one place; a non-finite loss stops training clearly."""

from __future__ import annotations

import pytest
import torch
from tango.common.exceptions import ConfigurationError

from catwalk_steps.engines.base import CatwalkEngine, NonFiniteLossError
from catwalk_steps.settings import Precision


def test_precision_names_and_errors():
    assert Precision.parse("bf16").compute_dtype is torch.bfloat16
    assert Precision.parse("fp32").compute_dtype is None
    with pytest.raises(
        ConfigurationError,
        match=r"training_engine.precision: expected one of "
        r"fp32, bf16, fp16, got 'float16'",
    ):
        Precision.parse("float16", "training_engine.precision")
    with pytest.raises(ConfigurationError, match="fp16 needs CUDA .* use bf16 on CPU"):
        Precision.parse("fp16").check_device("cpu")
    Precision.parse("fp16").check_device("cuda")


def test_precision_sets_autocast():
    with Precision.parse("bf16").autocast("cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype is torch.bfloat16
    with Precision.parse("fp32").autocast("cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype is torch.float32


@pytest.mark.parametrize("engine", ["fairscale", "fsdp2"])
@pytest.mark.parametrize("name", ["fp32", "bf16"])
def test_the_sharded_engines_compute_in_the_precision_and_keep_float32_masters(engine, name):
    """What the flags do, not what they are: one FSDP unit on a one-process group computes in
    the precision's dtype, keeps its parameters float32 and hands float32 gradients to the
    optimizer."""
    from fairscale.nn.data_parallel import FullyShardedDataParallel
    from torch.distributed.fsdp import fully_shard

    from catwalk_steps.distributed.groups import (
        destroy_process_group_if_initialized,
        init_process_group,
    )
    from catwalk_steps.engines.fairscale_cpu import use_worker_device
    from catwalk_steps.engines.mixed_precision import fairscale_flags, fsdp2_policy

    precision = Precision.parse(name)
    init_process_group("cpu", 0, 1)
    try:
        torch.manual_seed(0)  # token ids in, as the rank classifier takes them
        layer = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 4))
        if engine == "fairscale":
            use_worker_device(torch.device("cpu"))
            unit = FullyShardedDataParallel(
                layer, compute_device=torch.device("cpu"), **fairscale_flags(precision)
            )
        else:
            unit = fully_shard(layer, mp_policy=fsdp2_policy(precision))
        output = unit(torch.tensor([[1, 2, 3]]))
        output.float().sum().backward()
        expected = precision.compute_dtype or torch.float32
        assert output.dtype is expected
        assert all(p.dtype is torch.float32 for p in unit.parameters())
        assert all(p.grad.dtype is torch.float32 for p in unit.parameters())
    finally:
        destroy_process_group_if_initialized()


class FakeConfig:
    device_type = "cpu"


class FakeEngine(CatwalkEngine):
    """Just enough of an engine to run `forward_train`."""

    def __init__(self, loss: float, precision: str):
        self.precision = Precision.parse(precision)
        self.train_config = FakeConfig()
        self.device = torch.device("cpu")
        self.max_grad_norm = None
        self.optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        self.model = lambda **batch: {"loss": torch.tensor(loss)}


@pytest.mark.parametrize(
    ("loss", "precision", "cause"),
    [
        (float("nan"), "fp32", "a learning rate too high for this model, or no max_grad_norm"),
        (float("inf"), "bf16", "a learning rate too high for this model, or no max_grad_norm"),
        (float("nan"), "fp16", "fp16 overflow is the usual cause: use precision bf16"),
    ],
)
def test_a_non_finite_loss_stops_with_the_step_and_the_likely_cause(loss, precision, cause):
    engine = FakeEngine(loss, precision)
    divided, _ = engine.forward_train({}, 0, 2)  # the loop's step 7 (0-based 6): it names it
    with pytest.raises(NonFiniteLossError) as error:
        engine.check_loss(divided, 7)
    message = str(error.value)
    assert message.startswith(f"training step 7: loss is {loss} (")
    assert cause in message and "\n" not in message


def test_a_finite_loss_is_divided_over_micro_batches():
    loss, outputs = FakeEngine(3.0, "fp32").forward_train({}, 0, 3)
    assert float(loss) == 1.0 and float(outputs["loss"]) == 3.0
