"""Training engines for jsonnet: `catwalk::torch` (DDP), `catwalk::fairscale` (FairScale FSDP)
and `catwalk::torch_fsdp` (PyTorch FSDP2)."""

from .base import CatwalkEngine, NonFiniteLossError
from .fairscale_engine import CatwalkFairScaleEngine, with_wrapped_modules
from .torch_engine import CatwalkTorchEngine
from .torch_fsdp_engine import CatwalkTorchFSDPEngine

__all__ = [
    "CatwalkEngine",
    "CatwalkFairScaleEngine",
    "CatwalkTorchEngine",
    "CatwalkTorchFSDPEngine",
    "NonFiniteLossError",
    "with_wrapped_modules",
]
