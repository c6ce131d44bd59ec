"""`catwalk::report`: the table (and, for a sweep, the aggregates and plots) of several runs."""

from __future__ import annotations

from typing import Any

from tango import Step

from ..checks.evaluation import check_report_step, check_suite_report_step
from ..environment import environment
from ..reports import Report, ReportFormat, build_report, build_suite_report
from ..reports.paired import BASELINE
from ..settings import METRIC


@Step.register("catwalk::report")
class MetricsReport(Step[Report]):
    """Tabulates several runs' metrics, writes markdown/CSV/JSON, and plots the trained runs'
    validation curves (and in-loop task scores) and, for a sweep, the final metric.

    :param metrics: `{run name: metrics}`, usually references to `catwalk::evaluate` steps.
    :param configs: in a sweep, `{run name: {key: value}}`, each run's place in the grid; runs
        that differ only in `seed` are summarised together (mean, std, count), and the plots show
        validation accuracy over training steps and the final accuracy per configuration.
    :param baseline: the run every other run is compared with, document by document on the
        same documents (the difference of each metric, its paired standard error and 95%
        interval, and whether it is within noise: :mod:`catwalk_steps.reports.paired`), when
        a run of that name is in `metrics`; default `untrained`. In a sweep, grid values
        (`{lr: 0.001}`): each configuration's run of a seed against that configuration's run of
        the same seed, averaged over the seeds (`lib.sweep(..., baseline=...)`).
    :param runs: the runs' order in the table (`['before', 'after']`): jsonnet hands Tango an
        object's keys sorted, so `metrics` alone cannot keep the file's order; runs it leaves
        out follow, as given. The experiment library passes its own runs' order.

    Under the table, the run card: each trained run's devices, world size, wall time, versions,
    git commit and host (as recorded by `catwalk::train`), the wall time of every step the
    report depends on, and each training step's resolved config.

    The table is printed at the end of every `tango run` that includes the step, cached or not,
    also with `--parallelism` (:mod:`catwalk_steps.tango_fixes.executor`).
    """

    VERSION = "003"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = ReportFormat()
    # Added later: the ids of steps that leave them out stay as they were.
    SKIP_DEFAULT_ARGUMENTS = {"baseline": BASELINE, "runs": None}

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        check_report_step(kwargs)
        return kwargs

    def run(  # type: ignore[override]
        self,
        metrics: dict[str, dict[str, Any]],
        title: str = "Metrics",
        configs: dict[str, dict[str, Any]] | None = None,
        baseline: str | dict[str, Any] | None = BASELINE,
        runs: list[str] | None = None,
    ) -> Report:
        metrics = in_order(metrics, runs)
        return build_report(metrics, title, configs, environment(), step_times(self), baseline)


@Step.register("catwalk::suite_report")
class SuiteReport(Step[Report]):
    """A task suite's table: one row per run (per configuration in a sweep: mean ± std over
    seeds), one column per task with its `metric`, and their average; markdown, CSV and JSON
    (with every task's full results and the runs' in-loop task scores, which the training runs'
    `catwalk::report` plots), and the table printed at the end of every `tango run`.

    :param results: `{run name: {task name: metrics}}`, references to `catwalk::evaluate` steps
        (`lib.suite` in catwalk_steps/jsonnet/lib/pipeline.libsonnet writes them).
    :param metric: the score shown: "acc" (default) or "acc_norm".
    :param tasks: the columns' order (task names); default: the order of `results`.
    :param configs: in a sweep, `{run name: {key: value}}` (as `catwalk::report`'s).
    :param baseline: the run every other run is compared with, task by task on the same
        documents, and on the average over tasks (as `catwalk::report`'s; default `untrained`).
    :param runs: the runs' order in the table (as `catwalk::report`'s).
    """

    VERSION = "001"
    DETERMINISTIC = True
    CACHEABLE = True
    FORMAT = ReportFormat()
    SKIP_DEFAULT_ARGUMENTS = {"baseline": BASELINE, "runs": None}

    @classmethod
    def massage_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        check_suite_report_step(kwargs)  # when the step graph is built
        return kwargs

    def run(  # type: ignore[override]
        self,
        results: dict[str, dict[str, dict[str, Any]]],
        metric: str = METRIC,
        title: str = "Task suite",
        configs: dict[str, dict[str, Any]] | None = None,
        tasks: list[str] | None = None,
        baseline: str | dict[str, Any] | None = BASELINE,
        runs: list[str] | None = None,
    ) -> Report:
        results = in_order(results, runs)
        return build_suite_report(
            results, metric, title, configs, tasks, environment(), step_times(self), baseline
        )


def in_order(by_run: dict[str, Any], runs: list[str] | None) -> dict[str, Any]:
    """`by_run` with the runs `runs` names first, in its order, then the others as given."""
    first = list(runs or [])
    return {run: by_run[run] for run in [*first, *(r for r in by_run if r not in first)]}


def step_times(report: Step) -> list[dict[str, Any]]:
    """Name, unique id and wall time of every step a report depends on, from the workspace's
    records, in the order they ran."""
    times = []
    for step in report.recursive_dependencies:
        try:
            info = report.workspace.step_info(step)
        except (KeyError, ValueError):  # a step built outside a workspace
            continue
        duration = info.duration
        times.append(
            {
                "name": step.name,
                "unique_id": step.unique_id,
                "started": info.start_time.isoformat() if info.start_time else None,
                "wall_time_s": None if duration is None else duration.total_seconds(),
            }
        )
    return sorted(times, key=lambda t: (t["started"] or "", t["name"]))
