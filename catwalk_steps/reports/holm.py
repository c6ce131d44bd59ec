"""Many paired comparisons at once: how many, and which differ once that is accounted for.

A report compares every run with its baseline on every metric, and a suite on every task: each
line's "within noise" is one test at 5%, and of 26 tests about one differs by chance alone.
Each paired difference has a two-sided p-value from its normal approximation (the difference
over its paired standard error, as the 95% interval is made), and Holm's step-down correction
(Holm 1979) adjusts them for the number of comparisons in the report: sort the m p-values,
multiply the i-th smallest by m - i + 1, carry the running maximum, cap at 1. A row whose
adjusted p-value is below 0.05 differs from its baseline with the family-wise error held at 5%.
Holm's is uniformly more powerful than Bonferroni's and assumes nothing about dependence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

ALPHA = 0.05


def p_value(difference: float, stderr: float | None) -> float | None:
    """Two-sided p-value of a paired difference with its standard error (None without one)."""
    if stderr is None:
        return None
    if stderr == 0:
        return 1.0 if difference == 0 else 0.0
    return math.erfc(abs(difference / stderr) / math.sqrt(2))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def with_holm(comparison: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison (`{baseline, runs: {run: {column: paired row}}}`) with each row's
    `p_value` and `holm_p`, and `comparisons`: how many rows were corrected for together."""
    if not comparison:
        return {}
    rows = [row for by_column in comparison["runs"].values() for row in by_column.values()]
    p_values = [(row, p_value(row["difference"], row["stderr"])) for row in rows]
    tested = [(row, p) for row, p in p_values if p is not None]
    adjusted = holm([p for _, p in tested])
    runs = {
        run: {c: dict(row) for c, row in by_column.items()}
        for run, by_column in comparison["runs"].items()
    }
    by_id = {id(row): (p, a) for (row, p), a in zip(tested, adjusted, strict=True)}
    for run, by_column in comparison["runs"].items():
        for column, row in by_column.items():
            if id(row) in by_id:
                runs[run][column]["p_value"], runs[run][column]["holm_p"] = by_id[id(row)]
    return {**comparison, "runs": runs, "comparisons": len(tested)}


def holm_verdict(row: Mapping[str, Any]) -> str:
    """'differs (Holm)' or 'within noise (Holm)' for a corrected row; '' for another."""
    if row.get("holm_p") is None:
        return ""
    return "differs (Holm)" if row["holm_p"] < ALPHA else "within noise (Holm)"
