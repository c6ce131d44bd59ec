"""Experiment trackers in a `catwalk::train` step: how the config names them, why they are not
part of the step's identity, and what is checked when the step graph is built.

A tracker (`wandb::log`, `catwalk::wandb`, `catwalk::tensorboard`) is written in the step's
`callbacks` like any Tango callback. It only watches: turning one on or off must neither retrain
a cached step nor start a crashed one over, so the step moves trackers from `callbacks` to
`trackers`, a key left out of its unique id (as `log_every` is). Tango's `wandb::log` name is
run as `catwalk::wandb` (:mod:`catwalk_steps.training.trackers.wandb` says why).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tango.common import Lazy, Params
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import TrainCallback

from ..components import lazy_params
from ..files import unwritable
from ..settings import EngineSettings
from ..training.trackers import TRACKER_ALIASES, TensorBoardTracker, Tracker, WandbTracker
from ..training.trackers.wandb import OFFLINE_MODES, wandb_api_key_found, wandb_mode

INSTALL = "pip install 'catwalk_steps[trackers]' (or {package})"


def tracker_names() -> set[str]:
    """Every `type` that names a tracker: ours, and Tango's `wandb::log`."""
    names = set(TRACKER_ALIASES)
    for name in TrainCallback.list_available():
        constructor = TrainCallback.resolve_class_name(name)[0]
        if isinstance(constructor, type) and issubclass(constructor, Tracker):
            names.add(name)
    return names


def type_name(callback: Any) -> str | None:
    return lazy_params(callback).get("type") if isinstance(callback, Lazy) else None


def split_trackers(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The step's kwargs with its trackers moved from `callbacks` to `trackers` (an emptied
    `callbacks` becomes None, so that a step with trackers has the id of the step without)."""
    callbacks = kwargs.get("callbacks") or []
    names = tracker_names()
    trackers = [c for c in callbacks if type_name(c) in names]
    if not trackers:
        return kwargs
    kwargs = dict(kwargs)
    kwargs["trackers"] = [*(kwargs.get("trackers") or []), *trackers]
    others = [c for c in callbacks if type_name(c) not in names]
    kwargs["callbacks"] = others or None  # the default: ids as if the trackers were not there
    return kwargs


def tracker_callbacks(trackers: list[Lazy] | None) -> list[Lazy]:
    """The trackers as the workers build them: `wandb::log` as `catwalk::wandb`."""
    built = []
    for tracker in trackers or []:
        params = lazy_params(tracker)
        alias = TRACKER_ALIASES.get(params.get("type", ""))
        built.append(Lazy(TrainCallback, Params({**params, "type": alias})) if alias else tracker)
    return built


# --- Checks when the step graph is built ----------------------------------------------------


def check_trackers(kwargs: Mapping[str, Any], engine: EngineSettings) -> None:
    """Each tracker's library is installed, its keys exist, W&B can log in (or is offline),
    and TensorBoard's directory can be written."""
    from ..components import check_keys

    names = tracker_names()
    for index, callback in enumerate(kwargs.get("callbacks") or []):
        name = type_name(callback)
        if name not in names:
            continue
        key = f"train.callbacks[{index}] ({name})"
        params = {k: v for k, v in lazy_params(callback).items() if k != "type"}
        wandb = TRACKER_ALIASES.get(name, name) == "catwalk::wandb"
        tracker = WandbTracker if wandb else TensorBoardTracker
        check_keys(tracker, params, key)
        if wandb:
            check_wandb(params, key, engine)
        else:
            check_tensorboard(params, key)


def check_wandb(params: Mapping[str, Any], key: str, engine: EngineSettings) -> None:
    if importlib.util.find_spec("wandb") is None:
        raise ConfigurationError(
            f"{key}: the wandb package is not installed; " + INSTALL.format(package="wandb")
        )
    mode = wandb_mode(params.get("mode"))
    if mode not in ("online", "offline", "dryrun", "disabled", "shared"):
        raise ConfigurationError(f"{key}.mode: online, offline or disabled, got {mode!r}")
    if mode not in OFFLINE_MODES and not wandb_api_key_found():
        raise ConfigurationError(
            f"{key}: no W&B API key (WANDB_API_KEY, or `wandb login`) and not offline; "
            "log in, or set WANDB_MODE=offline (or mode: 'offline')"
        )
    if params.get("watch_model") and engine.shards:
        raise ConfigurationError(
            f"{key}.watch_model: not with {engine.name}: each rank holds a shard of the "
            "parameters (use catwalk::torch, or leave it out)"
        )


def check_tensorboard(params: Mapping[str, Any], key: str) -> None:
    if importlib.util.find_spec("tensorboard") is None:
        raise ConfigurationError(
            f"{key}: the tensorboard package is not installed; "
            + INSTALL.format(package="tensorboard")
        )
    log_dir = params.get("log_dir")
    if log_dir is None:
        return  # the step's work directory, checked with the workspace
    problem = unwritable(Path(log_dir))
    if problem:
        raise ConfigurationError(f"{key}.log_dir: cannot write to {log_dir} ({problem})")
