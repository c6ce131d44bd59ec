"""Checks of `catwalk::evaluate` and `catwalk::report` when the step graph is built: numbers,
precision and device, the split against the data step, the runs of a report; one line naming
the key, before any step has run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..scoring.precision import Precision
from .preflight import whole


def check_evaluate_step(kwargs: Mapping[str, Any]) -> None:
    """`catwalk::evaluate`'s numbers, precision, device and split."""
    from ..distributed.devices import evaluation_device

    whole(kwargs.get("batch_size", 32), "evaluate.batch_size")
    max_length = kwargs.get("max_length")  # None: the model's positions
    if max_length is not None:
        whole(max_length, "evaluate.max_length", minimum=2)
    where = evaluation_device(kwargs.get("device"), field="evaluate.device")
    parsed = Precision.parse(kwargs.get("precision", "fp32"), "evaluate.precision")
    parsed.check_device(where.type, "evaluate.precision")
    split = kwargs.get("split") or "validation"
    splits = loaded_splits(kwargs.get("dataset_dict"))
    if splits is not None and split not in splits:
        raise ConfigurationError(
            f"evaluate.split: '{split}' is not loaded by the data step "
            f"(splits: {', '.join(splits)})"
        )


def loaded_splits(data: Any) -> list[str] | None:
    """The splits a `catwalk::load_task` step will load, when `data` is one."""
    from .load_task import LoadTask

    if not isinstance(data, LoadTask):
        return None
    return list(data.kwargs.get("splits") or ["train", "validation"])


def check_report_step(kwargs: Mapping[str, Any]) -> None:
    metrics = kwargs.get("metrics") or {}
    if not metrics:
        raise ConfigurationError("report.metrics: give at least one run")
    check_configs_name_runs(kwargs.get("configs"), metrics, "report.configs", "metrics")


def check_suite_report_step(kwargs: Mapping[str, Any]) -> None:
    metric = kwargs.get("metric", "acc")
    if metric not in ("acc", "acc_norm"):
        raise ConfigurationError(f"suite_report.metric: acc or acc_norm, got {metric!r}")
    results = kwargs.get("results") or {}
    if not results or not all(results.values()):
        raise ConfigurationError("suite_report.results: give at least one task for every run")
    check_configs_name_runs(kwargs.get("configs"), results, "suite_report.configs", "results")
    tasks = kwargs.get("tasks") or []
    missing = sorted({t for t in tasks for by_task in results.values() if t not in by_task})
    if missing:
        raise ConfigurationError(f"suite_report.tasks: no results for task '{missing[0]}'")


def check_configs_name_runs(configs, runs: Mapping[str, Any], field: str, what: str) -> None:
    """A sweep's `configs` place only runs the report has (`what`: its name for their data)."""
    unknown = sorted(set(configs or {}) - set(runs))
    if unknown:
        raise ConfigurationError(f"{field}: no {what} for run '{unknown[0]}'")
