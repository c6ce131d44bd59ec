"""`catwalk::train`: plans a training job once, launches its workers, and returns the best
checkpoint's model as a Hugging Face directory."""

from __future__ import annotations

import inspect
import logging
import time
from pathlib import Path
from typing import Any

from tango import Step
from tango.common import DatasetDict, Lazy
from tango.common.exceptions import ConfigurationError
from tango.common.util import get_extra_imported_modules
from tango.integrations.torch import DataLoader, Model, TrainCallback, TrainingEngine
from tango.step import StepResources

from ..console import announce
from ..distributed.devices import plan_devices
from ..distributed.rendezvous import rendezvous_settings
from ..evaluation import release_model
from ..files import write_json_atomic
from ..launch import run_training, start_worker_server
from ..reports.run_card import environment
from ..reports.tables import training_figures
from ..scoring.rank_classifier import RankClassifier
from ..tasks import Task
from ..training.callbacks import RunMetrics
from ..training.checkpoints import (
    best_checkpoint,
    check_resumable,
    complete_checkpoints,
    latest_checkpoint,
    model_from_checkpoint,
)
from ..training.components import lazy_config
from ..training.job import Schedule, TrainingJob
from ..training.trackers import RUN_CARD_FILE
from .formats import HFModelFormat
from .preflight import check_train_step
from .start_warnings import (
    cut_answer_warnings,
    schedule_warnings,
    training_warnings,
    wrapping_note,
)
from .trackers import split_trackers, tracker_callbacks


@Step.register("catwalk::train")
class TrainRankClassifier(Step[RankClassifier]):
    """Trains a rank classifier with a Tango training engine; the result is a HF directory.

    The keys are `torch::train`'s (`train_steps` or `train_epochs`, `validate_every`,
    `checkpoint_every`, `grad_accum`, `log_every`, `device_count`, `seed`, ...), with these
    differences: validation metrics (`acc` by default, maximised) are exact over the whole
    split and all ranks (:mod:`~catwalk_steps.training.callbacks`); checkpoints resume bit for bit
    after a crash and on another `device_count` (:mod:`~catwalk_steps.training.checkpoints`); the
    best checkpoint's weights must fit the model exactly. And these keys:

    :param device: "cuda" (fail unless `device_count` GPUs are visible), "cpu" (CPU processes
        even on a GPU machine), or left out: GPUs when there are at least `device_count`, else
        CPU processes, with one log line saying so (:mod:`~catwalk_steps.distributed.devices`).
    :param num_nodes: machines taking part; `device_count` processes on each. Node 0 runs
        `tango run`; the others run `catwalk-worker` (see the README).
    :param master_addr: node 0's address (default: `MASTER_ADDR` when `num_nodes` > 1, else
        127.0.0.1).
    :param master_port: the rendezvous port (default: `MASTER_PORT` when `num_nodes` > 1, else
        one the OS picks). `distributed_port` is the same key under Tango's name.
    :param rendezvous_timeout: seconds to wait for every node to join before failing.
    :param resume_from: a checkpoint (or a step's work directory) to start from when this step
        has none of its own, e.g. one written with another `device_count`.
    :param evaluate_tasks: tasks scored whenever the step validates (every `validate_every`
        steps and at the end), by name or block (`{name: 'arc_easy', max_instances: 500}`), with
        the validation loader and exact over all ranks (:mod:`~catwalk_steps.training.
        task_evaluation`); kept in the metric history (`tasks`), in checkpoints and in the
        trained model's `catwalk_model.json`, and plotted per task by the reports.
    :param keep_last_checkpoints: how many of the newest checkpoints to keep besides the best
        (default 2: a damaged latest checkpoint falls back to the one before it).
    :param callbacks: Tango train callbacks; the trackers among them (`wandb::log`,
        `catwalk::tensorboard`) watch without being part of the step's identity
        (:mod:`.trackers`).

    The result carries the run's metric history and its run card (:mod:`..reports.run_card`),
    also written to `run_card.json` in the work directory when training starts.
    """

    VERSION = "003"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = HFModelFormat()
    SKIP_ID_ARGUMENTS = {
        "distributed_port",
        "log_every",
        "master_addr",
        "master_port",
        "rendezvous_timeout",
        "resume_from",
        "keep_last_checkpoints",
        "trackers",
    }
    METADATA = {"artifact_kind": "model"}

    @property
    def resources(self) -> StepResources:
        return self.step_resources or StepResources(gpu_count=self.kwargs.get("device_count", 1))

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        # When the step graph is built: a bad setting fails before any step has run.
        check_train_step(kwargs)
        return split_trackers(kwargs)

    def run(  # type: ignore[override]
        self,
        model: Lazy[Model],
        training_engine: Lazy[TrainingEngine],
        dataset_dict: DatasetDict,
        train_dataloader: Lazy[DataLoader],
        *,
        train_split: str = "train",
        validation_split: str | None = "validation",
        validation_dataloader: Lazy[DataLoader] | None = None,
        seed: int = 42,
        train_steps: int | None = None,
        train_epochs: int | None = None,
        validation_steps: int | None = None,
        grad_accum: int = 1,
        log_every: int = 10,
        checkpoint_every: int = 100,
        validate_every: int | None = None,
        device_count: int = 1,
        device: str | None = None,
        num_nodes: int = 1,
        master_addr: str | None = None,
        master_port: int | None = None,
        distributed_port: int | None = None,
        rendezvous_timeout: float = 300.0,
        val_metric_name: str = "acc",
        minimize_val_metric: bool = False,
        callbacks: list[Lazy[TrainCallback]] | None = None,
        trackers: list[Lazy[TrainCallback]] | None = None,
        remove_stale_checkpoints: bool = True,
        keep_last_checkpoints: int = 2,
        resume_from: str | None = None,
        evaluate_tasks: list[Task] | None = None,
    ) -> RankClassifier:
        arguments = dict(locals())  # every key of the step, as given or defaulted
        del arguments["self"]
        if device_count * num_nodes > 1:
            # Only for a step that trains (not when its result is cached); its imports run
            # while the job is planned (the in-loop tasks read, the data checked).
            start_worker_server(get_extra_imported_modules())
        release_model()  # a model an evaluation left in this process: memory for training
        job = plan_training(self, arguments)
        card = run_card(self, job)
        write_json_atomic(self.work_dir / RUN_CARD_FILE, card)
        started = time.monotonic()
        try:
            run_training(job)
        except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: say where the rerun starts
            message = stopped_message(self.work_dir, e)
            self.logger.error(message)  # Tango's CLI then says "Aborted!" and nothing more
            raise TrainingStopped(message) from None
        trained = trained_model(model, self.work_dir)
        trained.run_card = finished(card, time.monotonic() - started, trained.metrics_history)
        return trained


