"""Training engines for jsonnet: `catwalk::torch` (DDP) and `catwalk::fairscale` (FSDP)."""

from .base import CatwalkEngineMixin, NonFiniteLossError
from .fairscale_engine import CatwalkFairScaleEngine, with_wrapped_modules
from .torch_engine import CatwalkTorchEngine

__all__ = [
    "CatwalkEngineMixin",
    "CatwalkFairScaleEngine",
    "CatwalkTorchEngine",
    "NonFiniteLossError",
    "with_wrapped_modules",
]
