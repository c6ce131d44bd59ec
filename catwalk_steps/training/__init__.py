"""What every worker runs to train: the engines (DDP, FairScale FSDP, FSDP2), ZeRO optimizers,
the sharded loader, the callbacks, checkpoints, and the loop that drives them step by step."""

from . import optim, trackers  # noqa: F401  (register catwalk::zero, ::oss, ::wandb, ::tensorboard)
from .callbacks import RunMetrics
from .engines import CatwalkFairScaleEngine, CatwalkTorchEngine, CatwalkTorchFSDPEngine
from .loaders import ShardedDataLoader

__all__ = [
    "CatwalkFairScaleEngine",
    "CatwalkTorchEngine",
    "CatwalkTorchFSDPEngine",
    "RunMetrics",
    "ShardedDataLoader",
]
