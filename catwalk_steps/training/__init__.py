"""What every worker runs to train: the loop that drives an engine (:mod:`catwalk_steps.engines`)
step by step, its checkpoints, the sharded loader, the callbacks and trackers, and the in-loop
evaluation of a task suite."""

from . import trackers  # noqa: F401  (register catwalk::wandb, ::tensorboard)
from .callbacks import RunMetrics
from .loaders import ShardedDataLoader

__all__ = ["RunMetrics", "ShardedDataLoader"]
