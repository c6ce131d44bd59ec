"""The sweep report's plots (matplotlib, PNG): validation accuracy over training steps per
configuration, and the final accuracy per configuration with its spread over seeds (for a
generative task, its first metric: exact match, F1; the file names stay)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .suite import shown_metric
from .tables import Report

CURVES_PLOT = "validation_acc.png"
FINAL_PLOT = "final_acc.png"
TASKS_PLOT = "in_loop_tasks.png"


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
        _band(axes, curves, metric, f"{group} (n={len(curves)})")
    shown = validation_metric(report, metric)
    axes.set_xlabel("training step")
    axes.set_ylabel(f"validation {shown}")
    axes.set_title(f"{report.title}: validation {shown} (mean ± std over seeds)")
    axes.legend(fontsize="small")
    _save(figure, path)
    return True


def plot_final(report: Report, path: Path, metric: str = "acc") -> bool:
    """Final `metric` per configuration, mean over seeds with ± one standard deviation."""
    metric = validation_metric(report, metric)
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


def validation_metric(report: Report, metric: str) -> str:
    """What the runs' validation shows: `metric` (multiple choice), or the key their kind shows
    (a generative task's first metric), read from the first validation point."""
    for history in report.histories.values():
        if history:
            return shown_metric(history[0], metric)
    return metric


def plot_task_curves(report: Report, path: Path, metric: str = "acc") -> bool:
    """In-loop task scores over training steps, one panel per task, one line per configuration
    (the mean over its seeds, with a band of ± one standard deviation). False (nothing written)
    when no run has in-loop task scores."""
    tasks = list(dict.fromkeys(t for h in report.task_histories.values() for t in h))
    if not tasks:
        return False
    columns = min(3, len(tasks))
    rows = -(-len(tasks) // columns)
    figure, grid = _figure(size=(4.5 * columns, 3.2 * rows), panels=(rows, columns))
    panels = list(grid.flat)
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
                    metric,
                    f"{group} (n={len(curves)})" if report.aggregated else group,
                )
        first = next((h[task][0] for h in report.task_histories.values() if h.get(task)), {})
        axes.set_title(task, fontsize="medium")
        axes.set_xlabel("training step")
        axes.set_ylabel(shown_metric(first, metric) if first else metric)
    for axes in panels[len(tasks) :]:
        axes.set_visible(False)
    panels[0].legend(fontsize="x-small")
    shown = {axes.get_ylabel() for axes in panels[: len(tasks)]}
    scores = metric if shown == {metric} else "scores (each panel's own)"
    figure.suptitle(f"{report.title}: in-loop {scores} per task")
    _save(figure, path)
    return True


def _band(axes: Any, curves: list[list[dict[str, Any]]], metric: str, label: str) -> None:
    """The mean of several curves over their steps, with ± one standard deviation."""
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for point in curve:
            by_step.setdefault(point["step"], []).append(point[shown_metric(point, metric)])
    steps = sorted(by_step)
    means = [statistics.fmean(by_step[s]) for s in steps]
    stds = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
    line = axes.plot(steps, means, marker="o", label=label)[0]
    low = [m - s for m, s in zip(means, stds, strict=True)]
    high = [m + s for m, s in zip(means, stds, strict=True)]
    axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)


def _figure(size: tuple[float, float] = (8, 5), panels: tuple[int, int] | None = None):
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