class TrainingStopped(KeyboardInterrupt):
    """Training was interrupted (Ctrl-C, SIGTERM); the message says how the rerun resumes. A
    KeyboardInterrupt still: Tango marks the step failed and stops the run."""


def stopped_message(work_dir: Path, interruption: BaseException) -> str:
    how = f" by {interruption}" if str(interruption) else ""
    complete = complete_checkpoints(work_dir)
    if not complete:
        return (
            f"training stopped{how} before its first checkpoint; run the same command again to "
            "train from the start"
        )
    return (
        f"training stopped{how}; run the same command again to resume from its last "
        f"checkpoint, {complete[0]}"
    )


def plan_training(step: Step, arguments: dict[str, Any]) -> TrainingJob:
    """Node 0's job: the step's own identity, work directory and workspace."""
    return build_job(
        arguments, step.unique_id, step.name, step.work_dir, step.workspace, step.logger
    )


def step_arguments(step: Step, dataset_dict: DatasetDict) -> dict[str, Any]:
    """The arguments `run` would get, from a step built from the config (on another node)."""
    parameters = inspect.signature(type(step).run).parameters.values()
    arguments = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    arguments.update(step.kwargs)
    arguments["dataset_dict"] = dataset_dict
    return arguments


def build_job(
    arguments: dict[str, Any],
    step_id: str,
    step_name: str,
    work_dir: Path,
    workspace: Any,
    log: logging.Logger,
) -> TrainingJob:
    """Everything decided before a worker starts, each once: the schedule, the devices, the
    engine's config, the rendezvous and the checkpoint to resume from; warnings are logged."""
    schedule = Schedule.of(arguments)
    dataset_dict = arguments["dataset_dict"]
    check_splits(dataset_dict, schedule)
    devices = plan_devices(
        arguments["device_count"], requested=arguments["device"], field="train.device"
    )
    engine = lazy_config(arguments["training_engine"], TrainingEngine, "training_engine")
    warnings = [devices.note] if devices.note else []
    warnings += training_warnings(devices.device_type, devices.count)
    warnings += schedule_warnings(schedule)
    loader = arguments["train_dataloader"]
    splits = (schedule.train_split, schedule.validation_split)
    warnings += cut_answer_warnings(dataset_dict, loader, splits)
    for warning in warnings:
        log.warning(warning)
    port = arguments["master_port"] or arguments["distributed_port"]
    resume_from = arguments["resume_from"]
    job = TrainingJob(
        step_id=step_id,
        step_name=step_name,
        work_dir=Path(work_dir),
        model=arguments["model"],
        training_engine=arguments["training_engine"],
        dataset_dict=dataset_dict,
        train_dataloader=loader,
        validation_dataloader=arguments["validation_dataloader"],
        callbacks=[
            *tracker_callbacks(arguments["trackers"]),
            *(arguments["callbacks"] or []),
            Lazy(RunMetrics),
        ],
        schedule=schedule,
        devices=devices,
        rendezvous=rendezvous_settings(
            arguments["num_nodes"], arguments["master_addr"], port, arguments["rendezvous_timeout"]
        ),
        include_package=tuple(get_extra_imported_modules()),
        resume_from=Path(resume_from) if resume_from else None,
        workspace=workspace,
        evaluate_tasks=in_loop_instances(arguments["evaluate_tasks"] or [], log),
    )
    check_resumable(job.work_dir, job.resume_from, engine[0].__name__, job.world_size)
    nodes = f" on each of {job.rendezvous.num_nodes} nodes" if job.rendezvous.num_nodes > 1 else ""
    announce(log, "Training on %s%s; checkpoints in %s", devices.describe(), nodes, job.work_dir)
    note = wrapping_note(engine, arguments["model"])
    if note:
        log.info(note)
    return job


