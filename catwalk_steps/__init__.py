"""Tango steps that fine-tune and evaluate causal LMs on multiple-choice tasks.

Importing the package registers every component (`include_package: [catwalk_steps]` in
tango.yml). The sub-packages, from the bottom up:

- :mod:`.tasks`: multiple-choice instances and their sources (hub, offline data, files, a
  seed); the standard tasks by name, built from templates as lm-evaluation-harness builds them;
- :mod:`.scoring`: tokenizing, the rank classifier over any causal LM, scoring a split;
- :mod:`.reports`: tables, task suites, sweep aggregates and plots of several runs;
- :mod:`.distributed`: devices, the rendezvous store, process groups;
- :mod:`.training`: engines, optimizers, loaders, callbacks, checkpoints, the loop;
- :mod:`.launch`: the worker processes of a job, on one node or several;
- :mod:`.steps`: the Tango steps, config checks, the workspace, and fixes to `tango run`.
"""

import catwalk_startup

catwalk_startup.install()  # first: Tango's log receiver reads data only (see that package)

from .scoring import MultipleChoiceCollator, RankClassifier  # noqa: E402
from .steps import (  # noqa: E402
    Evaluate,
    ExportCheckpoint,
    HFModelFormat,
    LoadTask,
    MetricsReport,
    SharedLocalWorkspace,
    SuiteReport,
    TrainRankClassifier,
)
from .tasks import MultipleChoiceInstance, PiqaTask, SyntheticTask, Task, TemplatedTask  # noqa: E402
from .training import (  # noqa: E402
    CatwalkFairScaleEngine,
    CatwalkTorchEngine,
    CatwalkTorchFSDPEngine,
    RunMetrics,
    ShardedDataLoader,
)

__all__ = [
    "CatwalkFairScaleEngine",
    "CatwalkTorchEngine",
    "CatwalkTorchFSDPEngine",
    "Evaluate",
    "ExportCheckpoint",
    "HFModelFormat",
    "LoadTask",
    "MetricsReport",
    "MultipleChoiceCollator",
    "MultipleChoiceInstance",
    "PiqaTask",
    "RankClassifier",
    "RunMetrics",
    "ShardedDataLoader",
    "SharedLocalWorkspace",
    "SuiteReport",
    "SyntheticTask",
    "Task",
    "TemplatedTask",
    "TrainRankClassifier",
]
