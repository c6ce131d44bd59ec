"""`catwalk::report`: the table (and, for a sweep, the aggregates and plots) of several runs."""

from __future__ import annotations

from typing import Any

from tango import Step

from ..reports import Report, ReportFormat, build_report
from .evaluate_checks import check_report_step


@Step.register("catwalk::report")
class MetricsReport(Step[Report]):
    """Tabulates several runs' metrics, writes markdown/CSV/JSON (and plots for a sweep).

    :param metrics: `{run name: metrics}`, usually references to `catwalk::evaluate` steps.
    :param configs: in a sweep, `{run name: {key: value}}`, each run's place in the grid; runs
        that differ only in `seed` are summarised together (mean, std, count), and the plots show
        validation accuracy over training steps and the final accuracy per configuration.

    The table is printed at the end of every `tango run` that includes the step, cached or not,
    also with `--parallelism` (:mod:`.run_command`).
    """

    VERSION = "002"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = ReportFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        check_report_step(kwargs)
        return kwargs

    def run(  # type: ignore[override]
        self,
        metrics: dict[str, dict[str, Any]],
        title: str = "Metrics",
        configs: dict[str, dict[str, Any]] | None = None,
    ) -> Report:
        return build_report(metrics, title, configs)
