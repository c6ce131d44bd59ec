"""Every key of `catwalk::train`, typed and documented in one place.

The step's `run` takes exactly these keys (:func:`run_signature`): Tango reads that signature to
build them from the config, and the step hands them on as one :class:`TrainSettings`, so that a
key can be followed from the config to where it is used.
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

from tango.common import DatasetDict, Lazy, Params
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataLoader, Model, TrainCallback, TrainingEngine

from ..components import lazy_params
from ..tasks import Task
from .engine import EngineSettings
from .evaluation import DEVICE_COUNT
from .loaders import LoaderSettings
from .model import ModelSettings

POSITIONAL = 4  # model, training_engine, dataset_dict, train_dataloader: the rest by keyword


@dataclass(frozen=True)
class TrainSettings:
    """The keys of `catwalk::train` (its docstring says what each means)."""

    model: Lazy[Model]  # the model block (`catwalk::rank_classifier`), built in each worker
    training_engine: Lazy[TrainingEngine]  # the engine block (:class:`.EngineSettings`)
    dataset_dict: DatasetDict  # the data (a `catwalk::load_task` step)
    train_dataloader: Lazy[DataLoader]  # the training loader block (:class:`.LoaderSettings`)
    train_split: str = "train"
    validation_split: str | None = "validation"  # None: no validation
    validation_dataloader: Lazy[DataLoader] | None = None  # None: the training loader's keys
    seed: int = 42
    train_steps: int | None = None  # optimizer steps; give this or `train_epochs`
    train_epochs: int | None = None
    validation_steps: int | None = None  # batches per validation; None: the whole split
    grad_accum: int = 1  # micro-batches per optimizer step
    log_every: int = 10  # steps between logged metrics
    checkpoint_every: int = 100  # steps between checkpoints
    validate_every: int | None = None  # steps between validations; None: at the end only
    device_count: int = DEVICE_COUNT  # worker processes per node (GPUs, else CPU processes)
    device: str | None = None  # "cuda", "cpu", or None: GPUs when there are enough
    num_nodes: int = 1  # machines; the others join with `catwalk-worker`
    master_addr: str | None = None  # node 0's address, for the rendezvous
    master_port: int | None = None
    distributed_port: int | None = None  # Tango's name for master_port
    rendezvous_timeout: float = 300.0  # seconds every node has to join
    # None: the validation split's kind's first (acc; a generative task's primary metric).
    val_metric_name: str | None = None
    minimize_val_metric: bool = False  # true for a metric that is better lower (loss)
    callbacks: list[Lazy[TrainCallback]] | None = None  # Tango callbacks of one's own
    trackers: list[Lazy[TrainCallback]] | None = None  # split from the callbacks at graph build
    remove_stale_checkpoints: bool = True  # remove checkpoints beyond the last ones kept
    keep_last_checkpoints: int = 2  # the newest kept (the best one is always kept)
    resume_from: str | None = None  # a checkpoint (or a run's work directory) to go on from
    evaluate_tasks: list[Task] | None = None  # scored in the loop whenever the step validates
    # A step's model (or a model directory) whose weights the model block starts from: DPO
    # after SFT. None: the block's own weights.
    init_from: Any = None
    # Set at graph build, never by hand: the content of the model block's local directory and
    # of an `init_from` directory (SHA-256 over their files), so that weights replaced in place
    # make another step, trained again. None: the block and `init_from` say it all.
    model_content: dict[str, str] | None = None

    def as_mapping(self) -> dict[str, Any]:
        """Key -> value, the values themselves (no copies: they hold lazy components)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @functools.cached_property
    def blocks(self) -> TrainBlocks:
        """The lazy blocks, each read once from its config for every reader of these settings."""
        return TrainBlocks.of(self)

    def started(self) -> TrainSettings:
        """These settings with the model block loading `init_from`'s weights (a directory by
        now: the step's own, or on another node the shared workspace's); the block's `config`
        and `pretrained` give way, its `objective`, `dpo` and `adapter` stay."""
        if self.init_from is None:
            return self
        directory = str(self.init_from)
        if not Path(directory).is_dir():
            raise ConfigurationError(f"train.init_from: {directory}: no such model directory")
        params = {k: v for k, v in lazy_params(self.model).items() if k != "config"}
        params.update(pretrained=directory, tokenizer=params.get("tokenizer") or directory)
        return replace(self, model=Lazy(Model, Params(params)), init_from=None)

    @property
    def port(self) -> int | None:
        return self.master_port or self.distributed_port

    @property
    def processes(self) -> int:
        """Worker processes in all, on every node."""
        return self.device_count * self.num_nodes


@dataclass(frozen=True)
class TrainBlocks:
    """The lazy blocks of `catwalk::train`, each read once from its config without building it
    (the model's skeleton: :func:`catwalk_steps.engines.skeleton.model_skeleton`, once per
    process)."""

    model: ModelSettings  # `model`
    engine: EngineSettings  # `training_engine`
    train_loader: LoaderSettings  # `train_dataloader`
    validation_loader: LoaderSettings | None  # `validation_dataloader`; None when left out

    @classmethod
    def of(cls, settings: TrainSettings) -> TrainBlocks:
        validation = settings.validation_dataloader
        return cls(
            model=ModelSettings.of(settings.model, "model"),
            engine=EngineSettings.of(settings.training_engine, "training_engine"),
            train_loader=LoaderSettings.of(settings.train_dataloader, "train_dataloader"),
            validation_loader=None
            if validation is None
            else LoaderSettings.of(validation, "validation_dataloader"),
        )

    @property
    def in_loop(self) -> LoaderSettings:
        """The loader the in-loop tasks are scored with: the validation loader's keys, else the
        training loader's."""
        return self.validation_loader or self.train_loader


# Each key's default, written once (above): the schedule (`job.Schedule`) takes its own from here.
DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(TrainSettings) if f.default is not MISSING
}


def run_signature(returns: type) -> inspect.Signature:
    """`run(self, model, training_engine, dataset_dict, train_dataloader, *, ...)` with the
    settings' types and defaults, as Tango reads a step's keys."""
    hints = typing.get_type_hints(TrainSettings)
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for index, field in enumerate(fields(TrainSettings)):
        kind = (
            inspect.Parameter.POSITIONAL_OR_KEYWORD
            if index < POSITIONAL
            else inspect.Parameter.KEYWORD_ONLY
        )
        default = inspect.Parameter.empty if field.default is MISSING else field.default
        parameters.append(
            inspect.Parameter(field.name, kind, default=default, annotation=hints[field.name])
        )
    return inspect.Signature(parameters, return_annotation=returns)
