"""Training engines for jsonnet: `catwalk::torch` (DDP), `catwalk::fairscale` (FairScale FSDP)
and `catwalk::torch_fsdp` (PyTorch FSDP2), and what building one needs: the modules it wraps,
the ZeRO optimizers (`catwalk::zero`, `catwalk::oss`), Tango's train config aware of nodes,
generation in lockstep through its root wrapper, throughput and memory, and what each engine
keeps of a model that trains an adapter (:mod:`.adapter_state`). Training
(:mod:`catwalk_steps.training`) and evaluation outside it (:mod:`catwalk_steps.evaluation`)
both build engines from here.
"""

from . import optim  # noqa: F401  (register catwalk::zero, ::oss)
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
