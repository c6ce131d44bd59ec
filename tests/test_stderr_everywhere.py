"""A standard error beside every number, wherever the number goes: the run card (the numbers a
training ended with), `report.csv` / `runs.csv` (a `<metric>_stderr` column beside each metric),
and the trackers (an in-loop task's `tasks/<task>/acc_stderr`, read back from TensorBoard's
event files and W&B's offline records). The real runs' side is in test_checkpoints_demo.py."""

from __future__ import annotations

import csv
import io

import pytest

from catwalk_steps.kinds.multiple_choice import MultipleChoice
from catwalk_steps.metrics.stderr import mean_stderr
from catwalk_steps.metrics.sums import MeanSums
from catwalk_steps.reports import build_report
from catwalk_steps.reports.suite import build_suite_report
from catwalk_steps.training.callbacks import RunMetrics
from catwalk_steps.training.run_card import finished
from catwalk_steps.training.trackers import TensorBoardTracker, WandbTracker

from .test_trackers import NO_DATA, config, tensorboard_scalars, wandb_history


def in_loop_scores(correct: int, count: int) -> dict:
    """A multiple-choice task's in-loop metrics as the loop computes them (from sums)."""
    right = [1.0] * correct + [0.0] * (count - correct)
    sums = MeanSums().add({"acc": right, "acc_norm": right}, [1.0] * count).sums
    return MultipleChoice().compute({**sums, "loss_sum": 0.0}, [])


HISTORY = {
    "train": [{"step": 2, "loss": 2.0}, {"step": 4, "loss": 1.0}],
    "validation": [
        {"step": 2, **in_loop_scores(1, 8), "loss": 2.0},
        {"step": 4, **in_loop_scores(6, 8), "loss": 1.0},
    ],
    "tasks": {"piqa": [{"step": 2, **in_loop_scores(1, 4)}, {"step": 4, **in_loop_scores(3, 4)}]},
}


def test_a_run_card_holds_the_numbers_the_run_ended_with_each_with_its_standard_error():
    card = finished({"step": {"name": "trained", "unique_id": "T-1"}}, 1.5, HISTORY)
    final = card["final_metrics"]
    assert final == {
        "validation": HISTORY["validation"][-1],
        "tasks": {"piqa": HISTORY["tasks"]["piqa"][-1]},
    }
    # The loop's standard error is lm-eval's, over the documents' 0-or-1 values.
    assert final["validation"]["acc_stderr"] == pytest.approx(mean_stderr([1.0] * 6 + [0.0] * 2))
    assert final["tasks"]["piqa"]["acc_stderr"] == pytest.approx(mean_stderr([1, 1, 1, 0]))
    report = build_report({"trained": {"acc": 0.75, "n": 8, "run_card": card}})
    validation = "validation at step 4: acc 0.7500 ± 0.1637, acc_norm 0.7500 ± 0.1637, count 8"
    piqa = "piqa at step 4: acc 0.7500 ± 0.2500, acc_norm 0.7500 ± 0.2500, count 4"
    assert f"- `trained`: {validation}, loss 1.0000; {piqa}" in report.markdown().splitlines()
    assert finished({}, 1.0, {"train": [], "validation": []})["final_metrics"] == {}


def csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_report_csv_and_runs_csv_have_each_metrics_standard_error_beside_it():
    metrics = {
        "trained": {
            "acc": 0.75,
            "acc_stderr": 0.1,
            "acc_norm": 0.5,
            "acc_norm_stderr": 0.2,
            "n": 8,
        },
        "untrained": {"acc": 0.25, "acc_stderr": 0.15, "acc_norm": 0.25, "n": 8},
    }
    report = build_report(metrics)
    header = "run,acc,acc_stderr,acc_norm,acc_norm_stderr,n"
    assert report.csv().splitlines()[0] == header
    assert report.runs_csv() == report.csv()
    rows = csv_rows(report.csv())
    assert [(r["acc"], r["acc_stderr"], r["acc_norm_stderr"]) for r in rows] == [
        ("0.75", "0.1", "0.2"),
        ("0.25", "0.15", ""),  # none given: none made up
    ]
    # A sweep: report.csv is per configuration (± over seeds); runs.csv per run, with its own.
    configs = {"trained": {"seed": 1}, "untrained": {"seed": 2}}
    sweep = build_report(metrics, configs=configs)
    assert sweep.csv().splitlines()[0].startswith("configuration,acc_mean,acc_std,acc_count")
    assert sweep.runs_csv().splitlines()[0] == "run,seed,acc,acc_stderr,acc_norm,acc_norm_stderr,n"


def test_a_suite_report_csv_has_each_tasks_and_the_averages_standard_error():
    result = {"acc": 0.5, "acc_stderr": 0.1, "acc_norm": 0.5, "n": 4, "metric": "acc"}
    report = build_suite_report({"run": {"arc_easy": result, "boolq": {**result, "acc": 0.7}}})
    header, row = report.csv().splitlines()
    assert header == "run,arc_easy,arc_easy_stderr,boolq,boolq_stderr,average,average_stderr"
    assert float(row.split(",")[-1]) == pytest.approx((0.1**2 + 0.1**2) ** 0.5 / 2)


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_trackers_get_an_in_loop_tasks_standard_error_at_its_step(tmp_path, offline):
    import wandb

    metrics = RunMetrics(None, config(tmp_path), None, NO_DATA, None)
    tensorboard = TensorBoardTracker(None, config(tmp_path), None, None, None)
    trackers = [tensorboard, WandbTracker(None, config(tmp_path), None, None, None, project="p")]
    for tracker in trackers:
        tracker.follow(metrics)
        tracker.pre_train_loop()
    for point in HISTORY["tasks"]["piqa"]:  # the loop's hooks, in-loop tasks after the step
        step = point["step"] - 1
        for callback in (*trackers, metrics):
            callback.pre_batch(step, 0, [])
        metrics.log_batch(step, 0, 1.0, [])
        metrics.record_task_metrics(step, {"piqa": {k: v for k, v in point.items() if k != "step"}})
    for tracker in trackers:
        tracker.post_train_loop(step, 0)
    wandb.teardown()
    expected = [(p["step"], p["acc_stderr"]) for p in HISTORY["tasks"]["piqa"]]
    scalars = tensorboard_scalars(tmp_path / "tensorboard")
    assert scalars["tasks/piqa/acc_stderr"] == [(s, pytest.approx(v)) for s, v in expected]
    rows = [(step, row) for _, step, row in wandb_history(tmp_path)]
    assert [(s, row["tasks/piqa/acc_stderr"]) for s, row in rows] == expected
