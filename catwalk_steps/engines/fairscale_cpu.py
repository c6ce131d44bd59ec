"""Let FairScale's ``FullyShardedDataParallel`` (FSDP) run on CPU, for development machines and CI.

Scope
-----
FairScale FSDP assumes CUDA: it issues its all-gathers and reduce-scatters on side CUDA streams
and fails at the first forward pass of a CPU-only build ("Torch not compiled with CUDA enabled").
On a machine with GPUs it is worse: it picks ``cuda`` as its compute device whatever the worker's
device is. :func:`use_worker_device` tells this layer where the worker computes. On a CPU
worker the shims below are active, whether or not CUDA exists on the machine; on a CUDA worker
they step aside and FairScale runs unchanged. What it patches, and why:

* ``torch`` as seen by ``fairscale.nn.data_parallel.fully_sharded_data_parallel`` only: a view of
  ``torch`` whose ``.cuda`` reports no CUDA and provides a single no-op stream, ``stream()``,
  ``current_stream()`` and ``synchronize()``. CPU kernels run in program order, so stream
  ordering has nothing to do. FSDP then takes the code paths it takes on a CPU-only build.
* ``FullyShardedDataParallel._setup_streams``: without CUDA it creates no streams, yet FSDP later
  indexes ``self._streams[name]``; the wrapper fills the shared dict with the no-op stream.
* The FSDP module's default ``compute_device`` (``cuda``, or the parameters' device) becomes the
  worker's device, also for units created by a model constructor that does not pass it.
* ``clip_grad_norm_`` moves the local norm to CUDA with ``.cuda()``; the FSDP module's
  ``calc_grad_norm`` returns a norm whose ``.cuda()`` keeps it on the CPU.
* The reduce-scatter bucketer hands ``_reduce_scatter_base`` a 2-D ``[world_size, n]`` input,
  which gloo rejects; the bucketer's ``dist`` passes it on flattened to ``world_size * n``
  elements (same memory layout, same result).
* ``torch.Tensor.record_stream`` (global, unavoidable: it is a tensor method) ignores calls made
  with the no-op stream, which only the patched FSDP module can hold. Other calls are unchanged.
* ``FullyShardedDataParallel._gather_optim_state`` (used by ``gather_full_optim_state_dict``)
  reuses one all-gather buffer for every state tensor of a parameter and keeps each result with
  ``.cpu()``, which copies on CUDA but not on the CPU: every gathered state (``exp_avg``,
  ``exp_avg_sq``) would silently be the last one. On CPU workers it gathers one state at a time.

Checked against fairscale 0.4.13 and torch 2.13.0 (CPU build), gloo, 2 processes: losses match
single-process training for root-only and nested FSDP, with torch's or FairScale's activation
checkpointing inside wrapped blocks, bf16 mixed precision, ``clip_grad_norm_``, eval under
``torch.no_grad()``, ``summon_full_params`` and full / local state dicts. Not covered:
``move_params_to_cpu`` / ``cpu_offload`` / ``move_grads_to_cpu``, which pin host memory for
transfers to an accelerator and have no purpose when computing on the CPU.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
import torch.distributed as dist

from catwalk_startup.patching import patch

PATCH = "FairScale FSDP on CPU workers"
_worker_device: torch.device | None = None


def _cpu_worker() -> bool:
    """Whether the shims apply: this process computes on the CPU."""
    return _worker_device is not None and _worker_device.type == "cpu"


class _CpuStream:
    """The one stream of CPU execution, standing in for ``torch.cuda.Stream``.

    CPU kernels execute in program order, so every "stream" is the same stream and waiting on or
    synchronizing with it has nothing to do. All instances are one object, so FSDP's check that
    the current stream is its post-backward stream holds.
    """

    _instance: _CpuStream | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> _CpuStream:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def wait_stream(self, stream: Any) -> None:
        """Nothing to wait for: work is already ordered."""

    def synchronize(self) -> None:
        """Nothing to wait for: work is already complete when issued."""

    def __repr__(self) -> str:
        return "<CPU no-op stream>"


class _CpuCudaNamespace:
    """What FairScale's FSDP module sees as ``torch.cuda`` in a CPU worker.

    ``is_available()`` is ``False``, so FSDP takes its CPU-only paths even on a GPU machine; the
    stream and synchronization calls FSDP makes are replaced; any other attribute is looked up
    on the real ``torch.cuda``.
    """

    @staticmethod
    def is_available() -> bool:
        """This worker computes on the CPU: no CUDA for FSDP."""
        return False

    Stream = _CpuStream

    @staticmethod
    def stream(stream: Any) -> contextlib.AbstractContextManager[None]:
        """Selecting a stream changes nothing on the CPU."""
        return contextlib.nullcontext()

    @staticmethod
    def current_stream(device: Any = None) -> _CpuStream:
        """The single CPU stream."""
        return _CpuStream()

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """CPU work is complete when issued."""

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        """No CUDA memory is in use (used by FSDP's verbose logging)."""
        return 0

    max_memory_allocated = memory_allocated

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


class _TorchWithCpuCuda:
    """``torch`` whose ``.cuda`` is :class:`_CpuCudaNamespace` in a CPU worker; all else (and
    ``.cuda`` in a CUDA worker) is the real ``torch``."""

    _cpu_cuda = _CpuCudaNamespace()

    @property
    def cuda(self) -> Any:
        return self._cpu_cuda if _cpu_worker() else torch.cuda

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


class _DistWithFlatReduceScatter:
    """``torch.distributed`` whose ``_reduce_scatter_base`` accepts a 2-D, rank-major input.

    NCCL accepts the bucketer's ``[world_size, n]`` input; gloo checks that the input's first
    dimension is ``world_size * n``. Flattening a contiguous rank-major input gives exactly that.
    """

    @staticmethod
    def _reduce_scatter_base(
        output: torch.Tensor,
        input_tensor: torch.Tensor,
        op: Any = dist.ReduceOp.SUM,
        group: Any = None,
        async_op: bool = False,
    ) -> Any:
        if not _cpu_worker():  # NCCL takes the 2-D input as it is
            return dist._reduce_scatter_base(
                output, input_tensor, op=op, group=group, async_op=async_op
            )
        # torch 2.13 deprecates reduce_scatter_tensor in favour of reduce_scatter_single.
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        flat = input_tensor.reshape(-1)
        return reduce_scatter(output, flat, op=op, group=group, async_op=async_op)

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)


