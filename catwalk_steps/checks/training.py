"""Checks of a `catwalk::train` config that run before any work: when Tango builds the step
graph, nothing has loaded, evaluated or spawned yet. (Warnings about settings that work but are
probably not what was meant come when training starts: :mod:`.start_warnings`.)

Each error is one line that names the key, as the user wrote it, and what would be right. The
engines, loaders and optimizer are lazy in the config (they are built inside the workers); here
their `type` and keys are read without building them, against the constructors' signatures.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import (
    DataCollator,
    DataLoader,
    LRScheduler,
    Model,
    Optimizer,
    TrainingEngine,
)

from ..components import check_keys, lazy_config, registered_name, resolve_config
from ..distributed.rendezvous import rendezvous_settings
from ..engines.base import CatwalkEngine
from ..engines.wrapping import select_modules
from ..errors import whole
from ..kinds import kind_of_task
from ..remote import is_hub_name
from ..scoring.causal_lm import unavailable_here
from ..scoring.choices import max_positions
from ..scoring.model_files import check_model_directory
from ..scoring.precision import Precision
from .trackers import check_trackers

logger = logging.getLogger(__name__)

SHARDED_ENGINES = ("catwalk::fairscale", "catwalk::torch_fsdp")


def check_schedule(kwargs: Mapping[str, Any]) -> None:
    """The training loop's numbers; `grad_accum: 0` used to hang forever, `train_steps: 0`
    cached an untrained model as trained."""
    steps, epochs = kwargs.get("train_steps"), kwargs.get("train_epochs")
    if (steps is None) == (epochs is None):
        raise ConfigurationError("train.train_steps / train.train_epochs: give exactly one of them")
    if steps == 0:
        raise ConfigurationError(
            "train.train_steps: 0 trains nothing (the 'trained' model would be the untrained "
            "one); give at least 1"
        )
    whole(steps, "train.train_steps", optional=True)
    whole(epochs, "train.train_epochs", optional=True)
    for key in (
        "grad_accum",
        "log_every",
        "checkpoint_every",
        "device_count",
        "num_nodes",
        "keep_last_checkpoints",
    ):
        whole(kwargs.get(key, 1), f"train.{key}")
    whole(kwargs.get("validate_every"), "train.validate_every", optional=True)
    whole(kwargs.get("validation_steps"), "train.validation_steps", optional=True)
    whole(kwargs.get("seed", 0), "train.seed", minimum=0)
    validate_every, checkpoint_every = (
        kwargs.get("validate_every"),
        kwargs.get("checkpoint_every", 100),
    )
    if validate_every and checkpoint_every % validate_every and validate_every % checkpoint_every:
        raise ConfigurationError(
            f"train.checkpoint_every: {checkpoint_every} must be a multiple or a divisor of "
            f"validate_every ({validate_every}), so that the best checkpoint is one that exists"
        )
    if validate_every and kwargs.get("validation_split", "validation") is None:
        raise ConfigurationError(
            "train.validate_every: set, but validation_split is null; give a validation split"
        )
    timeout = kwargs.get("rendezvous_timeout", 300.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigurationError(f"train.rendezvous_timeout: seconds > 0, got {timeout!r}")
    device = kwargs.get("device")
    if device not in (None, "cpu", "cuda"):
        raise ConfigurationError(f"train.device: cpu or cuda (or leave it out), got {device!r}")
    port = kwargs.get("master_port") or kwargs.get("distributed_port")
    rendezvous_settings(kwargs.get("num_nodes", 1), kwargs.get("master_addr"), port, timeout)
    metric = kwargs.get("val_metric_name", "acc")
    if metric not in ("acc", "acc_norm", "loss"):
        raise ConfigurationError(
            f"train.val_metric_name: one of acc, acc_norm, loss, got {metric!r}"
        )


# --- Lazy components: their type and keys, without building them ---------------------------


def check_engine(lazy: Any, key: str = "training_engine", trains: bool = True) -> dict[str, Any]:
    """The engine's type, keys, precision, regexes, and (when it `trains`) its optimizer and LR
    scheduler; an engine that only evaluates takes neither."""
    engine, params = lazy_config(lazy, TrainingEngine, key)
    if not trains:
        for unused in ("optimizer", "lr_scheduler"):
            if unused in params:
                raise ConfigurationError(
                    f"{key}.{unused}: an evaluation trains nothing; leave it out"
                )
    check_keys(engine, params, key)
    if isinstance(engine, type) and issubclass(engine, CatwalkEngine):
        engine.check_params(params, key)  # the rules the engine's constructor applies too
    patterns = params.get("modules_to_wrap")  # None (left out): the model's own blocks
    name = registered_name(TrainingEngine, engine)
    if trains:
        check_optimizer(params.get("optimizer"), f"{key}.optimizer")
    if params.get("lr_scheduler") is not None:
        scheduler, scheduler_params = resolve_config(
            params["lr_scheduler"], LRScheduler, f"{key}.lr_scheduler"
        )
        check_keys(scheduler, scheduler_params, f"{key}.lr_scheduler")
    return {
        "key": key,
        "class": engine,
        "name": name,
        "patterns": patterns,
        "activation_checkpointing": bool(params.get("activation_checkpointing")),
        # Whether the engine wraps or recomputes inner modules: they must exist in the model.
        "selects_modules": name in SHARDED_ENGINES or bool(params.get("activation_checkpointing")),
        "precision": params.get("precision", "fp32"),
    }


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_optimizer(config: Any, key: str) -> None:
    if config is None:
        raise ConfigurationError(f"{key}: missing (e.g. {{type: 'torch::AdamW', lr: 1e-4}})")
    constructor, params = resolve_config(config, Optimizer, key)
    name = registered_name(Optimizer, constructor)
    if name in ("catwalk::zero", "catwalk::oss"):
        from ..engines.optim import optimizer_class

        inner = optimizer_class(params.pop("optimizer", "torch::AdamW"), f"{key}.optimizer")
        check_keys(inner, params, key)
    else:
        check_keys(constructor, params, key)
    lr = params.get("lr")
    if lr is not None and not (is_number(lr) and lr >= 0):
        raise ConfigurationError(f"{key}.lr: a learning rate >= 0, got {lr!r}")
    if lr == 0:
        raise ConfigurationError(f"{key}.lr: 0 changes no weight; give a learning rate > 0")


def check_loader(lazy: Any, key: str) -> dict[str, Any]:
    """A data loader's type and keys, its batch size, and its collate function's."""
    if lazy is None:
        return {}
    loader, params = lazy_config(lazy, DataLoader, key)
    check_keys(loader, params, key)
    whole(params.get("batch_size", 1), f"{key}.batch_size")
    collate = params.get("collate_fn")
    if collate is None:
        return {}
    collator, collate_params = resolve_config(collate, DataCollator, f"{key}.collate_fn")
    check_keys(collator, collate_params, f"{key}.collate_fn")
    if "max_length" in collate_params:
        whole(collate_params["max_length"], f"{key}.collate_fn.max_length", minimum=2)
    return collate_params


# --- The model's structure: regexes that match, lengths that fit -----------------------------


def model_skeleton(lazy: Any) -> Any:
    """The rank classifier's structure on the meta device, or None when it cannot be built
    without a download (then the real construction reports what is wrong). Built once per
    model block and process: the graph-build checks and the warnings when training starts
    share it."""
    return _skeleton(*_model_key(lazy))


def _model_key(lazy: Any) -> tuple[str, Any]:
    constructor, params = lazy_config(lazy, Model, "model")
    check_keys(constructor, params, "model")
    return json.dumps(params, sort_keys=True, default=str), constructor


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


def chosen_modules(model: Any, engine: dict[str, Any]) -> list[str] | None:
    """The inner modules the engine's `modules_to_wrap` chooses in the model, deepest first,
    matched on its skeleton (:func:`~catwalk_steps.engines.wrapping.select_modules`) once per
    process: the graph-build check, the note when training starts and every worker (through
    the job) use this one match. None when the engine chooses none, or when the model cannot be
    built here (each worker then matches its own)."""
    if not engine["selects_modules"]:
        return None
    patterns = json.dumps(engine["patterns"])
    chosen = _chosen(*_model_key(model), patterns, f"{engine['key']}.modules_to_wrap")
    return None if chosen is None else list(chosen)


@functools.lru_cache(maxsize=8)
def _chosen(params_json: str, constructor: Any, patterns: str, field: str) -> tuple | None:
    skeleton = _skeleton(params_json, constructor)
    if skeleton is None:
        return None
    return tuple(select_modules(skeleton, json.loads(patterns), field))


def check_against_model(model: Any, engine: dict[str, Any], collates: Iterable[Mapping]) -> None:
    """Inner modules that cannot be found (a regex that matches nothing; no `modules_to_wrap`
    for a model that declares no blocks), and a max_length the model's positions cannot hold."""
    skeleton = model_skeleton(model)
    if skeleton is None:
        return
    chosen_modules(model, engine)
    positions = max_positions(getattr(skeleton.lm, "config", None))
    for collate in collates:
        length = collate.get("max_length")
        if positions is not None and length is not None and length > positions:
            raise ConfigurationError(
                f"collate_fn.max_length: {length} tokens, but the model has {positions} "
                f"positions; use max_length <= {positions}"
            )


