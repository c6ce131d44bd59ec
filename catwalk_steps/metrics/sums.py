"""Means known by their sums, as the in-loop evaluation and validation keep every kind's metrics:
each rank adds its batches' sums, the ranks add theirs in one all-reduce, and only then is a
mean and its standard error taken, so both are exact over the whole split (not a mean of batch
means) and zero-weight padding counts for nothing.

A grouped task (MMLU) keeps each part's sums too (`<key>@<subtask>`), because lm-eval's error bar
of a group is pooled from its parts' (:func:`~.stderr.pooled_stderr`), not the one of all its
documents taken together: the loop then shows the bar the evaluate step shows (none where a part
has a single document, as lm-eval writes "N/A").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import torch

from .records import stderr_key
from .stderr import pooled_stderr, stderr_from_sums

COUNT = "count"  # the documents' weight
PART = "@"  # a part's key: `<key>@<part>`


def squares(name: str) -> str:
    """The key of the sum of a metric's squared values."""
    return f"{name}^2"


class MeanSums:
    """Per-document values of some metrics, as sums that add over batches and ranks: each
    metric's weighted values and their squares, the documents' weight (`count`), and the same
    per part of a grouped task. :attr:`sums` is the flat mapping of floats the loop adds up and
    all-reduces as it is (keys of a kind's own, such as a loss, may ride along)."""

    def __init__(self, sums: Mapping[str, float] | None = None) -> None:
        self.sums: dict[str, float] = {key: float(value) for key, value in (sums or {}).items()}

    def add(
        self,
        values: Mapping[str, Any],
        weights: Any,
        parts: Sequence[str | None] | None = None,
        squared: Collection[str] | None = None,
    ) -> MeanSums:
        """Adds each metric's per-document `values` (CPU tensors or lists), weighted by
        `weights`, and their squares (those in `squared`; None: all); each document's part
        (`parts`, a subtask or None) adds to that part's sums too. A document of weight 0
        counts for nothing, even where its value is infinite."""
        weight = torch.as_tensor(weights, dtype=torch.float64)
        columns = {name: torch.as_tensor(v, dtype=torch.float64) for name, v in values.items()}
        self._add(columns, weight, "", squared)
        for part in dict.fromkeys(parts or ()):
            if part is not None:
                inside = torch.tensor([other == part for other in parts or ()])
                self._add(columns, torch.where(inside, weight, 0.0), PART + part, squared)
        return self

    def _add(
        self, columns: Mapping[str, torch.Tensor], weight: torch.Tensor, suffix: str, squared: Any
    ) -> None:
        live = weight > 0

        def total(values: torch.Tensor) -> float:
            return float(torch.where(live, values * weight, 0.0).sum())

        added = {COUNT: float(weight.sum())}
        for name, values in columns.items():
            added[name] = total(values)
            if squared is None or name in squared:
                added[squares(name)] = total(values * values)
        for key, value in added.items():
            self.sums[key + suffix] = self.sums.get(key + suffix, 0.0) + value

    @property
    def count(self) -> float:
        return self.sums.get(COUNT, 0.0)

    def mean(self, name: str) -> float:
        return self.sums[name] / max(self.count, 1.0)

    def stderr(self, name: str) -> float | None:
        """lm-eval's `mean_stderr` of the values (None below two documents)."""
        return stderr_from_sums(self.sums[name], self.sums[squares(name)], self.count)

    def parts(self) -> dict[str, MeanSums]:
        """Each part's sums, by part."""
        found: dict[str, dict[str, float]] = {}
        for key, value in self.sums.items():
            name, separator, part = key.rpartition(PART)
            if separator:
                found.setdefault(part, {})[name] = value
        return {part: MeanSums(sums) for part, sums in found.items()}

    def metrics(self, names: Iterable[str]) -> dict[str, float | None]:
        """Each metric's mean and its standard error (`<metric>_stderr`): with parts, pooled
        from theirs as lm-eval 0.4.13 pools a group weighted by size over its leaf tasks."""
        parts = list(self.parts().values())
        found: dict[str, float | None] = {}
        for name in names:
            found[name] = self.mean(name)
            found[stderr_key(name)] = (
                pooled_stderr([p.stderr(name) for p in parts], [int(p.count) for p in parts])
                if parts
                else self.stderr(name)
            )
        return found
