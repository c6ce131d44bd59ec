"""Every key of `catwalk::train`, typed and documented in one place.

The step's `run` takes exactly these keys (:func:`run_signature`): Tango reads that signature to
build them from the config, and the step hands them on as one :class:`TrainSettings`, so that a
key can be followed from the config to where it is used.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any

from tango.common import DatasetDict, Lazy
from tango.integrations.torch import DataLoader, Model, TrainCallback, TrainingEngine

from ..tasks import Task

POSITIONAL = 4  # model, training_engine, dataset_dict, train_dataloader: the rest by keyword


@dataclass(frozen=True)
class TrainSettings:
    """The keys of `catwalk::train` (its docstring says what each means)."""

    model: Lazy[Model]
    training_engine: Lazy[TrainingEngine]
    dataset_dict: DatasetDict
    train_dataloader: Lazy[DataLoader]
    train_split: str = "train"
    validation_split: str | None = "validation"
    validation_dataloader: Lazy[DataLoader] | None = None
    seed: int = 42
    train_steps: int | None = None
    train_epochs: int | None = None
    validation_steps: int | None = None
    grad_accum: int = 1
    log_every: int = 10
    checkpoint_every: int = 100
    validate_every: int | None = None
    device_count: int = 1
    device: str | None = None  # "cuda", "cpu", or None: GPUs when there are enough
    num_nodes: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    distributed_port: int | None = None  # Tango's name for master_port
    rendezvous_timeout: float = 300.0
    # None: the validation split's kind's first (acc; a generative task's primary metric).
    val_metric_name: str | None = None
    minimize_val_metric: bool = False
    callbacks: list[Lazy[TrainCallback]] | None = None
    trackers: list[Lazy[TrainCallback]] | None = None  # split from the callbacks at graph build
    remove_stale_checkpoints: bool = True
    keep_last_checkpoints: int = 2
    resume_from: str | None = None
    evaluate_tasks: list[Task] | None = None

    def as_mapping(self) -> dict[str, Any]:
        """Key -> value, the values themselves (no copies: they hold lazy components)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def port(self) -> int | None:
        return self.master_port or self.distributed_port

    @property
    def processes(self) -> int:
        """Worker processes in all, on every node."""
        return self.device_count * self.num_nodes


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
