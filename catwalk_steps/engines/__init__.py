"""Training engines for jsonnet: `catwalk::torch` (DDP) and `catwalk::fairscale` (FSDP)."""

from .base import CatwalkEngineMixin, NonFiniteLossError
from .torch_engine import CatwalkTorchEngine

__all__ = ["CatwalkEngineMixin", "CatwalkTorchEngine", "NonFiniteLossError"]
