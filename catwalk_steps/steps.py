"""The Tango steps named in experiment files: thin; they build objects and call functions."""

from __future__ import annotations

import json
import socket
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from tango import Step
from tango.common import DatasetDict, Lazy
from tango.common.exceptions import ConfigurationError
from tango.format import JsonFormat
from tango.integrations.torch import DataLoader, Model, TrainCallback, TrainingEngine
from tango.integrations.torch.train import TorchTrainStep

from .callbacks import HISTORY_FILE, RunMetrics
from .checkpoints import check_full_weights
from .devices import evaluation_device, plan_devices
from .evaluation import metrics_from_scores, score_choices
from .formats import HFModelFormat
from .models import RankClassifier
from .precision import Precision
from .report import Report, ReportFormat, build_report, format_value
from .tasks import Task


@Step.register("catwalk::load_task")
class LoadTask(Step[DatasetDict]):
    """Loads the named splits of a multiple-choice task into a DatasetDict of instances.

    :param task: e.g. `{type: "catwalk::piqa", data_dir: "..."}` or `{type: "catwalk::synthetic"}`.
    :param splits: split names to load (default train and validation); each must exist and be
        non-empty.
    :param max_instances: keep only the first N instances of each split (quick runs).
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True

    def run(  # type: ignore[override]
        self,
        task: Task,
        splits: list[str] | None = None,
        max_instances: int | None = None,
    ) -> DatasetDict:
        loaded = task.load(splits or ["train", "validation"])
        if max_instances is not None:
            loaded = {name: instances[:max_instances] for name, instances in loaded.items()}
        for name, instances in loaded.items():
            self.logger.info("Split %s: %d instances", name, len(instances))
        return DatasetDict(splits=loaded, metadata={"task": type(task).__name__})


def free_port() -> int:
    """A TCP port nobody listens on now, so concurrent runs do not collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@Step.register("catwalk::train")
class TrainRankClassifier(TorchTrainStep):
    """Tango's `torch::train`, for rank classifiers, with the result saved as a HF directory.

    Differences from `torch::train`: validation metrics (`acc` by default, maximised) are exact
    over the whole split and across ranks (see :mod:`catwalk_steps.callbacks`); the best
    checkpoint's weights must fit the model exactly; the result is a `save_pretrained`
    directory; `distributed_port` defaults to a free port. Parameters are `torch::train`'s, and:

    :param device: "cuda" (fail unless `device_count` GPUs are visible), "cpu" (CPU processes
        even on a GPU machine), or left out: GPUs when there are at least `device_count`, else
        CPU processes, with one log line saying so (:mod:`catwalk_steps.devices`).
    """

    VERSION = "001"
    FORMAT = HFModelFormat()

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
        distributed_port: int | None = None,
        val_metric_name: str = "acc",
        minimize_val_metric: bool = False,
        callbacks: list[Lazy[TrainCallback]] | None = None,
        remove_stale_checkpoints: bool = True,
    ) -> RankClassifier:
        for split in (train_split, validation_split):
            if split is not None and split not in dataset_dict:
                raise ConfigurationError(
                    f"train: split '{split}' is not in the dataset "
                    f"(splits: {', '.join(dataset_dict.keys())})"
                )
        plan = plan_devices(device_count, requested=device, field="train.device")
        if plan.note:
            self.logger.warning(plan.note)
        self.logger.info("Training on %s", plan.describe())
        trained = self._train(
            model,
            training_engine,
            dataset_dict,
            train_dataloader,
            train_split=train_split,
            validation_split=validation_split,
            validation_dataloader=validation_dataloader,
            seed=seed,
            train_steps=train_steps,
            train_epochs=train_epochs,
            validation_steps=validation_steps,
            grad_accum=grad_accum,
            log_every=log_every,
            checkpoint_every=checkpoint_every,
            validate_every=validate_every,
            devices=list(plan.devices),
            distributed_port=distributed_port or free_port(),
            val_metric_name=val_metric_name,
            minimize_val_metric=minimize_val_metric,
            auto_aggregate_val_metric=False,  # RunMetrics aggregates exactly
            callbacks=[*(callbacks or []), Lazy(RunMetrics)],
            remove_stale_checkpoints=remove_stale_checkpoints,
        )
        if not isinstance(trained, RankClassifier):
            raise ConfigurationError(
                f"catwalk::train: model must be a catwalk::rank_classifier, got {type(trained)}"
            )
        weights_path = self.work_dir / "weights.pt"  # what Tango loaded into `trained`
        if weights_path.is_file():
            names = set(torch.load(weights_path, mmap=True, weights_only=True))
            check_full_weights(trained, names, str(weights_path))
        history_path = self.work_dir / HISTORY_FILE
        trained.metrics_history = json.loads(history_path.read_text())
        return trained


@Step.register("catwalk::evaluate")
class Evaluate(Step[dict]):
    """Scores one split with a model and returns `acc`, `acc_norm` and `n`.

    :param model: a rank classifier: a `catwalk::train` result, or one built from config.
    :param batch_size: sequences (one per choice) per forward; sequences are sorted by length.
    :param precision: "fp32" (default), "bf16", or "fp16" (CUDA only).
    :param device: "cpu", "cuda" or "cuda:N"; default: the first GPU if any, else the CPU.
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = JsonFormat()

    def run(  # type: ignore[override]
        self,
        model: Model,
        dataset_dict: DatasetDict,
        split: str = "validation",
        batch_size: int = 32,
        max_length: int = 256,
        precision: str = "fp32",
        device: str | None = None,
    ) -> dict[str, Any]:
        if not isinstance(model, RankClassifier):
            raise ConfigurationError(
                f"evaluate.model: expected a catwalk::rank_classifier, got {type(model).__name__}"
            )
        if split not in dataset_dict:
            raise ConfigurationError(
                f"evaluate.split: '{split}' is not in the dataset "
                f"(splits: {', '.join(dataset_dict.keys())})"
            )
        where = evaluation_device(device, field="evaluate.device")
        Precision.parse(precision, "evaluate.precision").check_device(
            where.type, "evaluate.precision"
        )
        instances = dataset_dict[split]
        model.to(where)
        scores = score_choices(
            model, instances, batch_size, max_length, where, precision, progress=True
        )
        metrics = metrics_from_scores(instances, scores)
        self.logger.info("%s: %s", split, metrics)
        return metrics


@Step.register("catwalk::report")
class MetricsReport(Step[Report]):
    """Tabulates several runs' metrics, writes markdown/CSV/JSON, and prints the table.

    :param metrics: `{run name: metrics}`, usually references to `catwalk::evaluate` steps.

    The table is printed whenever the step is part of a `tango run`, cached or not.
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = ReportFormat()

    def run(  # type: ignore[override]
        self, metrics: dict[str, dict[str, Any]], title: str = "Metrics"
    ) -> Report:
        if not metrics:
            raise ConfigurationError("report.metrics: give at least one run")
        return build_report(metrics, title)

    def ensure_result(self, workspace=None) -> None:
        super().ensure_result(workspace)
        if workspace is not None:
            print_report(workspace.step_cache[self], workspace.step_info(self).result_location)


def print_report(report: Report, location: str | None = None) -> None:
    table = Table(title=report.title)
    table.add_column("run", style="cyan")
    for column in report.columns:
        table.add_column(column, justify="right")
    for name, row in report.rows.items():
        table.add_row(name, *(format_value(row.get(column)) for column in report.columns))
    console = Console()
    console.print(table)
    if location:
        console.print(f"report.md / report.csv in {location}")
