"""Scoring a generated answer as lm-evaluation-harness 0.4 does for `generate_until` tasks: the
response goes through each of the task's filter pipelines (`filter_list`: strip whitespace,
extract with a regex, take the first), then each metric (`metric_list`) compares the filtered
answer with the target(s).

- `exact_match`: lm-evaluation-harness's (HF evaluate's): `regexes_to_ignore` removed from
  both sides in order, then `ignore_case`, `ignore_punctuation` (ASCII punctuation),
  `ignore_numbers`; equal strings score 1. With several targets (a task whose first document's
  target is a list: NQ-Open, TriviaQA), a match with any one scores 1.
- `f1`: SQuAD's token F1 (lower case, no punctuation, no articles, words compared as bags), the
  best over the targets.

A pipeline and a metric are data (:class:`AnswerScoring`), checked when the task is built.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tango.common.exceptions import ConfigurationError

FILTER_FUNCTIONS = ("remove_whitespace", "regex", "take_first", "lowercase", "uppercase")
METRICS = {
    "exact_match": ("ignore_case", "ignore_punctuation", "ignore_numbers", "regexes_to_ignore"),
    "f1": (),
}
INVALID = "[invalid]"  # lm-evaluation-harness's regex fallback
NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
NO_DIGITS = str.maketrans("", "", string.digits)


@dataclass(frozen=True)
class FilterStep:
    """One function of a filter pipeline (lm-evaluation-harness's `filter` entries)."""

    function: str
    regex_pattern: str = r"#### (\-?[0-9\.\,]+)"
    group_select: int = 0
    fallback: str = INVALID

    def apply(self, response: str) -> str:
        if self.function == "remove_whitespace":
            return response.strip()
        if self.function == "lowercase":
            return response.lower()
        if self.function == "uppercase":
            return response.upper()
        if self.function == "regex":
            return regex_extract(response, self.regex_pattern, self.group_select, self.fallback)
        return response  # take_first: one response per request, already the first


def regex_extract(response: str, pattern: str, group_select: int, fallback: str) -> str:
    """lm-evaluation-harness's `regex` filter: the `group_select`-th match (of several groups,
    the first non-empty one), stripped; `fallback` when nothing matches."""
    matches = re.findall(pattern, response)
    if not matches:
        return fallback
    try:
        match = matches[group_select]
    except IndexError:
        return fallback
    if isinstance(match, tuple):
        parts = [part for part in match if part]
        match = parts[0] if parts else fallback
    return match.strip()


@dataclass(frozen=True)
class Metric:
    name: str
    ignore_case: bool = False
    ignore_punctuation: bool = False
    ignore_numbers: bool = False
    regexes_to_ignore: tuple[str, ...] = ()

    def score(self, answer: str, targets: Sequence[str]) -> float:
        """The answer's score against its targets (the best of them)."""
        if self.name == "f1":
            return max(token_f1(answer, target) for target in targets)
        return float(any(self.exact(answer, target) for target in targets))

    def exact(self, answer: str, target: str) -> bool:
        for pattern in self.regexes_to_ignore:
            answer, target = re.sub(pattern, "", answer), re.sub(pattern, "", target)
        if self.ignore_case:
            answer, target = answer.lower(), target.lower()
        if self.ignore_punctuation:
            answer, target = answer.translate(NO_PUNCTUATION), target.translate(NO_PUNCTUATION)
        if self.ignore_numbers:
            answer, target = answer.translate(NO_DIGITS), target.translate(NO_DIGITS)
        # numpy, which lm-evaluation-harness compares with, ignores trailing NUL characters.
        return answer.rstrip("\0") == target.rstrip("\0")


def squad_normalize(text: str) -> str:
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(answer: str, target: str) -> float:
    """SQuAD's F1 of the answer's and the target's words."""
    predicted, gold = squad_normalize(answer).split(), squad_normalize(target).split()
    if not predicted or not gold:
        return float(predicted == gold)
    common = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class AnswerScoring:
    """A task's filter pipelines (name, steps) and metrics."""

    filters: tuple[tuple[str, tuple[FilterStep, ...]], ...]
    metrics: tuple[Metric, ...]

    def names(self) -> list[str]:
        """The result's keys, lm-evaluation-harness's: `<metric>,<filter>`."""
        return [f"{metric.name},{name}" for name, _ in self.filters for metric in self.metrics]

    def primary(self) -> str:
        return self.names()[0]

    def score(self, response: str, targets: Sequence[str]) -> dict[str, Any]:
        """Each filter's answer and each `<metric>,<filter>` score of one response."""
        answers, scores = {}, {}
        for name, steps in self.filters:
            answer = response
            for step in steps:
                answer = step.apply(answer)
            answers[name] = answer
            for metric in self.metrics:
                scores[f"{metric.name},{name}"] = metric.score(answer, targets)
        return {"filtered": answers, "scores": scores}

    @classmethod
    def of(cls, filter_list: Any, metric_list: Any, where: str) -> AnswerScoring:
        """From lm-evaluation-harness's YAML shapes: `filter_list: [{name, filter: [{function,
        ...}]}]` (none: the response as it is, named `none`), `metric_list: [{metric, ...}]`."""
        pipelines = filter_list or [{"name": "none", "filter": []}]
        if not isinstance(pipelines, list):
            raise ConfigurationError(f"{where}.filter_list: give a list of {{name, filter}}")
        filters = tuple(pipeline(p, f"{where}.filter_list[{i}]") for i, p in enumerate(pipelines))
        if not isinstance(metric_list, list) or not metric_list:
            raise ConfigurationError(f"{where}.metric_list: give a list of {{metric: ...}}")
        metrics = tuple(
            metric_of(m, f"{where}.metric_list[{i}]") for i, m in enumerate(metric_list)
        )
        names = [name for name, _ in filters]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"{where}.filter_list: names repeat ({', '.join(names)})")
        return cls(filters, metrics)


