"""Tango steps that fine-tune and evaluate causal LMs on multiple-choice tasks.

Importing the package registers every component (`include_package: [catwalk_steps]` in tango.yml).
"""

from . import (
    optim,  # noqa: F401  (registers catwalk::zero and catwalk::oss)
    tango_compat,  # noqa: F401  (applies its patches)
)
from .callbacks import RunMetrics
from .data import MultipleChoiceCollator, ShardedDataLoader
from .engines import CatwalkFairScaleEngine, CatwalkTorchEngine, CatwalkTorchFSDPEngine
from .formats import HFModelFormat
from .models import RankClassifier
from .steps import Evaluate, LoadTask, MetricsReport, TrainRankClassifier
from .tasks import MultipleChoiceInstance, PiqaTask, SyntheticTask, Task

__all__ = [
    "Evaluate",
    "CatwalkFairScaleEngine",
    "CatwalkTorchEngine",
    "CatwalkTorchFSDPEngine",
    "HFModelFormat",
    "LoadTask",
    "MetricsReport",
    "MultipleChoiceCollator",
    "MultipleChoiceInstance",
    "PiqaTask",
    "RankClassifier",
    "RunMetrics",
    "ShardedDataLoader",
    "SyntheticTask",
    "Task",
    "TrainRankClassifier",
]
