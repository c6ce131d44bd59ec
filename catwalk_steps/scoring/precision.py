"""One precision setting, mapped here (and only here) to everything that depends on it.

`precision: "fp32" | "bf16" | "fp16"` in jsonnet decides the autocast dtype, whether a gradient
scaler is needed, FairScale FSDP's mixed-precision flags and FSDP2's `MixedPrecisionPolicy`, so
the engine and the wrapped inner modules can never disagree. Losses and log-softmax stay in
float32 in the model code.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from tango.common.exceptions import ConfigurationError

_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """A validated precision setting."""

    name: str

    @classmethod
    def parse(cls, value: str, field: str = "precision") -> Precision:
        if value not in _DTYPES:
            raise ConfigurationError(
                f"{field}: expected one of {', '.join(_DTYPES)}, got {value!r}"
            )
        return cls(value)

    @property
    def compute_dtype(self) -> torch.dtype | None:
        """The autocast dtype; None for full float32."""
        return _DTYPES[self.name]

    def check_device(self, device_type: str, field: str = "precision") -> None:
        """fp16 autocast is a CUDA feature; on CPU bf16 is the mixed precision that works."""
        if self.name == "fp16" and device_type != "cuda":
            raise ConfigurationError(
                f"{field}: fp16 needs CUDA (this run is on {device_type}); use bf16 on CPU"
            )

    def autocast(self, device_type: str) -> contextlib.AbstractContextManager:
        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type, dtype=self.compute_dtype)

    @property
    def needs_grad_scaler(self) -> bool:
        """fp16 gradients underflow without loss scaling; bf16 has float32's exponent range."""
        return self.name == "fp16"

    def fairscale_fsdp_kwargs(self) -> dict[str, Any]:
        """FairScale FSDP flags: parameters gathered and computed in the autocast dtype.

        Gradients are reduce-scattered in float32 (`fp32_reduce_scatter`): summing half-precision
        gradients across ranks overflows (fp16) or loses precision (bf16). FSDP keeps the float32
        master shard for the optimizer. Tango's `FSDPConfig.mixed_precision` could only mean fp16;
        `compute_dtype` makes bf16 possible.
        """
        if self.compute_dtype is None:
            return {"mixed_precision": False}
        return {
            "mixed_precision": True,
            "compute_dtype": self.compute_dtype,
            "buffer_dtype": torch.float32,
            "fp32_reduce_scatter": True,
        }

    def fsdp2_policy(self) -> Any:
        """FSDP2's `MixedPrecisionPolicy`: parameters gathered in the autocast dtype, gradients
        reduced in float32 (as for FairScale, and for the same reason); the sharded master
        parameters and the optimizer state stay float32."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if self.compute_dtype is None:
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=self.compute_dtype, reduce_dtype=torch.float32)
