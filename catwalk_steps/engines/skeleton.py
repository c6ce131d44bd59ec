"""A model's structure on the meta device (its skeleton: no weights), and the inner modules an
engine's `modules_to_wrap` chooses in it, each computed once per model block and process: the
graph-build checks, the note when training starts and every worker (through the job) use the
one match."""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..components import check_keys
from ..model_files import check_model_directory
from ..remote import is_hub_name
from ..scoring.causal_lm import unavailable_here
from ..settings import EngineSettings, ModelSettings
from .wrapping import select_modules


def model_skeleton(model: Any) -> Any:
    """The rank classifier's structure on the meta device, or None when it cannot be built
    without a download (then the real construction reports what is wrong). Built once per
    model block and process: the graph-build checks and the warnings when training starts
    share it. `model`: a model block, or its :class:`~catwalk_steps.settings.ModelSettings`."""
    return _skeleton(*_model_key(model))


def _model_key(model: Any) -> tuple[str, Any]:
    settings = ModelSettings.read(model)
    check_keys(settings.constructor, settings.params, settings.key)
    return settings.params_json, settings.constructor


@functools.lru_cache(maxsize=8)
def _skeleton(params_json: str, constructor: Any) -> Any:
    from ..scoring.rank_classifier import RankClassifier

    if not (inspect.isclass(constructor) and issubclass(constructor, RankClassifier)):
        return None
    params = json.loads(params_json)
    pretrained = params.get("pretrained")
    if pretrained and not is_hub_name(pretrained):  # the weights the workers will read, too
        check_model_directory(pretrained)
    try:
        return RankClassifier(**params, skeleton=True)
    except ConfigurationError as e:
        if unavailable_here(e, params.get("pretrained")):
            return None  # not on this machine (yet): the step's own load says so, if it runs
        raise


def chosen_modules(model: Any, engine: EngineSettings) -> list[str] | None:
    """The inner modules the engine's `modules_to_wrap` chooses in the model, deepest first,
    matched on its skeleton (:func:`~catwalk_steps.engines.wrapping.select_modules`) once per
    process: the graph-build check, the note when training starts and every worker (through
    the job) use this one match. None when the engine chooses none, or when the model cannot be
    built here (each worker then matches its own)."""
    if not engine.selects_modules:
        return None
    patterns = json.dumps(engine.patterns)
    chosen = _chosen(*_model_key(model), patterns, f"{engine.key}.modules_to_wrap")
    return None if chosen is None else list(chosen)


@functools.lru_cache(maxsize=8)
def _chosen(params_json: str, constructor: Any, patterns: str, field: str) -> tuple | None:
    skeleton = _skeleton(params_json, constructor)
    if skeleton is None:
        return None
    return tuple(select_modules(skeleton, json.loads(patterns), field))