def pipeline(entry: Any, where: str) -> tuple[str, tuple[FilterStep, ...]]:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        raise ConfigurationError(f"{where}: give {{name: ..., filter: [{{function: ...}}]}}")
    steps = []
    for i, step in enumerate(entry.get("filter") or []):
        here = f"{where}.filter[{i}]"
        function = step.get("function") if isinstance(step, Mapping) else None
        if function not in FILTER_FUNCTIONS:
            raise ConfigurationError(
                f"{here}.function: expected one of {', '.join(FILTER_FUNCTIONS)}, got {function!r}"
            )
        options = {key: value for key, value in step.items() if key != "function"}
        allowed = ("regex_pattern", "group_select", "fallback") if function == "regex" else ()
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ConfigurationError(f"{here}: '{function}' does not take {', '.join(unknown)}")
        if "regex_pattern" in options:
            compile_pattern(options["regex_pattern"], f"{here}.regex_pattern")
        steps.append(FilterStep(function, **options))
    return entry["name"], tuple(steps)


def metric_of(entry: Any, where: str) -> Metric:
    name = entry.get("metric") if isinstance(entry, Mapping) else None
    if name not in METRICS:
        raise ConfigurationError(
            f"{where}.metric: expected one of {', '.join(METRICS)}, got {name!r}"
        )
    ignored = ("metric", "aggregation", "higher_is_better")
    options = {key: value for key, value in entry.items() if key not in ignored}
    unknown = sorted(set(options) - set(METRICS[name]))
    if unknown:
        raise ConfigurationError(f"{where}: '{name}' does not take {', '.join(unknown)}")
    patterns = options.get("regexes_to_ignore", [])
    if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)):
        raise ConfigurationError(f"{where}.regexes_to_ignore: give a list of patterns")
    for i, pattern in enumerate(patterns):
        compile_pattern(pattern, f"{where}.regexes_to_ignore[{i}]")
    options["regexes_to_ignore"] = tuple(patterns)
    return Metric(name, **options)


def compile_pattern(pattern: Any, where: str) -> None:
    try:
        re.compile(pattern)
    except (re.error, TypeError) as e:
        raise ConfigurationError(f"{where}: not a regular expression ({e})") from None
