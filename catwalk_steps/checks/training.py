"""Checks of a `catwalk::train` config that run before any work: when Tango builds the step
graph, nothing has loaded, evaluated or spawned yet. (Warnings about settings that work but are
probably not what was meant come when training starts: :mod:`.start_warnings`.)

Each error is one line that names the key, as the user wrote it, and what would be right. A
rule about one settings object's own values is that object's (`TrainSettings.check`, and the
engine's and loaders' blocks', read without building them: :mod:`catwalk_steps.settings`); here
they are called in order, with the rules that need several things at once: the task the data
step loads (its splits, its kind's validation metric, the objective that fits it), the model's
skeleton (the modules an engine chooses, the lengths it holds, a checkpoint to resume), the
machine (devices, precision), the in-loop tasks' kinds and the trackers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..components import model_params
from ..engines.skeleton import chosen_modules, model_skeleton
from ..kinds import Collator, default_kind, kind_of_task
from ..scoring.choices import max_positions
from ..scoring.tokenization import chat_tokenizer
from ..settings import EngineSettings, Precision, TrainSettings
from ..tasks import LOADED_SPLITS
from .objective import check_objective, check_trained_task
from .preference import check_init_from
from .reference import check_reference
from .trackers import check_trackers

logger = logging.getLogger(__name__)


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
    settings.check_evaluate_tasks()  # its own rules: validated, each once
    tasks = settings.evaluate_tasks or []
    collate, loader = in_loop_collate(settings)
    template = settings.blocks.model.chat_template  # the model's `chat_template`, if given
    for task in tasks:  # a chat template's prompts: the loader's tokenizer renders them
        if collate.get("tokenizer"):
            chat_tokenizer(task, collate["tokenizer"], f"{loader}.collate_fn.tokenizer", template)
    for task in tasks:  # as their kinds check them against the in-loop loader's max_length
        kind_of_task(task).check_in_loop(task, collate.get("max_length", Collator.MAX_LENGTH))


def check_train_step(settings: TrainSettings) -> None:
    """Everything that can be checked when the step graph is built (see the module docstring)."""
    settings.check()  # the keys' own rules (each block's: its settings' `check`)
    check_training_task(settings)
    check_init_from(settings.init_from, model_params(settings.model).get("tokenizer"))
    check_objective(settings)
    check_reference(settings)
    blocks = settings.blocks  # each lazy block read once
    engine = blocks.engine.check()
    check_devices_and_precision(settings, engine.precision)
    check_resume_from(settings.resume_from, settings.model)
    loaders = [blocks.train_loader, blocks.validation_loader]
    collates = [loader.check() for loader in loaders if loader is not None]
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
    """`resume_from` names a complete checkpoint of this run's model, where its skeleton can be
    built here (the rule of :mod:`~catwalk_steps.checkpoints.discovery`, which the step applies
    again with its training data and engine before any worker starts)."""
    if resume_from is None:
        return
    from pathlib import Path

    from ..checkpoints.discovery import check_resumed, resume_candidates, resumed_checkpoint
    from ..checkpoints.layout import CheckpointError
    from ..checkpoints.run_identity import model_identity

    found = [] if not isinstance(resume_from, str) else resume_candidates(Path(resume_from))
    try:
        resumed = resumed_checkpoint(found, resume_from)
    except CheckpointError:
        return  # damaged: the step skips it, saying so, as it skips any damaged checkpoint
    if resumed is not None and model is not None:
        current = {"model": model_identity(model_skeleton(model))}
        check_resumed(*resumed, current, field="train.resume_from")
