"""Checks of `catwalk::evaluate` and `catwalk::report` when the step graph is built: the
settings' own rules (:meth:`~catwalk_steps.settings.EvaluationSettings.check`), then what needs
several things at once (the engine against the model it shards, the split against the data
step, the length against the model's positions, the task's kind), the runs of a report; one
line naming the key, before any step has run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..kinds import kind_of_task
from ..kinds.multiple_choice import EXTRA_METRICS
from ..reports.paired import BASELINE, pairings
from ..scoring.choices import max_positions
from ..settings import METRIC, EngineSettings, EvaluationSettings
from .training import check_against_model


def check_evaluate_step(
    kwargs: Mapping[str, Any], configured: Any | None, splits: list[str] | None
) -> None:
    """`catwalk::evaluate`'s numbers, devices, precision, engine, split, and its length against
    the model's positions (read from the model's config: nothing is loaded). `configured` is
    the model's block when it is known at graph build (a `ConfiguredModel`), `splits` those the
    data step loads, when the step names one."""
    settings = EvaluationSettings.of(kwargs)  # typed, with the keys' one set of defaults
    settings.check()  # its own numbers, devices and precision
    max_length = settings.max_length  # None: the model's positions
    if settings.engine is not None:
        check_evaluation_engine(settings.engine, settings.precision, configured)
    split = kwargs.get("split") or "validation"
    if splits is not None and split not in splits:
        raise ConfigurationError(
            f"evaluate.split: '{split}' is not loaded by the data step "
            f"(splits: {', '.join(splits)})"
        )
    if configured is not None:
        configured.check_files()
    check_length_fits(configured, max_length)
    wanted = kwargs.get("extra_metrics")
    check_extra_metrics(wanted)
    task = kwargs.get("task")
    if task is not None and kwargs.get("split"):
        task.check_splits([kwargs["split"]], "evaluate.split")
    if task is not None:  # the task's kind: its settings (extra metrics, room to generate)
        kind_of_task(task).check_settings(
            task, lambda: model_length(configured, max_length), wanted
        )


def check_extra_metrics(wanted: Any) -> None:
    unknown = [name for name in wanted or () if name not in EXTRA_METRICS]
    if wanted and (not isinstance(wanted, list) or unknown):
        raise ConfigurationError(
            f"evaluate.extra_metrics: a list of {', '.join(EXTRA_METRICS)}, got {wanted!r}"
        )


def model_length(configured: Any | None, max_length: int | None) -> int | None:
    """The length the step scores with, when it is known at graph build: `max_length`, else the
    model's positions (read from its config)."""
    if max_length is not None or configured is None:
        return max_length
    return max_positions(configured.hf_config())


def check_evaluation_engine(engine: Any, precision: str, configured: Any | None) -> None:
    """An engine that shards the evaluated model: its type and keys, no optimizer, the step's
    precision, and the modules it wraps found in the model's skeleton."""
    checked = EngineSettings.of(engine, "evaluate.engine").check(trains=False)
    given = checked.params.get("precision")
    if given is not None and given != precision:
        raise ConfigurationError(
            f"evaluate.engine.precision: {given!r}, but the step's precision is {precision!r}; "
            "give the step's precision alone"
        )
    if configured is not None and checked.selects_modules:
        check_against_model(configured.lazy(), checked, [])


def check_length_fits(configured: Any | None, max_length: int | None) -> None:
    """A `max_length` longer than the model's positions would index past them."""
    if configured is None or max_length is None:
        return
    positions = max_positions(configured.hf_config())
    if positions is not None and max_length > positions:
        raise ConfigurationError(
            f"evaluate.max_length: {max_length} tokens, but the model has {positions} "
            f"positions; use max_length <= {positions} (or leave it out: the model's own)"
        )


def check_report_step(kwargs: Mapping[str, Any]) -> None:
    metrics = kwargs.get("metrics") or {}
    if not metrics:
        raise ConfigurationError("report.metrics: give at least one run")
    check_configs_name_runs(kwargs.get("configs"), metrics, "report.configs", "metrics")
    check_baseline(kwargs, metrics, "report.baseline")
    check_run_order(kwargs.get("runs"), metrics, "report.runs", "metrics")


def check_suite_report_step(kwargs: Mapping[str, Any]) -> None:
    metric = kwargs.get("metric", METRIC)
    if metric not in ("acc", "acc_norm"):
        raise ConfigurationError(f"suite_report.metric: acc or acc_norm, got {metric!r}")
    results = kwargs.get("results") or {}
    if not results or not all(results.values()):
        raise ConfigurationError("suite_report.results: give at least one task for every run")
    check_configs_name_runs(kwargs.get("configs"), results, "suite_report.configs", "results")
    check_baseline(kwargs, results, "suite_report.baseline")
    check_run_order(kwargs.get("runs"), results, "suite_report.runs", "results")
    tasks = kwargs.get("tasks") or []
    missing = sorted({t for t in tasks for by_task in results.values() if t not in by_task})
    if missing:
        raise ConfigurationError(f"suite_report.tasks: no results for task '{missing[0]}'")


def check_baseline(kwargs: Mapping[str, Any], runs: Mapping[str, Any], field: str) -> None:
    """A baseline given is a run the report has, or grid values that a sweep's configurations
    (`configs`) have (left out: the run named `untrained`, when there is one)."""
    if kwargs.get("baseline") in (None, BASELINE):  # the default: a run of that name, if any
        return
    baseline = kwargs["baseline"]
    if not isinstance(baseline, (str, Mapping)):
        raise ConfigurationError(
            f"{field}: a run's name or a sweep's grid values, got {baseline!r}"
        )
    if pairings(list(runs), baseline, kwargs.get("configs")) is None:
        given = baseline if isinstance(baseline, str) else dict(baseline)
        raise ConfigurationError(
            f"{field}: {given!r} is none of the runs ({', '.join(runs)})"
            + ("" if isinstance(baseline, str) else " nor grid values of their configurations")
        )


def check_configs_name_runs(configs: Any, runs: Mapping[str, Any], field: str, what: str) -> None:
    """A sweep's `configs` place only runs the report has (`what`: its name for their data)."""
    unknown = sorted(set(configs or {}) - set(runs))
    if unknown:
        raise ConfigurationError(f"{field}: no {what} for run '{unknown[0]}'")


def check_run_order(order: Any, runs: Mapping[str, Any], field: str, given: str) -> None:
    """A report's `runs` (the order of its runs) names runs it has, each once."""
    if order is None:
        return
    if not isinstance(order, list) or not all(isinstance(run, str) for run in order):
        raise ConfigurationError(f"{field}: a list of run names, got {order!r}")
    unknown = [run for run in order if run not in runs]
    if unknown:
        raise ConfigurationError(
            f"{field}: '{unknown[0]}' is not a run of {given} ({', '.join(runs)})"
        )
    if len(set(order)) != len(order):
        raise ConfigurationError(f"{field}: a run named twice in {order}")
