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
import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tango.common.exceptions import ConfigurationError

# A `generate_until` task without `metric_list`: lm-evaluation-harness 0.4.13 scores it by
# `DEFAULT_METRIC_REGISTRY["generate_until"]`, exact_match with no options (no kwargs; mean,
# higher is better), as the explicit `[{metric: exact_match}]` does.
DEFAULT_METRIC_LIST = ({"metric": "exact_match"},)
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
        """The answer's score against its targets (the best of them; none: 0, as lm-eval's mean
        over no targets is NaN, which does not count)."""
        if self.name == "f1":
            return max((token_f1(answer, target) for target in targets), default=0.0)
        return float(any(self.matches(answer, targets)))

    def matches(self, answer: str, targets: Sequence[str]) -> list[bool]:
        """lm-evaluation-harness's exact_match of the answer against each target, its numpy
        arrays' quirks included: lower-casing keeps each side's width (a character that
        lower-cases to two is cut), trailing NUL characters do not count."""
        answers, golds = [answer] * len(targets), list(targets)
        for pattern in self.regexes_to_ignore:
            answers = [re.sub(pattern, "", text) for text in answers]
            golds = [re.sub(pattern, "", text) for text in golds]
        if self.ignore_case:
            answers, golds = lowered(answers), lowered(golds)
        if self.ignore_punctuation:
            answers, golds = without(answers, NO_PUNCTUATION), without(golds, NO_PUNCTUATION)
        if self.ignore_numbers:
            answers, golds = without(answers, NO_DIGITS), without(golds, NO_DIGITS)
        return [a.rstrip("\0") == g.rstrip("\0") for a, g in zip(answers, golds, strict=True)]


def without(texts: list[str], table: dict[int, Any]) -> list[str]:
    return [text.translate(table) for text in texts]


def lowered(texts: list[str]) -> list[str]:
    """`np.char.lower` of an array of `texts`: lower case, cut to the array's width."""
    width = max((len(text) for text in texts), default=0)
    return [text.lower()[:width] for text in texts]


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
    """A task's filter pipelines (name, steps) and metrics; `source`: the two lists it was read
    from, as JSON (what a stored instance keeps: data, read again by :meth:`of`)."""

    filters: tuple[tuple[str, tuple[FilterStep, ...]], ...]
    metrics: tuple[Metric, ...]
    source: str = field(default="", repr=False, compare=False)

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
        return cls(filters, metrics, json.dumps([filter_list, metric_list], default=plain))

    @classmethod
    def read(cls, source: str, where: str) -> AnswerScoring:
        """The scoring a stored instance names by its :attr:`source`, checked as when given."""
        try:
            filter_list, metric_list = json.loads(source)
        except (TypeError, ValueError) as e:
            raise ConfigurationError(f"{where}: scoring: not a [filter_list, metric_list]") from e
        return cls.of(filter_list, metric_list, where)


def plain(value: Any) -> Any:
    """A mapping that JSON does not know (Tango's `Params`) as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    as_dict = getattr(value, "as_dict", None)
    if as_dict is None:
        raise TypeError(f"not data: {type(value).__name__}")
    return as_dict(quiet=True)


def pipeline(entry: Any, where: str) -> tuple[str, tuple[FilterStep, ...]]:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        raise ConfigurationError(f"{where}: give {{name: ..., filter: [{{function: ...}}]}}")
    functions = entry.get("filter") or []
    if not isinstance(functions, list):
        raise ConfigurationError(f"{where}.filter: give a list of {{function: ...}}")
    steps = []
    for i, step in enumerate(functions):
        here = f"{where}.filter[{i}]"
        if not isinstance(step, Mapping):
            raise ConfigurationError(f"{here}: give {{function: ...}}, got {step!r}")
        function = one_of(step.get("function"), FILTER_FUNCTIONS, f"{here}.function")
        options = {key: value for key, value in step.items() if key != "function"}
        allowed = ("regex_pattern", "group_select", "fallback") if function == "regex" else ()
        only(options, allowed, function, here)
        if "regex_pattern" in options:
            compile_pattern(options["regex_pattern"], f"{here}.regex_pattern")
        if "group_select" in options and not is_int(options["group_select"]):
            raise ConfigurationError(
                f"{here}.group_select: a whole number (0: the first match, -1: the last), got "
                f"{options['group_select']!r}"
            )
        if "fallback" in options and not isinstance(options["fallback"], str):
            raise ConfigurationError(f"{here}.fallback: a text, got {options['fallback']!r}")
        steps.append(FilterStep(function, **options))
    return entry["name"], tuple(steps)


def metric_of(entry: Any, where: str) -> Metric:
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"{where}: give {{metric: ...}}, got {entry!r}")
    name = one_of(entry.get("metric"), tuple(METRICS), f"{where}.metric")
    ignored = ("metric", "aggregation", "higher_is_better")
    options = {key: value for key, value in entry.items() if key not in ignored}
    only(options, METRICS[name], name, where)
    patterns = options.get("regexes_to_ignore", [])
    if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)):
        raise ConfigurationError(f"{where}.regexes_to_ignore: give a list of patterns")
    for i, pattern in enumerate(patterns):
        compile_pattern(pattern, f"{where}.regexes_to_ignore[{i}]")
    options["regexes_to_ignore"] = tuple(patterns)
    return Metric(name, **options)


def one_of(value: Any, known: tuple[str, ...], where: str) -> str:
    if value not in known:
        raise ConfigurationError(f"{where}: expected one of {', '.join(known)}, got {value!r}")
    return value


def only(options: Mapping[str, Any], allowed: tuple[str, ...], name: str, where: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigurationError(f"{where}: '{name}' does not take {', '.join(unknown)}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def compile_pattern(pattern: Any, where: str) -> re.Pattern[str]:
    """`pattern` compiled; one line naming `where` if it is not a regular expression."""
    if not isinstance(pattern, str):
        raise ConfigurationError(f"{where}: a regular expression (text), got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigurationError(f"{where}: not a regular expression ({e})") from None
