"""Where each worker runs, decided once from `device_count` and the visible GPUs.

Everything that places a tensor (the engines' models and FSDP units, the batches, evaluation)
follows the worker's device from here. Nothing else asks "is CUDA available?": a machine with
one GPU and `device_count: 2` runs two CPU processes, and the FairScale FSDP units, the model
and the batches of those processes all live on the CPU.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch
from tango.common.exceptions import ConfigurationError

from ..console import announce
from ..errors import whole
from .lease import leased, simulated_gpus

logger = logging.getLogger(__name__)

DEVICE_KINDS = ("cpu", "cuda")


def usable_cores() -> int:
    """CPU cores this process may run on: its affinity (`taskset`, a scheduler's cpuset), not
    every core of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def visible_gpu_count() -> int:
    """GPUs this process may use (after `CUDA_VISIBLE_DEVICES`); 0 on a CPU-only build."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@dataclass(frozen=True)
class DevicePlan:
    """One device per local worker: a CUDA index, or -1 for a CPU process (Tango's convention).

    :ivar note: why the workers are CPU processes although GPUs are visible, to be logged once.
    """

    devices: tuple[int, ...]
    note: str | None = None

    @property
    def device_type(self) -> str:
        return "cpu" if self.devices[0] < 0 else "cuda"

    def device(self, local_rank: int) -> torch.device:
        index = self.devices[local_rank]
        return torch.device("cpu") if index < 0 else torch.device("cuda", index)

    @property
    def count(self) -> int:
        return len(self.devices)

    def describe(self) -> str:
        count = self.count
        if self.device_type == "cuda":
            return f"{count} GPU{'s' if count > 1 else ''}"
        return f"{count} CPU process{'es' if count > 1 else ''}"


def plan_devices(
    device_count: int,
    visible_gpus: int | None = None,
    requested: str | None = None,
    field: str = "device",
    purpose: str = "training",
) -> DevicePlan:
    """Devices for `device_count` local workers.

    :param visible_gpus: defaults to :func:`visible_gpu_count`; a parameter so the decision can
        be tested for any machine.
    :param requested: "cuda" (fail unless there are enough GPUs), "cpu" (CPU processes even
        where GPUs exist), or None: GPUs when there are at least `device_count`, else CPU
        processes, with a note saying why.
    :param purpose: what the workers do, for the note ("training", "evaluating").
    """
    whole(device_count, "device_count")
    if requested is not None and requested not in DEVICE_KINDS:
        raise ConfigurationError(
            f"{field}: expected one of {', '.join(DEVICE_KINDS)} (or leave it out), "
            f"got {requested!r}"
        )
    gpus = visible_gpu_count() if visible_gpus is None else visible_gpus
    if requested == "cpu":
        return DevicePlan((-1,) * device_count)
    if gpus >= device_count:
        return DevicePlan(tuple(range(device_count)))
    if requested == "cuda":
        raise ConfigurationError(
            f"{field}: cuda asks for {device_count} GPU{'s' if device_count > 1 else ''} "
            f"(device_count), but {gpus} {'is' if gpus == 1 else 'are'} visible; "
            "lower device_count or set device: cpu"
        )
    return DevicePlan((-1,) * device_count, cpu_note(device_count, gpus, purpose))


def cpu_note(device_count: int, gpus: int, purpose: str) -> str | None:
    """Why `device_count` workers are CPU processes holding no GPU: the node's GPUs (or its
    simulated ones, :mod:`.lease`, which CPU workers lease as GPUs) are too few for them."""
    simulated = simulated_gpus() if gpus == 0 else None
    if simulated is not None and device_count > simulated:
        return (
            f"device_count {device_count} exceeds the {simulated} simulated "
            f"GPU{'s' if simulated > 1 else ''}: {purpose} on {device_count} CPU processes that "
            f"lease none, beside the steps that hold them (set device_count: {simulated} to "
            "lease them)"
        )
    if gpus == 0:
        return None
    return (
        f"device_count {device_count} exceeds the {gpus} visible "
        f"GPU{'s' if gpus > 1 else ''}: {purpose} on {device_count} CPU processes instead "
        f"(set device_count: {gpus} to use the GPU{'s' if gpus > 1 else ''})"
    )


def evaluation_device(
    requested: str | None = None, visible_gpus: int | None = None, field: str = "device"
) -> torch.device:
    """Where a single process evaluates: `requested`, else the first GPU if any, else the CPU.

    `requested` may name an index ("cuda:1"); asking for a GPU that is not visible is an error.
    """
    gpus = visible_gpu_count() if visible_gpus is None else visible_gpus
    if requested is None:
        return torch.device("cuda", 0) if gpus > 0 else torch.device("cpu")
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError):
        raise ConfigurationError(
            f"{field}: not a device: {requested!r} (use cpu, cuda or cuda:N)"
        ) from None
    if device.type not in DEVICE_KINDS:
        raise ConfigurationError(f"{field}: expected cpu, cuda or cuda:N, got {requested!r}")
    if device.type == "cuda":
        index = device.index or 0
        if index >= gpus:
            raise ConfigurationError(
                f"{field}: {requested} asked for, but {gpus} GPU{'' if gpus == 1 else 's'} "
                f"{'is' if gpus == 1 else 'are'} visible"
            )
        return torch.device("cuda", index)
    return device


def gpu_names(count: int) -> tuple[str, ...]:
    """Lease names of the visible GPUs, by what `CUDA_VISIBLE_DEVICES` says they are on the
    node (an index or a UUID), so runs that see the GPUs differently lease the same devices."""
    entries = [e.strip() for e in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    return tuple(
        f"gpu-{entries[i] if i < len(entries) and entries[i] else i}" for i in range(count)
    )


def lease_names(on_gpus: bool) -> tuple[str, ...] | None:
    """The node's devices by lease name: its visible GPUs for work on GPUs; for work on the CPU
    the simulated GPUs (:mod:`.lease`), or None where none are simulated (nothing to lease)."""
    if on_gpus:
        return gpu_names(visible_gpu_count())
    simulated = simulated_gpus()
    return None if simulated is None else tuple(f"simulated-gpu-{i}" for i in range(simulated))


@dataclass(frozen=True)
class Lease:
    """A step's devices as it will hold them while it runs: its workers' plan, and the lease
    names (:func:`lease_names`) it takes `plan.count` of, or None when it holds none (CPU
    workers where no GPU is simulated, or more workers than the node has). What
    :func:`held_plan` and :func:`held_device` hold, said before a step runs (`catwalk-plan`).

    :ivar nodes: machines running `plan` each (a multi-node step: this node's share).
    """

    plan: DevicePlan
    names: tuple[str, ...] | None
    nodes: int = 1

    def describe(self) -> str:
        """E.g. "2 GPUs, leased: 2 of the node's 4 GPUs", "1 GPU, leased: gpu-1", "2 CPU
        processes, no lease"."""
        what = self.plan.describe()
        names = self.names
        if names is None:
            held = "no lease"
        elif len(names) == self.plan.count:  # these ones: all of them, or the one asked for
            held = f"leased: {', '.join(names)}"
        else:
            kind = "GPUs" if self.plan.device_type == "cuda" else "simulated GPUs"
            held = f"leased: {self.plan.count} of the node's {len(names)} {kind}"
        on_nodes = f" on each of {self.nodes} nodes" if self.nodes > 1 else ""
        return f"{what}{on_nodes}, {held}"


def plan_lease(plan: DevicePlan, nodes: int = 1) -> Lease:
    """What the workers of `plan` hold (:func:`held_plan`)."""
    names = lease_names(plan.device_type == "cuda")
    return Lease(plan, None if names is None or plan.count > len(names) else names, nodes)


def device_lease(device: torch.device, requested: str | None) -> Lease:
    """What one process on `device` holds (:func:`held_device`): a GPU asked for by index, else
    any of the node's (GPUs, or simulated ones for the CPU); nothing where `cpu` was asked for."""
    names = None if requested == "cpu" else lease_names(device.type == "cuda")
    if names is not None and device.type == "cuda" and pinned(requested):
        names = names[device.index : device.index + 1]
    index = (device.index or 0) if device.type == "cuda" else -1
    return Lease(DevicePlan((index,)), names)


def pinned(requested: str | None) -> bool:
    """A device asked for by index (`cuda:1`)."""
    return requested is not None and torch.device(requested).index is not None


@contextlib.contextmanager
def held_plan(plan: DevicePlan, holder: str) -> Iterator[DevicePlan]:
    """The plan on GPUs this process holds while the block runs (:mod:`.lease`): steps side by
    side never share one. CPU workers hold nothing, unless GPUs are simulated."""
    names = plan_lease(plan).names
    if names is None:  # too few, or CPU: no lease (the plan's note says why)
        yield plan
        return
    with leased(plan.count, names, holder) as indices:
        if plan.device_type == "cuda":
            yield replace(plan, devices=indices)
            return
        announce(logger, "%s holds simulated GPUs %s", holder, ", ".join(map(str, indices)))
        yield plan


@contextlib.contextmanager
def held_device(device: torch.device, requested: str | None, holder: str) -> Iterator[torch.device]:
    """One process's device (:func:`evaluation_device`) held while the block runs: a GPU asked
    for by index is waited for; otherwise any free GPU is taken."""
    names = device_lease(device, requested).names
    if names is None:
        yield device
        return
    if device.type != "cuda":
        with leased(1, names, holder) as (index,):
            announce(logger, "%s holds simulated GPU %d", holder, index)
            yield device
        return
    if pinned(requested):
        with leased(1, names, holder):  # the one asked for
            yield device
        return
    with leased(1, names, holder) as (index,):
        yield torch.device("cuda", index)
