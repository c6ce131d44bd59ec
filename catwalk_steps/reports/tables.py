"""Tables and plots of several runs' metrics; sweeps aggregated over seeds.

A report has one row per run (`{run name: metrics}`). When the runs come from a sweep, each also
has a configuration (`{"engine": "ddp", "lr": 0.001, "seed": 1}`) and its validation history;
runs whose configurations differ only in `seed` are then summarised together: mean, standard
deviation (over seeds, n - 1 in the denominator) and count per metric. The same report renders
as markdown, CSV and JSON here; :mod:`.plots` draws it and :mod:`.files` stores and prints it.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import is_number
from ..kinds import kind_of_result
from ..metrics.records import split_stderrs, stderr_key
from .limited import limited_details, limited_line
from .paired import compare_runs, comparison_markdown, config_value, configuration_of
from .run_card import run_cards_markdown

LEADING_COLUMNS = ("acc", "acc_norm", "n")


@dataclass
class Summary:
    """One metric over the seeds of a configuration."""

    mean: float
    std: float | None  # None with a single seed
    count: int
    whole: bool = False  # every value was the same integer (a count such as `n`)

    @classmethod
    def of(cls, values: list[float | int]) -> Summary:
        """A count (integers, the same in every seed: `n`) is shown as one number; any other
        metric as mean ± std, also when every seed gave the same value (an accuracy of 1.0 is
        `1.0000 ± 0.0000`, as a memory figure is `434.6 ± 0.0`)."""
        std = statistics.stdev(values) if len(values) > 1 else None
        counts = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        whole = counts and len(set(values)) == 1
        return cls(statistics.fmean(values), std, len(values), whole)

    def text(self) -> str:
        if self.whole:
            return str(int(self.mean))
        if abs(self.mean) >= 100:
            return format_value(self.mean) + ("" if self.std is None else f" ± {self.std:.1f}")
        if self.std is None:
            return f"{self.mean:.4f}"
        return f"{self.mean:.4f} ± {self.std:.4f}"


@dataclass
class Report:
    """Rows of metrics, one per named run, with the columns in a stable order.

    :ivar configs: each run's configuration in a sweep (none for a plain comparison).
    :ivar histories: each run's validation history (`[{step, acc, ...}]`), for the curves.
    :ivar run_cards: each trained run's card (:mod:`.run_card`): config, versions, host, ...
    :ivar environment: versions, git state and host where the report was made.
    :ivar step_times: the wall time of each step the report depends on.
    :ivar task_histories: each run's in-loop task scores (`{task: [{step, acc, ...}]}`).
    :ivar column_order: the columns in this order (a suite's tasks, then the average);
        otherwise `acc`, `acc_norm`, `n`, then the rest alphabetically.
    :ivar details: everything else the report's files keep (a suite's full per-task results).
    """

    rows: dict[str, dict[str, Any]]
    title: str = "Metrics"
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    histories: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    run_cards: dict[str, dict[str, Any]] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    step_times: list[dict[str, Any]] = field(default_factory=list)
    task_histories: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    column_order: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    # Generative tasks' outputs, `{run: {task: [instance output]}}`: `generations.jsonl`.
    generations: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    # Each run's standard errors over documents, `{run: {column: stderr}}` (shown as `± se`).
    stderrs: dict[str, dict[str, float]] = field(default_factory=dict)
    # Each run against a baseline run, document by document (:mod:`.paired`).
    comparison: dict[str, Any] = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        seen = {key for row in self.rows.values() for key in row}
        if self.column_order:
            return [c for c in self.column_order if c in seen]
        leading = [c for c in LEADING_COLUMNS if c in seen]
        return leading + sorted(seen - set(leading))

    @property
    def aggregated(self) -> bool:
        return bool(self.configs)

    def configuration(self, run: str) -> str:
        """The run's configuration without its seed: the group it is summarised in."""
        return configuration_of(run, self.configs)

    def groups(self) -> dict[str, list[str]]:
        """Configuration -> its runs (one per seed), in the order the runs are given."""
        grouped: dict[str, list[str]] = {}
        for run in self.rows:
            grouped.setdefault(self.configuration(run), []).append(run)
        return grouped

    def summaries(self) -> dict[str, dict[str, Summary]]:
        """Configuration -> metric -> mean, std and count over its seeds."""
        out = {}
        for group, runs in self.groups().items():
            metrics = {}
            for column in self.columns:
                values = [self.rows[r][column] for r in runs if is_number(self.rows[r].get(column))]
                if values:
                    metrics[column] = Summary.of(values)
            out[group] = metrics
        return out

    # --- Text -------------------------------------------------------------------------------

    def table_rows(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows of the table people read: per configuration in a sweep."""
        if not self.aggregated:
            header = ["run", *self.columns]
            body = [[name, *(self.cell(name, c) for c in self.columns)] for name in self.rows]
            return header, body
        header = ["configuration", "seeds", *self.columns]
        body = []
        groups = self.groups()
        for group, metrics in self.summaries().items():
            seeds = len(groups[group])
            cells = [metrics[c].text() if c in metrics else "" for c in self.columns]
            body.append([group, str(seeds), *cells])
        return header, body

    def cell(self, run: str, column: str) -> str:
        """A run's value, with `± <standard error>` where the evaluation gave one."""
        text = format_value(self.rows[run].get(column))
        stderr = self.stderrs.get(run, {}).get(column)
        if text and stderr is not None and is_number(stderr):
            return f"{text} ± {format_value(float(stderr))}"
        return text

    def stderr_line(self) -> str:
        """What `±` means in a table of runs, when one shows a standard error."""
        if not any(self.stderrs.values()):
            return ""
        return (
            "± in a run's cell: the standard error over the task's documents "
            "(lm-evaluation-harness's `*_stderr`).\n"
        )

    def markdown(self) -> str:
        header, body = self.table_rows()
        limited = limited_line(self.details)
        lines = [
            *([limited.strip(), ""] if limited else []),
            "| " + " | ".join(header) + " |",
            "|"
            + "|".join(["---"] * (len(header) - len(self.columns)) + ["---:"] * len(self.columns))
            + "|",
        ]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        text = "\n".join(lines) + "\n"
        if self.aggregated:
            text += "\nMean ± standard deviation over seeds.\n\n## Runs\n\n" + self.runs_markdown()
        if self.stderr_line():
            text += "\n" + self.stderr_line()
        if self.comparison:
            text += "\n" + comparison_markdown(self.comparison)
        if TRAINING_COLUMNS & set(self.columns):
            text += (
                "\nTraining figures: `tokens/s`, the mean over the logged steps after the first, "
                "all ranks together; `peak MiB`, the largest peak of any rank.\n"
            )
        if self.run_cards or self.environment or self.step_times:
            text += "\n" + run_cards_markdown(self.run_cards, self.environment, self.step_times)
        return text

    def runs_markdown(self) -> str:
        keys = self.config_keys()
        header = ["run", *keys, *self.columns]
        lines = [
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] * (1 + len(keys)) + ["---:"] * len(self.columns)) + "|",
        ]
        for name in self.rows:
            config = self.configs.get(name, {})
            cells = [name, *(config_value(config[k]) if k in config else "" for k in keys)]
            cells += [self.cell(name, c) for c in self.columns]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def config_keys(self) -> list[str]:
        return sorted({key for config in self.configs.values() for key in config})

    def csv(self) -> str:
        """Per configuration in a sweep (mean, std, count of each metric); else per run."""
        if not self.aggregated:
            return self.runs_csv()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        stats = [f"{c}_{s}" for c in self.columns for s in ("mean", "std", "count")]
        writer.writerow(["configuration", *stats])
        for group, metrics in self.summaries().items():
            row: list[Any] = [group]
            for column in self.columns:
                summary = metrics.get(column)
                row += [summary.mean, summary.std, summary.count] if summary else ["", "", ""]
            writer.writerow(["" if v is None else v for v in row])
        return out.getvalue()

    def runs_csv(self) -> str:
        """Per run; beside each metric that has one, its standard error (`acc_stderr`)."""
        keys = self.config_keys()
        known = {c for errors in self.stderrs.values() for c in errors} & set(self.columns)
        pairs = [(c, c) for c in self.columns] + [(stderr_key(c), c) for c in known]
        columns = [key for key, _ in sorted(pairs, key=lambda p: self.columns.index(p[1]))]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["run", *keys, *columns])
        for name, row in self.rows.items():
            config = self.configs.get(name, {})
            errors = {stderr_key(c): e for c, e in self.stderrs.get(name, {}).items()}
            values = {**row, **errors}
            writer.writerow(
                [name, *(config.get(k, "") for k in keys), *(values.get(c, "") for c in columns)]
            )
        return out.getvalue()

    def as_json(self) -> dict[str, Any]:
        summaries = {
            group: {metric: vars(summary) for metric, summary in metrics.items()}
            for group, metrics in self.summaries().items()
        }
        return {
            "title": self.title,
            "rows": self.rows,
            "configs": self.configs,
            "histories": self.histories,
            "task_histories": self.task_histories,
            "column_order": self.column_order,
            "details": self.details,
            "summaries": summaries if self.aggregated else {},
            "run_cards": self.run_cards,
            "environment": self.environment,
            "step_times": self.step_times,
            "stderrs": self.stderrs,
            "comparison": self.comparison,
        }


