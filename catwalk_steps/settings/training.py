"""Every key of `catwalk::train`, typed and documented in one place.

The step's `run` takes exactly these keys (:func:`run_signature`): Tango reads that signature to
build them from the config, and the step hands them on as one :class:`TrainSettings`, so that a
key can be followed from the config to where it is used. The rules about the keys' own values
are the settings' (:meth:`TrainSettings.check`); those that need the task, the model or the
engine too are the graph-build checks' (:mod:`catwalk_steps.checks.training`).
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
from ..errors import whole
from ..tasks import Task
from .engine import EngineSettings
from .evaluation import DEVICE_COUNT, check_timeout
from .loaders import LoaderSettings
from .model import ModelSettings

POSITIONAL = 4  # model, training_engine, dataset_dict, train_dataloader: the rest by keyword
# The keys that are whole numbers >= 1.
WHOLE_KEYS = (
    "grad_accum",
    "log_every",
    "checkpoint_every",
    "device_count",
    "num_nodes",
    "keep_last_checkpoints",
)


def loading(block: dict[str, Any], directory: Any, field: str) -> dict[str, Any]:
    """A model block loading the weights of a model `directory` (given by `field`): its
    `config` and `pretrained` give way; its tokenizer, left out, the directory's."""
    directory = str(directory)
    if not Path(directory).is_dir():
        raise ConfigurationError(f"{field}: {directory}: no such model directory")
    params = {k: v for k, v in block.items() if k != "config"}
    params.update(pretrained=directory, tokenizer=params.get("tokenizer") or directory)
    return params


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
    # GRPO with beta > 0 and no adapter: the frozen reference (a model block, a step's model or
    # a model directory). None: the policy's starting weights.
    reference: str | Lazy[Model] | None = None
    # Set at graph build, never by hand: the content of the model block's local directory and
    # of an `init_from` (or `reference`) directory (SHA-256 over their files), so that weights
    # replaced in place make another step, trained again. None: the block and those say it all.
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
        block = loading(lazy_params(self.model), self.init_from, "train.init_from")
        return replace(self, model=Lazy(Model, Params(block)), init_from=None)

    @property
    def port(self) -> int | None:
        return self.master_port or self.distributed_port

    def check(self) -> None:
        """The loop's numbers, its device and nodes, one line each; `grad_accum: 0` used to
        hang forever, `train_steps: 0` cached an untrained model as trained."""
        steps, epochs = self.train_steps, self.train_epochs
        if (steps is None) == (epochs is None):
            raise ConfigurationError(
                "train.train_steps / train.train_epochs: give exactly one of them"
            )
        if steps == 0:
            raise ConfigurationError(
                "train.train_steps: 0 trains nothing (the 'trained' model would be the untrained "
                "one); give at least 1"
            )
        whole(steps, "train.train_steps", optional=True)
        whole(epochs, "train.train_epochs", optional=True)
        for key in WHOLE_KEYS:
            whole(getattr(self, key), f"train.{key}")
        whole(self.validate_every, "train.validate_every", optional=True)
        whole(self.validation_steps, "train.validation_steps", optional=True)
        whole(self.seed, "train.seed", minimum=0)
        self.check_validation()
        check_timeout(self.rendezvous_timeout, "train.rendezvous_timeout")
        if self.device not in (None, "cpu", "cuda"):
            raise ConfigurationError(
                f"train.device: cpu or cuda (or leave it out), got {self.device!r}"
            )
        # Imported here: the model side reads these settings and imports no torch.distributed.
        from ..distributed.rendezvous import rendezvous_settings

        rendezvous_settings(self.num_nodes, self.master_addr, self.port, self.rendezvous_timeout)

    def check_validation(self) -> None:
        """A validation split for `validate_every`, and checkpoints at its steps (or it at
        theirs), so that the best checkpoint is one that exists."""
        validate_every, checkpoint_every = self.validate_every, self.checkpoint_every
        if (
            validate_every
            and checkpoint_every % validate_every
            and validate_every % checkpoint_every
        ):
            raise ConfigurationError(
                f"train.checkpoint_every: {checkpoint_every} must be a multiple or a divisor of "
                f"validate_every ({validate_every}), so that the best checkpoint is one that exists"
            )
        if validate_every and self.validation_split is None:
            raise ConfigurationError(
                "train.validate_every: set, but validation_split is null; give a validation split"
            )

    def check_evaluate_tasks(self) -> None:
        """The in-loop tasks run when the step validates, each once."""
        tasks = self.evaluate_tasks or []
        if tasks and self.validation_split is None:
            raise ConfigurationError(
                "train.evaluate_tasks: scored whenever the step validates, but validation_split "
                "is null; give a validation split"
            )
        names = [task.name for task in tasks]
        for name in names:
            if names.count(name) > 1:
                raise ConfigurationError(
                    f"train.evaluate_tasks: '{name}' is given {names.count(name)} times; give "
                    "each task once"
                )

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


# Each key's default, written once (above).
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
