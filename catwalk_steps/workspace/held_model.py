"""At most one model in memory per process, shared by the steps that score it one after another.

A suite scores one model on many tasks, one `catwalk::evaluate` step each: each step used to load
the weights again, and Tango's step cache kept up to eight results in memory, models included.
Here a step asks its workspace's holder (:func:`catwalk_steps.workspace.step_cache.held_by`: the
step cache owns one) for its model by key: the model held is returned when the key is its own;
any other is released first (its memory freed, the CUDA cache too), then loaded, with one log
line. The executor runs the evaluations of one model together
(:mod:`catwalk_steps.tango_fixes.executor`), so a suite loads each model once.
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


class HeldModel:
    """The one model held, and under which key; `loads` counts the models it loaded."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.model: Any = None
        self.loads = 0

    def use(self, key: str, load: Callable[[], M], what: str) -> M:
        """The model known as `key`: the one held, or loaded now (the held one released first)."""
        if self.key == key:
            return self.model
        self.release()
        started = time.monotonic()
        model = load()
        self.loads += 1
        announce(
            logger,
            "Loaded model %s (%s parameters) in %.1f s",
            what,
            f"{parameter_count(model):,}",
            time.monotonic() - started,
        )
        self.keep(key, model)
        return model

    def keep(self, key: str, model: Any) -> None:
        """Holds `model` (a step's result just computed here) as the one model held."""
        if self.key != key:
            self.release()
        self.key, self.model = key, model

    def get(self, key: str) -> Any:
        """The model held under `key`, or None."""
        return self.model if self.key == key else None

    def release(self) -> None:
        """Drops the held model and frees its memory (once no one else refers to it)."""
        if self.model is None:
            return
        parameters = getattr(self.model, "parameters", None)
        on_gpu = parameters is not None and any(p.is_cuda for p in parameters())
        self.key, self.model = None, None
        gc.collect()
        if on_gpu:
            torch.cuda.empty_cache()


def parameter_count(model: Any) -> int:
    parameters = getattr(model, "parameters", None)
    return sum(p.numel() for p in parameters()) if parameters else 0
