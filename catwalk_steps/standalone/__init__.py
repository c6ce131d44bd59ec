"""Evaluating a model outside training: which model (a block, a step's saved model, or one built
in Python; nothing loaded before a step runs), at most one loaded per process, and where it is
scored (here on one device, or on several local workers, whole or sharded by an engine)."""

from .job import EvaluationJob, EvaluationSettings
from .loaded import keep_model, models_loaded, release_model, use_model
from .scores import evaluation_scores
from .sources import (
    BuiltModel,
    ConfiguredModel,
    ModelSource,
    SavedModel,
    configured_model_of,
    model_block,
    model_source,
)

__all__ = [
    "BuiltModel",
    "ConfiguredModel",
    "EvaluationJob",
    "EvaluationSettings",
    "ModelSource",
    "SavedModel",
    "configured_model_of",
    "evaluation_scores",
    "keep_model",
    "model_block",
    "model_source",
    "models_loaded",
    "release_model",
    "use_model",
]
