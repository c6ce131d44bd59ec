"""A report as files in a step's result directory, and as a table on the terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tango.common.aliases import PathOrStr
from tango.format import Format

from ..sealed import read_checked, read_if_written, write_digests
from .limited import limited_line
from .paired import comparison_lines
from .plots import CURVES_PLOT, FINAL_PLOT, TASKS_PLOT, plot_curves, plot_final, plot_task_curves
from .tables import Report


@Format.register("catwalk::report")
class ReportFormat(Format[Report]):
    """`report.md`, `report.csv`, `runs.csv`, `report.json` and the plots, in the result dir
    (and `generations.jsonl`: what the model said for each generative task's instance).
    The plots of training come with the runs' validation histories, which only the training
    runs' report (`catwalk::report`) has, so that each is written once (a pipeline with a suite
    has two reports): the validation metric over steps (one run, or per configuration of a
    sweep) and, when the runs scored tasks in the loop, those scores over steps, one panel per
    task; a sweep adds the final metric per configuration."""

    VERSION = "003"

    def write(self, artifact: Report, dir: PathOrStr) -> None:
        directory = Path(dir)
        (directory / "report.md").write_text(f"# {artifact.title}\n\n" + artifact.markdown())
        (directory / "report.csv").write_text(artifact.csv())
        (directory / "runs.csv").write_text(artifact.runs_csv())
        payload = artifact.as_json()
        (directory / "report.json").write_text(json.dumps(payload, indent=2) + "\n")
        if artifact.histories:
            plot_curves(artifact, directory / CURVES_PLOT)
            if artifact.task_histories:
                plot_task_curves(artifact, directory / TASKS_PLOT)
        if artifact.aggregated:
            plot_final(artifact, directory / FINAL_PLOT)
        read_back = ["report.json"]
        if artifact.generations:
            write_generations(artifact.generations, directory / GENERATIONS)
            read_back.append(GENERATIONS)
        write_digests(directory, read_back)  # what `read` reads: an edit is one line

    def read(self, dir: PathOrStr) -> Report:
        payload = json.loads(read_checked(Path(dir) / "report.json"))
        return Report(
            rows=payload["rows"],
            title=payload["title"],
            configs=payload.get("configs", {}),
            histories=payload.get("histories", {}),
            run_cards=payload.get("run_cards", {}),
            environment=payload.get("environment", {}),
            step_times=payload.get("step_times", []),
            task_histories=payload.get("task_histories", {}),
            column_order=payload.get("column_order", []),
            details=payload.get("details", {}),
            generations=read_generations(Path(dir) / GENERATIONS),
            stderrs=payload.get("stderrs", {}),
            comparison=payload.get("comparison", {}),
        )


GENERATIONS = "generations.jsonl"


def write_generations(generations: dict, path: Path) -> None:
    """One line per generated answer: run, task, and the instance's output (prompt, generated
    text, filtered answers, targets, scores)."""
    with path.open("w", encoding="utf-8") as out:
        for run, by_task in generations.items():
            for task, outputs in by_task.items():
                for output in outputs:
                    line = {"run": run, "task": task, **output}
                    out.write(json.dumps(line, ensure_ascii=False) + "\n")


def read_generations(path: Path) -> dict:
    generations: dict = {}
    text = read_if_written(path)
    if text is None:
        return generations
    for line in text.decode("utf-8").split("\n"):
        if not line:
            continue
        row = json.loads(line)
        run, task = row.pop("run"), row.pop("task")
        generations.setdefault(run, {}).setdefault(task, []).append(row)
    return generations


def print_report(report: Report, location: str | None = None) -> None:
    """The table on the terminal, and where its files are. A table wider than the terminal (a
    suite's many tasks) is printed turned: one row per column of the files (task, average),
    one column per run; one still too wide, in parts of its columns that fit, each with the
    rows' names. No cell is ever cut (rich's default cuts a cell too wide for its column with
    "…", also a number: 80 columns off a terminal); a name too long for its column wraps."""
    console = Console()
    limited = limited_line(report.details)
    if limited:
        console.print(limited.strip(), style="yellow", soft_wrap=True, crop=False)
    header, body = report.table_rows()
    turn = table_width(header, body) > console.width
    if turn:
        header, body = turned(header, body)
        shown = report.details.get("shown") or report.details.get("metric")
        header[0] = f"task ({shown})" if shown else "metric"
    parts = column_parts(header, body, console.width)
    for number, (part_header, part_body) in enumerate(parts):
        title = report.title if number == 0 else f"{report.title} ({number + 1} of {len(parts)})"
        table = Table(title=title)
        table.add_column(part_header[0], style="cyan", overflow="fold")
        for column in part_header[1:]:
            table.add_column(column, justify="right", overflow="fold", no_wrap=True)
        for cells in part_body:
            table.add_row(*cells)
        console.print(table)
    # Lines that must stay whole (a path cut in the middle of a step's hash is no path).
    whole: dict[str, Any] = {"soft_wrap": True, "crop": False}
    if turn:
        console.print(
            f"(turned, one row per column of report.csv, one column per run: a row per run "
            f"needs {table_width(*report.table_rows())} columns, the terminal has "
            f"{console.width}{'; in parts of its columns' if len(parts) > 1 else ''})",
            **whole,
        )
    if report.aggregated:
        console.print("mean ± standard deviation over seeds")
    elif report.stderr_line():
        console.print(report.stderr_line().strip().replace("`", ""))
    for line in comparison_lines(report.comparison):
        console.print(line, **whole)
    if location:
        plots = " / plots" if report.aggregated or report.histories else ""
        console.print(f"report.md / report.csv{plots} in {location}", **whole)


def column_parts(
    header: list[str], body: list[list[str]], width: int
) -> list[tuple[list[str], list[list[str]]]]:
    """The table in parts of consecutive columns, each with the first (the rows' names) and as
    many others as fit in `width` (at least one: a part never has none)."""
    widths = [max(len(row[i]) for row in [header, *body]) + 3 for i in range(len(header))]
    groups: list[list[int]] = [[]]
    used = widths[0] + 1
    for i in range(1, len(header)):
        if groups[-1] and used + widths[i] > width:
            groups.append([])
            used = widths[0] + 1
        groups[-1].append(i)
        used += widths[i]
    return [
        (
            [header[0], *(header[i] for i in group)],
            [[row[0], *(row[i] for i in group)] for row in body],
        )
        for group in groups
    ]


def table_width(header: list[str], body: list[list[str]]) -> int:
    """Characters a rich table of these cells takes (a border and two spaces per column)."""
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return sum(widths) + 3 * len(widths) + 1


def turned(header: list[str], body: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """The table with rows and columns swapped."""
    columns = [[row[i] for row in body] for i in range(1, len(header))]
    return [header[0], *(row[0] for row in body)], [
        [name, *cells] for name, cells in zip(header[1:], columns, strict=True)
    ]
