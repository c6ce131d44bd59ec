"""Tables and plots of several runs' metrics; sweeps aggregated over seeds.

A report has one row per run (`{run name: metrics}`). When the runs come from a sweep, each also
has a configuration (`{"engine": "ddp", "lr": 0.001, "seed": 1}`) and its validation history;
runs whose configurations differ only in `seed` are then summarised together: mean, standard
deviation (over seeds, n - 1 in the denominator) and count per metric. Files: `report.md` for
people, `report.csv` and `runs.csv` for tools, `report.json` with everything, and PNG plots made
with matplotlib.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tango.common.aliases import PathOrStr
from tango.format import Format

LEADING_COLUMNS = ("acc", "acc_norm", "n")
SEED = "seed"
CURVES_PLOT = "validation_acc.png"
FINAL_PLOT = "final_acc.png"


@dataclass
class Summary:
    """One metric over the seeds of a configuration."""

    mean: float
    std: float | None  # None with a single seed
    count: int
    whole: bool = False  # every value was the same whole number (a count such as `n`)

    @classmethod
    def of(cls, values: list[float]) -> Summary:
        std = statistics.stdev(values) if len(values) > 1 else None
        whole = all(float(v).is_integer() for v in values) and len(set(values)) == 1
        return cls(statistics.fmean(values), std, len(values), whole)

    def text(self) -> str:
        if self.whole:
            return str(int(self.mean))
        if self.std is None:
            return f"{self.mean:.4f}"
        return f"{self.mean:.4f} ± {self.std:.4f}"


@dataclass
class Report:
    """Rows of metrics, one per named run, with the columns in a stable order.

    :ivar configs: each run's configuration in a sweep (none for a plain comparison).
    :ivar histories: each run's validation history (`[{step, acc, ...}]`), for the curves.
    """

    rows: dict[str, dict[str, Any]]
    title: str = "Metrics"
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    histories: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        seen = {key for row in self.rows.values() for key in row}
        leading = [c for c in LEADING_COLUMNS if c in seen]
        return leading + sorted(seen - set(leading))

    @property
    def aggregated(self) -> bool:
        return bool(self.configs)

    def configuration(self, run: str) -> str:
        """The run's configuration without its seed: the group it is summarised in."""
        config = {k: v for k, v in self.configs.get(run, {}).items() if k != SEED}
        if not config:
            return run
        return ", ".join(f"{key}={config_value(value)}" for key, value in sorted(config.items()))

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
                    metrics[column] = Summary.of([float(v) for v in values])
            out[group] = metrics
        return out

    # --- Text -------------------------------------------------------------------------------

    def table_rows(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows of the table people read: per configuration in a sweep."""
        if not self.aggregated:
            header = ["run", *self.columns]
            body = [
                [name, *(format_value(row.get(c)) for c in self.columns)]
                for name, row in self.rows.items()
            ]
            return header, body
        header = ["configuration", "seeds", *self.columns]
        body = []
        groups = self.groups()
        for group, metrics in self.summaries().items():
            seeds = len(groups[group])
            cells = [metrics[c].text() if c in metrics else "" for c in self.columns]
            body.append([group, str(seeds), *cells])
        return header, body

    def markdown(self) -> str:
        header, body = self.table_rows()
        lines = [
            "| " + " | ".join(header) + " |",
            "|"
            + "|".join(["---"] * (len(header) - len(self.columns)) + ["---:"] * len(self.columns))
            + "|",
        ]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        text = "\n".join(lines) + "\n"
        if self.aggregated:
            text += "\nMean ± standard deviation over seeds.\n\n## Runs\n\n" + self.runs_markdown()
        return text

    def runs_markdown(self) -> str:
        keys = self.config_keys()
        header = ["run", *keys, *self.columns]
        lines = [
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] * (1 + len(keys)) + ["---:"] * len(self.columns)) + "|",
        ]
        for name, row in self.rows.items():
            config = self.configs.get(name, {})
            cells = [name, *(config_value(config[k]) if k in config else "" for k in keys)]
            cells += [format_value(row.get(c)) for c in self.columns]
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
        keys = self.config_keys()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["run", *keys, *self.columns])
        for name, row in self.rows.items():
            config = self.configs.get(name, {})
            writer.writerow(
                [name, *(config.get(k, "") for k in keys), *(row.get(c, "") for c in self.columns)]
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
            "summaries": summaries if self.aggregated else {},
        }


def config_value(value: Any) -> str:
    """A grid value as written in an experiment: 0.001, not 0.0010."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def format_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:g}"
    return str(value)


def build_report(
    metrics: Mapping[str, Mapping[str, Any]],
    title: str = "Metrics",
    configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> Report:
    """A report from `{run name: {metric: value}}`; non-scalar values are left out, except the
    validation history that `catwalk::evaluate` passes on from a trained model."""
    rows = {
        name: {
            key: value
            for key, value in run.items()
            if isinstance(value, (int, float, str)) and not isinstance(value, bool)
        }
        for name, run in metrics.items()
    }
    histories = {
        name: list(run["training_history"]["validation"])
        for name, run in metrics.items()
        if isinstance(run.get("training_history"), Mapping)
    }
    return Report(
        rows=rows,
        title=title,
        configs={name: dict(config) for name, config in (configs or {}).items()},
        histories=histories,
    )


# --- Plots ----------------------------------------------------------------------------------


def plot_curves(report: Report, path: Path, metric: str = "acc") -> bool:
    """Validation `metric` over training steps: per configuration the mean over seeds, with a
    band of ± one standard deviation. False (nothing written) without histories."""
    groups = {
        group: [report.histories[r] for r in runs if report.histories.get(r)]
        for group, runs in report.groups().items()
    }
    groups = {group: curves for group, curves in groups.items() if curves}
    if not groups:
        return False
    figure, axes = _figure()
    for group, curves in groups.items():
        by_step: dict[int, list[float]] = {}
        for curve in curves:
            for point in curve:
                by_step.setdefault(point["step"], []).append(point[metric])
        steps = sorted(by_step)
        means = [statistics.fmean(by_step[s]) for s in steps]
        stds = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
        line = axes.plot(steps, means, marker="o", label=f"{group} (n={len(curves)})")[0]
        low = [m - s for m, s in zip(means, stds, strict=True)]
        high = [m + s for m, s in zip(means, stds, strict=True)]
        axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    axes.set_xlabel("training step")
    axes.set_ylabel(f"validation {metric}")
    axes.set_title(f"{report.title}: validation {metric} (mean ± std over seeds)")
    axes.legend(fontsize="small")
    _save(figure, path)
    return True


def plot_final(report: Report, path: Path, metric: str = "acc") -> bool:
    """Final `metric` per configuration, mean over seeds with ± one standard deviation."""
    summaries = {g: m[metric] for g, m in report.summaries().items() if metric in m}
    if not summaries:
        return False
    figure, axes = _figure()
    names = list(summaries)
    means = [summaries[n].mean for n in names]
    errors = [summaries[n].std or 0.0 for n in names]
    axes.bar(range(len(names)), means, yerr=errors, capsize=4, color="tab:blue", alpha=0.8)
    axes.set_xticks(range(len(names)), [f"{n}\n(n={summaries[n].count})" for n in names])
    axes.tick_params(axis="x", labelsize="small", labelrotation=20)
    axes.set_ylabel(metric)
    axes.set_title(f"{report.title}: {metric} per configuration (mean ± std over seeds)")
    _save(figure, path)
    return True


def _figure():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(8, 5), dpi=100)


def _save(figure: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


@Format.register("catwalk::report")
class ReportFormat(Format[Report]):
    """`report.md`, `report.csv`, `runs.csv`, `report.json` and the plots, in the result dir."""

    VERSION = "002"

    def write(self, artifact: Report, dir: PathOrStr) -> None:
        directory = Path(dir)
        (directory / "report.md").write_text(f"# {artifact.title}\n\n" + artifact.markdown())
        (directory / "report.csv").write_text(artifact.csv())
        (directory / "runs.csv").write_text(artifact.runs_csv())
        payload = artifact.as_json()
        (directory / "report.json").write_text(json.dumps(payload, indent=2) + "\n")
        if artifact.aggregated:
            plot_curves(artifact, directory / CURVES_PLOT)
            plot_final(artifact, directory / FINAL_PLOT)

    def read(self, dir: PathOrStr) -> Report:
        payload = json.loads((Path(dir) / "report.json").read_text())
        return Report(
            rows=payload["rows"],
            title=payload["title"],
            configs=payload.get("configs", {}),
            histories=payload.get("histories", {}),
        )


def print_report(report: Report, location: str | None = None) -> None:
    """The table on the terminal, and where its files are."""
    header, body = report.table_rows()
    table = Table(title=report.title)
    table.add_column(header[0], style="cyan")
    for column in header[1:]:
        table.add_column(column, justify="right")
    for cells in body:
        table.add_row(*cells)
    console = Console()
    console.print(table)
    if report.aggregated:
        console.print("mean ± standard deviation over seeds")
    if location:
        console.print(
            f"report.md / report.csv{' / plots' if report.aggregated else ''} in {location}"
        )