def format_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if abs(value) >= 100:  # tokens/s, MiB: a tenth is precise enough
            return f"{value:.1f}"
        return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:g}"
    return str(value)


TRAINING_COLUMNS = {"tokens/s", "peak MiB"}  # from the history, in the report's rows


def training_figures(history: Mapping[str, Any]) -> dict[str, float]:
    """A run's mean tokens/s and seconds per step over its logged steps (the first, which
    carries the warm-up, left out when there are others) and the largest peak memory of any
    rank at any step."""
    entries = [e for e in history.get("train", []) if isinstance(e, Mapping)]
    speeds = [e["tokens_per_s"] for e in entries if is_number(e.get("tokens_per_s"))]
    seconds = [e["s_per_step"] for e in entries if is_number(e.get("s_per_step"))]
    peaks = [
        value
        for e in entries
        if isinstance(e.get("peak_memory_mib"), Mapping)
        for value in e["peak_memory_mib"].values()
        if is_number(value)
    ]
    figures = {}
    if speeds:
        figures["tokens/s"] = statistics.fmean(speeds[1:] or speeds)
    if seconds:
        figures["s/step"] = statistics.fmean(seconds[1:] or seconds)
    if peaks:
        figures["peak MiB"] = float(max(peaks))
    return figures


def build_report(
    metrics: Mapping[str, Mapping[str, Any]],
    title: str = "Metrics",
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    environment: Mapping[str, Any] | None = None,
    step_times: list[dict[str, Any]] | None = None,
    baseline: str | Mapping[str, Any] | None = None,
) -> Report:
    """A report from `{run name: {metric: value}}`; non-scalar values are left out, except what
    `catwalk::evaluate` passes on from a trained model: its history (the validation curve, mean
    tokens/s, peak memory) and its run card; each run paired with the `baseline` run."""
    split = {name: split_stderrs(kind_of_result(run).figures(run)) for name, run in metrics.items()}
    rows = {name: values for name, (values, _) in split.items()}
    trained = {
        name: run["training_history"]
        for name, run in metrics.items()
        if isinstance(run.get("training_history"), Mapping)
    }
    for name, history in trained.items():
        figures = training_figures(history)
        rows[name].update({k: v for k, v in figures.items() if k in TRAINING_COLUMNS})
    return Report(
        rows=rows,
        title=title,
        configs={name: dict(config) for name, config in (configs or {}).items()},
        histories={name: list(history["validation"]) for name, history in trained.items()},
        task_histories=in_loop_histories(metrics),
        run_cards={
            name: dict(run["run_card"])
            for name, run in metrics.items()
            if isinstance(run.get("run_card"), Mapping)
        },
        environment=dict(environment or {}),
        step_times=list(step_times or []),
        stderrs={name: errors for name, (_, errors) in split.items() if errors},
        comparison=compare_runs(metrics, baseline, configs),
        details=limited_details(metrics.values()),
    )


def in_loop_histories(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, list]]:
    """`{run: {task: [{step, acc, ...}]}}` from the training histories that evaluations of
    trained models carry (runs without in-loop tasks are left out)."""
    out = {}
    for name, run in runs.items():
        history = run.get("training_history")
        if isinstance(history, Mapping) and history.get("tasks"):
            out[name] = {task: list(points) for task, points in history["tasks"].items()}
    return out