class _NormOnHost(torch.Tensor):
    """A gradient norm whose ``.cuda()`` leaves it where it is (on the CPU)."""

    def cuda(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.as_subclass(torch.Tensor)


def _patch_fsdp_torch_reference() -> None:
    """Point the FSDP module's global ``torch`` at :class:`_TorchWithCpuCuda`.

    Private: relies on fully_sharded_data_parallel.py referring to CUDA only through its module
    global ``torch`` (fairscale 0.4.13, torch 2.13.0).
    """
    from fairscale.nn.data_parallel import fully_sharded_data_parallel as fsdp_module

    patch(fsdp_module, "torch", PATCH, lambda _: _TorchWithCpuCuda(), package="fairscale")


def _patch_fsdp_default_compute_device() -> None:
    """Default ``compute_device`` to the worker's device instead of ``cuda``.

    Private: replaces the module function ``_get_default_cuda_device`` (fairscale 0.4.13). Before
    :func:`use_worker_device` is called, FairScale's own default applies.
    """
    from fairscale.nn.data_parallel import fully_sharded_data_parallel as fsdp_module

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def default_device(module: torch.nn.Module) -> torch.device:
            return _worker_device if _worker_device is not None else original(module)

        return default_device

    patch(fsdp_module, "_get_default_cuda_device", PATCH, wrap, package="fairscale")


def _patch_fsdp_streams() -> None:
    """Give the root FSDP instance (and, through the shared dict, its children) CPU streams.

    Private: wraps ``FullyShardedDataParallel._setup_streams`` and fills ``self._streams`` with
    the keys FSDP indexes. The root shares this dict object with its children
    (fairscale 0.4.13).
    """
    from fairscale.nn.data_parallel import FullyShardedDataParallel

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def setup_streams(self: FullyShardedDataParallel) -> None:
            original(self)
            if _cpu_worker() and self._is_root and not self._streams:
                for name in ("fp32_to_fp16", "all_gather", "post_backward"):
                    self._streams[name] = _CpuStream()

        return setup_streams

    patch(FullyShardedDataParallel, "_setup_streams", PATCH, wrap, package="fairscale")


def _patch_fsdp_grad_norm() -> None:
    """Keep the local gradient norm on the CPU in ``clip_grad_norm_``, which calls ``.cuda()``.

    Private: replaces the FSDP module's imported name ``calc_grad_norm``, used only by
    ``clip_grad_norm_`` (fairscale 0.4.13).
    """
    from fairscale.nn.data_parallel import fully_sharded_data_parallel as fsdp_module

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def calc_grad_norm(*args: Any, **kwargs: Any) -> torch.Tensor:
            norm = original(*args, **kwargs)
            return norm.as_subclass(_NormOnHost) if _cpu_worker() else norm

        return calc_grad_norm

    patch(fsdp_module, "calc_grad_norm", PATCH, wrap, package="fairscale")


def _patch_bucketer_reduce_scatter() -> None:
    """Make the reduce-scatter bucketer's flush work with gloo.

    Private: replaces the module global ``dist`` of fairscale/internal/reduce_scatter_bucketer.py
    (fairscale 0.4.13, torch 2.13.0 gloo).
    """
    from fairscale.internal import reduce_scatter_bucketer

    flat = _DistWithFlatReduceScatter()
    patch(reduce_scatter_bucketer, "dist", PATCH, lambda _: flat, package="fairscale")


def _patch_record_stream() -> None:
    """Ignore ``Tensor.record_stream`` calls made with the CPU no-op stream.

    Global because ``record_stream`` is a tensor method. Only FSDP's patched module can hold a
    :class:`_CpuStream`, so every other call goes to the original (torch 2.13.0).
    """

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def record_stream(self: torch.Tensor, stream: Any) -> None:
            if isinstance(stream, _CpuStream):
                return
            original(self, stream)

        return record_stream

    patch(torch.Tensor, "record_stream", f"{PATCH} (Tensor.record_stream)", wrap, package="torch")


def _patch_fsdp_gather_optim_state() -> None:
    """Gather optimizer states one at a time on CPU workers, so none share a buffer.

    Private: wraps ``FullyShardedDataParallel._gather_optim_state(sd_state)``, which maps
    {unit: {state name: tensor or value}} to (gathered, singleton) dicts of the same shape
    (fairscale 0.4.13). Same collectives, in the same order, as the original.
    """
    from fairscale.nn.data_parallel import FullyShardedDataParallel

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def gather_optim_state(self: Any, sd_state: dict) -> tuple[dict, dict]:
            if not _cpu_worker():
                return original(self, sd_state)
            gathered: dict = {}
            singleton: dict = {}
            for unit, states in sd_state.items():
                gathered[unit], singleton[unit] = {}, {}
                for name, value in states.items():
                    one, one_singleton = original(self, {unit: {name: value}})
                    gathered[unit].update(one[unit])
                    singleton[unit].update(one_singleton[unit])
            return gathered, singleton

        return gather_optim_state

    patch(FullyShardedDataParallel, "_gather_optim_state", PATCH, wrap, package="fairscale")


def use_worker_device(device: torch.device | str) -> None:
    """Tell FairScale FSDP where this worker computes; see the module docstring.

    Installs the patches, each once per process (:func:`catwalk_startup.patching.patch`). With
    a CPU device the CPU shims are active, whether or not CUDA exists on the machine; with a
    CUDA device FSDP runs unchanged except that its default ``compute_device`` is that device.
    """
    global _worker_device
    _worker_device = torch.device(device)
    _patch_fsdp_torch_reference()
    _patch_fsdp_default_compute_device()
    _patch_fsdp_streams()
    _patch_fsdp_grad_norm()
    _patch_bucketer_reduce_scatter()
    _patch_record_stream()
    _patch_fsdp_gather_optim_state()
