"""Settings as typed objects, each config block read once and each default written once.

One object per block of an experiment file, importable from here: a `catwalk::train` step's
keys (:class:`TrainSettings`) and its lazy blocks read without building them
(:class:`TrainBlocks`: the model, :class:`ModelSettings`; the engine, :class:`EngineSettings`;
the loaders and their collate function, :class:`LoaderSettings`); the precision setting
(:class:`Precision`); how `catwalk::evaluate` scores (:class:`EvaluationSettings`). The
graph-build checks (:mod:`catwalk_steps.checks`), the planned job (:mod:`catwalk_steps.launch`),
the engines, the evaluate step and its workers read them; each field's comment says what the
key means.

This room sits low (above :mod:`catwalk_steps.tasks`, below :mod:`catwalk_steps.scoring`): it
reads configs, never builds a model or an engine, so every reader may import it.
"""

from .engine import EngineSettings
from .evaluation import BATCH_SIZE, DEVICE_COUNT, EVALUATION_DEFAULTS, METRIC, EvaluationSettings
from .loaders import MAX_LENGTH, LoaderSettings
from .model import INIT_SEED, ModelSettings
from .precision import DEFAULT_PRECISION, FP32, Precision
from .training import DEFAULTS, TrainBlocks, TrainSettings, run_signature

__all__ = [
    "BATCH_SIZE",
    "DEFAULTS",
    "DEFAULT_PRECISION",
    "DEVICE_COUNT",
    "EVALUATION_DEFAULTS",
    "FP32",
    "EngineSettings",
    "EvaluationSettings",
    "LoaderSettings",
    "INIT_SEED",
    "MAX_LENGTH",
    "METRIC",
    "ModelSettings",
    "Precision",
    "TrainBlocks",
    "TrainSettings",
    "run_signature",
]
