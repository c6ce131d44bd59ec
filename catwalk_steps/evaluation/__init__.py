"""Evaluating a model outside training: which model (a block, a step's saved model, or one built
in Python; nothing loaded before a step runs; loaded as the process's one held model,
:mod:`catwalk_steps.workspace.held_model`), and where it is scored (here on one device, or on
several local workers, whole or sharded by an engine)."""

from .job import EvaluationJob, EvaluationSettings
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
    "model_block",
    "model_source",
]