def run_card(step: Step, job: TrainingJob) -> dict[str, Any]:
    """What produced this training: the step, its resolved config, where it runs, and the
    environment (versions, git commit, host)."""
    try:
        config = step.config
    except ValueError:  # a step built in Python, not from an experiment file
        config = None
    return {
        "step": {"name": step.name, "unique_id": step.unique_id},
        "config": config,
        "world_size": job.world_size,
        "num_nodes": job.rendezvous.num_nodes,
        "devices": job.devices.describe(),
        "environment": environment(),
    }


def finished(card: dict[str, Any], wall_time_s: float, history: dict | None) -> dict[str, Any]:
    """The card with what training took: wall time (this run; a resumed one counts from its
    resumption), steps, and the mean seconds per step, tokens/s and peak memory."""
    entries = (history or {}).get("train", [])
    figures = training_figures(history or {})
    training = {
        "wall_time_s": wall_time_s,
        "train_steps": entries[-1]["step"] if entries else None,
        "s_per_step": figures.get("s/step"),
        "tokens_per_s": figures.get("tokens/s"),
        "peak_memory_mib": figures.get("peak MiB"),
    }
    return {**card, "training": training}


def in_loop_instances(tasks: list[Task], log: logging.Logger) -> dict[str, list]:
    """Each in-loop task's instances, loaded once here and sent to the workers with the job."""
    loaded = {}
    for task in tasks:
        loaded[task.name] = task.evaluation_instances()
        log.info("In-loop task %s: %d instances", task.name, len(loaded[task.name]))
    return loaded


def check_splits(dataset_dict: DatasetDict, schedule: Schedule) -> None:
    for split in (schedule.train_split, schedule.validation_split):
        if split is not None and split not in dataset_dict:
            raise ConfigurationError(
                f"train: split '{split}' is not in the dataset "
                f"(splits: {', '.join(dataset_dict.keys())})"
            )


def trained_model(model: Lazy[Model], work_dir: Path) -> RankClassifier:
    """The model built afresh with the best checkpoint's weights (which must fit it exactly)
    and the whole run's metric history (the last checkpoint's)."""
    trained = model.construct()
    if not isinstance(trained, RankClassifier):
        raise ConfigurationError(
            f"catwalk::train: model must be a catwalk::rank_classifier, got {type(trained)}"
        )
    return model_from_checkpoint(
        best_checkpoint(work_dir), trained, history_from=latest_checkpoint(work_dir)
    )
