"""A report as files in a step's result directory, and as a table on the terminal."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table
from tango.common.aliases import PathOrStr
from tango.format import Format

from .plots import CURVES_PLOT, FINAL_PLOT, plot_curves, plot_final
from .tables import Report


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
            run_cards=payload.get("run_cards", {}),
            environment=payload.get("environment", {}),
            step_times=payload.get("step_times", []),
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
