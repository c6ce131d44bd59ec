"""`catwalk::evaluate`: one split scored with one model (:mod:`catwalk_steps.scoring.evaluation`
does the work; this step checks its inputs and caches the metrics)."""

from __future__ import annotations

from typing import Any

from tango import Step
from tango.common import DatasetDict
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import Model

from ..distributed.devices import evaluation_device
from ..scoring.evaluation import metrics_from_scores, score_choices
from ..scoring.precision import Precision
from ..scoring.rank_classifier import RankClassifier
from .evaluate_checks import check_evaluate_step
from .formats import PlainJsonFormat


@Step.register("catwalk::evaluate")
class Evaluate(Step[dict]):
    """Scores one split with a model and returns `acc`, `acc_norm` and `n`.

    :param model: a rank classifier: a `catwalk::train` result, or one built from config.
    :param batch_size: sequences (one per choice) per forward; sequences are sorted by length.
    :param precision: "fp32" (default), "bf16", or "fp16" (CUDA only).
    :param device: "cpu", "cuda" or "cuda:N"; default: the first GPU if any, else the CPU.
    """

    VERSION = "002"  # 002: stored as plain JSON (PlainJsonFormat)
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = PlainJsonFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        # When the step graph is built: a bad setting fails before any step has run.
        check_evaluate_step(kwargs)
        return kwargs

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
        if model.run_card is not None:
            metrics["run_card"] = model.run_card
        return metrics
