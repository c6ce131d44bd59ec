"""The FairScale CPU layer's pieces on their own: reduce-scatter for gloo, streams, devices."""

from __future__ import annotations

import pytest
import torch

from catwalk_steps.engines import fairscale_cpu

from .distributed import run_distributed


def reduce_scatter_stacked(rank, world_size, port):
    fairscale_cpu.use_worker_device("cpu")
    # What FairScale's bucketer hands over: one row per destination rank.
    stacked = torch.arange(world_size * 3, dtype=torch.float32).reshape(world_size, 3) * (rank + 1)
    output = torch.zeros(3)
    fairscale_cpu._DistWithFlatReduceScatter()._reduce_scatter_base(output, stacked)
    return output


@pytest.mark.distributed
def test_reduce_scatter_of_a_stacked_input_works_on_gloo(tmp_path):
    results = run_distributed(reduce_scatter_stacked, tmp_path)
    rows = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    for rank, output in enumerate(results):
        # Row `rank` of every rank's input, summed: factors 1 + 2.
        torch.testing.assert_close(output, rows[rank] * 3)


@pytest.fixture(autouse=True)
def worker_device_restored(monkeypatch):
    """The layer's patches stay installed in this process, but inert once the worker device is
    unset again (as in a process that never trained with FairScale)."""
    monkeypatch.setattr(fairscale_cpu, "_worker_device", fairscale_cpu._worker_device)


def test_the_layer_follows_the_worker_device():
    fake_torch = fairscale_cpu._TorchWithCpuCuda()
    fairscale_cpu.use_worker_device("cpu")
    assert fake_torch.cuda.is_available() is False
    # FSDP checks that the current stream is its own post-backward stream: one CPU stream.
    assert fake_torch.cuda.current_stream() is fake_torch.cuda.Stream()
    assert fake_torch.cuda.synchronize is not torch.cuda.synchronize
    assert fake_torch.cuda.get_device_name is torch.cuda.get_device_name  # the rest is real
    fairscale_cpu.use_worker_device("cuda:0")
    assert fake_torch.cuda is torch.cuda  # on a CUDA worker FairScale sees the real thing


def test_without_a_worker_device_the_layer_steps_aside():
    fairscale_cpu._worker_device = None
    assert fairscale_cpu._TorchWithCpuCuda().cuda is torch.cuda


def test_default_compute_device_is_the_worker_device():
    from fairscale.nn.data_parallel import fully_sharded_data_parallel as fsdp_module

    fairscale_cpu.use_worker_device("cpu")
    assert fsdp_module._get_default_cuda_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
