"""Tables of several runs' metrics: markdown for people, CSV for tools, rich on the terminal."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tango.common.aliases import PathOrStr
from tango.format import Format

LEADING_COLUMNS = ("acc", "acc_norm", "n")


@dataclass
class Report:
    """Rows of metrics, one per named run, with the columns in a stable order."""

    rows: dict[str, dict[str, Any]]
    title: str = "Metrics"

    @property
    def columns(self) -> list[str]:
        seen = {key for row in self.rows.values() for key in row}
        leading = [c for c in LEADING_COLUMNS if c in seen]
        return leading + sorted(seen - set(leading))

    def markdown(self) -> str:
        header = ["run", *self.columns]
        lines = [
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] + ["---:"] * len(self.columns)) + "|",
        ]
        for name, row in self.rows.items():
            cells = [name, *(format_value(row.get(column)) for column in self.columns)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["run", *self.columns])
        for name, row in self.rows.items():
            writer.writerow([name, *(row.get(column, "") for column in self.columns)])
        return out.getvalue()


def format_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def build_report(metrics: Mapping[str, Mapping[str, Any]], title: str = "Metrics") -> Report:
    """A report from `{run name: {metric: value}}`; non-scalar values are left out."""
    rows = {
        name: {
            key: value
            for key, value in run.items()
            if isinstance(value, (int, float, str)) and not isinstance(value, bool)
        }
        for name, run in metrics.items()
    }
    return Report(rows=rows, title=title)


@Format.register("catwalk::report")
class ReportFormat(Format[Report]):
    """Writes `report.md`, `report.csv` and `report.json` into the step's result directory."""

    VERSION = "001"

    def write(self, artifact: Report, dir: PathOrStr) -> None:
        directory = Path(dir)
        (directory / "report.md").write_text(f"# {artifact.title}\n\n" + artifact.markdown())
        (directory / "report.csv").write_text(artifact.csv())
        payload = {"title": artifact.title, "rows": artifact.rows}
        (directory / "report.json").write_text(json.dumps(payload, indent=2) + "\n")

    def read(self, dir: PathOrStr) -> Report:
        payload = json.loads((Path(dir) / "report.json").read_text())
        return Report(rows=payload["rows"], title=payload["title"])


def print_report(report: Report, location: str | None = None) -> None:
    """The table on the terminal, and where its files are."""
    table = Table(title=report.title)
    table.add_column("run", style="cyan")
    for column in report.columns:
        table.add_column(column, justify="right")
    for name, row in report.rows.items():
        table.add_row(name, *(format_value(row.get(column)) for column in report.columns))
    console = Console()
    console.print(table)
    if location:
        console.print(f"report.md / report.csv in {location}")
