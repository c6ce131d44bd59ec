"""`catwalk::train`: plans a training job once, launches its workers, and returns the best
checkpoint's model as a Hugging Face directory."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tango import Step
from tango.common import Lazy
from tango.common.exceptions import ConfigurationError
from tango.common.util import get_extra_imported_modules
from tango.integrations.torch import Model
from tango.step import StepResources

from ..checkpoints import (
    best_checkpoint,
    complete_checkpoints,
    latest_checkpoint,
    model_from_checkpoint,
)
from ..checkpoints.weights import checkpoint_history
from ..checks.streaming import check_streamed_training
from ..checks.trackers import split_trackers
from ..checks.training import check_train_step, default_validation, loaded_task
from ..components import model_params
from ..distributed.devices import Lease, plan_devices, plan_lease
from ..evaluation import SavedModel
from ..evaluation.sources import local_content, template_content
from ..files import write_json_atomic
from ..launch import run_training, start_worker_server
from ..launch.plan import build_job
from ..scoring.causal_lm import modeling_module
from ..scoring.rank_classifier import RankClassifier
from ..settings import DEFAULTS, TrainSettings, run_signature
from ..tasks import Task
from ..training.run_card import finished, run_card
from ..training.trackers import RUN_CARD_FILE
from ..workspace.formats import HFModelFormat
from ..workspace.step_cache import held_by


@Step.register("catwalk::train")
class TrainRankClassifier(Step[RankClassifier]):
    """Trains a rank classifier with a Tango training engine; the result is a HF directory.

    The keys are `torch::train`'s (`train_steps` or `train_epochs`, `validate_every`,
    `checkpoint_every`, `grad_accum`, `log_every`, `device_count`, `seed`, ...), with these
    differences: validation metrics (`acc` by default, maximised) are exact over the whole
    split and all ranks (:mod:`~catwalk_steps.training.callbacks`); checkpoints resume bit for bit
    after a crash and on another `device_count` (:mod:`~catwalk_steps.checkpoints`); the
    best checkpoint's weights must fit the model exactly. And these keys:

    :param device: "cuda" (fail unless `device_count` GPUs are visible), "cpu" (CPU processes
        even on a GPU machine), or left out: GPUs when there are at least `device_count`, else
        CPU processes, with one log line saying so (:mod:`~catwalk_steps.distributed.devices`).
    :param num_nodes: machines taking part; `device_count` processes on each. Node 0 runs
        `tango run`; the others run `catwalk-worker` (docs/nodes.md).
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
        in_loop`); kept in the metric history (`tasks`), in checkpoints and in the
        trained model's `catwalk_model.json`, and plotted per task by the reports.
    :param keep_last_checkpoints: how many of the newest checkpoints to keep besides the best
        (default 2: a damaged latest checkpoint falls back to the one before it).
    :param init_from: a step's model (`lib.ref('sft')`) or a model directory whose weights the
        model block starts from (the block's `config` and `pretrained` give way to it; its
        `objective`, `dpo`, `adapter` stay): DPO from an SFT model in one experiment.
    :param reference: GRPO with `beta` > 0 and no adapter: the frozen model whose
        log-probabilities the KL term compares the policy with, a model block, a step's model
        (`lib.ref('sft')`) or a model directory (of the policy's tokenizer). Left out: the
        policy's starting weights (`init_from`'s model, else the model block's own). Built in
        each worker beside the policy, sharded as it is, never trained nor checkpointed.
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
    # Keys added later leave the unique ids of steps that do not set them as they were.
    SKIP_DEFAULT_ARGUMENTS = {"init_from": None, "model_content": None, "reference": None}

    @property
    def resources(self) -> StepResources:
        return self.step_resources or StepResources(
            gpu_count=self.kwargs.get("device_count", DEFAULTS["device_count"])
        )

    def planned_lease(self) -> Lease:
        """The devices its workers will hold, said before it runs (`catwalk-plan`)."""
        count = self.kwargs.get("device_count", DEFAULTS["device_count"])
        plan = plan_devices(count, requested=self.kwargs.get("device"), field="train.device")
        return plan_lease(plan, self.kwargs.get("num_nodes", DEFAULTS["num_nodes"]))

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        # When the step graph is built: a bad setting fails before any step has run. The
        # in-loop tasks are built here if Tango has not (Task.built: a bad task's own message).
        if kwargs.get("evaluate_tasks"):
            kwargs = {**kwargs, "evaluate_tasks": [Task.built(t) for t in kwargs["evaluate_tasks"]]}
        if kwargs.get("val_metric_name") is None:
            defaults = default_validation(kwargs.get("dataset_dict"))
            kwargs = {**kwargs, "val_metric_name": defaults.pop("val_metric_name")}
            kwargs = {**kwargs, **{k: v for k, v in defaults.items() if k not in kwargs}}
        settings = TrainSettings(**kwargs)  # typed, with the keys' one set of defaults
        check_train_step(settings)
        check_streamed_training(settings, loaded_task(kwargs.get("dataset_dict")))
        return split_trackers({**kwargs, "model_content": model_content(kwargs)})

    def _replace_steps_with_results(self, o: Any, workspace: Any) -> Any:
        # `init_from`, `reference`: a model step stays a handle (its directory), as evaluate
        # keeps one (:meth:`Evaluate._replace_steps_with_results`): workers load the weights.
        for key in ("init_from", "reference"):
            model = self.kwargs.get(key)
            if isinstance(model, Step) and o is model:
                return saved_model_directory(model, workspace, self, f"train.{key}")
        return super()._replace_steps_with_results(o, workspace)

    def run(self, **keys: Any) -> RankClassifier:
        settings = TrainSettings(**keys).started()  # the keys: `run.__signature__` below
        if settings.processes > 1:
            # Only for a step that trains (not when its result is cached); its imports run
            # while the job is planned (the in-loop tasks read, the data checked).
            family = modeling_module(model_params(settings.model))
            start_worker_server([*get_extra_imported_modules(), *filter(None, [family])])
        held_by(self.workspace).release()  # a model an evaluation left: memory for training
        job = build_job(
            settings, self.unique_id, self.name, self.work_dir, self.workspace, self.logger
        )
        card = run_card(job, self.resolved_config())
        write_json_atomic(self.work_dir / RUN_CARD_FILE, card)
        started = time.monotonic()
        try:
            run_training(job)
        except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: say where the rerun starts
            # Tango's CLI logs it as one line ("TrainingStopped: ..."), then "Aborted!".
            raise TrainingStopped(stopped_message(self.work_dir, e)) from None
        history = checkpoint_history(latest_checkpoint(self.work_dir))  # the whole run's
        card = finished(card, time.monotonic() - started, history)
        return trained_model(settings.model, self.work_dir, history, card)

    run.__signature__ = run_signature(returns=RankClassifier)  # type: ignore[attr-defined]

    def resolved_config(self) -> dict[str, Any] | None:
        try:
            return self.config
        except ValueError:  # a step built in Python, not from an experiment file
            return None


def model_content(kwargs: dict[str, Any]) -> dict[str, str] | None:
    """The content of the local directories the models' weights come from (the block's
    `pretrained` and `tokenizer`, an `init_from` or `reference` directory, a `reference`
    block's) and of its `chat_template` file, for the step's identity; a step's model
    (`init_from`, `reference`) is identified by that step."""
    block = model_params(kwargs.get("model"))
    directories = {f"model.{key}": block.get(key) for key in ("pretrained", "tokenizer")}
    for key in ("init_from", "reference"):
        if isinstance(kwargs.get(key), (str, Path)):
            directories[key] = str(kwargs[key])
    reference = kwargs.get("reference")
    if isinstance(reference, (Lazy, Mapping)):  # a model block of its own
        given = model_params(reference)
        directories.update(
            {f"reference.{key}": given.get(key) for key in ("pretrained", "tokenizer")}
        )
    template = template_content(block, "model.chat_template")
    return {**(local_content(directories) or {}), **template} or None


def saved_model_directory(
    step: Step, workspace: Any, needed_by: Step, field: str = "train.init_from"
) -> str:
    """A model step's result directory (given by `field`), computed first if it is not
    cached."""
    if not isinstance(step.format, HFModelFormat):
        raise ConfigurationError(
            f"{field}: step '{step.name}' gives no model (a catwalk::train step's does)"
        )
    if step in workspace.step_cache:
        step.log_cache_hit(needed_by=needed_by)
    else:
        step.result(workspace=workspace, needed_by=needed_by)
    return str(SavedModel(step, workspace).directory())


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


def trained_model(
    model: Lazy[Model], work_dir: Path, history: dict | None, card: dict
) -> RankClassifier:
    """The model built afresh, with the run's metric `history` and `card`, and the best
    checkpoint's weights (which must fit it exactly)."""
    trained = model.construct(metrics_history=history, run_card=card)
    if not isinstance(trained, RankClassifier):
        raise ConfigurationError(
            f"catwalk::train: model must be a catwalk::rank_classifier, got {type(trained)}"
        )
    return model_from_checkpoint(best_checkpoint(work_dir), trained)
