"""The reports' plots (matplotlib, PNG): the validation metric over training steps (each run's,
or per configuration of a sweep), the final one per configuration of a sweep with its spread
over seeds, and in-loop task scores. The metric is what the runs validated on (their run
cards' `val_metric_name`: acc, acc_norm, a generative task's exact match or F1; the file names
stay)."""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..settings import METRIC
from .suite import shown_metric
from .tables import Report

CURVES_PLOT = "validation_acc.png"
FINAL_PLOT = "final_acc.png"
TASKS_PLOT = "in_loop_tasks.png"


def plot_curves(report: Report, path: Path, metric: str = METRIC) -> bool:
    """The validation metric over training steps (what the runs validated on): each run's, or
    in a sweep per configuration the mean over seeds, with a band of ± one standard deviation.
    False (nothing written) without histories."""
    groups = {
        group: [report.histories[r] for r in runs if report.histories.get(r)]
        for group, runs in report.groups().items()
    }
    shown = validation_metric(report, metric)
    # Runs that validated on another metric (SFT, then DPO: a chained report) are left out.
    groups = {g: [c for c in curves if shown in c[0]] for g, curves in groups.items()}
    groups = {group: curves for group, curves in groups.items() if curves}
    if not groups:
        return False
    figure, axes = _figure()
    for group, curves in groups.items():
        label = f"{group} (n={len(curves)})" if report.aggregated else group
        _band(axes, curves, lambda point: point[shown], label)
    axes.set_xlabel("training step")
    axes.set_ylabel(f"validation {shown}")
    spread = " (mean ± std over seeds)" if report.aggregated else ""
    _title(axes, f"{report.title}: validation {shown}{spread}")
    axes.legend(fontsize="small")
    _save(figure, path)
    return True


def plot_final(report: Report, path: Path, metric: str = METRIC) -> bool:
    """Final `metric` per configuration, mean over seeds with ± one standard deviation: the
    metric the runs validated on where their evaluations have it (a validation loss has no
    final figure: then `metric`)."""
    validated = validation_metric(report, metric)
    all_summaries = report.summaries()
    if any(validated in m for m in all_summaries.values()):
        metric = validated
    summaries = {g: m[metric] for g, m in all_summaries.items() if metric in m}
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
    _title(axes, f"{report.title}: {metric} per configuration (mean ± std over seeds)")
    _save(figure, path)
    return True


def validation_metric(report: Report, metric: str) -> str:
    """What the runs validated on, as a trained run's card records it (its `val_metric_name`:
    `acc`, `acc_norm`, `loss`, a generative task's metric; a card from before it was recorded:
    the key its kind shows of its first validation point): the first run's whose metric the
    table shows for every run, else the first run's. A chained report (the base, SFT and DPO
    models answering the SFT task) plots what its table compares, not DPO's reward accuracy."""
    validated = [
        validated if isinstance(validated, str) else shown_metric(history[0], metric)
        for run, history in report.histories.items()
        if history
        for validated in [report.run_cards.get(run, {}).get("val_metric_name")]
    ]
    tabled = [name for name in validated if all(name in row for row in report.rows.values())]
    return (tabled or validated or [metric])[0]


def plot_task_curves(report: Report, path: Path, metric: str = METRIC) -> bool:
    """In-loop task scores over training steps, one panel per task, one line per configuration
    (the mean over its seeds, with a band of ± one standard deviation). False (nothing written)
    when no run has in-loop task scores."""
    tasks = list(dict.fromkeys(t for h in report.task_histories.values() for t in h))
    if not tasks:
        return False
    figure, panels = panel_grid(len(tasks))
    for axes, task in zip(panels, tasks, strict=False):
        for group, runs in report.groups().items():
            curves = [
                report.task_histories[r][task]
                for r in runs
                if task in report.task_histories.get(r, {})
            ]
            if curves:
                _band(
                    axes,
                    curves,
                    lambda point: point[shown_metric(point, metric)],
                    f"{group} (n={len(curves)})" if report.aggregated else group,
                )
        first = next((h[task][0] for h in report.task_histories.values() if h.get(task)), {})
        axes.set_title(task, fontsize="medium")
        axes.set_xlabel("training step")
        axes.set_ylabel(shown_metric(first, metric) if first else metric)
    panels[0].legend(fontsize="x-small")
    shown = {axes.get_ylabel() for axes in panels[: len(tasks)]}
    scores = metric if shown == {metric} else "scores (each panel's own)"
    figure.suptitle(f"{report.title}: in-loop {scores} per task")
    _save(figure, path)
    return True


def _band(
    axes: Any, curves: list[list[dict[str, Any]]], value: Callable[[dict], float], label: str
) -> None:
    """The mean of several curves' `value` over their steps, with ± one standard deviation."""
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for point in curve:
            by_step.setdefault(point["step"], []).append(value(point))
    steps = sorted(by_step)
    means = [statistics.fmean(by_step[s]) for s in steps]
    stds = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
    line = axes.plot(steps, means, marker="o", label=label)[0]
    low = [m - s for m, s in zip(means, stds, strict=True)]
    high = [m + s for m, s in zip(means, stds, strict=True)]
    axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)


def _title(axes: Any, title: str) -> None:
    """The title, wrapped while it is wider than its axes: it is centred on them, and the
    axes move right of the figure's centre when the y labels are wide, which cut a sweep's long
    title at the figure's right edge."""
    text = axes.set_title(title)
    renderer = axes.get_figure().canvas.get_renderer()
    limit = axes.get_window_extent(renderer).width
    width = len(title)
    while text.get_window_extent(renderer).width > limit and width > 20:
        width = int(width * 0.85)
        text.set_text(textwrap.fill(title, width))


def panel_grid(count: int) -> tuple[Any, list]:
    """A figure of `count` panels, three to a row (those past `count` hidden), and the panels."""
    columns = min(3, count)
    rows = -(-count // columns)
    figure, grid = _figure(size=(4.5 * columns, 3.2 * rows), panels=(rows, columns))
    panels = list(grid.flat)
    for axes in panels[count:]:
        axes.set_visible(False)
    return figure, panels


def _figure(
    size: tuple[float, float] = (8, 5), panels: tuple[int, int] | None = None
) -> tuple[Any, Any]:
    """A figure and its axes: one, or a grid (a 2-D array) of `panels` (rows, columns)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    if panels is None:
        return plt.subplots(figsize=size, dpi=100)
    return plt.subplots(*panels, figsize=size, dpi=100, squeeze=False)


def _save(figure: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
