"""A run's checkpoints scored on a suite: the step x task table (a suite report whose runs are
the checkpoints, in step order) and `checkpoint_curves.png`, one panel per task, its score over
training steps with a band of ± one standard error where the results carry `<metric>_stderr`.

The curves are kept in the report's details (`checkpoints`: `{task: [{step, value, stderr}]}`),
which the TensorBoard backfill and `report.json` read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tango.common.aliases import PathOrStr
from tango.format import Format

from .files import ReportFormat
from .plots import _save, panel_grid
from .suite import build_suite_report, lower_is_better, shown_metric
from .tables import Report

CHECKPOINT_CURVES = "checkpoint_curves.png"
# What a checkpoint's result carries that a report of checkpoints does not need again.
LEFT_OUT = ("training_history", "run_card")


def step_label(step: int) -> str:
    return f"step {step}"


def build_checkpoint_report(
    results: Mapping[int, Mapping[str, Mapping[str, Any]]], metric: str, title: str
) -> Report:
    """`{training step: {task: evaluation result}}` as a report: a row per checkpoint (in
    step order), a column per task, and the curves in `details['checkpoints']`."""
    by_step = {
        step_label(step): {
            task: {k: v for k, v in result.items() if k not in LEFT_OUT}
            for task, result in results[step].items()
        }
        for step in sorted(results)
    }
    report = build_suite_report(by_step, metric, title)
    report.details["checkpoints"] = curves_of(results, metric)
    report.details["band"] = "± one standard error of the per-document scores, where shown"
    return report


def curves_of(
    results: Mapping[int, Mapping[str, Mapping[str, Any]]], metric: str
) -> dict[str, dict[str, Any]]:
    """Each task's shown metric over the checkpoints' steps, with its standard error (None
    where the result has none) and whether lower is better."""
    curves: dict[str, dict[str, Any]] = {}
    for step in sorted(results):
        for task, result in results[step].items():
            shown = shown_metric(result, metric)
            curve = curves.setdefault(
                task,
                {"metric": shown, "lower_is_better": lower_is_better(result, shown), "points": []},
            )
            stderr = result.get(stderr_key(shown))
            curve["points"].append(
                {
                    "step": step,
                    "value": float(result[shown]),
                    "stderr": None if stderr is None else float(stderr),
                }
            )
    return curves


def stderr_key(metric: str) -> str:
    """The key of a metric's standard error in a result, as lm-evaluation-harness names it:
    `acc_stderr`; for a `<metric>,<filter>` key, `<metric>_stderr,<filter>`."""
    name, comma, rest = metric.partition(",")
    return f"{name}_stderr{comma}{rest}"


def plot_checkpoint_curves(curves: Mapping[str, Mapping[str, Any]], title: str, path: Path) -> bool:
    """One panel per task: the score at each checkpoint's step, with a band of ± one standard
    error when every point has one. False (nothing written) without curves."""
    if not curves:
        return False
    figure, panels = panel_grid(len(curves))
    banded = False
    for axes, (task, curve) in zip(panels, curves.items(), strict=False):
        points = curve["points"]
        steps = [p["step"] for p in points]
        values = [p["value"] for p in points]
        line = axes.plot(steps, values, marker="o")[0]
        if points and all(p["stderr"] is not None for p in points):
            low = [p["value"] - p["stderr"] for p in points]
            high = [p["value"] + p["stderr"] for p in points]
            axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
            banded = True
        lower = ", lower is better" if curve.get("lower_is_better") else ""
        axes.set_title(f"{task} ({curve['metric']}{lower})", fontsize="medium")
        axes.set_xlabel("training step")
    band = " (band: ± one standard error)" if banded else ""
    figure.suptitle(f"{title}: each checkpoint's score{band}")
    _save(figure, path)
    return True


@Format.register("catwalk::checkpoint_report")
class CheckpointReportFormat(ReportFormat):
    """A suite report's files, and `checkpoint_curves.png`."""

    VERSION = "001"

    def write(self, artifact: Report, dir: PathOrStr) -> None:
        super().write(artifact, dir)
        curves = artifact.details.get("checkpoints") or {}
        plot_checkpoint_curves(curves, artifact.title, Path(dir) / CHECKPOINT_CURVES)
