"""A report of results shrunk for a quick try (`--ext-var limit=N`) says so, in a line above
its table, on the terminal and in `report.md`, as lm-evaluation-harness warns that a limited run
is for testing: the numbers are of a task's first N instances, not of the task."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

LIMIT = "limit"  # the key an evaluation's result (and a load step's metadata) carries


def limit_of(results: Iterable[Mapping[str, Any]]) -> int | None:
    """The smallest limit any of the evaluation results was scored under, or None."""
    limits = [r[LIMIT] for r in results if isinstance(r.get(LIMIT), int)]
    return min(limits) if limits else None


def limited_details(results: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """What a report keeps of the limit (its `details`): `{limit: N}`, or nothing."""
    limit = limit_of(results)
    return {} if limit is None else {LIMIT: limit}


def limited_line(details: Mapping[str, Any]) -> str:
    """The line, where the report's results were limited (`details[LIMIT]`), else ''."""
    limit = details.get(LIMIT)
    if limit is None:
        return ""
    return (
        f"Limited (--ext-var limit={limit}): each task cut to its first {limit} instances "
        "and training shortened; a quick try of the pipeline, not numbers to report.\n"
    )
