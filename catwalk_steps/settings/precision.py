"""One precision setting, parsed once where the config enters, asked by everything that depends
on it.

`precision: "fp32" | "bf16" | "fp16"` in jsonnet decides the autocast dtype (here) and whether a
gradient scaler is needed; the sharded engines ask it for FairScale FSDP's mixed-precision flags
and FSDP2's `MixedPrecisionPolicy` (:mod:`catwalk_steps.engines.mixed_precision`: what
ranks exchange is the engines' concern, not scoring's). Losses and log-softmax stay in float32 in
the model code. (It lives with the other typed settings, below every reader: scoring asks it
for autocast, the engines for their flags, the checks and the evaluate step for its rules.)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from tango.common.exceptions import ConfigurationError

DEFAULT_PRECISION = "fp32"  # every `precision` key's default (engines, `catwalk::evaluate`)
_DTYPES = {DEFAULT_PRECISION: None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """A validated precision setting."""

    name: str  # "fp32" (full float32), "bf16" (autocast; CPU or CUDA), "fp16" (CUDA, scaled)

    @classmethod
    def parse(cls, value: str, field: str = "precision") -> Precision:
        """`value` checked; an unknown one is a configuration error naming `field`."""
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


FP32 = Precision(DEFAULT_PRECISION)  # full float32: no autocast
