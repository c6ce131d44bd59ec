"""The callbacks' state in a checkpoint, keyed by what each callback is, not by where it stands.

A run resumed with other callbacks than the run that wrote the checkpoint (`resume_from` another
run's directory, a tracker added or removed) must give each callback its own state: matched by
position, a tracker would be handed the metric history's state and fail on a missing key. A
callback the checkpoint has no state for starts fresh; a state no callback claims is left.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)


def callback_keys(callbacks: Sequence[Any]) -> list[str]:
    """One key per callback: its class, and its place among callbacks of the same class."""
    keys: list[str] = []
    seen: dict[str, int] = {}
    for callback in callbacks:
        name = f"{type(callback).__module__}.{type(callback).__qualname__}"
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return keys


def saved_states(callbacks: Sequence[Any]) -> dict[str, dict[str, Any]]:
    return {
        key: callback.state_dict()
        for key, callback in zip(callback_keys(callbacks), callbacks, strict=True)
    }


def restore_states(callbacks: Sequence[Any], saved: dict[str, Any] | list[Any]) -> None:
    """Each callback takes the state saved under its key. Checkpoints written before the keys
    hold a list in the callbacks' order then: matched by position when the count agrees."""
    if isinstance(saved, list):
        if len(saved) != len(callbacks):
            logger.warning(
                "The checkpoint holds %d callback states for %d callbacks (an older checkpoint, "
                "by position): every callback starts fresh",
                len(saved),
                len(callbacks),
            )
            return
        saved = dict(zip(callback_keys(callbacks), saved, strict=True))
    for key, callback in zip(callback_keys(callbacks), callbacks, strict=True):
        if key in saved:
            callback.load_state_dict(saved[key])
        else:
            logger.info("The checkpoint holds no state for callback %s: it starts fresh", key)
