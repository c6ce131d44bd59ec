"""What the sharded engines make of the one precision setting (:class:`Precision`): FairScale
FSDP's flags and FSDP2's `MixedPrecisionPolicy`, so that the engine and its inner units never
disagree. Both gather and compute parameters in the autocast dtype and reduce gradients in
float32: summing half-precision gradients across ranks overflows (fp16) or loses precision
(bf16). The sharded master parameters and the optimizer state stay float32.
"""

from __future__ import annotations

from typing import Any

import torch

from ..settings import Precision


def fairscale_flags(precision: Precision) -> dict[str, Any]:
    """FairScale FSDP's keyword arguments. Tango's `FSDPConfig.mixed_precision` could only mean
    fp16; `compute_dtype` makes bf16 possible; `fp32_reduce_scatter` reduces in float32."""
    if precision.compute_dtype is None:
        return {"mixed_precision": False}
    return {
        "mixed_precision": True,
        "compute_dtype": precision.compute_dtype,
        "buffer_dtype": torch.float32,
        "fp32_reduce_scatter": True,
    }


def fsdp2_policy(precision: Precision) -> Any:
    """FSDP2's `MixedPrecisionPolicy` for `precision`."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision.compute_dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=precision.compute_dtype, reduce_dtype=torch.float32)
