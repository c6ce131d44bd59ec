"""The Tango steps named in experiment files: thin; they build objects and call functions."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from tango import Step
from tango.common import DatasetDict, Lazy
from tango.common.exceptions import ConfigurationError
from tango.common.util import get_extra_imported_modules
from tango.format import JsonFormat
from tango.integrations.torch import DataLoader, Model, TrainCallback, TrainingEngine
from tango.step import StepResources

from .callbacks import HISTORY_FILE, RunMetrics
from .checkpoints import CheckpointError, best_checkpoint, check_full_weights, full_model_state
from .devices import evaluation_device, plan_devices
from .distributed import rendezvous_settings
from .evaluation import metrics_from_scores, score_choices
from .export import checkpoint_model, resolve_checkpoint
from .formats import HFModelFormat
from .launch import check_resumable, run_training
from .lazy_configs import lazy_config
from .loop import Schedule, TrainingJob
from .models import RankClassifier
from .precision import Precision
from .preflight import answers_cut, check_train_step, training_warnings
from .report import Report, ReportFormat, build_report
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


@Step.register("catwalk::train")
class TrainRankClassifier(Step[RankClassifier]):
    """Trains a rank classifier with a Tango training engine; the result is a HF directory.

    The keys are `torch::train`'s (`train_steps` or `train_epochs`, `validate_every`,
    `checkpoint_every`, `grad_accum`, `log_every`, `device_count`, `seed`, ...), with these
    differences: validation metrics (`acc` by default, maximised) are exact over the whole
    split and all ranks (:mod:`.callbacks`); checkpoints resume bit for bit after a crash and on
    another `device_count` (:mod:`.loop`); the best checkpoint's weights must fit the model
    exactly. And these keys:

    :param device: "cuda" (fail unless `device_count` GPUs are visible), "cpu" (CPU processes
        even on a GPU machine), or left out: GPUs when there are at least `device_count`, else
        CPU processes, with one log line saying so (:mod:`.devices`).
    :param num_nodes: machines taking part; `device_count` processes on each. Node 0 runs
        `tango run`; the others run `catwalk-worker` (see the README).
    :param master_addr: node 0's address (default: `MASTER_ADDR` when `num_nodes` > 1, else
        127.0.0.1).
    :param master_port: the rendezvous port (default: `MASTER_PORT` when `num_nodes` > 1, else
        one the OS picks). `distributed_port` is the same key under Tango's name.
    :param rendezvous_timeout: seconds to wait for every node to join before failing.
    :param resume_from: a checkpoint (or a step's work directory) to start from when this step
        has none of its own, e.g. one written with another `device_count`.
    """

    VERSION = "002"
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
    }
    METADATA = {"artifact_kind": "model"}

    @property
    def resources(self) -> StepResources:
        return self.step_resources or StepResources(gpu_count=self.kwargs.get("device_count", 1))

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        # When the step graph is built: a bad setting fails before any step has run.
        check_train_step(kwargs)
        return kwargs

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
        remove_stale_checkpoints: bool = True,
        resume_from: str | None = None,
    ) -> RankClassifier:
        for split in (train_split, validation_split):
            if split is not None and split not in dataset_dict:
                raise ConfigurationError(
                    f"train: split '{split}' is not in the dataset "
                    f"(splits: {', '.join(dataset_dict.keys())})"
                )
        schedule = Schedule(
            train_steps=train_steps,
            train_epochs=train_epochs,
            train_split=train_split,
            validation_split=validation_split,
            validation_steps=validation_steps,
            seed=seed,
            grad_accum=grad_accum,
            log_every=log_every,
            checkpoint_every=checkpoint_every,
            validate_every=validate_every,
            val_metric_name=val_metric_name,
            minimize_val_metric=minimize_val_metric,
            remove_stale_checkpoints=remove_stale_checkpoints,
        )
        plan = plan_devices(device_count, requested=device, field="train.device")
        if plan.note:
            self.logger.warning(plan.note)
        for warning in training_warnings(
            training_engine, model, plan.device_type, len(plan.devices)
        ):
            self.logger.warning(warning)
        self.warn_about_cut_answers(dataset_dict, train_dataloader, train_split, validation_split)
        rendezvous = rendezvous_settings(
            num_nodes, master_addr, master_port or distributed_port, rendezvous_timeout
        )
        job = TrainingJob(
            step_id=self.unique_id,
            step_name=self.name,
            work_dir=self.work_dir,
            model=model,
            training_engine=training_engine,
            dataset_dict=dataset_dict,
            train_dataloader=train_dataloader,
            validation_dataloader=validation_dataloader,
            callbacks=[*(callbacks or []), Lazy(RunMetrics)],
            schedule=schedule,
            devices=plan,
            rendezvous=rendezvous,
            include_package=tuple(get_extra_imported_modules()),
            resume_from=Path(resume_from) if resume_from else None,
            workspace=self.workspace,
        )
        check_resumable(job, engine_class_name(training_engine))
        nodes = f" on each of {num_nodes} nodes" if num_nodes > 1 else ""
        self.logger.info(
            "Training on %s%s; checkpoints in %s", plan.describe(), nodes, self.work_dir
        )
        run_training(job)
        return load_trained_model(model, self.work_dir)

    def warn_about_cut_answers(
        self,
        dataset_dict: DatasetDict,
        loader: Lazy[DataLoader],
        *splits: str | None,
    ) -> None:
        """Answers are scored whole only when they fit in max_length: say how many do not."""
        collate = lazy_config(loader, DataLoader, "train_dataloader")[1].get("collate_fn") or {}
        if "tokenizer" not in collate:
            return
        from .tokenization import load_tokenizer

        max_length = collate.get("max_length", 256)
        tokenizer = load_tokenizer(collate["tokenizer"], "train_dataloader.collate_fn.tokenizer")
        for split in filter(None, splits):
            cut = answers_cut(dataset_dict[split], tokenizer, max_length)
            if cut:
                self.logger.warning(
                    "collate_fn.max_length: %d of %d %s instances have an answer longer than "
                    "%d tokens, which is cut (answers are otherwise scored whole); raise "
                    "max_length",
                    cut,
                    len(dataset_dict[split]),
                    split,
                    max_length - 1,
                )


def engine_class_name(training_engine: Lazy[TrainingEngine]) -> str:
    """The class a lazy engine will be (its type was checked when the step graph was built)."""
    return lazy_config(training_engine, TrainingEngine, "training_engine")[0].__name__


def load_trained_model(model: Lazy[Model], work_dir: Path) -> RankClassifier:
    """The model built afresh with the best checkpoint's weights, which must fit it exactly."""
    trained = model.construct()
    if not isinstance(trained, RankClassifier):
        raise ConfigurationError(
            f"catwalk::train: model must be a catwalk::rank_classifier, got {type(trained)}"
        )
    best = best_checkpoint(work_dir)
    weights = full_model_state(best)
    check_full_weights(trained, set(weights), str(best))
    trained.load_state_dict(weights, strict=False)  # only tied duplicates may be absent
    trained.metrics_history = json.loads((work_dir / HISTORY_FILE).read_text())
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
        parsed = Precision.parse(precision, "evaluate.precision")
        parsed.check_device(where.type, "evaluate.precision")
        instances = dataset_dict[split]
        model.to(where)
        scores = score_choices(
            model, instances, batch_size, max_length, where, parsed, progress=True
        )
        metrics: dict[str, Any] = metrics_from_scores(instances, scores)
        self.logger.info("%s: %s", split, metrics)
        if model.metrics_history is not None:
            # Passed on to reports, which plot it; the model is loaded here anyway.
            metrics["training_history"] = model.metrics_history
        return metrics


@Step.register("catwalk::export_checkpoint")
class ExportCheckpoint(Step[RankClassifier]):
    """A training checkpoint (intermediate or final) as a rank classifier, stored as a Hugging
    Face directory like `catwalk::train`'s result, so `catwalk::evaluate` can score it.

    :param checkpoint: a checkpoint directory (`.../checkpoints/step000000400`), or a step's work
        directory (its latest complete checkpoint). The same as `catwalk-export CHECKPOINT DIR`.

    The cache key includes the checkpoint's manifest, so a newer checkpoint at the same path is
    exported again.
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = HFModelFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(kwargs)
        with contextlib.suppress(Exception):  # a bad path fails in run(), with its message
            resolved = resolve_checkpoint(Path(kwargs["checkpoint"]))
            kwargs["manifest"] = (resolved / "COMPLETE.json").read_text()
        return kwargs

    def run(self, checkpoint: str, manifest: str | None = None) -> RankClassifier:  # type: ignore[override]
        try:
            return checkpoint_model(Path(checkpoint))
        except CheckpointError as e:
            raise ConfigurationError(f"export_checkpoint.checkpoint: {e}") from None


@Step.register("catwalk::report")
class MetricsReport(Step[Report]):
    """Tabulates several runs' metrics, writes markdown/CSV/JSON (and plots for a sweep).

    :param metrics: `{run name: metrics}`, usually references to `catwalk::evaluate` steps.
    :param configs: in a sweep, `{run name: {key: value}}`, each run's place in the grid; runs
        that differ only in `seed` are summarised together (mean, std, count), and the plots show
        validation accuracy over training steps and the final accuracy per configuration.

    The table is printed at the end of every `tango run` that includes the step, cached or not,
    also with `--parallelism` (:mod:`.tango_compat`).
    """

    VERSION = "002"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = ReportFormat()

    def run(  # type: ignore[override]
        self,
        metrics: dict[str, dict[str, Any]],
        title: str = "Metrics",
        configs: dict[str, dict[str, Any]] | None = None,
    ) -> Report:
        if not metrics:
            raise ConfigurationError("report.metrics: give at least one run")
        unknown = sorted(set(configs or {}) - set(metrics))
        if unknown:
            raise ConfigurationError(f"report.configs: no metrics for run '{unknown[0]}'")
        return build_report(metrics, title, configs)
