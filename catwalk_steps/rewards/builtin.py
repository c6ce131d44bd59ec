"""The built-in rewards: the task's own metric of a completion, scored exactly as evaluation
scores it (`catwalk::task_metric`), and a format given as a regular expression
(`catwalk::regex_format`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..tasks.answers import compile_pattern
from ..tasks.generation import GenerationInstance
from .base import Reward

MATCHES = ("full", "search")


@Reward.register("catwalk::task_metric")
class TaskMetric(Reward):
    """The task's own score of a completion, as evaluation scores it: through the task's
    filters (GSM8K's `strict-match`, `flexible-extract`), then its metric (exact match with its
    options, token F1) against the targets (:meth:`GenerationInstance.score`).

    :param metric: the `<metric>,<filter>` score to use (`exact_match,strict-match`, as the
        evaluate step's result names it); left out: the task's primary metric (its first)."""

    def __init__(self, metric: str | None = None):
        if metric is not None and not isinstance(metric, str):
            raise ConfigurationError(
                f"metric: a task's `<metric>,<filter>` (exact_match,strict-match), got {metric!r}"
            )
        self.metric = metric

    def __call__(self, instance: GenerationInstance, completion: str) -> float | None:
        scores = instance.score(completion)["scores"]
        key = self.metric or instance.scoring.primary()
        if key not in scores:
            raise ValueError(f"metric {key!r}: the task has no such score ({', '.join(scores)})")
        return scores[key]

    def config(self) -> dict[str, Any]:
        return {**super().config(), **({"metric": self.metric} if self.metric else {})}

    def check_metrics(self, names: Sequence[str], field: str) -> None:
        if self.metric is not None and self.metric not in names:
            raise ConfigurationError(
                f"{field}.metric: the task has no {self.metric!r} (it has {', '.join(names)})"
            )


@Reward.register("catwalk::regex_format")
class RegexFormat(Reward):
    """1.0 when the completion has the format a regular expression gives, else 0.0.

    :param pattern: the regular expression (Python's `re`), compiled once when the settings
        are read; `(?s)` at its start lets `.` match a newline.
    :param match: "full": the whole completion must match (`re.fullmatch`, the default: a
        format is the completion's shape); "search": a match anywhere in it (`re.search`)."""

    def __init__(self, pattern: str, match: str = "full"):
        self.compiled = compile_pattern(pattern, "pattern")
        if match not in MATCHES:
            raise ConfigurationError(f"match: one of {', '.join(MATCHES)}, got {match!r}")
        self.match = match

    def __call__(self, instance: GenerationInstance, completion: str) -> float | None:
        find = self.compiled.fullmatch if self.match == "full" else self.compiled.search
        return 1.0 if find(completion) else 0.0

    def config(self) -> dict[str, Any]:
        return {**super().config(), "pattern": self.compiled.pattern, "match": self.match}
