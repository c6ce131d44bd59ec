"""At most one model in memory per process, shared by the steps that score it one after another.

A suite scores one model on many tasks, one `catwalk::evaluate` step each: each step used to load
the weights again, and Tango's step cache kept up to eight results in memory, models included.
Here a step asks for its model by key: the model held is returned when the key is its own; any
other is released first (its memory freed, the CUDA cache too), then loaded, with one log line.
The executor runs the evaluations of one model together (:mod:`catwalk_steps.tango_fixes.executor`),
so a suite loads each model once.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..console import announce

logger = logging.getLogger(__name__)
M = TypeVar("M")


class _Held:
    """The model this process holds, and under which key."""

    key: str | None = None
    model: Any = None
    loads: int = 0  # models loaded by this process: the tests count them


_held = _Held()


def use_model(key: str, load: Callable[[], M], what: str) -> M:
    """The model known as `key`: the one held, or loaded now (the held one released first)."""
    if _held.key == key:
        return _held.model
    release_model()
    started = time.monotonic()
    model = load()
    _held.loads += 1
    announce(
        logger,
        "Loaded model %s (%s parameters) in %.1f s",
        what,
        f"{parameter_count(model):,}",
        time.monotonic() - started,
    )
    keep_model(key, model)
    return model


def keep_model(key: str, model: Any) -> None:
    """Holds `model` (a step's result just computed here) as the one model of this process."""
    if _held.key != key:
        release_model()
    _held.key, _held.model = key, model


def held_model(key: str) -> Any:
    """The model held under `key`, or None."""
    return _held.model if _held.key == key else None


def held_model_key() -> str | None:
    """The key of the model this process holds, if any."""
    return _held.key


def release_model() -> None:
    """Drops the held model and frees its memory (once no one else refers to it)."""
    if _held.model is None:
        return
    parameters = getattr(_held.model, "parameters", None)
    on_gpu = parameters is not None and any(p.is_cuda for p in parameters())
    _held.key, _held.model = None, None
    gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()


def models_loaded() -> int:
    return _held.loads


def parameter_count(model: Any) -> int:
    parameters = getattr(model, "parameters", None)
    return sum(p.numel() for p in parameters()) if parameters else 0
