"""Checks of a `catwalk::train` config that run before any work: when Tango builds the step
graph, nothing has loaded, evaluated or spawned yet. (Warnings about settings that work but are
probably not what was meant come when training starts: :mod:`.start_warnings`.)

Each error is one line that names the key, as the user wrote it, and what would be right. The
engines, loaders and optimizer are lazy in the config (they are built inside the workers); here
their `type` and keys are read without building them, against the constructors' signatures.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator, LRScheduler, Optimizer

from ..components import check_keys, registered_name, resolve_config
from ..distributed.rendezvous import rendezvous_settings
from ..engines.base import CatwalkEngine
from ..engines.skeleton import chosen_modules, model_skeleton
from ..errors import whole
from ..kinds import Collator, default_kind, kind_of_task
from ..scoring.choices import max_positions
from ..scoring.tokenization import chat_tokenizer
from ..settings import EngineSettings, LoaderSettings, Precision, TrainSettings
from ..tasks import LOADED_SPLITS
from .objective import check_objective, check_trained_task, model_params
from .preference import check_init_from
from .trackers import check_trackers

logger = logging.getLogger(__name__)


def check_schedule(settings: TrainSettings) -> None:
    """The training loop's numbers; `grad_accum: 0` used to hang forever, `train_steps: 0`
    cached an untrained model as trained."""
    steps, epochs = settings.train_steps, settings.train_epochs
    if (steps is None) == (epochs is None):
        raise ConfigurationError("train.train_steps / train.train_epochs: give exactly one of them")
    if steps == 0:
        raise ConfigurationError(
            "train.train_steps: 0 trains nothing (the 'trained' model would be the untrained "
            "one); give at least 1"
        )
    whole(steps, "train.train_steps", optional=True)
    whole(epochs, "train.train_epochs", optional=True)
    for key in WHOLE_KEYS:
        whole(getattr(settings, key), f"train.{key}")
    whole(settings.validate_every, "train.validate_every", optional=True)
    whole(settings.validation_steps, "train.validation_steps", optional=True)
    whole(settings.seed, "train.seed", minimum=0)
    validate_every, checkpoint_every = settings.validate_every, settings.checkpoint_every
    if validate_every and checkpoint_every % validate_every and validate_every % checkpoint_every:
        raise ConfigurationError(
            f"train.checkpoint_every: {checkpoint_every} must be a multiple or a divisor of "
            f"validate_every ({validate_every}), so that the best checkpoint is one that exists"
        )
    if validate_every and settings.validation_split is None:
        raise ConfigurationError(
            "train.validate_every: set, but validation_split is null; give a validation split"
        )
    timeout = settings.rendezvous_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigurationError(f"train.rendezvous_timeout: seconds > 0, got {timeout!r}")
    if settings.device not in (None, "cpu", "cuda"):
        raise ConfigurationError(
            f"train.device: cpu or cuda (or leave it out), got {settings.device!r}"
        )
    rendezvous_settings(settings.num_nodes, settings.master_addr, settings.port, timeout)


def loaded_task(dataset_dict: Any) -> Any:
    """The task `dataset_dict` loads, when the step graph says (a `catwalk::load_task` step, or
    one that passes its data on: `catwalk::reference_logprobs`); else None (known later)."""
    kwargs = getattr(dataset_dict, "kwargs", {})
    if "task" not in kwargs and "dataset_dict" in kwargs:
        return loaded_task(kwargs["dataset_dict"])
    return kwargs.get("task")


def default_validation(dataset_dict: Any) -> dict[str, Any]:
    """`val_metric_name` left out: its task's kind's default (`acc` for multiple choice, as it
    always was: such a step's id stays as it was); None while the task is not known (the data's
    kind decides when it is)."""
    task = loaded_task(dataset_dict)
    return {"val_metric_name": None} if task is None else kind_of_task(task).defaults(task)


def check_val_metric(settings: TrainSettings, kind: Any, task: Any, what: str) -> str:
    """`val_metric_name` against what a validation split of `kind` (of `task`, or an instance of
    it: `what` names it) gives, and `minimize_val_metric` against it; the name, or the kind's
    default (`acc`; a generative task's primary metric)."""
    allowed = kind.validation_metrics(task)
    name = settings.val_metric_name or allowed[0]
    if name not in allowed:
        raise ConfigurationError(
            f"train.val_metric_name: one of {', '.join(allowed)}{what}, got {name!r}"
        )
    lower_is_better = kind.lower_is_better(name)
    if bool(settings.minimize_val_metric) != lower_is_better:
        # The best checkpoint (the step's result) would be the worst one.
        raise ConfigurationError(
            f"train.minimize_val_metric: {str(settings.minimize_val_metric).lower()} with "
            f"val_metric_name '{name}', which is better "
            f"{'lower' if lower_is_better else 'higher'}: the best checkpoint would be the worst; "
            f"set minimize_val_metric: {str(lower_is_better).lower()}"
        )
    return name


def check_training_task(settings: TrainSettings) -> None:
    """The task trained on, when it is known now: its validation metric, and an objective that
    fits it (a generative task has one answer, which `rank` cannot rank)."""
    task = loaded_task(settings.dataset_dict)
    if task is None:
        choices, named = default_kind(), settings.val_metric_name
        if not named or named in choices.validation_metrics(None):
            check_val_metric(settings, choices, None, "")  # another kind's: checked at run time
        return
    check_loaded_splits(settings, task)
    kind = kind_of_task(task)
    check_val_metric(settings, kind, task, task_named(kind, task.name))
    check_trained_task(settings.model, kind.examples, task.name)
    kind.check_packing(task.name, settings.blocks.train_loader)


def check_loaded_splits(settings: TrainSettings, task: Any) -> None:
    """The splits the step reads (train, validation) among those its data step loads, and in
    the task's data (a task of one's own with only a validation file)."""
    loaded = getattr(settings.dataset_dict, "kwargs", {}).get("splits") or LOADED_SPLITS
    for key in ("train_split", "validation_split"):
        split = getattr(settings, key)
        if split is not None and split not in loaded:
            raise ConfigurationError(
                f"train.{key}: '{split}' is not loaded by the data step (splits: "
                f"{', '.join(loaded)}); add it to the data step's splits"
            )
        if split is not None:
            task.check_splits([split], f"train.{key}")


def task_named(kind: Any, name: str) -> str:
    """The task beside the names it allows, where they are its own (not every task's)."""
    return f" (task '{name}')" if kind.metrics_of_task else ""


WHOLE_KEYS = (
    "grad_accum",
    "log_every",
    "checkpoint_every",
    "device_count",
    "num_nodes",
    "keep_last_checkpoints",
)


# --- Lazy components: their type and keys, without building them ---------------------------


def check_engine(lazy: Any, key: str = "training_engine", trains: bool = True) -> EngineSettings:
    """The engine block `lazy`, read once: :func:`check_engine_settings`."""
    return check_engine_settings(EngineSettings.of(lazy, key), trains)


def check_engine_settings(settings: EngineSettings, trains: bool = True) -> EngineSettings:
    """The engine's type, keys, precision, regexes, and (when it `trains`) its optimizer and LR
    scheduler; an engine that only evaluates takes neither."""
    engine, params, key = settings.engine_class, settings.params, settings.key
    if not trains:
        for unused in ("optimizer", "lr_scheduler"):
            if unused in params:
                raise ConfigurationError(
                    f"{key}.{unused}: an evaluation trains nothing; leave it out"
                )
    check_keys(engine, params, key)
    if isinstance(engine, type) and issubclass(engine, CatwalkEngine):
        engine.check_params(params, key)  # the rules the engine's constructor applies too
    if trains:
        check_optimizer(params.get("optimizer"), f"{key}.optimizer")
    if params.get("lr_scheduler") is not None:
        scheduler, scheduler_params = resolve_config(
            params["lr_scheduler"], LRScheduler, f"{key}.lr_scheduler"
        )
        check_keys(scheduler, scheduler_params, f"{key}.lr_scheduler")
    return settings


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


def check_loader(settings: LoaderSettings | None) -> dict[str, Any]:
    """A data loader's type and keys, its batch size, and its collate function's."""
    if settings is None:
        return {}
    loader, params, key = settings.loader_class, settings.params, settings.key
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


def check_against_model(model: Any, engine: EngineSettings, collates: Iterable[Mapping]) -> None:
    """Inner modules that cannot be found (a regex that matches nothing; no `modules_to_wrap`
    for a model that declares no blocks), and a max_length the model's positions cannot hold."""
    skeleton = model_skeleton(model)
    if skeleton is None:
        return
    inner = chosen_modules(model, engine)
    check_model = getattr(engine.engine_class, "check_model", None)
    if check_model is not None:
        check_model(skeleton, inner, engine.activation_checkpointing, engine.key)
    positions = max_positions(getattr(skeleton.lm, "config", None))
    for collate in collates:
        length = collate.get("max_length")
        if positions is not None and length is not None and length > positions:
            raise ConfigurationError(
                f"collate_fn.max_length: {length} tokens, but the model has {positions} "
                f"positions; use max_length <= {positions}"
            )


def check_evaluate_tasks(settings: TrainSettings) -> None:
    """The in-loop tasks (built by the step: `evaluate_tasks`) run when the step validates,
    each once."""
    tasks = settings.evaluate_tasks or []
    if tasks and settings.validation_split is None:
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
    collate, loader = in_loop_collate(settings)
    template = settings.blocks.model.chat_template  # the model's `chat_template`, if given
    for task in tasks:  # a chat template's prompts: the loader's tokenizer renders them
        if collate.get("tokenizer"):
            chat_tokenizer(task, collate["tokenizer"], f"{loader}.collate_fn.tokenizer", template)
    for task in tasks:  # as their kinds check them against the in-loop loader's max_length
        kind_of_task(task).check_in_loop(task, collate.get("max_length", Collator.MAX_LENGTH))


def check_train_step(settings: TrainSettings) -> None:
    """Everything that can be checked when the step graph is built (see the module docstring)."""
    check_schedule(settings)
    check_training_task(settings)
    check_init_from(settings.init_from, model_params(settings.model).get("tokenizer"))
    check_objective(settings)
    blocks = settings.blocks  # each lazy block read once
    engine = check_engine_settings(blocks.engine)
    check_devices_and_precision(settings, engine.precision)
    check_resume_from(settings.resume_from, settings.model)
    collates = [check_loader(blocks.train_loader), check_loader(blocks.validation_loader)]
    check_against_model(blocks.model, engine, collates)
    check_evaluate_tasks(settings)
    check_trackers(settings.as_mapping(), engine)


def in_loop_collate(settings: TrainSettings) -> tuple[dict[str, Any], str]:
    """The collate keys of the loader in-loop tasks are scored with (the validation loader's,
    else the training loader's), and that loader's key."""
    loader = settings.blocks.in_loop
    return dict(loader.collate), loader.key


def check_devices_and_precision(settings: TrainSettings, precision: str) -> None:
    """Where the workers will run is known now (this machine's GPUs); fp16 needs CUDA."""
    from ..distributed.devices import plan_devices

    plan = plan_devices(settings.device_count, requested=settings.device, field="train.device")
    Precision.parse(precision, "training_engine.precision").check_device(
        plan.device_type, "training_engine.precision"
    )


def check_resume_from(resume_from: Any, model: Any = None) -> None:
    """`resume_from` names a complete checkpoint (one line naming a path that does not
    exist), of this run's model where its skeleton can be built here (the training data is
    compared when the step runs, before any worker starts: :mod:`..checkpoints.run_identity`)."""
    if resume_from is None:
        return
    from pathlib import Path

    from ..checkpoints.discovery import missing_resume_from, resume_candidates
    from ..checkpoints.layout import CheckpointError
    from ..checkpoints.manifest import has_manifest, read_manifest
    from ..checkpoints.run_identity import identity_problem, model_identity

    found = [] if not isinstance(resume_from, str) else resume_candidates(Path(resume_from))
    complete = [candidate for candidate in found if has_manifest(candidate)]
    if not complete:
        raise ConfigurationError(missing_resume_from(resume_from))
    if model is None:
        return
    try:
        manifest = read_manifest(complete[0])
    except CheckpointError:
        return  # damaged: the step skips it, saying so, as it skips any damaged checkpoint
    current = {"model": model_identity(model_skeleton(model))}
    problem = identity_problem(complete[0], manifest, current)
    if problem is not None:
        raise ConfigurationError(f"train.resume_from: {problem}")
