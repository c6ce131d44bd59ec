"""A task suite's report: one row per run (per configuration in a sweep, mean ± std over seeds),
one column per task with its score, and the average over tasks; the full per-task results
(acc, acc_norm, n, split, few-shot, MMLU's subjects and categories) are kept in `report.json`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from .tables import Report, in_loop_histories

AVERAGE = "average"


def build_suite_report(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    metric: str = "acc",
    title: str = "Task suite",
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    tasks: list[str] | None = None,
    environment: Mapping[str, Any] | None = None,
    step_times: list[dict[str, Any]] | None = None,
) -> Report:
    """A report of `{run: {task: evaluation result}}` showing each task's `metric`, the tasks
    in the order of `tasks` (default: as they come).

    The average is the plain mean over the run's tasks (each task counts once, whatever its
    size, as suite averages are usually reported; MMLU's own number is already its size-
    weighted mean over subjects)."""
    tasks = list(dict.fromkeys([*(tasks or []), *(t for run in results.values() for t in run)]))
    rows, details = {}, {}
    for run, by_task in results.items():
        row = {task: float(by_task[task][metric]) for task in tasks if task in by_task}
        if len(row) == len(tasks):
            row[AVERAGE] = statistics.fmean(row.values())
        rows[run] = row
        details[run] = {task: scalars_and_parts(result) for task, result in by_task.items()}
    histories: dict[str, Mapping[str, Any]] = {}
    cards: dict[str, dict[str, Any]] = {}
    for run, by_task in results.items():
        trained = [result for result in by_task.values() if result.get("training_history")]
        if trained:
            histories[run] = trained[0]
        card = next((r["run_card"] for r in by_task.values() if r.get("run_card")), None)
        if isinstance(card, Mapping):
            cards[run] = dict(card)
    return Report(
        rows=rows,
        title=title,
        configs={run: dict(config) for run, config in (configs or {}).items()},
        task_histories=in_loop_histories(histories),
        column_order=[*tasks, AVERAGE],
        details={"metric": metric, "results": details},
        run_cards=cards,
        environment=dict(environment or {}),
        step_times=list(step_times or []),
    )


def scalars_and_parts(result: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation result without the training history it carries."""
    return {key: value for key, value in result.items() if key != "training_history"}
