"""`catwalk::report`: the table (and, for a sweep, the aggregates and plots) of several runs."""

from __future__ import annotations

from typing import Any

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..reports import Report, ReportFormat, build_report, build_suite_report


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


@Step.register("catwalk::suite_report")
class SuiteReport(Step[Report]):
    """A task suite's table: one row per run (per configuration in a sweep: mean ± std over
    seeds), one column per task with its `metric`, and their average; markdown, CSV and JSON
    (with every task's full results), a plot of in-loop task scores when the runs have them, and
    the table printed at the end of every `tango run`.

    :param results: `{run name: {task name: metrics}}`, references to `catwalk::evaluate` steps
        (`lib.suite` in experiments/lib/pipeline.libsonnet writes them).
    :param metric: the score shown: "acc" (default) or "acc_norm".
    :param tasks: the columns' order (task names); default: the order of `results`.
    :param configs: in a sweep, `{run name: {key: value}}` (as `catwalk::report`'s).
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = ReportFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        metric = kwargs.get("metric", "acc")
        if metric not in ("acc", "acc_norm"):  # when the step graph is built
            raise ConfigurationError(f"suite_report.metric: acc or acc_norm, got {metric!r}")
        return kwargs

    def run(  # type: ignore[override]
        self,
        results: dict[str, dict[str, dict[str, Any]]],
        metric: str = "acc",
        title: str = "Task suite",
        configs: dict[str, dict[str, Any]] | None = None,
        tasks: list[str] | None = None,
    ) -> Report:
        if not results or not all(results.values()):
            raise ConfigurationError("suite_report.results: give at least one task for every run")
        unknown = sorted(set(configs or {}) - set(results))
        if unknown:
            raise ConfigurationError(f"suite_report.configs: no results for run '{unknown[0]}'")
        missing = sorted(
            {t for t in tasks or [] for by_task in results.values() if t not in by_task}
        )
        if missing:
            raise ConfigurationError(f"suite_report.tasks: no results for task '{missing[0]}'")
        return build_suite_report(results, metric, title, configs, tasks)
