"""How the steps of a run share the node: threads per slot on CPU, one line at the start when
`--parallelism N` steps side by side want more devices than the node has, and the device lease
directory checked at the start where steps will lease devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..distributed.devices import usable_cores, visible_gpu_count
from ..distributed.lease import lease_directory, simulated_gpus
from ..engines.base import default_cpu_threads


def devices_of(step: Any) -> tuple[int, bool]:
    """(local devices the step's workers take, whether it is asked to run on the CPU): Tango's
    `StepResources.gpu_count`, which our training and evaluation steps set from
    `device_count`; 0 for a step without devices."""
    resources = getattr(step, "resources", None)
    count = int(getattr(resources, "gpu_count", None) or 0)
    return count, getattr(step, "kwargs", {}).get("device") == "cpu"


def node_gpus() -> int:
    """GPUs on this node that steps lease (simulated ones: :mod:`..distributed.lease`)."""
    simulated = simulated_gpus()
    return simulated if simulated is not None else visible_gpu_count()


def check_lease_directory(steps: Sequence[Any]) -> None:
    """The lease directory (:mod:`..distributed.lease`) checked once, before any step runs, when
    one of `steps` takes devices and the node has some to lease (GPUs, or simulated ones): a bad
    `CATWALK_LEASE_DIR` is one line then, not a failure of each device step after the data
    step ran."""
    if node_gpus() > 0 and any(devices_of(step)[0] > 0 for step in steps):
        lease_directory()


def slot_threads(parallelism: int) -> int:
    """Torch threads per slot, as a node's workers get them: one, or the `OMP_NUM_THREADS` the
    user set, at most the usable cores split between the slots (never every slot assuming all
    of them)."""
    return default_cpu_threads(parallelism)


def crowding_line(parallelism: int, steps: Sequence[Any]) -> str | None:
    """One line when `parallelism` steps side by side need more of the node than it has: on
    GPUs, how many of the steps that take the most run at a time and how many wait for devices,
    and how many steps run CPU processes beside them, leasing none (`device: cpu`, or more
    devices than the node has); on CPU, that their processes share the cores. None when they
    fit."""
    if parallelism < 2:
        return None
    gpus = node_gpus()
    wanted = [devices_of(step) for step in steps]
    on_gpus = [count for count, cpu in wanted if 0 < count <= gpus and not cpu]
    if on_gpus:
        largest = max(on_gpus)
        biggest = on_gpus.count(largest)
        at_once = min(parallelism, gpus // largest)
        if parallelism * largest <= gpus or biggest <= at_once:
            return None
        return (
            f"--parallelism {parallelism}: {biggest} steps take {largest} "
            f"GPU{'s' if largest > 1 else ''} each and this "
            f"node has {gpus}: {at_once} at a time, {biggest - at_once} waiting for devices"
            + cpu_beside(wanted, gpus)
        )
    on_cpu = [count for count, _ in wanted if count > 0]
    cores = usable_cores()
    if not on_cpu or parallelism * max(on_cpu) <= cores:
        return None
    return (
        f"--parallelism {parallelism}: steps of up to {max(on_cpu)} CPU processes side by side "
        f"on {cores} cores: they share the cores ({slot_threads(parallelism)} thread(s) per "
        "slot)"
    )


def cpu_beside(wanted: list[tuple[int, bool]], gpus: int) -> str:
    """The steps of `wanted` (devices, asked for the CPU) that run CPU processes beside the GPU
    steps, leasing none: each says why when it starts (:func:`..distributed.devices.cpu_note`)."""
    beside = [(count, cpu) for count, cpu in wanted if count > 0 and (cpu or count > gpus)]
    if not beside:
        return ""
    reasons = [f"device_count above the node's {gpus}"] if any(not c for _, c in beside) else []
    reasons += ["device: cpu"] if any(cpu for _, cpu in beside) else []
    n, top = len(beside), max(count for count, _ in beside)
    processes = f"{top}" if n == 1 else f"up to {top}"
    return (
        f"; {n} step{'s' if n > 1 else ''} of {processes} CPU processes run{'s' if n == 1 else ''} "
        f"beside them, leasing no GPU ({' or '.join(reasons)})"
    )
