"""Paired comparisons: two models scored on the same documents, compared document by document.

The difference of a mean metric is the mean of the per-document differences (`b - a`, from the
results' records: :mod:`catwalk_steps.metrics.records`); its standard error is the sample
standard error of those differences (the paired one, far smaller than the two standard errors
together when the models agree on most documents), its 95% interval `difference ± 1.96 se`,
and it is *within noise* when that interval holds 0. Over several tasks the average difference
has the standard error of a plain mean of independent differences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tango.common.exceptions import ConfigurationError

from ..metrics.records import documents
from ..metrics.stderr import mean_stderr, unweighted_mean_stderr
from .holm import holm_verdict, with_holm

Z_95 = 1.959963984540054  # the normal distribution's 97.5% quantile
BASELINE = "untrained"  # a report's default baseline: the run of that name, when it has one


class NotPairedError(ConfigurationError):
    """Two results that are not scores of the same documents (one line, naming what differs)."""


@dataclass(frozen=True)
class Paired:
    """`b - a` on one metric over `n` documents (or averaged over tasks)."""

    metric: str
    n: int
    difference: float
    stderr: float | None

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.stderr is None:
            return None
        return self.difference - Z_95 * self.stderr, self.difference + Z_95 * self.stderr

    @property
    def within_noise(self) -> bool | None:
        """Whether the 95% interval holds 0 (None without a standard error)."""
        interval = self.interval
        return None if interval is None else interval[0] <= 0.0 <= interval[1]

    def text(self) -> str:
        """`+0.0125 ± 0.0040`: the difference and its paired standard error."""
        return f"{self.difference:+.4f}" + ("" if self.stderr is None else f" ± {self.stderr:.4f}")

    def interval_text(self) -> str:
        interval = self.interval
        return "" if interval is None else f"[{interval[0]:+.4f}, {interval[1]:+.4f}]"

    def as_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "n": self.n,
            "difference": self.difference,
            "stderr": self.stderr,
            "interval_95": list(self.interval) if self.interval else None,
            "within_noise": self.within_noise,
        }


def same_documents(a: Sequence[Mapping], b: Sequence[Mapping], what: str) -> None:
    """Raises :class:`NotPairedError` unless `a` and `b` are records of the same documents in
    the same order (the same requests, the same gold). `what` names them as every comparison
    does, B first (`B against A`: B - A), and the counts follow it."""
    if len(a) != len(b):
        raise NotPairedError(f"{what}: {len(b)} documents against {len(a)}; not the same ones")
    for x, y in zip(a, b, strict=True):
        if x.get("request") != y.get("request") or x.get("gold") != y.get("gold"):
            raise NotPairedError(
                f"{what}: document {x.get('doc')} differs (its request or gold); the results "
                "are not scores of the same documents"
            )


def paired(a: Sequence[Mapping], b: Sequence[Mapping], metric: str, what: str = "") -> Paired:
    """`b - a` on `metric`, document by document (records of the same documents)."""
    same_documents(a, b, what or metric)
    differences = [
        float(y["metrics"][metric]) - float(x["metrics"][metric]) for x, y in zip(a, b, strict=True)
    ]
    mean = sum(differences) / len(differences) if differences else float("nan")
    return Paired(metric, len(differences), mean, mean_stderr(differences))


def paired_metrics(a: Mapping[str, Any], b: Mapping[str, Any], what: str = "") -> list[Paired]:
    """Every mean metric two results' records share (a bootstrapped one, such as F1 over
    documents, has no per-document value to difference): empty when either has no records."""
    first, second = documents(a), documents(b)
    if not first or not second:
        return []
    names = [
        name
        for name, value in first[0]["metrics"].items()
        if isinstance(value, (int, float)) and name in second[0]["metrics"]
    ]
    return [paired(first, second, name, what) for name in names]


def averaged(differences: Sequence[Paired], metric: str = "average") -> Paired | None:
    """The plain mean of several tasks' differences, with the standard error of a mean of
    independent ones (None when a task has none)."""
    if not differences:
        return None
    mean = sum(d.difference for d in differences) / len(differences)
    stderr = unweighted_mean_stderr([d.stderr for d in differences])
    return Paired(metric, sum(d.n for d in differences), mean, stderr)


SEED = "seed"


def config_value(value: Any) -> str:
    """A grid value as written in an experiment: 0.001, not 0.0010."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def configuration_of(run: str, configs: Mapping[str, Mapping[str, Any]]) -> str:
    """A run's configuration without its seed (`lr=0.001, model=tiny`): the group a sweep
    summarises it in; the run's name when it has none."""
    config = {k: v for k, v in configs.get(run, {}).items() if k != SEED}
    if not config:
        return run
    return ", ".join(f"{key}={config_value(value)}" for key, value in sorted(config.items()))


def matches(config: Mapping[str, Any], baseline: Mapping[str, Any]) -> bool:
    return all(config.get(key) == value for key, value in baseline.items() if key != SEED)


