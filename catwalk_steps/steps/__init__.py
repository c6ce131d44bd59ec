"""The steps that experiment files name (`catwalk::load_task`, `::train`, `::evaluate`,
`::reference_logprobs`, `::report`, `::suite_report`, `::export_checkpoint`, `::checkpoints`).

Steps are thin: they check their inputs (:mod:`catwalk_steps.checks`), build objects and call the
plain functions below them.
"""

from .checkpoints import CheckpointModel, CheckpointReport, EvaluateCheckpoints
from .evaluate import Evaluate
from .export import ExportCheckpoint
from .load_task import LoadTask
from .reference_logprobs import ReferenceLogprobs
from .report import MetricsReport, SuiteReport
from .train import TrainRankClassifier

__all__ = [
    "CheckpointModel",
    "CheckpointReport",
    "EvaluateCheckpoints",
    "Evaluate",
    "ExportCheckpoint",
    "LoadTask",
    "MetricsReport",
    "ReferenceLogprobs",
    "SuiteReport",
    "TrainRankClassifier",
]