def check_evaluate_tasks(kwargs: dict[str, Any]) -> None:
    """The in-loop tasks run when the step validates, each built here if Tango has not
    (:meth:`Task.built`), so a bad task fails with its own message."""
    from ..tasks import Task

    tasks = [Task.built(task) for task in kwargs.get("evaluate_tasks") or []]
    if tasks:
        kwargs["evaluate_tasks"] = tasks
    if tasks and kwargs.get("validation_split", "validation") is None:
        raise ConfigurationError(
            "train.evaluate_tasks: scored whenever the step validates, but validation_split is "
            "null; give a validation split"
        )
    names = [task.name for task in tasks]
    for name in names:
        if names.count(name) > 1:
            raise ConfigurationError(
                f"train.evaluate_tasks: '{name}' is given {names.count(name)} times; give each "
                "task once"
            )


def check_train_step(kwargs: dict[str, Any]) -> None:
    """Everything that can be checked when the step graph is built (see the module docstring)."""
    check_schedule(kwargs)
    check_evaluate_tasks(kwargs)
    engine = check_engine(kwargs["training_engine"])
    check_devices_and_precision(kwargs, engine["precision"])
    check_resume_from(kwargs.get("resume_from"))
    collates = [
        check_loader(kwargs.get("train_dataloader"), "train_dataloader"),
        check_loader(kwargs.get("validation_dataloader"), "validation_dataloader"),
    ]
    check_against_model(kwargs["model"], engine, collates)
    in_loop = collates[1] if kwargs.get("validation_dataloader") is not None else collates[0]
    check_in_loop_tasks(kwargs.get("evaluate_tasks") or [], in_loop.get("max_length", 256))
    check_trackers(kwargs, engine["name"])


def check_in_loop_tasks(tasks: list[Any], max_length: int) -> None:
    """The in-loop tasks, as their kinds check them against the loader's `max_length` (its
    collate's, the length in-loop tasks are scored with): room to generate an answer."""
    for task in tasks:
        kind_of_task(task).check_in_loop(task, max_length)


def check_devices_and_precision(kwargs: Mapping[str, Any], precision: str) -> None:
    """Where the workers will run is known now (this machine's GPUs); fp16 needs CUDA."""
    from ..distributed.devices import plan_devices

    plan = plan_devices(
        kwargs.get("device_count", 1), requested=kwargs.get("device"), field="train.device"
    )
    Precision.parse(precision, "training_engine.precision").check_device(
        plan.device_type, "training_engine.precision"
    )


def check_resume_from(resume_from: Any) -> None:
    if resume_from is None:
        return
    from pathlib import Path

    from ..checkpoints.discovery import resume_candidates
    from ..checkpoints.manifest import has_manifest

    if not isinstance(resume_from, str) or not any(
        map(has_manifest, resume_candidates(Path(resume_from)))
    ):
        raise ConfigurationError(f"train.resume_from: no complete checkpoint in {resume_from}")
