"""Where workers and evaluation run: decided once from device_count and the visible GPUs."""

from __future__ import annotations

import pytest
import torch
from tango.common.exceptions import ConfigurationError

from catwalk_steps.distributed.devices import DevicePlan, evaluation_device, plan_devices


@pytest.mark.parametrize(
    ("gpus", "device_count", "requested", "devices", "noted"),
    [
        (0, 1, None, (-1,), False),
        (0, 2, None, (-1, -1), False),
        (0, 2, "cpu", (-1, -1), False),
        (1, 1, None, (0,), False),
        (1, 2, None, (-1, -1), True),  # the one-GPU machine of the bug report
        (1, 2, "cpu", (-1, -1), False),
        (1, 1, "cpu", (-1,), False),
        (2, 2, None, (0, 1), False),
        (2, 2, "cuda", (0, 1), False),
        (4, 2, None, (0, 1), False),
        (8, 3, "cpu", (-1, -1, -1), False),
    ],
)
def test_device_plan_for_every_machine(gpus, device_count, requested, devices, noted):
    plan = plan_devices(device_count, visible_gpus=gpus, requested=requested)
    assert plan.devices == devices
    assert (plan.note is not None) == noted
    expected_type = "cpu" if devices[0] < 0 else "cuda"
    assert plan.device_type == expected_type
    assert {plan.device(rank).type for rank in range(device_count)} == {expected_type}


def test_the_cpu_fallback_note_says_why_and_how_to_use_the_gpu():
    plan = plan_devices(2, visible_gpus=1)
    assert plan.note == (
        "device_count 2 exceeds the 1 visible GPU: training on 2 CPU processes instead "
        "(set device_count: 1 to use the GPU)"
    )
    assert "\n" not in plan.note
    assert plan.describe() == "2 CPU processes"
    assert plan_devices(2, visible_gpus=2).describe() == "2 GPUs"


def test_more_workers_than_simulated_gpus_say_they_lease_none(monkeypatch):
    """CATWALK_SIMULATED_GPUS=1 and the demo's device_count 2: CPU processes that hold no lease,
    as on a node of one GPU, said in one line (before, nothing was said)."""
    monkeypatch.setenv("CATWALK_SIMULATED_GPUS", "1")
    plan = plan_devices(2, visible_gpus=0)
    assert plan.devices == (-1, -1)
    assert plan.note == (
        "device_count 2 exceeds the 1 simulated GPU: training on 2 CPU processes that lease "
        "none, beside the steps that hold them (set device_count: 1 to lease them)"
    )
    assert plan_devices(1, visible_gpus=0).note is None  # it leases the simulated GPU


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"device_count": 2, "visible_gpus": 1, "requested": "cuda"},
            "train.device: cuda asks for 2 GPUs (device_count), but 1 is visible",
        ),
        (
            {"device_count": 1, "visible_gpus": 0, "requested": "cuda"},
            "train.device: cuda asks for 1 GPU (device_count), but 0 are visible",
        ),
        (
            {"device_count": 1, "visible_gpus": 0, "requested": "tpu"},
            "train.device: expected one of cpu, cuda (or leave it out), got 'tpu'",
        ),
        ({"device_count": 0, "visible_gpus": 0}, "device_count: must be a whole number >= 1"),
    ],
)
def test_impossible_device_requests_name_the_field(kwargs, message):
    with pytest.raises(ConfigurationError) as error:
        plan_devices(field="train.device", **kwargs)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    ("requested", "gpus", "expected"),
    [
        (None, 0, "cpu"),
        (None, 1, "cuda:0"),
        (None, 4, "cuda:0"),
        ("cpu", 2, "cpu"),
        ("cuda", 1, "cuda:0"),
        ("cuda:1", 2, "cuda:1"),
    ],
)
def test_evaluation_device_follows_the_same_rule(requested, gpus, expected):
    assert evaluation_device(requested, visible_gpus=gpus) == torch.device(expected)


@pytest.mark.parametrize(
    ("requested", "gpus", "message"),
    [
        ("cuda", 0, "evaluate.device: cuda asked for, but 0 GPUs are visible"),
        ("cuda:1", 1, "evaluate.device: cuda:1 asked for, but 1 GPU is visible"),
        ("gpu", 1, "evaluate.device: not a device: 'gpu'"),
        ("meta", 1, "evaluate.device: expected cpu, cuda or cuda:N, got 'meta'"),
    ],
)
def test_bad_evaluation_devices_name_the_field(requested, gpus, message):
    with pytest.raises(ConfigurationError) as error:
        evaluation_device(requested, visible_gpus=gpus, field="evaluate.device")
    assert str(error.value).startswith(message)


def test_a_plan_gives_each_local_worker_its_device():
    plan = DevicePlan((0, 1))
    assert [plan.device(rank) for rank in range(2)] == [
        torch.device("cuda", 0),
        torch.device("cuda", 1),
    ]


def test_cpu_threads_are_one_or_omp_num_threads_at_most_the_cores_shared_between_ranks(
    monkeypatch,
):
    """One thread a rank (bench/threads.py: safe on a shared machine), or what OMP_NUM_THREADS
    asks, never more than the cores shared between the machine's ranks."""
    from catwalk_steps.engines.base import default_cpu_threads

    # The cores this process may use (its affinity), as a scheduler's cpuset sets them.
    monkeypatch.setattr("catwalk_steps.engines.base.usable_cores", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [default_cpu_threads(n) for n in (1, 2, 4, 32)] == [1, 1, 1, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert [default_cpu_threads(n) for n in (1, 2, 8, 32)] == [3, 3, 2, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "64")  # more than the cores: the share
    assert [default_cpu_threads(n) for n in (1, 2)] == [16, 8]
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # set but empty: the default
    assert default_cpu_threads(1) == 1
