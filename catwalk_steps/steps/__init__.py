"""The Tango face: the steps named in experiment files, and what makes `tango run` behave.

Steps are thin: they check their inputs, build objects and call the plain functions below them.
Importing this package registers every step and applies the named patches to Tango
(:mod:`.patching`: each checked against the installed Tango version).
"""

from . import registry, run_command, run_metadata  # noqa: F401  (apply their patches)
from .evaluate import Evaluate
from .executor import CatwalkExecutor
from .export import ExportCheckpoint
from .formats import HFModelFormat
from .load_task import LoadTask
from .report import MetricsReport, SuiteReport
from .train import TrainRankClassifier
from .workspace import SharedLocalWorkspace

__all__ = [
    "CatwalkExecutor",
    "Evaluate",
    "ExportCheckpoint",
    "HFModelFormat",
    "LoadTask",
    "MetricsReport",
    "SharedLocalWorkspace",
    "SuiteReport",
    "TrainRankClassifier",
]
