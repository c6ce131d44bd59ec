"""`catwalk::report`: the table (and, for a sweep, the aggregates and plots) of several runs."""

from __future__ import annotations

from typing import Any

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..reports import Report, ReportFormat, build_report


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