def pairings(
    runs: Sequence[str],
    baseline: str | Mapping[str, Any] | None,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[str, dict[str, list[tuple[str, str]]]] | None:
    """Who is compared with whom: `(baseline's name, {run or configuration: [(baseline run,
    run)]})`. A baseline run (a name) pairs with every other run; a baseline configuration of
    a sweep (grid values, `{lr: 0.001}`) pairs each other configuration's run of a seed with
    the baseline's run of the same seed. None when no run is the baseline."""
    configs = configs or {}
    if isinstance(baseline, str):
        if baseline not in runs:
            return None
        return baseline, {run: [(baseline, run)] for run in runs if run != baseline}
    if not baseline:
        return None
    base = {configs[r].get(SEED): r for r in runs if r in configs and matches(configs[r], baseline)}
    if not base:
        return None
    label = configuration_of(next(iter(base.values())), configs)
    pairs: dict[str, list[tuple[str, str]]] = {}
    for run in runs:
        group, seed = configuration_of(run, configs), configs.get(run, {}).get(SEED)
        if group != label and seed in base:
            pairs.setdefault(group, []).append((base[seed], run))
    return label, pairs


def over_seeds(per_seed: Sequence[Paired]) -> Paired:
    """One seed's difference as it is; several seeds' averaged (independent runs)."""
    if len(per_seed) == 1:
        return per_seed[0]
    mean = averaged(per_seed, per_seed[0].metric)
    assert mean is not None
    return Paired(mean.metric, per_seed[0].n, mean.difference, mean.stderr)


def compare_runs(
    runs: Mapping[str, Mapping[str, Any]],
    baseline: str | Mapping[str, Any] | None,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Each run (or configuration, over its seeds) against the baseline (:func:`pairings`), on
    every mean metric they share: `{baseline, runs: {run: {metric: paired}}}`; empty without
    a baseline run or without records."""
    found = pairings(list(runs), baseline, configs)
    if found is None:
        return {}
    label, pairs = found
    compared = {}
    for name, couples in pairs.items():
        by_metric: dict[str, list[Paired]] = {}
        for base, run in couples:
            for one in paired_metrics(runs[base], runs[run], f"{run} against {base}"):
                by_metric.setdefault(one.metric, []).append(one)
        if by_metric:
            compared[name] = {m: over_seeds(ps).as_json() for m, ps in by_metric.items()}
    return with_holm({"baseline": label, "runs": compared}) if compared else {}


def compare_suite(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    baseline: str | Mapping[str, Any] | None,
    shown: Mapping[str, str],
    columns: Mapping[str, str],
    in_average: Sequence[str],
    configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Each run's (or configuration's) tasks against the baseline's on the metric each task
    shows (`{baseline, runs: {run: {column: paired}}}`), and the average over the tasks of
    `in_average`."""
    found = pairings(list(results), baseline, configs)
    if found is None:
        return {}
    label, pairs = found
    compared: dict[str, dict[str, Any]] = {}
    for name, couples in pairs.items():
        by_task: dict[str, list[Paired]] = {}
        for base, run in couples:
            for task in columns:  # in the report's order of tasks
                first = documents(results[base].get(task, {}))
                second = documents(results[run].get(task, {}))
                if first and second:
                    what = f"{run} against {base}, task '{task}'"
                    by_task.setdefault(task, []).append(paired(first, second, shown[task], what))
        tasks = {task: over_seeds(ps) for task, ps in by_task.items()}
        rows = {columns[task]: one.as_json() for task, one in tasks.items()}
        mean = averaged([tasks[t] for t in in_average if t in tasks])
        if mean is not None and all(t in tasks for t in in_average):
            rows["average"] = mean.as_json()
        if rows:
            compared[name] = rows
    return with_holm({"baseline": label, "by": "task", "runs": compared}) if compared else {}


def comparison_markdown(comparison: Mapping[str, Any]) -> str:
    """The report's section of paired differences (empty without one)."""
    if not comparison:
        return ""
    comparison = corrected(comparison)
    baseline = comparison["baseline"]
    lines = [
        f"## Paired with `{baseline}`\n",
        f"Each run minus `{baseline}`, document by document on the same documents: the mean "
        "difference ± its paired standard error, its 95% interval, and *within noise* where "
        "the interval holds 0.\n",
        f"| run | {comparison.get('by', 'metric')} | difference | 95% interval | | Holm p | |",
        "|---|---|---:|---:|---|---:|---|",
    ]
    for run, rows in comparison["runs"].items():
        for column, row in rows.items():
            one = Paired(row["metric"], row["n"], row["difference"], row["stderr"])
            noise = "within noise" if one.within_noise else ""
            holm_p = "" if row.get("holm_p") is None else f"{row['holm_p']:.4f}"
            lines.append(
                f"| {run} | {column} | {one.text()} | {one.interval_text()} | {noise} | "
                f"{holm_p} | {holm_verdict(row)} |"
            )
    return "\n".join(lines) + "\n\n" + holm_line(comparison) + "\n"


def comparison_lines(comparison: Mapping[str, Any]) -> list[str]:
    """The paired differences in a few terminal lines: per run, its average over tasks (a
    suite) or each metric."""
    if not comparison:
        return []
    comparison, lines = corrected(comparison), []
    for run, rows in comparison["runs"].items():
        shown = {"average": rows["average"]} if "average" in rows else rows
        for column, row in shown.items():
            one = Paired(row["metric"], row["n"], row["difference"], row["stderr"])
            noise = ", within noise" if one.within_noise else ""
            lines.append(
                f"{run} - {comparison['baseline']}, {column} (paired, 95% interval): "
                f"{one.text()} {one.interval_text()}{noise}"
            )
    return [*lines, holm_line(comparison)] if lines else []


def corrected(comparison: Mapping[str, Any]) -> Mapping[str, Any]:
    """The comparison with Holm's correction (a report cached before it carried one)."""
    return comparison if "comparisons" in comparison else with_holm(comparison)


def holm_line(comparison: Mapping[str, Any]) -> str:
    """How many comparisons the report makes, and how many differ after Holm's correction."""
    count = comparison.get("comparisons", 0)
    rows = [row for by_column in comparison["runs"].values() for row in by_column.values()]
    differ = sum(holm_verdict(row) == "differs (Holm)" for row in rows)
    comparisons = f"{count} paired comparison{'s' if count != 1 else ''}"
    differing = f"{differ} differ{'s' if differ == 1 else ''}"
    return (
        f"{comparisons}; {differing} from the baseline after Holm's correction for all of them "
        "(family-wise 5%)"
    )
